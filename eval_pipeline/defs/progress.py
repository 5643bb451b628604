"""What a pass over a campaign needs next, read from the Dagster instance alone.

A pass (a *cycle*: one `eval-pipeline run`, or one night) prepares the dataset,
then builds every environment not yet materialized, runs the trial partitions
not yet evaluated in batches (one instance's trials per run) as soon as their
environment is ready, and, once nothing of the cycle is in flight, builds
results and report, then the release decision. Each run the cycle requests
carries its id (CYCLE_TAG) and its request (REQUEST_TAG: cycle, stage and
partition or batch), so a partition is requested at most once per cycle: one
that failed waits for the next cycle or for the infrastructure-retry sensor,
and never loops. The CLI driver and the nightly sensor both ask `next_step`; they differ
only in how they launch the runs it requests.
"""

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field

from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRun, DagsterRunStatus, RunRequest, RunsFilter

from eval_pipeline.config.campaign import Campaign
from eval_pipeline.defs.group import DATA_VERSION_TAG
from eval_pipeline.defs.partitions import CampaignPartitions, PartitionBatch, trial_batches, trial_run_key
from eval_pipeline.defs.stages import (
    CYCLE_TAG,
    ENVIRONMENTS,
    RELEASE_STAGE,
    STAGE_TAG,
    TRIALS,
    TRIGGER_TAG,
    stage_job_name,
)

REQUEST_TAG = "eval_pipeline/request"  # the request a run answers: its cycle, stage and partition
FINISHED = frozenset({DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED})


@dataclass(frozen=True)
class HarnessView:
    """What the harness knows now, against which Dagster's record of a campaign's materializations is read:
    `unstored`, the trial partitions whose scored evaluation the artifact store no longer holds (not evaluated,
    whatever Dagster recorded); `environment_keys`, each instance's environment key as the sandbox works it out
    now (an environment materialized under another key, say by the same interpreter through another path or
    with another harness pytest, is not ready: its trials would run under keys no report reads). None: Dagster's
    record of the environments is taken as it is (the nightly sensor, which loads no sandbox)."""

    unstored: Set[str] = frozenset()
    environment_keys: Mapping[str, str] | None = None

    def environments_ready(self, dagster_instance: DagsterInstance, campaign: Campaign) -> frozenset[str]:
        """The instances whose environment was materialized, under the key the harness expects where it says."""
        key = AssetKey([campaign.name, "environment"])
        if self.environment_keys is None:
            return frozenset(dagster_instance.get_materialized_partitions(key))
        latest = dagster_instance.event_log_storage.get_latest_tags_by_partition(
            key, DagsterEventType.ASSET_MATERIALIZATION, [DATA_VERSION_TAG]
        )
        expected = self.environment_keys
        return frozenset(p for p, tags in latest.items() if p in expected and tags.get(DATA_VERSION_TAG) == expected[p])


AS_RECORDED = HarnessView()  # Dagster's record taken as it is


@dataclass(frozen=True)
class CampaignProgress:
    """The campaign's registered partitions and which of them Dagster has materialized."""

    instances: tuple[str, ...]
    trials: tuple[str, ...]
    environments_ready: frozenset[str]
    evaluated: frozenset[str]
    only: frozenset[str] | None = None  # the trial partitions a selection picked (trial/selection.py); None: all

    @classmethod
    def read(
        cls,
        dagster_instance: DagsterInstance,
        campaign: Campaign,
        harness: HarnessView = AS_RECORDED,
        only: frozenset[str] | None = None,
        prepared: Set[str] = frozenset(),
    ) -> "CampaignProgress":
        """`harness`: what the harness knows that overrides Dagster's record; `only`: the trial partitions a
        cycle is limited to; `prepared`: the instances whose environment the cycle itself prepared, ready
        whatever key they recorded: the process that ran them worked the key out later than the harness's view
        (a base image pulled by the first build changes the next ones'), or elsewhere (a Dagster server's run
        workers), and their trials run where they ran."""
        partitions = CampaignPartitions.for_campaign(campaign)
        evaluated = dagster_instance.get_materialized_partitions(AssetKey([campaign.name, "evaluation"]))
        instances = tuple(dagster_instance.get_dynamic_partitions(partitions.instances_name))
        if only is not None:
            selected = {key.split("|", 1)[0] for key in only}
            instances = tuple(i for i in instances if i in selected)
        return cls(
            instances,
            tuple(dagster_instance.get_dynamic_partitions(partitions.trials_name)),
            harness.environments_ready(dagster_instance, campaign) | prepared,
            frozenset(evaluated - harness.unstored),
            only,
        )

    def missing_environments(self) -> list[str]:
        return [i for i in self.instances if i not in self.environments_ready]

    def pending_trials(self) -> list[str]:
        """Trial partitions not evaluated (of those selected), instance by instance."""
        keys = (str(trial_run_key(i, t)) for i in self.instances for t in self.trials)
        return [key for key in keys if key not in self.evaluated and (self.only is None or key in self.only)]

    def runnable_batches(self, size: int, requested: Set[str] = frozenset(), spread: int = 1) -> list[PartitionBatch]:
        """Pending trials whose environment is ready (one that failed is left for the next cycle), less those
        `requested` already, in batches of at most `size` (`spread`: as for `trial_batches`)."""
        runnable = (key for key in self.pending_trials() if key.split("|", 1)[0] in self.environments_ready)
        return trial_batches((key for key in runnable if key not in requested), self.trials, size, spread)


