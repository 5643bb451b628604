"""The Dagster layer: one asset group, partitions and jobs per campaign."""

from dagster import AssetKey, Definitions, define_asset_job

from eval_pipeline.campaign import Campaign
from eval_pipeline.defs.assets import build_campaign_assets
from eval_pipeline.defs.partitions import CampaignPartitions
from eval_pipeline.defs.resources import EvalPipelineResource
from eval_pipeline.settings import Paths

# Stages of a campaign, each a job: the CLI runs them in order, the UI and schedules by name.
STAGES = {
    "prepare": ["dataset_snapshot", "trial_plan"],
    "environments": ["environment_image", "environment"],
    "trials": ["generation", "evaluation"],
    "results": ["results", "report"],
}


def stage_job_name(campaign: Campaign, stage: str) -> str:
    return f"{campaign.name}__{stage}_job"


def campaign_definitions(campaign: Campaign) -> Definitions:
    partitions = CampaignPartitions.for_campaign(campaign)
    jobs = [
        define_asset_job(stage_job_name(campaign, stage), selection=[AssetKey([campaign.name, name]) for name in names])
        for stage, names in STAGES.items()
    ]
    return Definitions(assets=build_campaign_assets(campaign, partitions), jobs=jobs)


def build_definitions(campaigns: list[Campaign], paths: Paths | None = None) -> Definitions:
    """Definitions for the campaigns, sharing one resource rooted at the data directory."""
    resources = {"eval_pipeline": EvalPipelineResource(data_dir=str((paths or Paths.from_env()).data_dir))}
    return Definitions.merge(*(campaign_definitions(c) for c in campaigns), Definitions(resources=resources))
