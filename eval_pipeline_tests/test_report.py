"""The report's numbers per slice and variant, on hand-made results whose answers are known."""

import math

import pytest

from eval_pipeline.report import build_report, render_markdown
from eval_pipeline_tests.conftest import trial

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
    new = report["slices"]["code"]["new"]
    # m = (1, .5, 0): rate .5, sd .5, SE .5 / sqrt(3)
    assert new["resolved_rate"] == pytest.approx(0.5)
    assert new["ci_high"] == pytest.approx(0.5 + T_975_DOF_2 * 0.5 / math.sqrt(3))
    assert (new["scored"], new["planned"], new["coverage"]) == (5, 6, pytest.approx(5 / 6))
    assert new["outcomes"] == {"oom_killed": 1, "resolved": 3, "unresolved": 2}, "the OOM is not a zero"
    assert new["outcome_kinds"] == {"agent": 5, "infrastructure": 1}
    assert new["infrastructure_error_rate"] == pytest.approx(1 / 6)


def test_seeds_pass_at_k_durations_and_cost(report):
    new = report["slices"]["code"]["new"]
    # seed 1 is not scored on b1, so only seed 0 is on every scored instance: rate_0 = 2/3
    assert new["seed_spread"] == {
        "seeds": (0,),
        "rates": (pytest.approx(2 / 3),),
        "min": pytest.approx(2 / 3),
        "max": pytest.approx(2 / 3),
        "sd": None,
    }
    # pass@1 = (1 + .5 + 0) / 3; pass@2 would need two scored trials on b1
    assert new["pass_at_k"] == {"1": pytest.approx(0.5)}
    # durations of scored trials: 10, 2, 2, 2, 2
    assert new["duration_s"] == {"median": 2.0, "p95": pytest.approx(2 + 0.8 * 8)}
    assert new["cost_per_resolved"] == pytest.approx(2.5 / 3), "the OOM-killed trial's cost is not a score's"
    assert new["tokens_per_resolved"] == pytest.approx(750 / 3)


def test_paired_difference_against_the_baseline(report):
    versus = report["slices"]["code"]["new"]["vs_baseline"]
    # d = (1 - .5, .5 - 0, 0 - 0) = (.5, .5, 0): mean 1/3, sd sqrt(1/12), SE 1/6
    assert versus["baseline"] == "old" and versus["n"] == 3
    assert versus["diff"] == pytest.approx(1 / 3)
    assert versus["se"] == pytest.approx(1 / 6)
    assert versus["ci_low"] == pytest.approx(1 / 3 - T_975_DOF_2 / 6)
    assert "vs_baseline" not in report["slices"]["code"]["old"]


def test_markdown_has_rates_comparisons_and_costs(report):
    markdown = render_markdown(report)
    assert "| code | new | 0.500 |" in markdown
    assert "## Against the baseline `old` (paired by instance)" in markdown
    assert "| code | new | 0.333 | [" in markdown
    assert "@1 0.500" in markdown
