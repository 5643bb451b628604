"""A campaign's assets, by domain, each built by a short function of the campaign's group; the work is in the
plain core modules.

dataset_snapshot -> environment_image[instance] -> environment[instance] -> generation[instance x trial]
                                          -> evaluation[instance x trial] -> results -> report
dataset_snapshot and trial_plan (which registers the trial partitions from the campaign file) are in
defs/dataset.py, the environments in defs/environments.py, the trials in defs/trials.py, the warehouse and
the report in defs/results.py. Instance validation (validation[instance], validation_report) is in
defs/validation.py, the release gates in defs/release.py.
"""

from dagster import AssetsDefinition

from eval_pipeline.config.campaign import Campaign
from eval_pipeline.defs.dataset import dataset_snapshot_asset, trial_plan_asset
from eval_pipeline.defs.environments import environment_asset, environment_image_asset
from eval_pipeline.defs.group import CampaignGroup
from eval_pipeline.defs.partitions import CampaignPartitions
from eval_pipeline.defs.results import report_asset, results_asset
from eval_pipeline.defs.trials import trials_asset

__all__ = ["build_campaign_assets"]

BUILDERS = (
    dataset_snapshot_asset,
    trial_plan_asset,
    environment_image_asset,
    environment_asset,
    trials_asset,
    results_asset,
    report_asset,
)


def build_campaign_assets(campaign: Campaign, partitions: CampaignPartitions) -> list[AssetsDefinition]:
    group = CampaignGroup(campaign, partitions)
    return [build(group) for build in BUILDERS]
