"""What every asset of a campaign's group shares: its keys, partitions, retry policy, code versions and
concurrency pools, and the lineage each materialization records."""

from dataclasses import dataclass
from typing import Any

from dagster import AssetIn, AssetKey, Backoff, Jitter, MetadataValue, RetryPolicy

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.defs.partitions import CampaignPartitions
from eval_pipeline.sandbox import SandboxBackend

__all__ = [
    "DATA_VERSION_TAG",
    "ENVIRONMENT_POOL",
    "IMAGE_CODE_VERSION",
    "MODEL_API_POOL",
    "PLAN_CODE_VERSION",
    "RESULTS_CODE_VERSION",
    "SNAPSHOT_CODE_VERSION",
    "CampaignGroup",
    "lineage_metadata",
]

# Code versions of the assets whose logic has no version of its own in the core. The snapshot's 2 and the
# results' 6: their outputs are pickled under the modules' paths, which the package move changed (2026-11-27),
# so Dagster shows them as changed code and a user materializes them again before what loads them.
SNAPSHOT_CODE_VERSION = "2"
PLAN_CODE_VERSION = "1"
RESULTS_CODE_VERSION = "6"
IMAGE_CODE_VERSION = "1"
# Concurrency pools (limits per Dagster instance: dagster.yaml, or `dagster instance concurrency set`).
ENVIRONMENT_POOL = "eval_pipeline_environments"  # image builds and environment pods started at once
MODEL_API_POOL = "eval_pipeline_model_api"  # trial batches running at once, their agents calling a model API
# Where Output(data_version=...) records the data version; a materialization logged by the step sets it itself.
DATA_VERSION_TAG = "dagster/data_version"


@dataclass(frozen=True)
class CampaignGroup:
    """A campaign's asset group: every asset key is under the campaign's name."""

    campaign: Campaign
    partitions: CampaignPartitions

    def key(self, name: str) -> AssetKey:
        return AssetKey([self.campaign.name, name])

    @property
    def common(self) -> dict[str, Any]:
        """The arguments every asset of the group takes."""
        return {"key_prefix": [self.campaign.name], "group_name": self.campaign.name}

    @property
    def snapshot_key(self) -> AssetKey:
        """The dataset snapshot's asset."""
        return self.key("dataset_snapshot")

    @property
    def snapshot_in(self) -> AssetIn:
        """The dataset snapshot, loaded as the `portfolio` input."""
        return AssetIn(key=self.snapshot_key)

    @property
    def retry_policy(self) -> RetryPolicy:
        retries = self.campaign.retries
        return RetryPolicy(
            max_retries=retries.max_retries,
            delay=retries.delay_s,
            backoff=Backoff.EXPONENTIAL,
            jitter=Jitter.PLUS_MINUS,
        )


def lineage_metadata(portfolio: Portfolio, sandbox: SandboxBackend) -> dict[str, Any]:
    """What every materialization of a campaign's asset records: versions, sandbox and resources."""
    return {
        "harness_version": HARNESS_VERSION,
        "dataset_version": portfolio.version,
        "sandbox_backend": sandbox.name,
        "resources": MetadataValue.json(sandbox.resources_record()),
    }
