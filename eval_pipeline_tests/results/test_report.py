"""The report's numbers per slice and variant, on hand-made results whose answers are known."""

import json
import math
from pathlib import Path

import pytest

from eval_pipeline.config.gates import parse_policy
from eval_pipeline.results.markdown import render_markdown, render_summary
from eval_pipeline.results.model import ReportError, load_report
from eval_pipeline.results.report import build_report, write_report
from eval_pipeline_tests.support.result_rows import trial

T_975_DOF_2 = 4.302652729749464


# new resolves a1 twice, a2 once, b1 never; old resolves a1 once; one of new's trials was OOM-killed.
RESULTS = [
    trial("a1", "new", 0, "resolved", generation_duration_s=9.0),
    trial("a1", "new", 1, "resolved"),
    trial("a2", "new", 0, "resolved"),
    trial("a2", "new", 1, "unresolved"),
    trial("b1", "new", 0, "unresolved"),
    trial("b1", "new", 1, "oom_killed", cost_usd=7.0),
    trial("a1", "old", 0, "resolved"),
    trial("a1", "old", 1, "unresolved"),
    trial("a2", "old", 0, "unresolved"),
    trial("a2", "old", 1, "unresolved"),
    trial("b1", "old", 0, "unresolved"),
    trial("b1", "old", 1, "unresolved"),
]


@pytest.fixture(scope="module")
def report():
    return build_report("c", "d" * 64, "p" * 64, RESULTS, baseline="old")


def test_rates_coverage_and_taxonomy(report):
    new = report.slices["code"]["new"]
    # m = (1, .5, 0): rate .5, sd .5, SE .5 / sqrt(3)
    assert new.resolved_rate == pytest.approx(0.5)
    assert new.ci_high == pytest.approx(0.5 + T_975_DOF_2 * 0.5 / math.sqrt(3))
    assert (new.scored, new.planned, new.coverage) == (5, 6, pytest.approx(5 / 6))
    assert new.outcomes == {"oom_killed": 1, "resolved": 3, "unresolved": 2}, "the OOM is not a zero"
    assert new.outcome_kinds == {"agent": 5, "infrastructure": 1}
    assert new.infrastructure_error_rate == pytest.approx(1 / 6)


def test_seeds_pass_at_k_durations_and_cost(report):
    new = report.slices["code"]["new"]
    # seed 1 is not scored on b1, so only seed 0 is on every scored instance: rate_0 = 2/3
    spread = new.seed_spread
    assert (spread.seeds, spread.rates) == ((0,), (pytest.approx(2 / 3),))
    assert (spread.min, spread.max, spread.sd) == (pytest.approx(2 / 3), pytest.approx(2 / 3), None)
    # pass@1 = (1 + .5 + 0) / 3; pass@2 would need two scored trials on b1
    assert new.pass_at_k == {1: pytest.approx(0.5)}
    # durations of scored trials: 10, 2, 2, 2, 2
    assert (new.duration_s.median, new.duration_s.p95) == (2.0, pytest.approx(2 + 0.8 * 8))
    assert new.cost_per_resolved == pytest.approx(2.5 / 3), "the OOM-killed trial's cost is not a score's"
    assert new.tokens_per_resolved == pytest.approx(750 / 3)


def test_paired_difference_against_the_baseline(report):
    versus = report.slices["code"]["new"].vs_baseline
    # d = (1 - .5, .5 - 0, 0 - 0) = (.5, .5, 0): mean 1/3, sd sqrt(1/12), SE 1/6
    assert versus.baseline == "old" and versus.n == 3
    assert versus.diff == pytest.approx(1 / 3)
    assert versus.se == pytest.approx(1 / 6)
    assert versus.ci_low == pytest.approx(1 / 3 - T_975_DOF_2 / 6)
    assert report.slices["code"]["old"].vs_baseline is None


def test_markdown_has_rates_comparisons_and_costs(report):
    markdown = render_markdown(report)
    assert "| code | new | 0.500 |" in markdown
    new_row = next(line for line in markdown.splitlines() if line.startswith("| code | new | 0.500 |"))
    assert "| 3/6 | 5/6 |" in new_row, "resolved over planned (every planned trial counts) beside scored over planned"
    assert "## Against the baseline `old` (paired by instance)" in markdown
    assert "| code | new | 0.333 | [" in markdown
    assert "@1 0.500" in markdown


