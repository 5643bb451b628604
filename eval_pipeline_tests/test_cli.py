"""The CLI end to end, as a user runs it: a real console script against a fresh DAGSTER_HOME."""

import json
import subprocess
from pathlib import Path

import duckdb

from eval_pipeline import HARNESS_VERSION


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["eval-pipeline", "run", *args], env=env, capture_output=True, text=True, timeout=900)


def test_demo_campaign_end_to_end_then_resume_does_nothing(campaign_env):
    first = run_cli(campaign_env, "--campaign", "demo", "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads(first.stdout)
    assert summary["planned"] == summary["scored"] == 48
    assert summary["variants"]["oracle"]["resolved_rate"] == 1.0
    assert summary["variants"]["null"]["resolved_rate"] == 0.0
    assert summary["variants"]["oracle"]["n"] == 8
    assert summary["generation"] == {"computed": 48, "reused": 0, "failed": 0}
    assert Path(summary["report"]).read_text().startswith("# Campaign `demo`")

    home = Path(campaign_env["DAGSTER_HOME"])
    with duckdb.connect(str(home / "eval_pipeline" / "results" / "demo.duckdb"), read_only=True) as db:
        rows = db.execute(
            "SELECT count(*), count(DISTINCT dataset_version), min(harness_version), count(agent_config_hash),"
            " count(DISTINCT seed), min(sandbox_backend), min(memory_floor_mb), min(memory_ceiling_mb) FROM trials"
        ).fetchone()
        measured = db.execute("SELECT count(*) FROM trials WHERE peak_memory_mb > 0 AND NOT oom_killed").fetchone()
    assert rows == (48, 1, HARNESS_VERSION, 48, 2, "local", 256, 2048)
    assert measured == (48,), "every trial records its peak memory"

    second = run_cli(campaign_env, "--campaign", "demo", "--json")
    assert second.returncode == 0, second.stderr[-3000:]
    again = json.loads(second.stdout)
    assert again["generation"] == again["evaluation"] == {"computed": 0, "reused": 0, "failed": 0}
    assert again["variants"] == summary["variants"]
    assert "48 of 48 trials already done" in second.stderr


def test_a_bad_campaign_gets_a_clear_error(campaign_env, tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\nbenchmark: {kind: demo}\nvariants: [{name: x, agent: nope}]\n")
    result = run_cli(campaign_env, "--campaign", str(bad))
    assert result.returncode == 2
    assert f"{bad}: variants[0] (x): field agent/params: unknown agent 'nope'" in result.stderr
