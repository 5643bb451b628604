"""The dataset snapshot and the trial plan: what a campaign evaluates, registered as partitions."""

from dagster import AssetExecutionContext, AssetsDefinition, DataVersion, MetadataValue, Output, asset

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.datasets.sources import load_portfolio, write_snapshot
from eval_pipeline.defs.group import PLAN_CODE_VERSION, SNAPSHOT_CODE_VERSION, CampaignGroup
from eval_pipeline.defs.partitions import sync_partitions
from eval_pipeline.defs.resources import EvalPipelineResource

__all__ = ["dataset_snapshot_asset", "trial_plan_asset"]


def dataset_snapshot_asset(group: CampaignGroup) -> AssetsDefinition:
    campaign, partitions, common = group.campaign, group.partitions, group.common

    @asset(**common, code_version=SNAPSHOT_CODE_VERSION)
    def dataset_snapshot(context: AssetExecutionContext, eval_pipeline: EvalPipelineResource) -> Output[Portfolio]:
        """Every slice's rows as evaluated, less the instances the campaign excludes; the hash of their content
        is the data version."""
        portfolio = load_portfolio(campaign.slices, eval_pipeline.harness.paths).excluding(campaign.exclude)
        snapshots = {
            name: eval_pipeline.harness.publish(write_snapshot(benchmark, eval_pipeline.harness.paths.snapshots))
            for name, benchmark in portfolio.slices.items()
        }
        return Output(
            portfolio,
            data_version=DataVersion(portfolio.version),
            metadata={
                **sync_partitions(context, partitions.instances, [i.instance_id for i in portfolio.instances]),
                "instances": len(portfolio.instances),
                "slices": MetadataValue.json({name: len(b.instances) for name, b in portfolio.slices.items()}),
                "quarantined": len(portfolio.quarantined),
                "excluded": len(portfolio.excluded),
                "quarantined_rows": MetadataValue.md("\n".join(f"- {p}" for p in portfolio.quarantined) or "none"),
                "snapshots": MetadataValue.json(snapshots),
                "harness_version": HARNESS_VERSION,
                "dataset_version": portfolio.version,
            },
        )

    return dataset_snapshot


def trial_plan_asset(group: CampaignGroup) -> AssetsDefinition:
    campaign, partitions, common = group.campaign, group.partitions, group.common

    @asset(**common, code_version=PLAN_CODE_VERSION)
    def trial_plan(context: AssetExecutionContext) -> Output[list[str]]:
        """The campaign's trials (variant x seed), registered as partitions."""
        keys = [trial.key for trial in campaign.trials]
        return Output(
            keys,
            data_version=DataVersion(campaign.plan_version),
            metadata={"trials": len(keys), **sync_partitions(context, partitions.trials, keys)},
        )

    return trial_plan