def test_rate_intervals_are_shown_as_computed(report):
    new = report.slices["code"]["new"]
    assert new.ci_low < 0 < 1 < new.ci_high, "three instances: the t-interval reaches past both ends"
    assert "| code | new | 0.500 | [-0.742, 1.742] |" in render_markdown(report), "docs/STATISTICS.md's example"


GATE = {"environment": "prod", "candidate": "new", "floors": {"*": 0.6}, "max_regression": {"resolved_rate": 0.5}}


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    directory = tmp_path_factory.mktemp("reports")
    staging = parse_policy({**GATE, "environment": "staging", "floors": {}}, "staging.yaml")
    return build_report(
        "c",
        "d" * 64,
        "p" * 64,
        RESULTS,
        baseline="old",
        gates=[staging, parse_policy(GATE, "prod.yaml")],
        directory=directory,
    )


def test_the_report_carries_each_gates_decision(gated):
    assert [(env, d.passed) for env, d in gated.gates.items()] == [("staging", True), ("prod", False)]
    [violation] = gated.gates["prod"].violations
    assert (violation.rule, violation.slice, violation.value, violation.limit) == ("floor", "code", 0.5, 0.6)


def test_report_json_is_the_model_and_loads_back(gated):
    path = write_report(gated)
    stored = gated.paths()["json"]
    assert json.loads(Path(stored).read_text()) == gated.model_dump(mode="json")
    assert load_report(Path(stored)) == gated
    assert path == Path(gated.paths()["markdown"]) and path.read_text() == render_markdown(gated)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda data: data.pop("schema_version"), "schema version None, this eval-pipeline reads"),
        (
            lambda data: data["slices"]["code"]["new"].update(resolved_rate="high"),
            r"field slices\.code\.new\.resolved_rate",
        ),
        (lambda data: data.update(surprise=1), "field surprise: unknown field; allowed: schema_version"),
    ],
)
def test_a_stored_report_that_cannot_be_used_names_the_file_and_field(gated, tmp_path, change, message):
    data = gated.model_dump(mode="json")
    change(data)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReportError, match=f"report {path}: .*{message}"):
        load_report(path)
    path.write_text("{")
    with pytest.raises(ReportError, match=f"report {path}: Expecting"):
        load_report(path)


def test_the_summary_has_per_slice_intervals_gates_and_files(gated):
    summary = json.loads(json.dumps(gated.summary()))
    new = gated.slices["code"]["new"]
    assert summary["slices"]["code"]["new"] == {
        "resolved_rate": 0.5,
        "n": 3,
        "ci_low": new.ci_low,
        "ci_high": new.ci_high,
        "scored": 5,
        "planned": 6,
        "coverage": 5 / 6,
        "outcomes": {"oom_killed": 1, "resolved": 3, "unresolved": 2},
        # SWE-bench's lists; with two seeds an instance is in the list of each of its trials
        "resolved_ids": ["a1", "a2"],
        "unresolved_ids": ["a2", "b1"],
        "empty_patch_ids": [],
        "error_ids": ["b1"],
        "incomplete_ids": [],
    }
    assert summary["variants"]["old"]["ci_low"] == gated.variants["old"].ci_low
    assert (summary["planned"], summary["scored"], summary["dataset_version"]) == (12, 11, "d" * 64)
    assert summary["gates"] == {"staging": True, "prod": False}
    assert {form: Path(path).name for form, path in summary["report"].items()} == {
        "markdown": "report.md",
        "html": "report.html",
        "json": "report.json",
    }


def test_the_text_summary_shows_each_gate_and_the_html_report(gated):
    text = render_summary(gated)
    assert "- `staging`: passed (candidate `new`)\n- `prod`: FAILED (candidate `new`)\n" in text
    assert "  - floor: code: resolved rate 0.5 is below the floor 0.6\n" in text
    assert text.endswith(
        f"HTML report: {gated.paths()['html']}\nMarkdown report: {gated.paths()['markdown']}\n"
        f"JSON report: {gated.paths()['json']}\n"
    )
