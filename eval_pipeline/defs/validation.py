"""A campaign's instance validation in Dagster: a partition and a check per instance, and the report.

dataset_snapshot -> validation[instance] (check `valid`) -> validation_report

- `validation[instance]` grades the instance's reference solution and the empty
  patch, each `repeats` times (run config; default 3), on the campaign's sandbox,
  after preparing the instance's environment as the `environment` asset does.
  An environment that cannot be prepared is the instance's result
  (`environment_failed`), not a failed step.
- A reference that resolved there is kept as evidence that the instance passes
  within the campaign's limits (trial/limits.py).
- The check `valid` on each partition passes only for a valid instance, so the
  partitions' check results show which instances a campaign can trust.
- `validation_report` gathers the partitions into
  `reports/<campaign>/validation.json`, whose `quarantine` a campaign excludes.

`eval-pipeline validate` requests one run per instance (orchestration/validation_run.py),
as trials run, so the UI shows the command's validations too.
"""

import warnings
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetIn,
    AssetsDefinition,
    Config,
    DataVersion,
    Failure,
    MetadataValue,
    Output,
    PreviewWarning,
    asset,
    asset_check,
)

from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.defs.environments import prepare_environment
from eval_pipeline.defs.group import CampaignGroup, lineage_metadata
from eval_pipeline.defs.partitions import CampaignPartitions
from eval_pipeline.defs.resources import EvalPipelineResource
from eval_pipeline.grading.verdict import GRADING_VERSION
from eval_pipeline.results.markdown import render_validation
from eval_pipeline.results.report import write_json
from eval_pipeline.trial.limits import GradingConditions
from eval_pipeline.trial.validation import (
    DEFAULT_REPEATS,
    VALIDATION_FILE,
    VALIDATION_VERSION,
    InstanceValidation,
    Status,
    build_validation,
    environment_failure,
    leave_limit_evidence,
    validate_task,
)

VALIDATION_CHECK = "valid"


class ValidationConfig(Config):
    repeats: int = DEFAULT_REPEATS  # how many times the reference solution and the empty patch are each graded


def _runs_metadata(result: InstanceValidation) -> dict[str, Any]:
    return {
        "status": result.status,
        "slice": result.slice,
        "gold_resolved": f"{result.gold_resolved}/{result.gold_runs}",
        "empty_resolved": f"{result.empty_resolved}/{result.empty_runs}",
        "outcomes": MetadataValue.json({"gold": result.gold, "empty": result.empty}),
        "detail": MetadataValue.text(result.detail or "valid"),
        **({"environment_outcome": result.environment_outcome} if result.environment_outcome else {}),
    }


def _loaded(validations: Any) -> list[InstanceValidation]:
    """The validation partitions as Dagster's IO manager loads them: None for none, the value itself for one,
    a dict by partition for several."""
    if validations is None:
        return []
    if isinstance(validations, InstanceValidation):
        return [validations]
    return list(validations.values())


def _validation_asset(group: CampaignGroup) -> AssetsDefinition:
    campaign, partitions, common, snapshot_in = group.campaign, group.partitions, group.common, group.snapshot_in

    @asset(
        **common,
        partitions_def=partitions.instances,
        ins={"portfolio": snapshot_in},
        deps=[group.key("environment")],
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
        sandbox = eval_pipeline.harness.sandbox(campaign, task)
        try:
            environment = prepare_environment(sandbox, portfolio, eval_pipeline.harness.store, task, "prepare")
        except Exception as error:  # noqa: BLE001 - an environment that cannot be prepared is this instance's result
            result = environment_failure(slice_name, task, config.repeats, error)
        else:
            test_timeout_s = campaign.test_timeout_for(task)
            result = validate_task(
                slice_name,
                task,
                portfolio.environment_for(task),
                environment,
                sandbox,
                repeats=config.repeats,
                test_timeout_s=test_timeout_s,
                timeout_multiplier=campaign.timeout_multiplier,
            )
            under = GradingConditions.of(task, environment.key, sandbox, test_timeout_s)
            leave_limit_evidence(eval_pipeline.harness.store, result, under)
        return Output(
            result,
            data_version=DataVersion(stable_hash(result.as_record())),
            metadata={**lineage_metadata(portfolio, sandbox), **_runs_metadata(result), "repeats": result.repeats},
        )

    return validation


def _valid_check(group: CampaignGroup) -> AssetChecksDefinition:
    partitions = group.partitions

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
            asset=group.key("validation"),
            name=VALIDATION_CHECK,
            partitions_def=partitions.instances,
            description="The instance is valid: its reference solution always resolves it, the empty patch never does.",
        )(valid)

    return valid_check


def _validation_report_asset(group: CampaignGroup) -> AssetsDefinition:
    campaign, common, snapshot_in = group.campaign, group.common, group.snapshot_in

    @asset(
        **common,
        ins={
            "portfolio": snapshot_in,
            # Every partition; a missing one is reported below by name rather than failing the load.
            "validations": AssetIn(key=group.key("validation"), metadata={"allow_missing_partitions": True}),
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
        path = write_json(report, eval_pipeline.harness.paths.reports / campaign.name / VALIDATION_FILE)
        return Output(
            report,
            data_version=DataVersion(stable_hash(report)),
            metadata={
                **report["statuses"],
                "quarantine": len(report["quarantine"]),
                "path": MetadataValue.path(eval_pipeline.harness.publish(path)),
                "summary": MetadataValue.md(render_validation(report)),
            },
        )

    return validation_report


def build_validation_definitions(
    campaign: Campaign, partitions: CampaignPartitions
) -> tuple[list[AssetsDefinition], list[AssetChecksDefinition]]:
    """Instance validation's assets (a partition per instance, and the campaign's report) and its check."""
    group = CampaignGroup(campaign, partitions)
    return [_validation_asset(group), _validation_report_asset(group)], [_valid_check(group)]
