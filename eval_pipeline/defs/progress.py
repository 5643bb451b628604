"""What a pass over a campaign needs next, read from the Dagster instance alone.

A pass (a *cycle*: one `eval-pipeline run`, or one night) prepares the dataset,
then builds every environment not yet materialized, runs every trial partition
not yet evaluated whose environment is ready, and, once nothing of the cycle is
in flight, builds results and report, then the release decision. Each run the
cycle requests carries its id (CYCLE_TAG) and its request (REQUEST_TAG: cycle,
stage and partition), so a partition is requested at most once per cycle: one that failed
waits for the next cycle or for the infrastructure-retry sensor, and never
loops. The CLI driver and the nightly sensor both ask `next_step`; they differ
only in how they launch the runs it requests.
"""

from collections.abc import Set
from dataclasses import dataclass, field

from dagster import AssetKey, DagsterInstance, DagsterRun, DagsterRunStatus, RunRequest, RunsFilter

from eval_pipeline.campaign import Campaign
from eval_pipeline.defs.partitions import CampaignPartitions, trial_run_key
from eval_pipeline.defs.stages import CYCLE_TAG, RELEASE_STAGE, TRIGGER_TAG, stage_job_name

REQUEST_TAG = "eval_pipeline/request"  # the request a run answers: its cycle, stage and partition
FINISHED = frozenset({DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED})


@dataclass(frozen=True)
class CampaignProgress:
    """The campaign's registered partitions and which of them Dagster has materialized."""

    instances: tuple[str, ...]
    trials: tuple[str, ...]
    environments_ready: frozenset[str]
    evaluated: frozenset[str]

    @classmethod
    def read(
        cls, instance: DagsterInstance, campaign: Campaign, unstored: Set[str] = frozenset()
    ) -> "CampaignProgress":
        """`unstored`: trial partitions whose scored evaluation the artifact store no longer holds, which count
        as not evaluated whatever Dagster recorded."""
        partitions = CampaignPartitions.for_campaign(campaign)
        evaluated = instance.get_materialized_partitions(AssetKey([campaign.name, "evaluation"]))
        return cls(
            tuple(instance.get_dynamic_partitions(partitions.instances.name)),
            tuple(instance.get_dynamic_partitions(partitions.trials.name)),
            frozenset(instance.get_materialized_partitions(AssetKey([campaign.name, "environment"]))),
            frozenset(evaluated - unstored),
        )

    def missing_environments(self) -> list[str]:
        return [i for i in self.instances if i not in self.environments_ready]

    def pending_trials(self) -> list[str]:
        """Trial partitions not evaluated, ordered so that neighbours hit different instances' environments."""
        keys = (str(trial_run_key(i, t)) for t in self.trials for i in self.instances)
        return [key for key in keys if key not in self.evaluated]

    def runnable_trials(self) -> list[str]:
        """Pending trials whose environment is ready (one that failed is left for the next cycle)."""
        return [key for key in self.pending_trials() if key.split("|", 1)[0] in self.environments_ready]


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
    """One pass over a campaign: its id, and what started it (cli, nightly)."""

    campaign: Campaign
    id: str
    trigger: str

    def request(self, stage: str, partition_key: str | None = None) -> RunRequest:
        return RunRequest(
            run_key=f"{self.id}:{stage}:{partition_key or ''}",
            job_name=stage_job_name(self.campaign, stage),
            partition_key=partition_key,
            tags={
                CYCLE_TAG: self.id,
                TRIGGER_TAG: self.trigger,
                REQUEST_TAG: f"{self.id}:{stage}:{partition_key or ''}",
            },
        )

    def runs(self, instance: DagsterInstance) -> list[DagsterRun]:
        return list(instance.get_runs(RunsFilter(tags={CYCLE_TAG: self.id})))


def next_step(
    instance: DagsterInstance, cycle: Cycle, launched: Set[str] = frozenset(), unstored: Set[str] = frozenset()
) -> Step:
    """The runs the cycle needs that it has not requested yet (in the instance, or `launched` by the caller
    and not yet there); `unstored` as for `CampaignProgress.read`.

    Assumes the cycle's prepare run succeeded (it registers the partitions).
    """
    runs, campaign = cycle.runs(instance), cycle.campaign
    requested = {run.tags.get(REQUEST_TAG) for run in runs} | launched
    succeeded = {run.tags.get(REQUEST_TAG) for run in runs if run.status == DagsterRunStatus.SUCCESS}
    in_flight = bool(launched - {run.tags.get(REQUEST_TAG) for run in runs if run.status in FINISHED}) or any(
        run.status not in FINISHED for run in runs
    )
    progress = CampaignProgress.read(instance, campaign, unstored)
    wanted = [cycle.request("environments", key) for key in progress.missing_environments()]
    wanted += [cycle.request("trials", key) for key in progress.runnable_trials()]
    new = [request for request in wanted if request.run_key not in requested]
    if new or in_flight:
        return Step(new, waiting=in_flight)
    results = cycle.request("results")
    if results.run_key not in requested:
        return Step([results])
    release = cycle.request(RELEASE_STAGE)
    if campaign.gates and results.run_key in succeeded and release.run_key not in requested:
        return Step([release])
    return Step()
