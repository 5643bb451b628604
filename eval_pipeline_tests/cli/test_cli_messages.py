"""What the CLI says where a new user met a traceback, a misleading line or silence (issue 50's smaller points):
each test runs the command as a user does (in process where that is the same, else the console script) and
reads what it prints and how it exits."""

import json
import re
import signal
import socket
import subprocess
from dataclasses import replace

import pytest

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.cli import main
from eval_pipeline.config.gates import parse_policy
from eval_pipeline.results.gates import evaluate_gate
from eval_pipeline.results.html import render_html
from eval_pipeline.results.markdown import render_markdown
from eval_pipeline.results.report import build_report
from eval_pipeline.trial.records import MISSING
from eval_pipeline_tests.support.cli import eval_pipeline_cli
from eval_pipeline_tests.support.result_rows import trial

FIRST_CODE_ISSUE = "eval-pipeline-demo__calclib-1"  # the demo's first slice (code-issues), its first instance by id


def not_run(instance_id: str, variant: str, seed: int, **fields):
    """A planned trial with no outcome at all (never run), as the results give one."""
    return replace(trial(instance_id, variant, seed, "unresolved", **fields), outcome=MISSING, outcome_kind=None)


def test_a_dagster_home_that_cannot_be_created_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    home = tmp_path / "a-file" / "dagster_home"
    home.parent.write_text("not a directory\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    for command in (["run"], ["view"], ["report"], ["export", "--to", str(tmp_path / "out")]):
        assert main(command) == 2, command
        [line] = capsys.readouterr().err.splitlines()
        assert line == (
            f"eval-pipeline {command[0]}: DAGSTER_HOME {home}: cannot write there (Not a directory: {home});"
            " set DAGSTER_HOME to a directory you can write"
        )


@pytest.mark.slow
def test_limit_1_runs_the_first_slices_first_trial_and_gates_on_a_selection_are_not_judged(campaign_env):
    """`run --limit 1`, a smoke test: the first trial in the campaign's order (its first slice, code-issues,
    not the terminal slice's build-index, which sorts first by id and is OOM-killed at 1x by design); the report
    is the whole campaign's, so its gates, with 95 of 96 trials not run, say they are not judged (no None)."""
    result = eval_pipeline_cli(campaign_env, "run", "--limit", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    [told] = [line for line in result.stderr.splitlines() if line.startswith("[")]
    assert told.startswith(f"[1/1] {FIRST_CODE_ISSUE} oracle-s0: resolved "), told
    gates = result.stdout.split("## Release gates\n\n", 1)[1].split("\n## ", 1)[0]
    not_judged = "not_judged: 95 of the 96 planned trials have not run (a run of a selection, or one stopped early)"
    for environment in ("prod", "staging"):
        assert f"- `{environment}`: not judged (candidate `flaky`)\n  - {not_judged}" in gates, gates
    assert "None" not in gates and "FAILED" not in gates


def test_a_run_that_scores_nothing_says_how_many_of_what_and_a_selections_outcomes():
    from eval_pipeline.orchestration.campaign_run import CampaignRun

    oom = trial("build-index", "oracle", 0, "oom_killed")
    timeout = trial("slow-report", "oracle", 0, "test_timeout")
    selected = CampaignRun(selected=True, trials=[oom, oom, timeout])
    assert selected.failures() == ["none of the 3 selected trials could be scored (oom_killed 2, test_timeout 1)"]
    assert CampaignRun(trials=[oom, timeout]).failures() == ["none of the 2 planned trials could be scored"]
    assert CampaignRun(selected=True, trials=[oom, trial("a", "oracle", 0, "agent_error")]).failures() == []


@pytest.mark.slow
def test_the_run_says_why_each_trial_it_ended_in_agent_error(campaign_env, tmp_path):
    """A prediction that does not apply ends its trial in agent_error (scored, exit 0): the CLI says why after the
    summary, as the evaluation recorded it, and --json carries it."""
    predictions = tmp_path / "preds.jsonl"
    patch = "diff --git a/absent.py b/absent.py\n--- a/absent.py\n+++ b/absent.py\n@@ -1 +1 @@\n-x\n+y\n"
    predictions.write_text(json.dumps({"instance_id": FIRST_CODE_ISSUE, "model_patch": patch}) + "\n")
    campaign = tmp_path / "applies_nothing.yaml"
    campaign.write_text(
        "name: applies_nothing\nslices: {code: {kind: demo}}\nseeds: 1\n"
        f"variants: [{{name: model, agent: predictions, params: {{path: {predictions}}}}}]\n"
        "sandbox: {backend: local, allow_untrusted_agents_locally: true}\n"
    )
    result = eval_pipeline_cli(
        campaign_env, "run", "--campaign", str(campaign), "--instance", FIRST_CODE_ISSUE, "--json"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    why = f"the prediction for {FIRST_CODE_ISSUE!r} does not apply"
    [line] = [line for line in result.stderr.splitlines() if line.startswith("eval-pipeline run: ")]
    assert line.startswith(f"eval-pipeline run: agent_error: {FIRST_CODE_ISSUE} model-s0: {why}"), line
    assert "can't find file to patch" in line, "GNU patch's reason, which it writes on stdout"
    [(trial_name, error)] = json.loads(result.stdout)["agent_errors"].items()
    assert trial_name == f"{FIRST_CODE_ISSUE} model-s0" and error.startswith(why)


@pytest.mark.parametrize(
    ("command", "hint"),
    [
        (["grade", "--dataset", "demo"], "; or, without a container engine, --backend local runs on this machine"),
        (
            ["run", "--campaign", "demo_containers"],
            "; or, without a container engine, a campaign with `sandbox: {backend: local}` runs on this machine",
        ),
    ],
    ids=["grade", "campaign"],
)
def test_no_container_engine_points_at_the_local_backend(campaign_env, tmp_path, command, hint):
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(json.dumps({"instance_id": FIRST_CODE_ISSUE, "model_patch": ""}) + "\n")
    if command[0] == "grade":
        command = [*command, "--predictions", str(predictions)]
    env = {**campaign_env, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    result = eval_pipeline_cli(env, *command, "--workers", "1", "--instance", FIRST_CODE_ISSUE, "--limit", "1")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    [line] = result.stderr.splitlines()[-1:]
    assert line.startswith(f"eval-pipeline {command[0]}: connecting to the container engine at unix://{tmp_path}/")
    assert "(DOCKER_HOST): " in line and hint in line, line


def test_a_taken_port_is_one_line_pointing_at_port(campaign_env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = eval_pipeline_cli(campaign_env, "view", "--port", str(port))
    assert refused.returncode == 2
    assert refused.stderr == (
        f"eval-pipeline view: cannot serve on 127.0.0.1:{port}: Address already in use; choose another port with"
        " --port (--port 0: any free one)\n"
    )


def test_ctrl_c_stops_view_with_exit_0_and_no_word_of_resuming(campaign_env):
    """Ctrl-C is how the viewer is stopped (it says so): an ending, not `run`'s interruption to resume."""
    viewer = subprocess.Popen(
        ["eval-pipeline", "view", "--port", "0"],
        env=campaign_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert viewer.stdout.readline().startswith("Trials of campaign demo: http://127.0.0.1:")
        viewer.send_signal(signal.SIGINT)
        _, stderr = viewer.communicate(timeout=60)
    finally:
        viewer.kill()
    assert (viewer.returncode, stderr) == (0, "Stopped serving the trials of campaign demo.\n")


def test_help_describes_every_command_with_examples_and_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as ended:
        main(["--version"])
    assert ended.value.code == 0 and capsys.readouterr().out == f"eval-pipeline {HARNESS_VERSION}\n"
    with pytest.raises(SystemExit):
        main(["--help"])
    top = capsys.readouterr().out
    assert "\nEvaluate AI coding agents on SWE-bench-style issues and Terminal-Bench tasks.\n" in top
    assert "\nexamples:\n  eval-pipeline run\n" in top and "--version" in top
    listed = top.split("\npositional arguments:\n", 1)[1].split("\n\n", 1)[0]
    commands = re.findall(r"^    ([a-z][a-z-]+)", listed, re.MULTILINE)
    assert {"run", "grade", "validate", "view", "export", "report", "gate", "janitor"} <= set(commands)
    for command in commands:
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        description = text.split("\n\n")[1]
        assert description[0].isupper() and description.endswith("."), (command, description)
        examples = text.split("\nexamples:\n", 1)[1]
        assert re.match(rf"  (\S+=\S+ )?eval-pipeline {command}\b.*\n      \S", examples), (command, examples)


def test_the_instances_column_is_named_for_what_it_counts():
    """n is the instances with a scored trial (docs/STATISTICS.md): of 3 planned, one only OOM-killed."""
    results = [
        trial("a1", "new", 0, "resolved"),
        trial("a2", "new", 0, "unresolved"),
        trial("b1", "new", 0, "oom_killed"),
    ]
    report = build_report("c", "d", "p", results)
    assert report.slices["code"]["new"].n == 2
    table = render_markdown(report).split("\n\n")[2].splitlines()
    headers = [cell.strip() for cell in table[0].strip("|").split("|")]
    cells = [cell.strip() for cell in table[2].strip("|").split("|")]
    assert cells[headers.index("instances scored")] == "2"


def test_intervals_are_the_same_numbers_in_report_json_markdown_and_html():
    """rate ± t·SE (docs/STATISTICS.md) everywhere: m = (1, .5, 0) gives [-0.742, 1.742], not [0, 1] in one place
    and the bounds in another; so does a difference's interval."""
    new_outcomes = {"a1": ("resolved", "resolved"), "a2": ("resolved", "unresolved"), "b1": ("unresolved",) * 2}
    results = [trial(i, "new", seed, outcome) for i, pair in new_outcomes.items() for seed, outcome in enumerate(pair)]
    results += [trial(i, "old", seed, "unresolved") for i in new_outcomes for seed in (0, 1)]
    report = build_report("c", "d", "p", results, baseline="old")
    new = json.loads(report.model_dump_json())["slices"]["code"]["new"]
    assert (round(new["ci_low"], 3), round(new["ci_high"], 3)) == (-0.742, 1.742)
    markdown, html = render_markdown(report), render_html(report, results)
    assert "| code | new | 0.500 | [-0.742, 1.742] |" in markdown
    assert "<td>0.500</td><td>[-0.742, 1.742]</td>" in html
    versus = new["vs_baseline"]
    assert f"| code | new | 0.500 | [{versus['ci_low']:.3f}, {versus['ci_high']:.3f}] |" in markdown


def test_a_gate_with_trials_not_run_is_not_judged_and_a_judged_one_never_says_none():
    from eval_pipeline.results.gates import NOT_JUDGED, verdict

    policy = parse_policy({"environment": "prod", "candidate": "new", "floors": {"*": 0.5}}, "prod.yaml")
    ran = [trial("a1", "new", 0, "resolved"), trial("t1", "new", 0, "oom_killed", slice="terminal")]
    partial = build_report("c", "d", "p", [*ran, not_run("a2", "new", 0)], gates=[policy])
    decision = partial.gates["prod"]
    [violation] = decision.violations
    assert (decision.passed, verdict(decision), violation.rule) == (False, "not judged", NOT_JUDGED)
    assert violation.message.startswith("1 of the 3 planned trials have not run")
    assert "- `prod`: not judged (candidate `new`)\n" in render_markdown(partial)
    assert '<span class="failed">not judged</span> (candidate new)' in render_html(partial, ran)

    judged = evaluate_gate(policy, build_report("c", "d", "p", ran))
    assert verdict(judged) == "FAILED"
    assert [v.message for v in judged.violations] == [
        "terminal: no trial scored, so no resolved rate for the floor 0.5"
    ]


def test_every_example_is_a_command_with_flags_it_takes(capsys):
    from eval_pipeline.cli import EXAMPLES

    for command, examples in EXAMPLES.items():
        for line, _ in examples:
            words = line.split()
            name, *rest = words[words.index("eval-pipeline") + 1 :]
            assert command in (None, name), line
            with pytest.raises(SystemExit):
                main([name, "--help"])
            text = capsys.readouterr().out
            assert all(f"{flag} " in text for flag in rest if flag.startswith("--")), line
