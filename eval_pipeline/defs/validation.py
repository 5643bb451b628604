"""A campaign's instance validation in Dagster: a partition and a check per instance, and the report.

dataset_snapshot -> validation[instance] (check `valid`) -> validation_report

- `validation[instance]` grades the instance's reference solution and the empty
  patch, each `repeats` times (run config; default 3), on the campaign's sandbox,
  after preparing the instance's environment as the `environment` asset does.
  An environment that cannot be prepared is the instance's result
  (`environment_failed`), not a failed step.
- The check `valid` on each partition passes only for a valid instance, so the
  partitions' check results show which instances a campaign can trust.
- `validation_report` gathers the partitions into
  `reports/<campaign>/validation.json`, whose `quarantine` a campaign excludes.

`run_validation` drives them as `eval-pipeline validate` does: one Dagster run
per instance, as trials run, so the UI shows the command's validations too.
"""

import warnings
from collections.abc import Callable
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetsDefinition,
    Config,
    DagsterInstance,
    DataVersion,
    Definitions,
    ExecuteInProcessResult,
    Failure,
    MetadataValue,
    Output,
    PreviewWarning,
    asset,
    asset_check,
)

from eval_pipeline.campaign import Campaign
from eval_pipeline.defs.assets import lineage_metadata, prepare_environment
from eval_pipeline.defs.partitions import CampaignPartitions
from eval_pipeline.defs.resources import EvalPipelineResource
from eval_pipeline.grading import GRADING_VERSION
from eval_pipeline.hashing import stable_hash
from eval_pipeline.markdown_report import render_validation
from eval_pipeline.portfolio import Portfolio
from eval_pipeline.report import write_json
from eval_pipeline.validation import (
    DEFAULT_REPEATS,
    VALIDATION_FILE,
    VALIDATION_VERSION,
    InstanceValidation,
    Status,
    build_validation,
    environment_failure,
    validate_task,
)

VALIDATION_CHECK = "valid"


class ValidationConfig(Config):
    repeats: int = DEFAULT_REPEATS  # how many times the reference solution and the empty patch are each graded


class ValidationRunError(RuntimeError):
    """A validation stage failed; the message carries the underlying error and the Dagster run to look up."""

    def __init__(self, what: str, run: ExecuteInProcessResult) -> None:
        messages = []
        for event in run.get_step_failure_events():
            error = event.step_failure_data.error
            while error and error.cause:  # Dagster wraps the error the asset raised
                error = error.cause
            messages.append(error.message.strip() if error else "unknown error")
        super().__init__(f"{what} failed (Dagster run {run.run_id}): {'; '.join(messages)}")


class DatasetNotLoaded(ValidationRunError):
    """The campaign's dataset could not be loaded, so there was nothing to validate."""


def _runs_metadata(result: InstanceValidation) -> dict[str, Any]:
    return {
        "status": result.status,
        "slice": result.slice,
        "gold_resolved": f"{result.gold_resolved}/{result.gold_runs}",
        "empty_resolved": f"{result.empty_resolved}/{result.empty_runs}",
        "outcomes": MetadataValue.json({"gold": result.gold, "empty": result.empty}),
        "detail": MetadataValue.text(result.detail or "valid"),
    }


def _loaded(validations: Any) -> list[InstanceValidation]:
    """The validation partitions as Dagster's IO manager loads them: None for none, the value itself for one,
    a dict by partition for several."""
    if validations is None:
        return []
    if isinstance(validations, InstanceValidation):
        return [validations]
    return list(validations.values())


