"""An instance's environment: its image, built once, and the long-lived environment started from it."""

from typing import Any, Literal, overload

from dagster import AssetExecutionContext, AssetsDefinition, DataVersion, MetadataValue, Output, asset

from eval_pipeline.common.outcomes import InfrastructureError
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.defs.failures import describe_outcome, outcome_failure
from eval_pipeline.defs.group import ENVIRONMENT_POOL, IMAGE_CODE_VERSION, CampaignGroup, lineage_metadata
from eval_pipeline.defs.resources import EvalPipelineResource
from eval_pipeline.sandbox import EnvironmentHandle, SandboxBackend
from eval_pipeline.sandbox.local import ENVIRONMENT_LAYOUT_VERSION
from eval_pipeline.store.artifacts import ArtifactStore
from eval_pipeline.store.attempts import environment_attempt
from eval_pipeline.tasks.task import Task

__all__ = ["environment_asset", "environment_image_asset", "prepare_environment"]

EnvironmentWork = Literal["build", "prepare"]


@overload
def prepare_environment(
    sandbox: SandboxBackend, portfolio: Portfolio, store: ArtifactStore, task: Task, work: Literal["build"]
) -> dict[str, Any]: ...


@overload
def prepare_environment(
    sandbox: SandboxBackend, portfolio: Portfolio, store: ArtifactStore, task: Task, work: Literal["prepare"]
) -> EnvironmentHandle: ...


def prepare_environment(
    sandbox: SandboxBackend, portfolio: Portfolio, store: ArtifactStore, task: Task, work: EnvironmentWork
) -> dict[str, Any] | EnvironmentHandle:
    """Build the instance's environment's image (`build`) or start the environment (`prepare`), keeping an
    infrastructure failure as an attempt at the environment before it is raised."""
    spec = portfolio.environment_for(task)
    key = sandbox.environment_key(task, spec)
    step = sandbox.build if work == "build" else sandbox.prepare
    with environment_attempt(store, task.instance_id, key):
        return step(task, spec, portfolio.source_for(task))


def _environment_step(
    campaign: Campaign, portfolio: Portfolio, eval_pipeline: EvalPipelineResource, task: Task, work: EnvironmentWork
) -> tuple[SandboxBackend, Any]:
    """`prepare_environment` with its infrastructure failures typed as the step's."""
    sandbox = eval_pipeline.harness.sandbox(campaign, task)
    try:
        return sandbox, prepare_environment(sandbox, portfolio, eval_pipeline.harness.store, task, work)
    except InfrastructureError as error:
        raise outcome_failure(
            describe_outcome(error.outcome, str(error)),
            {task.instance_id: error.outcome},
            lineage_metadata(portfolio, sandbox),
        ) from error


def _environment_asset_args(group: CampaignGroup, code_version: str) -> dict[str, Any]:
    """An environment step's asset: a partition per instance, retried, in the environments' pool."""
    return {
        **group.common,
        "partitions_def": group.partitions.instances,
        "ins": {"portfolio": group.snapshot_in},
        "code_version": code_version,
        "retry_policy": group.retry_policy,
        "pool": ENVIRONMENT_POOL,
    }


def environment_image_asset(group: CampaignGroup) -> AssetsDefinition:
    @asset(**_environment_asset_args(group, IMAGE_CODE_VERSION))
    def environment_image(
        context: AssetExecutionContext, portfolio: Portfolio, eval_pipeline: EvalPipelineResource
    ) -> Output[dict]:
        """What the instance's environment starts from (an image, a directory), built once, before any trial."""
        task = portfolio.instance(context.partition_key)
        sandbox, record = _environment_step(group.campaign, portfolio, eval_pipeline, task, "build")
        return Output(
            record,
            data_version=DataVersion(record.get("image_id") or record["environment_key"]),
            metadata={**lineage_metadata(portfolio, sandbox), **{k: MetadataValue.json(v) for k, v in record.items()}},
        )

    return environment_image


def environment_asset(group: CampaignGroup) -> AssetsDefinition:
    @asset(**_environment_asset_args(group, ENVIRONMENT_LAYOUT_VERSION), deps=[group.key("environment_image")])
    def environment(
        context: AssetExecutionContext, portfolio: Portfolio, eval_pipeline: EvalPipelineResource
    ) -> Output[EnvironmentHandle]:
        """The instance's long-lived environment (a pod, a directory), started from its image."""
        task = portfolio.instance(context.partition_key)
        sandbox, handle = _environment_step(group.campaign, portfolio, eval_pipeline, task, "prepare")
        return Output(
            handle,
            data_version=DataVersion(handle.key),
            metadata={**lineage_metadata(portfolio, sandbox), "environment_key": handle.key},
        )

    return environment
