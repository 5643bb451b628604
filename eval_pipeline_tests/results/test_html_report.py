"""The HTML report: self-contained, and rendered for real in headless Chromium with its plots."""

import re
import subprocess
from dataclasses import replace

import pytest

from eval_pipeline.cli import main
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.config.gates import parse_policy
from eval_pipeline.results.html import LABEL, MARGIN, OUTCOME_COLOURS, WIDTH, render_html, write_html_report
from eval_pipeline.results.report import build_report, write_report
from eval_pipeline.results.trajectory import anchor, render_trajectories, trajectories_for
from eval_pipeline.results.warehouse import MISSING, Warehouse, write_warehouse
from eval_pipeline.store.artifacts import LocalArtifactStore
from eval_pipeline_tests.support.chromium import CHROMIUM_FLAGS, chromium, png_pixels
from eval_pipeline_tests.support.gate_results import POLICY, RESULTS
from eval_pipeline_tests.support.hostile_text import SCRIPT
from eval_pipeline_tests.support.result_rows import trial

ESTIMATE_BLUE = (0x2B, 0x6C, 0xB0)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    # prod fails (terminal is under its floor), staging passes
    gates = [parse_policy(POLICY, "prod.yaml"), parse_policy({**POLICY, "environment": "staging", "floors": {}}, "s")]
    directory = tmp_path_factory.mktemp("reports")
    return build_report("gated", "d" * 64, "p" * 64, RESULTS, baseline="base", gates=gates, directory=directory)


def test_the_report_is_one_file_with_four_plots_and_nothing_to_fetch(report):
    html = render_html(report, RESULTS)
    assert html.count("<svg") == 4
    assert "<script" not in html and "src=" not in html and "href=" not in html
    # one dot per (slice, variant) row, over both slices and the portfolio: 6 rates, 3 differences
    assert html.count('class="estimate"') == 6 + 3
    assert "terminal / cand" in html and "Paired difference against base" in html


def svg(html: str, title: str) -> str:
    """The plot of that title in the page."""
    [plot] = re.findall(rf'<svg role="img" aria-label="{re.escape(title)}".*?</svg>', html)
    return plot


def test_the_portfolio_row_is_bold_in_html_not_in_markdown_asterisks(report):
    html = render_html(report, RESULTS)
    assert "**" not in html
    assert html.count("<td><strong>all</strong></td>") == 2 * 2, "one portfolio row per variant in each table"
    assert "all / cand" in svg(html, "Resolved rates")


def test_every_outcome_has_a_colour_of_its_own():
    assert set(OUTCOME_COLOURS) == {*Outcome, MISSING}
    assert len(set(OUTCOME_COLOURS.values())) == len(OUTCOME_COLOURS)
    # an OOM kill and a test timeout in one campaign: the bars and the legend tell them apart
    results = [
        trial("a", "v", 0, "oom_killed"),
        replace(trial("b", "v", 0, "oom_killed"), outcome="test_timeout", oom_killed=False),
        trial("c", "v", 0, "resolved"),
    ]
    html = render_html(build_report("c", "d", "p", results), results)
    bars = dict(re.findall(r'fill="(#[0-9a-f]{6})"><title>(\w+): 1</title>', svg(html, "Outcomes per variant")))
    legend = re.findall(r'fill="(#[0-9a-f]{6})"/><text[^>]*>(\w+)</text>', svg(html, "Outcomes per variant"))
    assert (
        sorted(bars.values()) == sorted(outcome for _, outcome in legend) == ["oom_killed", "resolved", "test_timeout"]
    )
    assert len(set(bars)) == 3 and set(bars) == {colour for colour, _ in legend}


def test_the_duration_axis_is_in_seconds(report):
    durations = svg(render_html(report, RESULTS), "Durations (s)")
    assert re.search(r'<text class="axis-unit"[^>]*>seconds</text>', durations)


