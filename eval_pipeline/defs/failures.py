"""Unscored outcomes as step failures, and back: how an outcome travels through Dagster's run records.

An evaluation that cannot be scored fails its step (so "backfill failed partitions" re-runs exactly those); the
step's retry policy retries it only when it is infrastructure. The outcome rides in the failure's metadata,
where the retry sensor and the CLI read it back.
"""

from collections.abc import Sequence
from typing import Any

from dagster import DagsterEvent, Failure

from eval_pipeline.outcomes import Outcome


def outcome_failure(description: str, outcome: Outcome, metadata: dict[str, Any]) -> Failure:
    """The step failure for an unscored outcome: retried by the step's policy only when it is infrastructure.

    The outcome travels in the failure's metadata, where the campaign's sensor reads it.
    """
    return Failure(
        description=f"{outcome.value} ({outcome.kind.value} outcome, not scored): {description}",
        metadata={**metadata, "outcome": outcome.value, "outcome_kind": outcome.kind.value},
        allow_retries=outcome.is_retried,
    )


def failure_outcomes(step_failures: Sequence[DagsterEvent]) -> list[Outcome]:
    """The outcomes that `outcome_failure` recorded in a run's step failures (none for a crash)."""
    outcomes = []
    for event in step_failures:
        user_data = event.step_failure_data.user_failure_data
        if user_data and "outcome" in user_data.metadata:
            outcomes.append(Outcome(user_data.metadata["outcome"].value))
    return outcomes
