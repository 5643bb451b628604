"""A campaign's partitions: instances (from the dataset) crossed with trials (from the campaign), and the
batches of trial partitions that one run materializes."""

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dagster import AssetExecutionContext, DynamicPartitionsDefinition, MultiPartitionKey, MultiPartitionsDefinition

from eval_pipeline.config.campaign import Campaign
from eval_pipeline.trial.spec import TrialSpec

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

    @property
    def instances_name(self) -> str:
        """The name of the instances' partition set (`for_campaign` names it)."""
        return _named(self.instances)

    @property
    def trials_name(self) -> str:
        """The name of the trials' partition set (`for_campaign` names it)."""
        return _named(self.trials)


def _named(partitions: DynamicPartitionsDefinition) -> str:
    if partitions.name is None:
        raise ValueError("a dynamic partitions definition without a name has no partition set to read")
    return partitions.name


def trial_run_key(instance_id: str, trial_key: str) -> MultiPartitionKey:
    return MultiPartitionKey({INSTANCE: instance_id, TRIAL: trial_key})


def trial_partition(spec: TrialSpec) -> str:
    """The trial's partition of the generation and evaluation assets: `<instance>|<variant>-s<seed>`."""
    return str(trial_run_key(spec.instance_id, spec.trial))


# How Dagster names the partition range a run targets (as its backfills do for a BackfillPolicy.multi_run asset).
RANGE_START_TAG, RANGE_END_TAG = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


@dataclass(frozen=True)
class PartitionBatch:
    """Trial partitions of one instance, consecutive in the registered trial order: what one run of the trials
    stage that a cycle requests materializes. To Dagster it is the partition range (instance, first) ..
    (instance, last), a rectangle of the two dimensions one instance high, so the batch's trials share one
    environment. (A UI backfill's ranges are Dagster's to cut, and the trials step takes any rectangle.)"""

    instance_id: str
    trials: tuple[str, ...]

    @property
    def name(self) -> str:
        first, last = self.trials[0], self.trials[-1]
        return f"{self.instance_id}|{first}" + (f"..{last}" if last != first else "")

    def partitions(self) -> list[str]:
        return [str(trial_run_key(self.instance_id, trial)) for trial in self.trials]

    def range_tags(self) -> dict[str, str]:
        return {RANGE_START_TAG: self.partitions()[0], RANGE_END_TAG: self.partitions()[-1]}

    @classmethod
    def from_tags(cls, tags: Mapping[str, str], trial_order: Sequence[str]) -> "PartitionBatch | None":
        """The batch a run of one instance's trial range targets (None for a run of no such range)."""
        if RANGE_START_TAG not in tags:
            return None
        (instance_id, first), (_, last) = (tags[tag].split("|", 1) for tag in (RANGE_START_TAG, RANGE_END_TAG))
        if first not in trial_order or last not in trial_order:  # trials retired since
            return cls(instance_id, tuple(dict.fromkeys((first, last))))
        return cls(instance_id, tuple(trial_order[trial_order.index(first) : trial_order.index(last) + 1]))


# A smaller batch pays a run's cost for too little work: about 0.6 s of Dagster a run, a null trial about 0.5 s.
SMALLEST_BATCH = 4


def trial_batches(
    partitions: Iterable[str], trial_order: Sequence[str], size: int, spread: int = 1
) -> list[PartitionBatch]:
    """`partitions` (trial partition keys) as batches of one instance's trials, consecutive in `trial_order`
    (the registered order, which is Dagster's), instance by instance in first-seen order.

    A batch holds at most `size` trials, and at most a `spread`-th of the trials not yet batched (but
    SMALLEST_BATCH), so batches shrink toward the end (guided self-scheduling): `spread` runs at once finish
    together rather than waiting on one long last batch. The last trials are not left as a batch smaller than
    SMALLEST_BATCH of their own (instance boundaries and gaps in the order still make small batches): 72 trials
    on 2 workers ended in runs of 12, 6, 4 and 2, the last three on one worker while the other ran the 12,
    each run costing Dagster's per-run share. (A 2 x `spread`-th, as before, made 11 runs of 72 trials
    on 2 workers where 6 do, each run costing about 0.6 s of Dagster.)
    """
    position = {trial: index for index, trial in enumerate(trial_order)}
    by_instance: dict[str, list[int]] = {}
    for key in partitions:
        instance_id, trial = key.split("|", 1)
        by_instance.setdefault(instance_id, []).append(position[trial])
    unbatched = sum(len(indices) for indices in by_instance.values())
    batches: list[PartitionBatch] = []
    for instance_id, indices in by_instance.items():
        run: list[int] = []
        limit = size
        for index in sorted(indices):
            if run and (index != run[-1] + 1 or len(run) == limit):
                batches.append(PartitionBatch(instance_id, tuple(trial_order[i] for i in run)))
                unbatched -= len(run)
                run = []
            if not run:
                limit = min(size, max(SMALLEST_BATCH, math.ceil(unbatched / spread)))
                if unbatched - limit < SMALLEST_BATCH:  # what would be left is one small run's worth: take it too
                    limit = min(size, unbatched)
            run.append(index)
        batches.append(PartitionBatch(instance_id, tuple(trial_order[i] for i in run)))
        unbatched -= len(run)
    return batches


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
