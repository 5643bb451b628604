"""The report's numbers per slice and variant, on hand-made results whose answers are known."""

import math

import pytest

from eval_pipeline.report import build_report, render_markdown
from eval_pipeline.results import TrialResult

T_975_DOF_2 = 4.302652729749464


def trial(instance_id: str, variant: str, seed: int, outcome: str, **fields) -> TrialResult:
    """One results row; only what the report reads is given, the rest is lineage it passes over."""
    kind = {"resolved": "agent", "unresolved": "agent", "oom_killed": "infrastructure"}[outcome]
    row = {
        "campaign": "c",
        "slice": "code",
        "instance_id": instance_id,
        "repo": f"owner/{instance_id[0]}",
        "trial": f"{variant}-s{seed}",
        "variant": variant,
        "seed": seed,
        "agent": variant,
        "agent_config_hash": variant,
        "outcome": outcome,
        "outcome_kind": kind,
        "scored": kind == "agent",
        "resolved": outcome == "resolved",
        "attempts": 1,
        "generation_key": None,
        "evaluation_key": None,
        "patch_sha256": None,
        "generation_duration_s": 1.0,
        "evaluation_duration_s": 1.0,
        "peak_memory_mb": None,
        "oom_killed": outcome == "oom_killed",
        "input_tokens": 100,
        "output_tokens": 50,
        "cost_usd": 0.5,
        "harness_version": "h",
        "dataset_version": "d",
        "sandbox_backend": "local",
        "sandbox_mode": "pod",
        "environment_image": None,
        "memory_floor_mb": 1,
        "memory_ceiling_mb": 2,
        "cpu_floor": 1.0,
        "cpu_ceiling": 1.0,
        "resource_multiplier": 1.0,
        "effective_memory_ceiling_mb": 2,
        "pids_limit": 1,
        "enforced_limits": "{}",
    }
    return TrialResult(**{**row, **fields})


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