@dataclass
class Step:
    """What the cycle needs now: runs to request, or a wait for runs in flight, or nothing (it is done)."""

    requests: list[RunRequest] = field(default_factory=list)
    waiting: bool = False

    @property
    def done(self) -> bool:
        return not self.requests and not self.waiting


@dataclass(frozen=True)
class Cycle:
    """One pass over a campaign: its id, what started it (cli, nightly), and the trials it is limited to."""

    campaign: Campaign
    id: str
    trigger: str
    only: frozenset[str] | None = None  # the trial partitions it runs (a selection's), None: every planned one

    def request(self, stage: str, partition_key: str | None = None) -> RunRequest:
        return self._request(stage, partition_key or "", partition_key)

    def request_trials(self, batch: PartitionBatch) -> RunRequest:
        """The run of a batch of trial partitions: a partition range, as a BackfillPolicy.multi_run backfill
        launches it."""
        return self._request(TRIALS, batch.name, range_tags=batch.range_tags())

    def _request(
        self, stage: str, target: str, partition_key: str | None = None, range_tags: Mapping[str, str] | None = None
    ) -> RunRequest:
        key = f"{self.id}:{stage}:{target}"
        return RunRequest(
            run_key=key,
            job_name=stage_job_name(self.campaign, stage),
            partition_key=partition_key,
            tags={
                **(range_tags or {}),
                CYCLE_TAG: self.id,
                TRIGGER_TAG: self.trigger,
                REQUEST_TAG: key,
                STAGE_TAG: stage,  # the job's own tag too: here for the launcher's lanes, before the run exists
            },
        )

    def runs(self, dagster_instance: DagsterInstance) -> list[DagsterRun]:
        return list(dagster_instance.get_runs(RunsFilter(tags={CYCLE_TAG: self.id})))


def requested_trials(tags: Iterable[Mapping[str, str]], trial_order: tuple[str, ...]) -> set[str]:
    """The trial partitions that runs (or requests) with these tags target."""
    batches = (PartitionBatch.from_tags(run_tags, trial_order) for run_tags in tags)
    return {key for batch in batches if batch for key in batch.partitions()}


def next_step(
    dagster_instance: DagsterInstance,
    cycle: Cycle,
    launched: Iterable[RunRequest] = (),
    harness: HarnessView = AS_RECORDED,
    runs_at_once: int = 1,
) -> Step:
    """The runs the cycle needs that it has not requested yet (in the Dagster instance, or `launched` by the caller
    and not yet there); `harness` as for `CampaignProgress.read`; `runs_at_once` (the caller's capacity)
    shrinks the last batches so that those runs end together.

    Trial batches whose environment is ready come first, then environments still missing: the first trials
    start as soon as their own environment is ready, while the others are prepared.
    Assumes the cycle's prepare run succeeded (it registers the partitions).
    """
    runs, campaign = cycle.runs(dagster_instance), cycle.campaign
    launched = list(launched)
    tags = [run.tags for run in runs] + [request.tags for request in launched]
    requested = {run_tags.get(REQUEST_TAG) for run_tags in tags}
    succeeded = {run.tags.get(REQUEST_TAG) for run in runs if run.status == DagsterRunStatus.SUCCESS}
    finished = {run.tags.get(REQUEST_TAG) for run in runs if run.status in FINISHED}
    in_flight = any(run.status not in FINISHED for run in runs) or any(
        request.tags[REQUEST_TAG] not in finished for request in launched
    )
    environments = f"{cycle.id}:{ENVIRONMENTS}:"  # the run key of an instance's environments request, less it
    prepared = {key.removeprefix(environments) for key in succeeded if key and key.startswith(environments)}
    progress = CampaignProgress.read(dagster_instance, campaign, harness, cycle.only, prepared)
    batches = progress.runnable_batches(campaign.batches.size, requested_trials(tags, progress.trials), runs_at_once)
    new = [cycle.request_trials(batch) for batch in batches]
    new += [cycle.request(ENVIRONMENTS, key) for key in progress.missing_environments()]
    new = [request for request in new if request.run_key not in requested]
    if new or in_flight:
        return Step(new, waiting=in_flight)
    results = cycle.request("results")
    if results.run_key not in requested:
        return Step([results])
    release = cycle.request(RELEASE_STAGE)
    if campaign.gates and results.run_key in succeeded and release.run_key not in requested:
        return Step([release])
    return Step()