def test_rate_intervals_are_shown_as_computed_and_drawn_within_zero_and_one(report):
    assert report.slices["terminal"]["cand"].ci_low < 0, "m = (1, 0, 0, 0): the t-interval reaches below 0"
    html = render_html(report, RESULTS)
    computed = [(f"{row.summary.ci_low:.3f}", f"{row.summary.ci_high:.3f}") for row in report.rows()]
    assert re.findall(r"<td>\[(\S+), (\S+)\]</td>", html) == computed, "as report.json holds them"
    lines = re.findall(r'<line class="interval" x1="([\d.]+)" y1="[\d.]+" x2="([\d.]+)"', svg(html, "Resolved rates"))
    assert len(lines) == 6 and all(LABEL <= float(x) <= WIDTH - MARGIN for line in lines for x in line)


def test_the_gates_verdicts_and_broken_rules_are_shown(report):
    html = render_html(report, RESULTS)
    gates = dict(re.findall(r'<li class="gate" data-environment="(\w+)">.*?<span class="(\w+)">', html))
    assert gates == {"prod": "failed", "staging": "passed"}
    assert "<li>floor: terminal: resolved rate 0.25 is below the floor 0.5</li>" in html


def test_the_report_renders_with_its_plots_in_headless_chromium(report, tmp_path):
    page = write_html_report(report, RESULTS)
    screenshot = tmp_path / "report.png"
    subprocess.run(
        [
            chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=900,1400",
            f"--screenshot={screenshot}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    width, height, pixels = png_pixels(screenshot)
    assert (width, height) == (900, 1400)
    blue = sum(pixel == ESTIMATE_BLUE for pixel in pixels)
    assert blue > 500, f"the interval lines and estimate dots are drawn ({blue} pixels of their blue)"
    assert sum(pixel != (255, 255, 255) for pixel in pixels) > 0.03 * width * height, "text, tables and plots"


LONG = "x" * 5000


def llm_generation(key: str) -> dict:
    """An llm agent's generation record: messages, a model call, a failed tool call whose arguments and
    result hold a script, and a model call far longer than the view shows."""
    return {
        "key": key,
        "status": "completed",
        "error": "",
        "steps": 2,
        "stop_reason": "step_limit",
        "input_tokens": 1200,
        "output_tokens": 340,
        "cost_usd": 0.0123,
        "trajectory": [
            {"type": "message", "role": "system", "content": "You fix bugs."},
            {"type": "message", "role": "user", "content": "Fix the parser."},
            {
                "type": "model_call",
                "step": 1,
                "content": "Let me run the tests.",
                "finish_reason": "tool_calls",
                "input_tokens": 600,
                "output_tokens": 20,
                "retries": 0,
            },
            {
                "type": "tool_call",
                "step": 1,
                "tool": "run_tests",
                "arguments": {"path": f"tests/{SCRIPT}"},
                "result": f"FAILED {SCRIPT}",
                "is_error": True,
                "duration_s": 1.5,
            },
            {"type": "model_call", "step": 2, "content": LONG, "finish_reason": "length", "retries": 1},
        ],
    }


@pytest.fixture
def failed_campaign(store, tmp_path):
    """Trials of an llm agent and a reference agent, with their generations stored; one failed trial has no
    generation record, one has no generation at all."""
    trials = [
        replace(trial("i1", "cand", 0, "unresolved"), generation_key="generation/i1.json", cost_usd=0.25),
        replace(trial("i2", "cand", 0, "resolved"), generation_key="generation/i2.json", input_tokens=1000),
        replace(trial("i3", "cand", 0, "oom_killed"), generation_key="generation/i3.json"),
        replace(trial("i4", "cand", 0, "unresolved"), generation_key="generation/absent.json"),
        replace(trial("i5", "cand", 0, "unresolved"), generation_key=None),
        replace(trial("i0", "ref", 0, "patch_apply_failed"), generation_key="generation/ref.json"),
    ]
    for key in ("generation/i1.json", "generation/i2.json", "generation/i3.json"):
        store.put(key, llm_generation(key))
    reference = {"action": "apply_reference", "exit_code": 1, "stdout_tail": f"error: {SCRIPT}"}
    store.put("generation/ref.json", {"key": "generation/ref.json", "trajectory": [reference]})
    (tmp_path / "reports").mkdir()
    report = build_report("c", "d" * 64, "p" * 64, trials, baseline="ref", directory=tmp_path / "reports")
    return report, trials


def test_the_failed_trials_trajectories_are_read_from_their_generations(failed_campaign, store):
    _, trials = failed_campaign
    views = trajectories_for(trials, store)
    # scored and unresolved, with a stored generation; by variant, then instance
    assert list(views) == ["i1|cand-s0", "i0|ref-s0"]
    view = views["i1|cand-s0"]
    assert (view["variant"], view["instance_id"], view["outcome"]) == ("cand", "i1", "unresolved")
    assert (view["steps"], view["stop_reason"], view["input_tokens"], view["cost_usd"]) == (
        2,
        "step_limit",
        1200,
        0.0123,
    )
    assert [entry.get("type") for entry in view["trajectory"]] == [
        "message",
        "message",
        "model_call",
        "tool_call",
        "model_call",
    ]
    assert views["i0|ref-s0"]["trajectory"] == [
        {"action": "apply_reference", "exit_code": 1, "stdout_tail": f"error: {SCRIPT}"}
    ]


def test_trajectories_of_chosen_trials_and_at_most_the_limit(failed_campaign, store):
    _, trials = failed_campaign
    assert list(trajectories_for(trials, store, chosen={"i2|cand-s0", "i3|cand-s0"})) == ["i2|cand-s0", "i3|cand-s0"]
    assert trajectories_for(trials, store, chosen={"i5|cand-s0", "i4|cand-s0", "cand-s0"}) == {}
    assert list(trajectories_for(trials, store, limit=1)) == ["i1|cand-s0"]
    assert list(trajectories_for(trials, store, chosen={"i2|cand-s0", "i0|ref-s0"}, limit=1)) == ["i2|cand-s0"]
    assert trajectories_for(trials, store, limit=0) == {}


def test_a_trajectory_is_escaped_truncated_and_linkable(failed_campaign, store):
    report, trials = failed_campaign
    html = render_html(report, trials, trajectories_for(trials, store))
    assert "<script" not in html and "alert(" in html
    assert html.count("&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;") == 3 + 2, (
        "the tool's result, arguments and their preview; the reference agent's stdout and its entry's preview"
    )
    [section] = re.findall(r'<section class="trajectory" id="trajectory-i1-cand-s0">.*?</section>', html, re.S)
    assert "<h3>i1|cand-s0</h3>" in section
    for fact in (
        "<strong>cand</strong>",
        "<code>i1</code>",
        "unresolved",
        "2 steps",
        "step_limit",
        "1200 in",
        "$0.0123",
    ):
        assert fact in section, fact
    steps = re.findall(r'<details class="step([^"]*)"><summary>(.*?)</summary>', section)
    assert [kind for kind, _ in steps] == [" message", " message", " model-call", " tool-call error", " model-call"]
    assert steps[3][1].startswith(
        '4. step 1 · tool <code class="tool">run_tests</code> <strong>error</strong> in 1.50 s'
    )
    assert "x" * 2000 + "… [3000 more characters]" in section and "x" * 2001 not in section
    assert 'id="trajectory-i0-ref-s0"' in html and "<dt>exit_code</dt><dd><pre>1</pre></dd>" in html
    assert "2 trial(s) shown; 4 trial(s) failed" in html
    assert "Trajectories" not in render_html(report, trials), "no section unless trajectories are given"


def test_trajectory_ids_are_sanitized_and_unique():
    view = {"trajectory": [{"type": "message", "role": "user", "content": "hi"}]}
    html = render_trajectories({'a"><b|v-s0': view, "a--b|v-s0": view})
    assert re.findall(r'<section class="trajectory" id="([^"]*)">', html) == [
        "trajectory-a---b-v-s0",
        "trajectory-a--b-v-s0",
    ]
    assert "<h3>a&quot;&gt;&lt;b|v-s0</h3>" in html and "<b" not in html
    assert list(map(anchor, ["x|y", "x/y"])) == ["trajectory-x-y", "trajectory-x-y"]
    twice = render_trajectories({"x|y": view, "x/y": view})
    assert re.findall(r'id="([^"]*)"', twice) == ["trajectory-x-y", "trajectory-x-y-2"]


def test_time_tokens_and_cost_per_slice_and_variant(failed_campaign):
    report, trials = failed_campaign
    [table] = re.findall(r'<table class="time-cost">.*?</table>', render_html(report, trials))
    header = re.findall(r"<th>(.*?)</th>", table)
    assert header == ["slice", "variant", "median s", "p95 s", "tokens / resolved", "total cost", "cost / resolved"]
    rows = {
        tuple(re.findall(r"<td>(.*?)</td>", row))[1]: re.findall(r"<td>(.*?)</td>", row)
        for row in re.findall(r"<tr><td>.*?</tr>", table)
    }
    # cand: 4 scored trials (not the OOM kill) of 150 tokens but one of 1050, costing 0.5 but one 0.25; 1 resolved
    assert rows["cand"] == ["code", "cand", "2.0", "2.0", "1500", "1.7500", "1.7500"]
    assert rows["ref"] == ["code", "ref", "2.0", "2.0", "n/a", "0.5000", "n/a"], "none resolved: undefined"


def test_the_trajectories_render_as_text_in_headless_chromium(failed_campaign, store, tmp_path):
    report, trials = failed_campaign
    page = write_html_report(report, trials, trajectories_for(trials, store))
    dom = subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    # The DOM as Chromium parsed it: the sections and steps are there, and the agent's script is text in them
    # (serialized escaped), never a script element.
    sections = re.findall(r'<section class="trajectory" id="(trajectory-[^"]+)">', dom)
    assert sections == ["trajectory-i1-cand-s0", "trajectory-i0-ref-s0"]
    assert '<code class="tool">run_tests</code>' in dom
    assert "FAILED &lt;script&gt;alert('pwned')&lt;/script&gt;" in dom
    assert "<script" not in dom.lower()
    assert dom.count("<details") == 5 + 1 and "Time, tokens and cost" in dom


def test_the_cli_writes_the_report_again_with_the_chosen_trials_trajectories(
    failed_campaign, tmp_path, monkeypatch, capsys
):
    report, trials = failed_campaign
    data = tmp_path / "data"
    monkeypatch.setenv("EVAL_PIPELINE_DATA_DIR", str(data))
    monkeypatch.delenv("EVAL_PIPELINE_ARTIFACTS", raising=False)
    store = LocalArtifactStore(data / "artifacts")
    for key in ("generation/i2.json", "generation/i1.json"):
        store.put(key, llm_generation(key))
    instances, variants = [{"instance_id": t.instance_id} for t in trials], [{"variant": "cand"}, {"variant": "ref"}]
    warehouse = Warehouse(list(trials), [], instances, variants, {"campaign": "demo"})
    write_warehouse(warehouse, data / "results" / "demo.duckdb")
    write_report(report.model_copy(update={"campaign": "demo", "directory": str(data / "reports" / "demo")}))

    assert main(["report", "--campaign", "demo", "--trial", "i2|cand-s0"]) == 0
    page = data / "reports" / "demo" / "report.html"
    assert capsys.readouterr().out == f"HTML report: {page} (1 trajectory)\n"
    assert re.findall(r'<section class="trajectory" id="([^"]+)"', page.read_text()) == ["trajectory-i2-cand-s0"]
    assert main(["report", "--campaign", "demo"]) == 0, "by default the failed trials"
    assert re.findall(r'<section class="trajectory" id="([^"]+)"', page.read_text()) == ["trajectory-i1-cand-s0"]
    capsys.readouterr()
    assert main(["report", "--campaign", "demo", "--variant", "ref", "--limit", "5"]) == 0, "the filters of run"
    assert capsys.readouterr().out == f"HTML report: {page} (0 trajectories)\n", "ref's failure has no generation"
    assert main(["report", "--campaign", "demo", "--instance", "i1"]) == 0
    assert re.findall(r'<section class="trajectory" id="([^"]+)"', page.read_text()) == ["trajectory-i1-cand-s0"]
    assert page.read_text().count('<span class="trial" data-outcome=') >= 6, "the matrix stays the campaign's"
    assert main(["report", "--campaign", "demo", "--variant", "nope"]) == 2
    assert "--variant nope: not in the campaign (it has cand, ref)" in capsys.readouterr().err
    assert main(["report", "--campaign", "demo", "--trial", "cand-s0"]) == 2
    assert "has no trial 'cand-s0' (a trial is named <instance id>|<variant>-s<seed>)" in capsys.readouterr().err


def test_the_report_has_the_matrix_and_names_each_unscored_trial_with_why(failed_campaign, store):
    report, trials = failed_campaign
    views = trajectories_for(trials, store)
    reason = "the tests were OOM-killed at the memory ceiling"
    html = render_html(report, trials, views, {"i3|cand-s0": reason})
    [matrix] = re.findall(r'<table class="matrix">.*?</table>', html)
    cells = re.findall(r'<span class="trial" data-outcome="(\w+)">(?:<a href="([^"]*)">)?', matrix)
    assert sorted(cells) == sorted(
        [
            ("unresolved", "#trajectory-i1-cand-s0"),  # its trajectory is shown: the cell links to it
            ("resolved", ""),
            ("oom_killed", ""),
            ("unresolved", ""),
            ("unresolved", ""),
            ("patch_apply_failed", "#trajectory-i0-ref-s0"),
        ]
    )
    assert "<td>1/5 resolved</td><td>0/1 resolved</td>" in matrix
    [unscored] = re.findall(r'<ul class="unscored">.*?</ul>', html)
    assert re.findall(r"<li>.*?</li>", unscored) == [
        '<li><span class="trial" data-outcome="oom_killed"><span class="swatch" style="background:#9b2c2c"></span>'
        f"i3|cand-s0</span>: <strong>oom_killed</strong>: {reason}</li>"
    ]


def test_a_trajectory_shows_the_final_patch_and_failing_tests_and_no_step_count_without_a_model(failed_campaign, store):
    report, trials = failed_campaign
    graded = replace(trials[0], generation_key="generation/i1-patched.json", evaluation_key="evaluation/i1.json")
    store.put("evaluation/i1.json", {"tests": {"t::ok": "PASSED", "t::bad": "FAILED", "t::gone": "MISSING"}})
    patched = {**llm_generation("generation/i1-patched.json"), "patch": "diff --git a/x b/x\n-old\n+new\n"}
    store.put("generation/i1-patched.json", patched)
    silent = replace(trial("i9", "cand", 0, "unresolved"), generation_key="generation/null.json")
    store.put("generation/null.json", {"key": "generation/null.json", "trajectory": [], "patch": "", "steps": 0})
    reference = replace(trials[5], steps=0, input_tokens=0, output_tokens=0, cost_usd=0.0)  # no model
    trials = [graded, *trials[1:5], reference, silent]
    views = trajectories_for(trials, store)
    assert "i9|cand-s0" not in views, "a failure with nothing to read takes no slot"
    assert list(trajectories_for(trials, store, chosen={"i9|cand-s0"})) == ["i9|cand-s0"], "unless chosen"
    html = render_html(report, trials, views)
    [section] = re.findall(r'<section class="trajectory" id="trajectory-i1-cand-s0">.*?</section>', html, re.S)
    assert "failing tests: <code>t::bad</code>, <code>t::gone</code></p>" in section
    assert (
        '<span class="del">-old</span>\n<span class="add">+new</span>' in section and "final patch (3 lines)" in section
    )
    [reference] = re.findall(r'<section class="trajectory" id="trajectory-i0-ref-s0">.*?</section>', html, re.S)
    assert "steps" not in reference and "tokens" not in reference, "an agent without a model: no '0 steps'"
    assert "The agent left no patch." in reference
