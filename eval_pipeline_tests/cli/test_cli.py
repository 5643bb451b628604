"""The CLI end to end, as a user runs it: a real console script against a fresh DAGSTER_HOME."""

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from dagster import AssetCheckKey, AssetKey, DagsterEventType, DagsterInstance

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.cli import main
from eval_pipeline_tests.support.cli import eval_pipeline_cli


@pytest.mark.slow
def test_demo_portfolio_end_to_end_then_resume_regrades_only_the_unscored(campaign_env):
    first = eval_pipeline_cli(campaign_env, "run", "--campaign", "demo", "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads(first.stdout)
    # 16 instances x 3 variants x 2 seeds; build-index (OOM at 1x) and slow-report (timeout) are never scored.
    assert summary["planned"] == 96 and summary["scored"] == 84
    code, terminal = summary["slices"]["code-issues"], summary["slices"]["terminal"]
    assert [headline(code["oracle"]), headline(code["null"])] == [(1.0, 8, 1.0, 1.0), (0.0, 8, 0.0, 0.0)]
    assert headline(terminal["null"]) == (0.0, 6, 0.0, 0.0), "every slice with its interval"
    assert summary["generation"] == {"computed": 96, "reused": 0, "failed": 0}
    assert Path(summary["report"]["markdown"]).read_text().startswith("# Campaign `demo`")
    html = Path(summary["report"]["html"]).read_text()
    assert html.startswith("<!DOCTYPE html>")
    # the null variant alone fails 28 scored trials: the report asset shows 20 failed trials' trajectories
    failed = int(re.search(r"(\d+) trial\(s\) failed", html)[1])
    assert failed >= 28 and html.count('<section class="trajectory" id="trajectory-') == 20
    assert_quiet(first.stderr)

    home = Path(campaign_env["DAGSTER_HOME"])
    with duckdb.connect(str(home / "eval_pipeline" / "results" / "demo.duckdb"), read_only=True) as db:
        rows = db.execute(
            "SELECT count(*), count(DISTINCT dataset_version), min(harness_version), count(agent_config_hash),"
            " count(DISTINCT seed), min(sandbox_backend), min(memory_floor_mb), max(memory_ceiling_mb) FROM trials"
        ).fetchone()
        measured = db.execute(
            "SELECT count(*) FILTER (WHERE slice = 'code-issues' AND peak_memory_mb > 0),"
            " count(*) FILTER (WHERE peak_memory_mb = 0) FROM trials"
        ).fetchone()
        unscored = db.execute(
            "SELECT instance_id, outcome, count(*), min(memory_ceiling_mb) FROM trials WHERE NOT scored GROUP BY ALL ORDER BY 1"
        ).fetchall()
        oracle_terminal = db.execute(
            "SELECT instance_id FROM trials WHERE slice = 'terminal' AND variant = 'oracle' AND NOT resolved"
        ).fetchall()
    assert rows == (96, 1, HARNESS_VERSION, 96, 2, "local", 256, 2048)
    sampled, zero = measured
    assert zero == 0, "a run too short to sample records no peak, never 0"
    assert sampled >= 40, f"pytest runs record their peak (of 48 code-issue trials, {sampled} were sampled)"
    assert unscored == [("build-index", "oom_killed", 6, 256), ("slow-report", "test_timeout", 6, 1024)]
    assert {row[0] for row in oracle_terminal} <= {"build-index", "slow-report", "shuffle-deck"}
    assert_release_gates(campaign_env, summary)
    unscored_attempts = assert_warehouse(home, summary)
    assert_trial_folders(campaign_env, home / "export")

    second = eval_pipeline_cli(campaign_env, "run", "--campaign", "demo", "--json")
    assert second.returncode == 0, second.stderr[-3000:]
    again = json.loads(second.stdout)
    assert again["generation"] == {"computed": 0, "reused": 12, "failed": 0}, "re-grading never regenerates"
    assert again["evaluation"] == {"computed": 0, "reused": 0, "failed": 12}, second.stderr[-3000:]
    assert again["variants"] == summary["variants"]
    assert "84 of 96 trials already done" in second.stderr
    assert assert_warehouse(home, again) == 2 * unscored_attempts, "a re-grade adds attempts and deletes none"


def assert_quiet(stderr: str) -> None:
    """The demo's intended failures are results: one line each, no traceback, nothing else said."""
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    told = re.compile(r"demo: 16 instances x 6 trials; .*|environment ready: \S+|\[\d+/96\] \S+ \S+: .*")
    assert [line for line in lines if not told.fullmatch(line)] == []
    failures = [line for line in lines if "oom_killed" in line or "test_timeout" in line]
    assert len(failures) == 12 and all("(run " in line for line in failures), "each with its run to look up"


def headline(numbers: dict) -> tuple:
    return numbers["resolved_rate"], numbers["n"], numbers["ci_low"], numbers["ci_high"]


def assert_trial_folders(env: dict[str, str], dest: Path) -> None:
    """A person can browse one trial: what the agent was asked, what it wrote, how it was graded, and why. An
    export run with another results key says so and quarantines nothing."""
    wrong_key = {**env, "EVAL_PIPELINE_RESULTS_KEY": "f" * 64}
    refused = eval_pipeline_cli(
        wrong_key, "export", "--campaign", "demo", "--to", str(dest), "--instance", "build-index"
    )
    assert refused.returncode == 2 and "wrong results key?" in refused.stderr, refused.stderr[-3000:]
    exported = eval_pipeline_cli(env, "export", "--campaign", "demo", "--to", str(dest), "--instance", "build-index")
    assert exported.returncode == 0, exported.stderr[-3000:]
    folder = dest / "terminal" / "build-index" / "oracle" / "seed-0"
    assert sorted(path.name for path in dest.glob("terminal/build-index/*/seed-*")) == ["seed-0"] * 3 + ["seed-1"] * 3
    assert {path.name for path in folder.iterdir()} >= {"instruction.md", "patch.diff", "outcome.json", "lineage.json"}
    assert json.loads((folder / "outcome.json").read_text())["outcome"] == "oom_killed"
    attempts = (folder / "attempts.jsonl").read_text().splitlines()
    assert len(attempts) >= 2, "every attempt of the retried evaluation is there"


def assert_warehouse(home: Path, summary: dict) -> int:
    """The warehouse's tables agree with each other and the summary; returns the unscored trials' attempts."""
    with duckdb.connect(str(home / "eval_pipeline" / "results" / "demo.duckdb"), read_only=True) as db:
        kept = db.execute(
            "SELECT count(*), count(DISTINCT outcome), bool_or(final) FROM attempts"
            " WHERE stage = 'evaluation' AND instance_id IN ('build-index', 'slow-report')"
        ).fetchone()
        counted = db.execute("SELECT sum(attempts) FROM trials WHERE NOT scored").fetchone()[0]
        finals = db.execute("SELECT stage, count(*) FROM attempts WHERE final GROUP BY ALL ORDER BY ALL").fetchall()
        instances = db.execute("SELECT count(*), count(DISTINCT slice) FROM instances").fetchone()
        baseline = db.execute("SELECT variant FROM variants WHERE is_baseline").fetchall()
        lineage = db.execute("SELECT dataset_version, harness_version FROM lineage").fetchall()
    assert kept[0] == counted and kept[0] > 12, "each unscored trial was retried in its run, every attempt kept"
    assert (kept[1], kept[2]) == (2, False), "oom_killed and test_timeout attempts, none final"
    assert finals == [("evaluation", 84), ("generation", 96)]
    assert instances == (16, 2) and baseline == [("null",)]
    assert lineage == [(summary["dataset_version"], HARNESS_VERSION)]
    return kept[0]


def assert_release_gates(env: dict[str, str], summary: dict) -> None:
    """The demo's candidate (flaky) beats its baseline (null) everywhere, yet code-issues is under prod's floor."""
    assert summary["gates"] == {"staging": True, "prod": False}
    reports = Path(env["DAGSTER_HOME"]) / "eval_pipeline" / "reports" / "demo"
    prod = json.loads((reports / "gate_prod.json").read_text())
    assert {(v["rule"], v["slice"]) for v in prod["violations"]} == {
        ("floor", "code-issues"),
        ("min_coverage", "terminal"),
    }
    assert json.loads((reports / "release_decision.json").read_text())["promote"] is False, "a failed gate: no release"
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        released = instance.get_latest_materialization_event(AssetKey(["demo", "release_decision"]))
        assert released.asset_materialization.metadata["promote"].value is False
        release_run = instance.get_run_by_id(released.run_id)
        assert release_run.status.value == "SUCCESS", "a failed gate is a result, not a failed run"
        check = AssetCheckKey(AssetKey(["demo", "report"]), "gate_prod")
        record = instance.event_log_storage.get_asset_check_execution_history(check, limit=1)[0]
        assert record.event.dagster_event.event_specific_data.metadata["decision"].value == prod

    for environment, exit_code in (("staging", 0), ("prod", 1)):
        gate = eval_pipeline_cli(env, "gate", "--campaign", "demo", "--environment", environment)
        assert gate.returncode == exit_code, gate.stderr
        assert json.loads(gate.stdout)["passed"] is (exit_code == 0)


def test_a_bad_campaign_gets_a_clear_error(campaign_env, tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\nbenchmark: {kind: demo}\nvariants: [{name: x, agent: nope}]\n")
    result = eval_pipeline_cli(campaign_env, "run", "--campaign", str(bad))
    assert result.returncode == 2
    assert f"{bad}: field variants[0].agent: unknown agent 'nope' (known: " in result.stderr


def test_an_untrusted_agent_on_the_local_backend_is_refused_before_anything_runs(campaign_env, tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "name: mine\nbenchmark: {kind: demo}\nvariants: [{name: x, agent: command, params: {command: a}}]\n"
    )
    result = eval_pipeline_cli(campaign_env, "run", "--campaign", str(mine))
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"eval-pipeline run: {mine}: field variants[0].agent: variant 'x' (agent 'command') runs")
    assert line.endswith("or opt in explicitly (sandbox: {allow_untrusted_agents_locally: true})")
    assert not (tmp_path / "dagster_home" / "dagster.yaml").exists(), "refused before the instance is set up"


@pytest.mark.parametrize(
    ("ending", "code"),
    [("raise KeyboardInterrupt", 130), ("sys.exit(2)", 2), ("sys.exit('broken')", 1), ("return 0", 0), ("return 3", 3)],
)
def test_the_command_exits_with_mains_code_however_main_ends(ending, code):
    """The console entry ends the process without the interpreter's teardown (cli.console_main): the exit code
    is still main's, its SystemExit's, 130 for an interrupt that escaped it, and what was printed is flushed."""
    script = (
        "import sys\nimport eval_pipeline.cli as cli\n"
        f"def main():\n    print('said', flush=False)\n    {ending}\n"
        "cli.main = main\ncli.console_main()\n"
    )
    ended = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert (ended.returncode, ended.stdout) == (code, "said\n")


def test_a_container_engine_that_cannot_be_reached_is_one_line_naming_docker_host(campaign_env, tmp_path):
    """No engine at DOCKER_HOST (not started, a wrong socket) is the user's to fix: the error names where the
    command looked, in one line, not a traceback."""
    env = {**campaign_env, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    result = eval_pipeline_cli(env, "run", "--campaign", "demo_containers", "--workers", "1", "--limit", "1")
    assert result.returncode == 1
    [line] = result.stderr.splitlines()[-1:]
    assert line.startswith(f"eval-pipeline run: connecting to the container engine at unix://{tmp_path}/no-engine")
    assert "(DOCKER_HOST)" in line and "Traceback" not in result.stderr


def test_a_run_whose_every_environment_fails_exits_1_naming_each_builds_last_error_and_log(
    campaign_env, demo_benchmark, tmp_path
):
    """Nothing scored is no success: the summary is printed, then a line per failed environment with the
    last line its install step printed and where the whole log is, and exit 1."""
    instance = demo_benchmark.instances[0]
    row = {**instance.to_row(), "instance_id": "octo__calc-1"}
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    failing = "{install: ['echo collecting; echo \"ERROR: no matching distribution for nothing-at-all\" >&2; exit 1']}"
    campaign = tmp_path / "broken_env.yaml"
    campaign.write_text(
        "name: broken_env\n"
        f"benchmark: {{kind: swebench, path: {tmp_path / 'rows.jsonl'}, mirror_dir: {demo_benchmark.source.mirror_dir},"
        f" environments: {{'{instance.repo}@{instance.version}': {failing}}}}}\n"
        "variants: [{name: gold, agent: oracle}]\nseeds: 1\n"
    )
    result = eval_pipeline_cli(campaign_env, "run", "--campaign", str(campaign))
    assert result.returncode == 1, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("eval-pipeline run: ")]
    assert lines[0].startswith("eval-pipeline run: environment failed: octo__calc-1: ")
    assert "ERROR: no matching distribution for nothing-at-all (log: " in lines[0]
    log = Path(lines[0].rsplit("(log: ", 1)[1].rstrip(")"))
    assert "$ echo collecting" in log.read_text()
    assert lines[-1] == "eval-pipeline run: none of the 1 planned trials could be scored"


@pytest.mark.slow
def test_run_with_filters_runs_exactly_the_selected_trials(campaign_env):
    """`run --instance X --variant Y`, as a smoke test of one instance needs: those trials and nothing else, in
    the campaign's own partitions; a filter naming what the campaign lacks is refused before anything runs."""
    refused = eval_pipeline_cli(campaign_env, "run", "--campaign", "demo", "--variant", "gpt")
    assert refused.returncode == 2 and "--variant gpt: not in the campaign" in refused.stderr, refused.stderr[-2000:]
    picked = eval_pipeline_cli(
        campaign_env, "run", "--campaign", "demo", "--instance", "hello-file", "--variant", "oracle", "--json"
    )
    assert picked.returncode == 0, picked.stderr[-3000:]
    summary = json.loads(picked.stdout)
    assert summary["generation"]["computed"] == 2 and summary["evaluation"]["computed"] == 2, "its two seeds"
    assert (summary["planned"], summary["scored"]) == (96, 2), "the report is the whole campaign's"
    told = [line for line in picked.stderr.splitlines() if line.startswith("[")]
    assert len(told) == 2 and all(line.split()[1] == "hello-file" for line in told), picked.stderr[-3000:]
    assert "(selected: 2)" in picked.stderr
    assert_planned_once_per_asset(Path(campaign_env["DAGSTER_HOME"]))


def assert_planned_once_per_asset(home: Path) -> None:
    """A run of a range of trials records one planned event per asset, naming the range, not one per asset and
    trial (which made a 64-trial run write 128 events before it started): the CLI sets Dagster's flag."""
    with DagsterInstance.from_config(str(home)) as instance:
        ranged = 0
        for run in instance.get_runs():
            planned = instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION_PLANNED)
            data = [event.get_dagster_event().event_specific_data for event in planned]
            assert len(data) == len({item.asset_key for item in data}), f"run {run.run_id}: one per asset"
            ranged += sum(1 for item in data if item.partitions_subset and len(item.partitions_subset) > 1)
    assert ranged, "a run of several trials names them as a subset"


def test_library_chatter_is_off_unless_the_user_turns_it_on(monkeypatch, capsys):
    monkeypatch.delenv("HF_DATASETS_DISABLE_PROGRESS_BARS", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")  # the user's own choice stands
    monkeypatch.setattr(logging.getLogger("alembic"), "level", logging.NOTSET)
    assert main(["instance-config"]) == 0
    assert os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] == "1" and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "0"
    assert not logging.getLogger("alembic").isEnabledFor(logging.INFO)
    assert "telemetry:" in capsys.readouterr().out
