"""Each trial's verdict where the Dagster UI shows it partition by partition: the check `resolved` on a
campaign's `evaluation` asset.

A partition's colour in Dagster says only whether it was materialized, so an
unresolved trial is as green as a resolved one. The check's partitions (the
asset's Checks tab, then `resolved`, then Partitions) tell the three apart,
each with a status of its own to count and filter by:

- Passed: the trial resolved its instance.
- Failed (severity WARN: the pipeline worked, the agent did not): the trial
  was scored and did not resolve it; the description names its outcome.
- Execution Failed: the trial ended unscored (an infrastructure or harness
  outcome), so there is no verdict; its run's failure says why
  (defs/failures.py).

The trials step evaluates the check for each partition of its batch as that
trial ends. Dagster's `AssetCheckResult` would take the step's one partition
key, which a step over a range of partitions has not, so the step yields the
`AssetCheckEvaluation` itself, partition and target materialization named
(`_about_latest`).
A partition left unevaluated in a failed run is what Dagster resolves to
Execution Failed.

The results asset's materialization carries the verdicts at a glance
(`verdict_metadata`): per variant, the trials planned, scored, resolved,
unscored and missing (`variants`); then one row per planned trial, an unscored
trial with its outcome, a trial never run as `missing` (`verdicts`, the first
VERDICT_ROWS by instance, variant and seed; `verdicts_omitted` counts the rest).
"""

import json
import warnings

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetObservation,
    AssetRecordsFilter,
    DagsterInstance,
    MetadataValue,
    Output,
    PreviewWarning,
    TableColumn,
    TableMetadataValue,
    TableRecord,
    TableSchema,
    deserialize_value,
    serialize_value,
)

from eval_pipeline.common.text import truncate
from eval_pipeline.defs.failures import DETAIL_CHARS, describe_outcome
from eval_pipeline.defs.group import CampaignGroup
from eval_pipeline.trial.records import MISSING, ResultRow
from eval_pipeline.trial.run import TrialResult

__all__ = [
    "RESOLVED_CHECK",
    "resolved_check_spec",
    "trial_verdict",
    "unscored_observation",
    "verdict_metadata",
    "verdicts_output",
]

RESOLVED_CHECK = "resolved"
# The record, as Dagster's event log stores it, that names the materialization a check evaluation is about.
TARGET_MATERIALIZATION = "AssetCheckEvaluationTargetMaterializationData"


def resolved_check_spec(group: CampaignGroup) -> AssetCheckSpec:
    """The check `resolved` on the evaluation, one partition per trial as the evaluation has."""
    with warnings.catch_warnings():
        # A check per partition is a preview feature in Dagster 1.13; we rely on it knowingly.
        warnings.simplefilter("ignore", PreviewWarning)
        return AssetCheckSpec(
            RESOLVED_CHECK,
            asset=group.key("evaluation"),
            partitions_def=group.partitions.trial_runs,
            description=(
                "Passed: the trial resolved its instance. Failed (warning): it was scored and did not."
                " Execution failed: it ended unscored, and its run's failure says why."
            ),
        )


def _about_latest(evaluation: AssetCheckEvaluation, instance: DagsterInstance, partition: str) -> AssetCheckEvaluation:
    """`evaluation`, about the partition's latest materialization (the step has just recorded it): without it,
    the UI takes the result for stale and shows the partition as not evaluated. Dagster 1.13 exports no
    constructor for that pointer, so it is written into the evaluation in the form the event log stores it
    (`serialize_value`), which Dagster reads back from every existing event log and so cannot change without a
    migration (eval_pipeline_tests/defs/test_dagster_internals.py pins it)."""
    key = evaluation.asset_key
    [record] = instance.fetch_materializations(AssetRecordsFilter(key, asset_partitions=[partition]), limit=1).records
    stored = json.loads(serialize_value(evaluation))
    stored["target_materialization_data"] = {
        "__class__": TARGET_MATERIALIZATION,
        "storage_id": record.storage_id,
        "run_id": record.run_id,
        "timestamp": record.timestamp,
    }
    return deserialize_value(json.dumps(stored), AssetCheckEvaluation)