def build_validation_definitions(
    campaign: Campaign, partitions: CampaignPartitions
) -> tuple[list[AssetsDefinition], list[AssetChecksDefinition]]:
    prefix = [campaign.name]
    common = {"key_prefix": prefix, "group_name": campaign.name}
    snapshot_in = AssetIn(key=AssetKey([*prefix, "dataset_snapshot"]))

    @asset(
        **common,
        partitions_def=partitions.instances,
        ins={"portfolio": snapshot_in},
        deps=[AssetKey([*prefix, "environment"])],
        code_version=f"{VALIDATION_VERSION}.{GRADING_VERSION}",
    )
    def validation(
        context: AssetExecutionContext,
        config: ValidationConfig,
        portfolio: Portfolio,
        eval_pipeline: EvalPipelineResource,
    ) -> Output[InstanceValidation]:
        """Whether the instance's reference solution resolves it and the unchanged repository does not, every
        time: valid, gold_fails, empty_passes, flaky or environment_failed."""
        task = portfolio.instance(context.partition_key)
        slice_name = portfolio.slice_of(task.instance_id)
        sandbox = eval_pipeline.sandbox(campaign, task)
        try:
            environment = prepare_environment(sandbox, portfolio, eval_pipeline.artifact_store(), task, "prepare")
        except Exception as error:  # noqa: BLE001 - an environment that cannot be prepared is this instance's result
            result = environment_failure(slice_name, task, config.repeats, error)
        else:
            result = validate_task(
                slice_name,
                task,
                portfolio.environment_for(task),
                environment,
                sandbox,
                repeats=config.repeats,
                test_timeout_s=campaign.test_timeout_for(task),
                timeout_multiplier=campaign.timeout_multiplier,
            )
        return Output(
            result,
            data_version=DataVersion(stable_hash(result.as_record())),
            metadata={**lineage_metadata(portfolio, sandbox), **_runs_metadata(result), "repeats": result.repeats},
        )

    def valid(validation: InstanceValidation) -> AssetCheckResult:
        return AssetCheckResult(
            passed=validation.status == Status.VALID,
            severity=AssetCheckSeverity.ERROR,
            metadata=_runs_metadata(validation),
        )

    with warnings.catch_warnings():
        # A check per partition is a preview feature in Dagster 1.13; we rely on it knowingly.
        warnings.simplefilter("ignore", PreviewWarning)
        valid_check = asset_check(
            asset=validation,
            name=VALIDATION_CHECK,
            partitions_def=partitions.instances,
            description="The instance is valid: its reference solution always resolves it, the empty patch never does.",
        )(valid)

    @asset(
        **common,
        ins={
            "portfolio": snapshot_in,
            # Every partition; a missing one is reported below by name rather than failing the load.
            "validations": AssetIn(key=AssetKey([*prefix, "validation"]), metadata={"allow_missing_partitions": True}),
        },
        code_version=VALIDATION_VERSION,
    )
    def validation_report(
        portfolio: Portfolio, validations: Any, eval_pipeline: EvalPipelineResource
    ) -> Output[dict[str, Any]]:
        """Every instance's validation, and the quarantine a campaign excludes (`exclude: {validation: ...}`),
        in reports/<campaign>/validation.json."""
        evaluated = {task.instance_id: task.content_hash for task in portfolio.instances}
        current = [v for v in _loaded(validations) if evaluated.get(v.instance_id) == v.content_hash]
        missing = sorted(set(evaluated) - {v.instance_id for v in current})
        if missing:
            raise Failure(
                f"{len(missing)} instance(s) have no validation of their current content; materialize their"
                f" validation partitions first: {', '.join(missing[:20])}"
            )
        report = build_validation(campaign.name, portfolio.version, current, portfolio.excluded)
        path = write_json(report, eval_pipeline.paths.reports / campaign.name / VALIDATION_FILE)
        return Output(
            report,
            data_version=DataVersion(stable_hash(report)),
            metadata={
                **report["statuses"],
                "quarantine": len(report["quarantine"]),
                "path": MetadataValue.path(eval_pipeline.publish(path)),
                "summary": MetadataValue.md(render_validation(report)),
            },
        )

    return [validation, validation_report], [valid_check]


def run_validation(
    campaign: Campaign,
    defs: Definitions,
    instance: DagsterInstance,
    repeats: int,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Validate every instance of the campaign, one Dagster run per instance, then write the validation report;
    return it. Raises DatasetNotLoaded when the dataset cannot be loaded, ValidationRunError when the report
    cannot be made (an instance's run failed)."""
    from eval_pipeline.defs import VALIDATION_REPORT_STAGE, VALIDATION_STAGE, stage_job_name  # builds this module
    from eval_pipeline.runner import QUIET_RUN_CONFIG, CampaignExecutor

    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    executor = CampaignExecutor(campaign, defs, instance)
    prepared = executor.execute("prepare")
    if not prepared.success:
        raise DatasetNotLoaded(f"campaign {campaign.name}: preparing the dataset", prepared)
    tasks = prepared.asset_value(executor.asset_key("dataset_snapshot")).instances
    job = defs.resolve_job_def(stage_job_name(campaign, VALIDATION_STAGE))
    run_config = {**QUIET_RUN_CONFIG, "ops": {f"{campaign.name}__validation": {"config": {"repeats": repeats}}}}
    try:
        for number, task in enumerate(tasks, start=1):
            run = job.execute_in_process(
                instance=instance, run_config=run_config, partition_key=task.instance_id, raise_on_error=False
            )
            if run.success:
                result = run.asset_value(executor.asset_key("validation"))
                said = f"{result.status} (gold {result.gold_resolved}/{result.gold_runs}, empty {result.empty_resolved}/{result.empty_runs})"
            else:
                said = f"failed (Dagster run {run.run_id})"
            progress(f"[{number}/{len(tasks)}] {task.instance_id}: {said}")
    finally:
        defs.resources["eval_pipeline"].sandbox(campaign).release()  # pods are restarted on demand by the next run
    reported = executor.execute(VALIDATION_REPORT_STAGE)
    if not reported.success:
        raise ValidationRunError(f"campaign {campaign.name}: the validation report", reported)
    return reported.asset_value(executor.asset_key("validation_report"))
