"""The CLI's driver: one cycle over a campaign, its runs requested by `progress.next_step` and launched by a
`Launcher`, each finished run told in one line read from the instance.

The nightly sensor asks the same `next_step`; this module only adds launching, waiting and telling.
"""

import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any

from dagster import DagsterEventType, DagsterInstance, DagsterRun, DagsterRunStatus, RunRequest

from eval_pipeline.campaign import Campaign
from eval_pipeline.defs.failures import failure_outcomes
from eval_pipeline.defs.progress import Cycle, next_step
from eval_pipeline.defs.stages import STAGE_TAG
from eval_pipeline.orchestration.launchers import POLL_S, Launcher, request_key

CLI_TRIGGER = "cli"


class CampaignRunError(RuntimeError):
    """A stage that every trial depends on failed; the message carries the underlying error."""


def new_cycle(campaign: Campaign) -> Cycle:
    return Cycle(campaign, f"{CLI_TRIGGER}-{uuid.uuid4().hex[:12]}", CLI_TRIGGER)


def failure_message(instance: DagsterInstance, run: DagsterRun, what: str) -> CampaignRunError:
    """The error behind a failed run, unwrapped from Dagster's step error, with the run to look up."""
    messages = []
    for entry in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_FAILURE):
        error = entry.dagster_event.step_failure_data.error
        while error and error.cause:
            error = error.cause
        messages.append(error.message.strip() if error else "unknown error")
    return CampaignRunError(f"{what} failed (Dagster run {run.run_id}): {'; '.join(messages) or run.status.value}")


@dataclass(frozen=True)
class FinishedRun:
    """What one run did, as the instance recorded it."""

    run: DagsterRun
    stage: str
    partition: str
    metadata: Mapping[str, Mapping[str, Any]]  # asset name -> its materialization's metadata values
    failure: str  # for a failed run: the outcomes its steps failed on (else how it ended), and the run to look up

    @property
    def success(self) -> bool:
        return self.run.status == DagsterRunStatus.SUCCESS

    def reused(self, asset: str) -> bool | None:
        """Whether the asset's materialization reused a stored artifact; None when it was not materialized."""
        return self.metadata[asset]["reused"] if asset in self.metadata else None

    @classmethod
    def read(cls, instance: DagsterInstance, run: DagsterRun) -> "FinishedRun":
        materializations = [
            entry.asset_materialization
            for entry in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
        ]
        metadata = {
            m.asset_key.path[-1]: {name: value.value for name, value in m.metadata.items()}
            for m in materializations
            if m
        }
        failure = ""
        if run.status != DagsterRunStatus.SUCCESS:
            failures = [e.dagster_event for e in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_FAILURE)]
            failed_on = [o.value for o in failure_outcomes(failures)] or [run.status.value.lower()]
            failure = f"{', '.join(failed_on)} (run {run.run_id})"
        return cls(run, run.tags.get(STAGE_TAG, ""), run.tags.get("dagster/partition", ""), metadata, failure)


def run_one(
    instance: DagsterInstance, launcher: Launcher, request: RunRequest, run_config: Mapping[str, Any] | None = None
) -> DagsterRun:
    """Launch one run and wait for it to finish."""
    launcher.launch(request, run_config)
    while not (finished := launcher.wait()):
        time.sleep(POLL_S)
    return instance.get_run_by_id(finished[0])


def run_all(
    instance: DagsterInstance,
    launcher: Launcher,
    requests: Iterable[RunRequest],
    tell: Callable[[FinishedRun], None],
    run_config: Mapping[str, Any] | None = None,
) -> None:
    """Launch every request, at most `launcher.capacity` in flight, telling each finished run."""
    waiting = list(requests)
    while waiting or launcher.in_flight():
        while waiting and launcher.in_flight() < launcher.capacity:
            launcher.launch(waiting.pop(0), run_config)
        for run_id in launcher.wait():
            tell(FinishedRun.read(instance, instance.get_run_by_id(run_id)))


def drive(
    instance: DagsterInstance,
    cycle: Cycle,
    launcher: Launcher,
    tell: Callable[[FinishedRun], None],
    unstored: Set[str] = frozenset(),
) -> None:
    """Carry a prepared cycle through environments, trials, results and release (`unstored`: as for
    `CampaignProgress.read`).

    `next_step` reads the cycle's partitions and runs from the instance, so it is asked again only when the
    requests it gave last have all been launched, not after every finished run (which would read the whole
    cycle once per trial).
    """
    launched: set[str] = set()
    queue: deque[RunRequest] = deque()
    while True:
        if not queue:
            step = next_step(instance, cycle, launched, unstored)
            if step.done:
                return
            queue.extend(step.requests)
        while queue and launcher.in_flight() < launcher.capacity:
            request = queue.popleft()
            launcher.launch(request)
            launched.add(request_key(request))
        finished = launcher.wait()
        for run_id in finished:
            tell(FinishedRun.read(instance, instance.get_run_by_id(run_id)))
        if not queue and not finished and not launcher.in_flight():
            time.sleep(POLL_S)  # runs of the cycle in flight that another process launched (a run retry, say)
