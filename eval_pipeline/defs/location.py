"""The code location's definitions: per campaign, one asset group, its partitions, stage jobs, and automation;
the resource, IO manager and executor the deployment chooses."""

from typing import Any

from dagster import AssetKey, AssetSelection, Definitions, ExecutorDefinition, define_asset_job, in_process_executor

from eval_pipeline.common.settings import Deployment, Paths
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.defs.assets import build_campaign_assets
from eval_pipeline.defs.automation import campaign_sensor, infrastructure_retry_sensor, nightly_schedule
from eval_pipeline.defs.partitions import CampaignPartitions
from eval_pipeline.defs.release import build_release_definitions
from eval_pipeline.defs.resources import EvalPipelineResource
from eval_pipeline.defs.stages import (
    RELEASE_STAGE,
    STAGE_TAG,
    STAGES,
    VALIDATION_REPORT_STAGE,
    VALIDATION_STAGE,
    stage_job_name,
)
from eval_pipeline.defs.trials import kubernetes_step_tags
from eval_pipeline.defs.validation import build_validation_definitions

__all__ = ["build_definitions", "campaign_definitions"]


def _runs_on_kubernetes(campaign: Campaign, deployment: Deployment) -> bool:
    return deployment.on_kubernetes or deployment.executor == "k8s" or campaign.sandbox.backend == "kubernetes"


def _stage_asset_keys(campaign: Campaign, names: list[str]) -> list[AssetKey]:
    return [AssetKey([campaign.name, name]) for name in names]


def campaign_definitions(campaign: Campaign, deployment: Deployment) -> Definitions:
    partitions = CampaignPartitions.for_campaign(campaign)
    # On Kubernetes a trial run is one pod (in-process executor): size it like a trial step. Elsewhere the tag
    # would only be noise on every run.
    trial_tags = kubernetes_step_tags(campaign) if _runs_on_kubernetes(campaign, deployment) else {}
    gate_checks, release_assets = build_release_definitions(campaign)
    jobs = {
        stage: define_asset_job(
            stage_job_name(campaign, stage),
            # With the assets' checks (the trials' `resolved`, defs/verdicts.py), but not the gate checks on the
            # report (the release stage's).
            selection=AssetSelection.assets(*_stage_asset_keys(campaign, names)).required_multi_asset_neighbors()
            - AssetSelection.checks(*gate_checks),
            tags={STAGE_TAG: stage, **(trial_tags if stage == "trials" else {})},
        )
        for stage, names in STAGES.items()
    }
    validation_assets, validation_checks = build_validation_definitions(campaign, partitions)
    for stage in (VALIDATION_STAGE, VALIDATION_REPORT_STAGE):
        jobs[stage] = define_asset_job(
            stage_job_name(campaign, stage),
            # With the asset's checks: each validation partition's `valid`.
            selection=AssetSelection.assets(AssetKey([campaign.name, stage])),
            tags={STAGE_TAG: stage},
        )
    if release_assets:
        jobs[RELEASE_STAGE] = define_asset_job(
            stage_job_name(campaign, RELEASE_STAGE),
            selection=AssetSelection.checks(*gate_checks) | AssetSelection.assets(*release_assets),
            tags={STAGE_TAG: RELEASE_STAGE},
        )
    schedule = nightly_schedule(campaign, jobs["prepare"])
    return Definitions(
        assets=[*build_campaign_assets(campaign, partitions), *validation_assets, *release_assets],
        asset_checks=[*validation_checks, *gate_checks],
        jobs=list(jobs.values()),
        schedules=[schedule] if schedule else [],
        sensors=[
            infrastructure_retry_sensor(campaign, jobs["trials"]),
            *([campaign_sensor(campaign, jobs)] if schedule else []),
        ],
    )


def _executor(deployment: Deployment) -> ExecutorDefinition:
    """In process by default: a run is one partition's few steps in sequence, so a process per step would
    only add start-up time, and the run worker is then the process doing the work, which run monitoring
    and run retries watch. On Kubernetes, `k8s` runs each step as a job sized by its tags."""
    if deployment.executor == "k8s":
        from dagster_k8s import k8s_job_executor

        return k8s_job_executor
    return in_process_executor


def _io_managers(deployment: Deployment) -> dict[str, Any]:
    """Step outputs on S3 beside the artifacts when those are there, so steps in other pods can read them."""
    if not deployment.s3_bucket:
        return {}
    from dagster_aws.s3 import S3PickleIOManager, S3Resource

    return {
        "io_manager": S3PickleIOManager(
            s3_resource=S3Resource(), s3_bucket=deployment.s3_bucket, s3_prefix=deployment.s3_prefix("io")
        )
    }


def build_definitions(campaigns: list[Campaign], paths: Paths | None = None) -> Definitions:
    """Definitions for the campaigns, sharing one resource rooted at the data directory, with the
    artifact store, step output storage and executor that the deployment's variables choose."""
    deployment = Deployment.from_env()
    resources = {
        "eval_pipeline": EvalPipelineResource.for_deployment(paths or Paths.from_env(), deployment),
        **_io_managers(deployment),
    }
    return Definitions.merge(
        *(campaign_definitions(c, deployment) for c in campaigns),
        Definitions(resources=resources, executor=_executor(deployment)),
    )
