"""Rows of the results warehouse made by hand, for reports, gates and pages whose answers are known."""

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.results.warehouse import ResultRow


def trial(instance_id: str, variant: str, seed: int, outcome: str, **fields) -> ResultRow:
    """One results row; only what the report reads is given, the rest is lineage it passes over."""
    kind = Outcome(outcome).kind.value
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
        "test_infrastructure_changes": 0,
        "audit_flags": "",
        "input_tokens": 100,
        "output_tokens": 50,
        "cost_usd": 0.5,
        "steps": 3,
        "stop_reason": "completed",
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
        "limit_evidence": None,
    }
    return ResultRow(**{**row, **fields})
