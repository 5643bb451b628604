"""The CLI's driver: one cycle over a campaign, its runs requested by `progress.next_step` and launched by a
`Launcher`, each finished run read from the Dagster instance and handed to `on_finished`, and each trial's
materializations handed to `on_materialized` as soon as the Dagster instance records its evaluation (a run is a
batch of trials, which may take long).

The nightly sensor asks the same `next_step`; this module only adds launching, waiting and handing results on.
"""

import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunRequest,
)

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.defs.failures import failure_descriptions, failure_outcomes, innermost_error
from eval_pipeline.defs.group import ENVIRONMENT_POOL, MODEL_API_POOL
from eval_pipeline.defs.progress import AS_RECORDED, REQUEST_TAG, Cycle, HarnessView, next_step
from eval_pipeline.defs.stages import CYCLE_TAG, ENVIRONMENTS, STAGE_TAG, TRIALS
from eval_pipeline.orchestration.errors import CampaignRunError
from eval_pipeline.orchestration.launchers import POLL_S, Launcher, launched_run

CLI_TRIGGER = "cli"
# The pool each stage's steps claim a slot of (defs/environments.py, defs/trials.py).
STAGE_POOLS = {ENVIRONMENTS: ENVIRONMENT_POOL, TRIALS: MODEL_API_POOL}
# How often the driver looks for trials that ended: each look queries the event log that the runs are writing.
MATERIALIZATION_POLL_S = 2.0


def new_cycle(campaign: Campaign) -> Cycle:
    return Cycle(campaign, f"{CLI_TRIGGER}-{uuid.uuid4().hex[:12]}", CLI_TRIGGER)


def failure_message(dagster_instance: DagsterInstance, run: DagsterRun, what: str) -> CampaignRunError:
    """The error behind a failed run, unwrapped from Dagster's step error, with the run to look up."""
    messages = []
    for entry in dagster_instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_FAILURE):
        messages.append(innermost_error(entry.get_dagster_event()) or "unknown error")
    return CampaignRunError(f"{what} failed (Dagster run {run.run_id}): {'; '.join(messages) or run.status.value}")


Materialized = Mapping[tuple[str, str], Mapping[str, Any]]  # (asset name, partition) -> its metadata values


def _materialized(materializations: Iterable[AssetMaterialization | None]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (m.asset_key.path[-1], m.partition or ""): {name: value.value for name, value in m.metadata.items()}
        for m in materializations
        if m
    }


@dataclass(frozen=True)
class FinishedRun:
    """What one run did, as the Dagster instance recorded it: per partition, what it materialized and, for a failed run,
    the unscored outcomes its partitions ended on."""

    run: DagsterRun
    stage: str
    partition: str  # the run's partition, or its batch of trial partitions
    metadata: Materialized
    outcomes: Mapping[str, Outcome]  # partition -> the unscored outcome it failed on
    failure: str  # for a failed run: the outcomes its steps failed on (else how it ended), and the run to look up
    reasons: str = ""  # for a failed run: what its failed steps said, each in its own words

    @property
    def success(self) -> bool:
        return self.run.status == DagsterRunStatus.SUCCESS

    def reused(self, asset: str, partition: str | None = None) -> bool | None:
        """Whether the asset's materialization (of `partition`) reused a stored artifact; None when it was not
        materialized."""
        found = self.metadata.get((asset, partition or self.partition))
        return None if found is None else found["reused"]

    def trial_partitions(self) -> list[str]:
        """The trial partitions the run ended: materialized, or failed on an outcome."""
        keys = {partition for (asset, partition) in self.metadata if asset in ("generation", "evaluation")}
        return sorted(keys | set(self.outcomes))

    @classmethod
    def read(cls, dagster_instance: DagsterInstance, run: DagsterRun) -> "FinishedRun":
        entries = dagster_instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
        metadata = _materialized(entry.asset_materialization for entry in entries)
        outcomes, failure, reasons = {}, "", ""
        if run.status != DagsterRunStatus.SUCCESS:
            failures = [
                e.get_dagster_event()
                for e in dagster_instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_FAILURE)
            ]
            outcomes = failure_outcomes(failures)
            failed_on = sorted({o.value for o in outcomes.values()}) or [run.status.value.lower()]
            failure = f"{', '.join(failed_on)} (run {run.run_id})"
            reasons = "\n".join(failure_descriptions(failures))
        stage = run.tags.get(STAGE_TAG, "")
        request = run.tags.get(REQUEST_TAG, "").removeprefix(f"{run.tags.get(CYCLE_TAG)}:{stage}:")
        partition = request or run.tags.get("dagster/partition", "")
        return cls(run, stage, partition, metadata, outcomes, failure, reasons)


class MaterializationPoller:
    """The materializations of a cycle's trials that the Dagster instance recorded since the last `poll`."""

    def __init__(self, dagster_instance: DagsterInstance, cycle: Cycle) -> None:
        self.dagster_instance, self.cycle = dagster_instance, cycle
        # Evaluations first: a trial's generation is stored before its evaluation, so any evaluation one look
        # finds has its generation found by the same look (the other order could see an evaluation whose
        # generation landed between the two queries).
        self.keys = [AssetKey([cycle.campaign.name, name]) for name in ("evaluation", "generation")]
        self.after = {key: self._newest(key) for key in self.keys}
        self.runs: dict[str, bool] = {}  # run id -> whether it is the cycle's

    def _newest(self, key: AssetKey) -> int:
        records = self.dagster_instance.fetch_materializations(key, limit=1).records
        return records[0].storage_id if records else 0

    def _ours(self, run_id: str) -> bool:
        if run_id not in self.runs:
            run = self.dagster_instance.get_run_by_id(run_id)
            self.runs[run_id] = run is not None and run.tags.get(CYCLE_TAG) == self.cycle.id
        return self.runs[run_id]

    def poll(self) -> Materialized:
        found = []
        for key in self.keys:
            records = self.dagster_instance.fetch_materializations(
                AssetRecordsFilter(asset_key=key, after_storage_id=self.after[key]), limit=10_000, ascending=True
            ).records
            self.after[key] = max([self.after[key], *(record.storage_id for record in records)])
            found += [record.asset_materialization for record in records if self._ours(record.run_id)]
        return _materialized(found)