def trial_verdict(
    instance: DagsterInstance, evaluation_key: AssetKey, partition: str, result: TrialResult
) -> AssetCheckEvaluation:
    """The check `resolved` on a scored trial's evaluation partition, just materialized: passed when it
    resolved, else failed with its outcome and detail, as a warning."""
    outcome = result.outcome
    evaluation = AssetCheckEvaluation(
        asset_key=evaluation_key,
        check_name=RESOLVED_CHECK,
        passed=outcome.is_resolved,
        severity=AssetCheckSeverity.WARN,  # what a failure is: the pipeline worked, the agent did not
        description=describe_outcome(outcome, truncate(result.detail, DETAIL_CHARS)),
        metadata={"outcome": outcome.value},
        partition=partition,
    )
    return _about_latest(evaluation, instance, partition)


def verdicts_output(context: AssetExecutionContext, evaluation_key: AssetKey) -> Output[None]:
    """The check's step output, which Dagster requires of a step that completes (and does not store): the
    verdicts themselves are the evaluations `trial_verdict` made, partition by partition."""
    check_key = AssetCheckKey(evaluation_key, RESOLVED_CHECK)
    return Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(check_key))


def unscored_observation(evaluation_key: AssetKey, partition: str, result: TrialResult) -> AssetObservation:
    """What the evaluation partition of a trial that ended unscored records: its outcome, observed, not
    materialized (a materialized evaluation is a scored one, which resumption, backfills of failed partitions
    and the nightly cycle rely on). The partition's page lists it under its observations."""
    outcome = result.outcome
    return AssetObservation(
        evaluation_key,
        partition=partition,
        description=describe_outcome(outcome, truncate(result.detail, DETAIL_CHARS)),
        metadata={"outcome": outcome.value, "scored": False, "outcome_kind": outcome.kind.value},
    )


# Rows of the `verdicts` table: about 200 bytes each in the event log (the demo's 96: 19.6 kB), so 2,000 keep a
# results materialization under half a megabyte; a larger campaign's trials are in the warehouse and `view`.
VERDICT_ROWS = 2000
VERDICT_SCHEMA = TableSchema(
    columns=[
        TableColumn("instance", "string"),
        TableColumn("slice", "string"),
        TableColumn("variant", "string"),
        TableColumn("seed", "int"),
        TableColumn("outcome", "string", description="the final outcome; `missing`: never run"),
        TableColumn("scored", "bool"),
        TableColumn("resolved", "bool"),
    ]
)
VARIANT_SCHEMA = TableSchema(
    columns=[
        TableColumn("variant", "string"),
        TableColumn("planned", "int"),
        TableColumn("scored", "int"),
        TableColumn("resolved", "int"),
        TableColumn("unscored", "int", description="ran and ended with no verdict (infrastructure or harness)"),
        TableColumn("missing", "int", description="never run"),
    ]
)


def verdict_metadata(rows: list[ResultRow]) -> dict[str, TableMetadataValue | int]:
    """The results materialization's verdicts: each variant's counts, then each trial's (VERDICT_ROWS at most)."""
    return {
        "variants": _variant_table(rows),
        "verdicts": _verdict_table(sorted(rows, key=_trial_order)[:VERDICT_ROWS]),
        "verdicts_omitted": max(0, len(rows) - VERDICT_ROWS),
    }


def _trial_order(row: ResultRow) -> tuple[str, str, int]:
    return row.instance_id, row.variant, row.seed


def _verdict_table(rows: list[ResultRow]) -> TableMetadataValue:
    """Each trial's verdict, a row each."""
    records = [
        TableRecord(
            {
                "instance": row.instance_id,
                "slice": row.slice,
                "variant": row.variant,
                "seed": row.seed,
                "outcome": row.outcome,
                "scored": row.scored,
                "resolved": row.resolved,
            }
        )
        for row in rows
    ]
    return MetadataValue.table(records, schema=VERDICT_SCHEMA)


def _variant_table(rows: list[ResultRow]) -> TableMetadataValue:
    """Per variant: its trials planned, scored, resolved, unscored (ran, no verdict) and missing (never run)."""
    records = []
    for variant in sorted({row.variant for row in rows}):
        trials = [row for row in rows if row.variant == variant]
        missing = sum(row.outcome == MISSING for row in trials)
        scored = sum(row.scored for row in trials)
        records.append(
            TableRecord(
                {
                    "variant": variant,
                    "planned": len(trials),
                    "scored": scored,
                    "resolved": sum(row.resolved for row in trials),
                    "unscored": len(trials) - scored - missing,
                    "missing": missing,
                }
            )
        )
    return MetadataValue.table(records, schema=VARIANT_SCHEMA)
