"""A campaign's partitions: instances (from the dataset) crossed with trials (from the campaign)."""

from dataclasses import dataclass

from dagster import DynamicPartitionsDefinition, MultiPartitionKey, MultiPartitionsDefinition

from eval_pipeline.campaign import Campaign

INSTANCE, TRIAL = "instance", "trial"


@dataclass(frozen=True)
class CampaignPartitions:
    instances: DynamicPartitionsDefinition
    trials: DynamicPartitionsDefinition
    trial_runs: MultiPartitionsDefinition

    @classmethod
    def for_campaign(cls, campaign: Campaign) -> "CampaignPartitions":
        instances = DynamicPartitionsDefinition(name=f"{campaign.name}__instances")
        trials = DynamicPartitionsDefinition(name=f"{campaign.name}__trials")
        return cls(instances, trials, MultiPartitionsDefinition({INSTANCE: instances, TRIAL: trials}))


def trial_run_key(instance_id: str, trial_key: str) -> MultiPartitionKey:
    return MultiPartitionKey({INSTANCE: instance_id, TRIAL: trial_key})
