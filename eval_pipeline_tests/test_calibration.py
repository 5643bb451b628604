"""Resource calibration: the same patches graded at 1x, 3x and uncapped resources."""

import json

from eval_pipeline.calibration import at_multiplier, calibration_rows, render_calibration
from eval_pipeline.campaign import load_campaign
from eval_pipeline.terminal_tasks import DEMO_TASKS_DIR
from eval_pipeline_tests.conftest import eval_pipeline_cli

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
    tripled, uncapped = at_multiplier(demo, "3"), at_multiplier(demo, "uncapped")
    assert (tripled.name, tripled.resources.effective_memory_ceiling_mb) == ("demo_x3", 3 * 2048)
    assert (uncapped.name, uncapped.resources.effective_memory_ceiling_mb) == ("demo_uncapped", None)
    assert tripled.trials == demo.trials and tripled.gates == ()


def test_rows_compare_rates_and_infrastructure_errors_per_multiplier():
    summary = {"resolved_rate": 0.5, "ci_low": 0.1, "ci_high": 0.9, "infrastructure_error_rate": 0.25, "coverage": 0.75}
    reports = {"x1": {"slices": {"code": {"a": summary}}, "variants": {"a": summary}}}
    [row] = calibration_rows(reports)
    assert row == {"multiplier": "x1", "slice": "code", "variant": "a", **summary}
    assert "| x1 | code | a | 0.500 | [0.100, 0.900] | 0.250 | 0.750 |" in render_calibration([row])


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