def run_one(
    dagster_instance: DagsterInstance,
    launcher: Launcher,
    request: RunRequest,
    run_config: Mapping[str, Any] | None = None,
) -> DagsterRun:
    """Launch one run and wait for it to finish."""
    launcher.launch(request, run_config)
    while not (finished := launcher.wait()):
        time.sleep(POLL_S)
    return launched_run(dagster_instance, finished[0])


def run_all(
    dagster_instance: DagsterInstance,
    launcher: Launcher,
    requests: Iterable[RunRequest],
    on_finished: Callable[[FinishedRun], None],
    run_config: Mapping[str, Any] | None = None,
) -> None:
    """Launch every request, at most `launcher.capacity` in flight, handing each finished run to `on_finished`."""
    waiting = list(requests)
    while waiting or launcher.in_flight():
        while waiting and launcher.in_flight() < launcher.capacity:
            launcher.launch(waiting.pop(0), run_config)
        for run_id in launcher.wait():
            on_finished(FinishedRun.read(dagster_instance, launched_run(dagster_instance, run_id)))


def stage_limits(dagster_instance: DagsterInstance) -> dict[str, int]:
    """How many runs of a stage may run at once: the limit of the pool its steps claim a slot of. A run launched
    past it only waits for a slot, and Dagster's in-process executor waits without sleeping (its
    `interval_to_next_pending_claim_check` never returns more than 0): a worker, and a core, spent spinning.
    Read once a cycle, and counting only this driver's runs: slots other launchers hold still make its runs
    wait. A pool with no slot at all is an error, not a wait without end."""
    limits = {pool.name: pool.limit for pool in dagster_instance.event_log_storage.get_pool_limits()}
    for stage, pool in STAGE_POOLS.items():
        if limits.get(pool, 1) < 1:
            raise CampaignRunError(
                f"the concurrency pool {pool} has a limit of {limits[pool]}: no {stage} run can start;"
                f" raise it with `dagster instance concurrency set {pool} <limit>`"
            )
    return {stage: limits[pool] for stage, pool in STAGE_POOLS.items() if pool in limits}


def _launchable(
    queue: deque[RunRequest], launcher: Launcher, running: Counter[str], limits: Mapping[str, int]
) -> RunRequest | None:
    """The next request the launcher has room for: an environment's while an environment lane is free (so that
    the next instances' environments are prepared while trials run), else the first in the queue (trials whose
    environment is ready come first) while `launcher.capacity` is not all taken; never one of a stage whose pool
    is full (`stage_limits`). None when nothing fits."""

    def fits(request: RunRequest) -> bool:
        stage = request.tags[STAGE_TAG]
        return stage not in limits or running[stage] < limits[stage]

    environments = running[ENVIRONMENTS]
    if environments < launcher.environment_lanes:
        if request := next((r for r in queue if r.tags[STAGE_TAG] == ENVIRONMENTS and fits(r)), None):
            return request
    taken = sum(running.values()) - min(environments, launcher.environment_lanes)
    return next((r for r in queue if fits(r)), None) if taken < launcher.capacity else None


def drive(
    dagster_instance: DagsterInstance,
    cycle: Cycle,
    launcher: Launcher,
    on_finished: Callable[[FinishedRun], None],
    harness: HarnessView = AS_RECORDED,
    on_materialized: Callable[[Materialized], None] = lambda _: None,
) -> None:
    """Carry a prepared cycle through environments, trials, results and release (`harness`: as for
    `CampaignProgress.read`), handing each finished run to `on_finished` and, while runs are in flight, the
    materializations of the trials that ended to `on_materialized`.

    `next_step` reads the cycle's partitions and runs from the Dagster instance, so it is asked again only when the
    requests it gave last have all been launched or an environment has become ready (its trials can start),
    not after every finished run.
    """
    launched: list[RunRequest] = []
    running: Counter[str] = Counter()  # runs launched and not yet finished, by stage
    queue: deque[RunRequest] = deque()
    poller = MaterializationPoller(dagster_instance, cycle)
    limits = stage_limits(dagster_instance)
    looked = time.monotonic()
    ask = True
    while True:
        if ask or not queue:
            step = next_step(dagster_instance, cycle, launched, harness, launcher.capacity)
            if step.done:
                return
            queue, ask = deque(step.requests), False
        while (request := _launchable(queue, launcher, running, limits)) is not None:
            queue.remove(request)
            launcher.launch(request)
            launched.append(request)
            running[request.tags[STAGE_TAG]] += 1
        finished = [
            FinishedRun.read(dagster_instance, launched_run(dagster_instance, run_id))
            for run_id in launcher.wait(POLL_S)
        ]
        running.subtract(run.stage for run in finished)
        if time.monotonic() - looked >= MATERIALIZATION_POLL_S or finished:
            looked = time.monotonic()
            if materialized := poller.poll():
                on_materialized(materialized)
        for run in finished:
            on_finished(run)
            ask = ask or (run.stage == ENVIRONMENTS and run.success)
        if not queue and not finished and not launcher.in_flight():
            time.sleep(POLL_S)  # runs of the cycle in flight that another process launched (a run retry, say)
