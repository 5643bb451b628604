"""The Dagster layer: per campaign, one asset group, its partitions, stage jobs, and automation."""

from dagster import AssetKey, AssetSelection, Definitions, define_asset_job, in_process_executor

from eval_pipeline.campaign import Campaign
from eval_pipeline.defs.assets import build_campaign_assets
from eval_pipeline.defs.automation import campaign_job, infrastructure_retry_sensor, nightly_schedule
from eval_pipeline.defs.partitions import CampaignPartitions
from eval_pipeline.defs.release import build_release_definitions
from eval_pipeline.defs.resources import EvalPipelineResource
from eval_pipeline.settings import Paths

# Stages of a campaign, each a job: the CLI runs them in order, the UI and schedules by name.
STAGES = {
    "prepare": ["dataset_snapshot", "trial_plan"],
    "environments": ["environment_image", "environment"],
    "trials": ["generation", "evaluation"],
    "results": ["results", "report"],
}
RELEASE_STAGE = "release"  # the report's gate checks and the release decision, for a campaign with gates
STAGE_TAG = "eval_pipeline/stage"  # dagster.yaml limits how many runs of each stage run at once


def stage_job_name(campaign: Campaign, stage: str) -> str:
    return f"{campaign.name}__{stage}_job"


def campaign_definitions(campaign: Campaign) -> Definitions:
    partitions = CampaignPartitions.for_campaign(campaign)
    jobs = {
        stage: define_asset_job(
            stage_job_name(campaign, stage),
            selection=AssetSelection.assets(*(AssetKey([campaign.name, name]) for name in names)).without_checks(),
            tags={STAGE_TAG: stage},
        )
        for stage, names in STAGES.items()
    }
    gate_checks, release_assets = build_release_definitions(campaign)
    if release_assets:
        jobs[RELEASE_STAGE] = define_asset_job(
            stage_job_name(campaign, RELEASE_STAGE),
            selection=AssetSelection.checks(*gate_checks) | AssetSelection.assets(*release_assets),
            tags={STAGE_TAG: RELEASE_STAGE},
        )
    whole = campaign_job(campaign)
    schedule = nightly_schedule(campaign, whole)
    return Definitions(
        assets=[*build_campaign_assets(campaign, partitions), *release_assets],
        asset_checks=gate_checks,
        jobs=[*jobs.values(), whole],
        schedules=[schedule] if schedule else [],
        sensors=[infrastructure_retry_sensor(campaign, jobs["trials"])],
    )


def build_definitions(campaigns: list[Campaign], paths: Paths | None = None) -> Definitions:
    """Definitions for the campaigns, sharing one resource rooted at the data directory.

    Runs execute in process: a run is one partition's few steps in sequence,
    so a process per step would only add start-up time; and the run worker is
    then the process doing the work, which run monitoring and run retries watch.
    """
    resources = {"eval_pipeline": EvalPipelineResource(data_dir=str((paths or Paths.from_env()).data_dir))}
    return Definitions.merge(
        *(campaign_definitions(c) for c in campaigns), Definitions(resources=resources, executor=in_process_executor)
    )
