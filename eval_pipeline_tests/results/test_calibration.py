"""Resource calibration: the same patches graded at 1x, 3x and uncapped resources."""

import json
from pathlib import Path

import pytest

from eval_pipeline.cli import main
from eval_pipeline.config.campaign import load_campaign
from eval_pipeline.results.calibration import at_multiplier, calibration_rows, parse_multipliers, render_calibration
from eval_pipeline.results.report import build_report
from eval_pipeline.tasks.terminal.task import DEMO_TASKS_DIR
from eval_pipeline_tests.support.cli import eval_pipeline_cli
from eval_pipeline_tests.support.result_rows import trial

CAMPAIGN = f"""
name: cal
slices:
  terminal: {{kind: terminal, path: {DEMO_TASKS_DIR / "build-index"}}}
variants: [{{name: oracle, agent: oracle}}]
seeds: 2
resources: {{memory_floor_mb: 128, memory_ceiling_mb: 256}}
retries: {{max_retries: 0, delay_s: 0, max_rerequests: 0}}
"""


def test_each_multiplier_is_its_own_campaign_with_scaled_ceilings():
    demo = load_campaign("demo")
    tripled, uncapped = at_multiplier(demo, 3.0), at_multiplier(demo, None)
    assert (tripled.name, tripled.resources.effective_memory_ceiling_mb) == ("demo_x3", 3 * 2048)
    assert (uncapped.name, uncapped.resources.effective_memory_ceiling_mb) == ("demo_uncapped", None)
    assert tripled.trials == demo.trials and tripled.gates == ()


def test_rows_compare_rates_and_infrastructure_errors_per_multiplier():
    results = [trial("a1", "a", 0, "resolved"), trial("a2", "a", 0, "unresolved"), trial("a3", "a", 0, "oom_killed")]
    report = build_report("c", "d", "p", results)
    [row] = calibration_rows({"x1": report})
    summary = report.slices["code"]["a"]
    assert row == {
        "multiplier": "x1",
        "slice": "code",
        "variant": "a",
        "resolved_rate": 0.5,
        "ci_low": summary.ci_low,
        "ci_high": summary.ci_high,
        "infrastructure_error_rate": 1 / 3,
        "coverage": 2 / 3,
    }
    interval = f"[{summary.ci_low:.3f}, {summary.ci_high:.3f}]"
    assert f"| x1 | code | a | 0.500 | {interval} | 0.333 | 0.667 |" in render_calibration([row])


def test_multipliers_are_numbers_or_uncapped():
    assert parse_multipliers("1, 3x,uncapped,0.5") == [1.0, 3.0, None, 0.5]


@pytest.mark.parametrize(("text", "bad"), [("1,x", "'x'"), ("1,,3", "''"), ("1,-2", "'-2'"), ("", "got ''")])
def test_a_bad_multiplier_is_named(text, bad):
    with pytest.raises(ValueError, match=f"--multipliers: .*{bad}"):
        parse_multipliers(text)


def test_a_bad_multiplier_fails_before_any_campaign_runs(campaign_env, capsys):
    assert main(["calibrate", "--campaign", "demo", "--multipliers", "1,x"]) == 2
    assert "--multipliers: 'x' is not a positive number" in capsys.readouterr().err
    assert not (Path(campaign_env["DAGSTER_HOME"]) / "eval_pipeline").exists(), "nothing ran, nothing was written"


@pytest.mark.slow
def test_a_task_over_its_memory_is_infrastructure_at_1x_and_resolved_above(campaign_env, tmp_path):
    campaign = tmp_path / "cal.yaml"
    campaign.write_text(CAMPAIGN)
    completed = eval_pipeline_cli(campaign_env, "calibrate", "--campaign", str(campaign), "--workers", "1", "--json")
    assert completed.returncode == 0, completed.stderr[-3000:]
    calibration = json.loads(completed.stdout)
    measured = {
        row["multiplier"]: (row["resolved_rate"], row["infrastructure_error_rate"]) for row in calibration["rows"]
    }
    assert measured == {"x1": (None, 1.0), "x3": (1.0, 0.0), "uncapped": (1.0, 0.0)}, "an OOM is never a zero"
    runs = calibration["runs"]
    assert [runs[m]["generation"]["computed"] for m in ("x1", "x3", "uncapped")] == [2, 0, 0], "patches made once"
    assert runs["x3"]["evaluation"]["computed"] == runs["uncapped"]["evaluation"]["computed"] == 2
