"""A campaign's partitions: instances (from the dataset) crossed with trials (from the campaign)."""

from dataclasses import dataclass

from dagster import AssetExecutionContext, DynamicPartitionsDefinition, MultiPartitionKey, MultiPartitionsDefinition

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


def sync_partitions(
    context: AssetExecutionContext, partitions: DynamicPartitionsDefinition, keys: list[str]
) -> dict[str, int]:
    """Make the registered partitions exactly `keys`: add new ones, retire the rest.

    A retired partition leaves the partition set, but its materializations stay
    in the event log, so its history is not lost.
    """
    known = set(context.instance.get_dynamic_partitions(partitions.name))
    new = [key for key in keys if key not in known]
    retired = sorted(known - set(keys))
    if new:
        context.instance.add_dynamic_partitions(partitions.name, new)
    for key in retired:
        context.instance.delete_dynamic_partition(partitions.name, key)
    return {"new_partitions": len(new), "retired_partitions": len(retired)}
