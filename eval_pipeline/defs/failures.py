"""Unscored outcomes as step failures, and back: how an outcome travels through Dagster's run records.

A step whose partitions did not all end in a scored outcome fails after
materializing the ones that did, so that exactly the others are failed
partitions ("backfill failed partitions" re-runs those alone). The failure's
description starts with the typed outcome and its detail ("oom_killed: ..."),
which is the first line the UI shows of the failed step and of its run. The
outcome of each failed partition rides in the failure's metadata, where the
retry sensor and the CLI read it back.
"""

from collections.abc import Mapping, Sequence
from typing import Any, cast

from dagster import DagsterEvent, Failure, MetadataValue

from eval_pipeline.common.foreign_text import shown
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.common.text import truncate

DETAIL_CHARS = 2000  # of an outcome's detail in a failure: its head, where the error's own message is


def outcome_failure(description: str, outcomes: Mapping[str, Outcome], metadata: Mapping[str, Any]) -> Failure:
    """The step failure for partitions that ended in unscored `outcomes` (partition key -> outcome).

    A step retry policy (environments have one) retries it only when every outcome is infrastructure.
    """
    return Failure(
        description=description,
        metadata={**metadata, "outcomes": MetadataValue.json({key: o.value for key, o in outcomes.items()})},
        allow_retries=all(outcome.is_retried for outcome in outcomes.values()),
    )


def describe_outcome(outcome: Outcome, detail: str) -> str:
    """An outcome and its detail, outcome first: as a failure's description, its first line is what Dagster
    shows first of a failed step and run (after the exception's class). The detail may hold an agent's words:
    it is `shown` (common/foreign_text.py), since Dagster's UI serves it as UTF-8 JSON, which no lone surrogate
    survives."""
    detail = shown(detail.strip())
    return f"{outcome.value}: {detail}" if detail else outcome.value


def describe_trial_outcome(partition: str, outcome: Outcome, detail: str) -> str:
    """A trial partition's unscored outcome, as `describe_outcome` with the head of its detail, then which trial
    and what its kind means."""
    described = describe_outcome(outcome, truncate(detail, DETAIL_CHARS))
    return f"{described}\n(trial {partition}: {outcome.kind.value} outcome, not scored)"


def failure_outcomes(step_failures: Sequence[DagsterEvent]) -> dict[str, Outcome]:
    """The outcomes, by partition, that `outcome_failure` recorded in a run's step failures (none for a crash)."""
    outcomes: dict[str, Outcome] = {}
    for event in step_failures:
        user_data = event.step_failure_data.user_failure_data
        if user_data and "outcomes" in user_data.metadata:
            recorded = cast(Mapping[str, str], user_data.metadata["outcomes"].value)  # outcome_failure's JSON
            outcomes |= {key: Outcome(value) for key, value in recorded.items()}
    return outcomes


def innermost_error(event: DagsterEvent) -> str:
    """A step failure's root error message, unwrapped from Dagster's step error ('' when it has none)."""
    error = event.step_failure_data.error
    while error and error.cause:
        error = error.cause
    return error.message.strip() if error else ""


def failure_descriptions(step_failures: Sequence[DagsterEvent]) -> list[str]:
    """What each failed step said: `outcome_failure`'s description, else its root error's message."""
    described = []
    for event in step_failures:
        user_data = event.step_failure_data.user_failure_data
        described.append((user_data and user_data.description) or innermost_error(event))
    return [text for text in described if text]
