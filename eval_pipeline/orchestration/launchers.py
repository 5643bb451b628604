"""How the CLI's requested runs reach Dagster: through a running Dagster webserver, or in worker processes.

Both create ordinary runs of the code location's jobs in the same instance, tagged
with their request, and report the ids of runs that finished; what a run did is
then read from the Dagster instance, the same way for both.

- `ServerLauncher` launches through the GraphQL API of a running `dagster dev`
  or webserver (EVAL_PIPELINE_DAGSTER_URL), exactly as the UI's Materialize
  button does: the runs carry the code location's origin, so they appear on the
  Overview timeline and the Jobs page and re-execute like any other, and the
  instance's run queue, run retries and run monitoring apply.
- `WorkerPoolLauncher` (the embedded default, no server) executes each run in
  process in one of N worker processes that import the definitions once.
"""

import os
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, Protocol

import requests
from dagster import DagsterInstance, DagsterRun, RunRequest, RunsFilter

from eval_pipeline.common.settings import Paths
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.defs.location import build_definitions
from eval_pipeline.defs.progress import FINISHED, REQUEST_TAG
from eval_pipeline.orchestration.errors import LaunchError
from eval_pipeline.orchestration.run_workers import (
    DAGSTER_URL_VARIABLE,
    environment_lanes,
    execute_in_worker,
    execute_request,
    start_run_workers,
    stop_run_workers,
)

LOCATION, REPOSITORY = "eval_pipeline", "__repository__"
POLL_S = 0.5


def launched_run(dagster_instance: DagsterInstance, run_id: str) -> DagsterRun:
    """A run this command launched: the Dagster instance holds it from its launch on."""
    run = dagster_instance.get_run_by_id(run_id)
    if run is None:
        raise LaunchError(f"Dagster's instance has no run {run_id}, launched by this command")
    return run


class Launcher(Protocol):
    capacity: int  # runs at once
    environment_lanes: int  # runs preparing environments that may run besides `capacity` others (run_workers)

    def launch(self, request: RunRequest, run_config: Mapping[str, Any] | None = None) -> None: ...

    def in_flight(self) -> int: ...

    def wait(self, timeout_s: float | None = None) -> list[str]:
        """Block until at least one launched run has finished, or `timeout_s` has passed; the ids of those that
        have finished."""
        ...

    def close(self, abort: bool = False) -> None:
        """Release what the launcher holds; with `abort` (Ctrl-C, an error), first stop what is in flight."""
        ...


def free_abandoned_slots(dagster_instance: DagsterInstance) -> None:
    """Free the pool slots held by runs that are over or gone. Dagster frees a run's slots when the run ends
    itself; a run whose worker was killed (an interrupted or killed command) keeps them, and every later run of
    its pool would wait for them forever, silently."""
    storage = dagster_instance.event_log_storage
    for run_id in storage.get_concurrency_run_ids():
        run = dagster_instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            storage.free_concurrency_slots_for_run(run_id)


def abandon(dagster_instance: DagsterInstance, requests: list[RunRequest]) -> None:
    """The runs of `requests`, cut off by an abort: marked canceled where they had not ended, and their pool
    slots freed; the next cycle runs their partitions again."""
    for request in requests:
        for run in dagster_instance.get_runs(RunsFilter(tags={REQUEST_TAG: request.tags[REQUEST_TAG]})):
            if not run.is_finished:
                dagster_instance.report_run_canceled(
                    run, message="the eval-pipeline command running it was interrupted"
                )
            dagster_instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)


class WorkerPoolLauncher:
    """Runs in `capacity` worker processes, and an environment lane's (Dagster's SQLite event log keeps
    a file per run, so parallel runs do not contend on one database file); with one and no lane, in this
    process, in turn."""

    def __init__(
        self,
        campaign: Campaign,
        paths: Paths,
        dagster_instance: DagsterInstance,
        capacity: int,
        workers: ProcessPoolExecutor | None = None,
    ) -> None:
        """`workers`: the pool `run_workers.embedded_run_workers` started for `capacity` (the command starts it
        before it opens its instance); without, the launcher starts its own, on `dagster_instance`."""
        self.capacity = max(1, capacity)
        self.environment_lanes = environment_lanes(campaign)
        self._finished: list[str] = []
        self._running: dict[Future, RunRequest] = {}
        self._dagster_instance = dagster_instance
        self._pool = workers
        if self.capacity + self.environment_lanes == 1:
            self._definitions = build_definitions([campaign], paths)
        elif workers is None:
            self._pool = start_run_workers(campaign, paths, self.capacity, dagster_instance.get_ref())

    def launch(self, request: RunRequest, run_config: Mapping[str, Any] | None = None) -> None:
        if self._pool is None:
            self._finished.append(execute_request(self._definitions, self._dagster_instance, request, run_config))
        else:
            self._running[self._pool.submit(execute_in_worker, request, run_config)] = request  # workers started

    def in_flight(self) -> int:
        """Runs launched and not yet reported by `wait` (in this process a run ends within `launch`, and still
        counts until it is reported, so that the driver tells each before it launches the next)."""
        return len(self._running) + len(self._finished)

    def wait(self, timeout_s: float | None = None) -> list[str]:
        if self._running:
            done, _ = wait(self._running, timeout=timeout_s, return_when=FIRST_COMPLETED)
            for future in done:
                del self._running[future]
                self._finished.append(future.result())
        finished, self._finished = self._finished, []
        return finished

    def close(self, abort: bool = False) -> None:
        """Stop the workers. With `abort`, or once every run has been reported, they are killed at once
        (`run_workers.stop_run_workers`): an idle worker has written all it ran, and exiting by itself it spent
        about a second tearing down its interpreter; a run cut off mid-way is run again by the next cycle. With
        runs still in flight and no abort, the pool is shut down in the ordinary way, after them."""
        if self._pool is None:
            return
        if abort or not self._running:
            cut_off = list(self._running.values())
            stop_run_workers(self._pool)
            abandon(self._dagster_instance, cut_off)
        else:
            self._pool.shutdown(wait=True, cancel_futures=True)


LAUNCH_RUN = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } ... on InvalidSubsetError { message }
  ... on PipelineNotFoundError { message } } }"""
TERMINATE_RUNS = """mutation($ids: [String!]!) { terminateRuns(runIds: $ids) { __typename } }"""


def partition_tags(partition_key: str | None) -> dict[str, str]:
    """The tags the UI gives a run of one partition (a multi-partition key also by dimension)."""
    if partition_key is None:
        return {}
    tags = {"dagster/partition": partition_key}
    if "|" in partition_key:
        instance_id, trial = partition_key.split("|", 1)
        tags |= {"dagster/partition/instance": instance_id, "dagster/partition/trial": trial}
    return tags


class ServerLauncher:
    """Runs launched through a Dagster webserver's GraphQL API; finished when the Dagster instance says so."""

    def __init__(self, url: str, dagster_instance: DagsterInstance, capacity: int) -> None:
        self.url = url.rstrip("/")
        self.dagster_instance = dagster_instance
        self.capacity = max(1, capacity)
        self.environment_lanes = 0  # the server's run queue and its `environments` tag limit decide
        self._running: set[str] = set()

    def _query(self, text: str, **variables: Any) -> dict[str, Any]:
        try:
            response = requests.post(f"{self.url}/graphql", json={"query": text, "variables": variables}, timeout=60)
            response.raise_for_status()
        except requests.RequestException as error:
            raise LaunchError(f"the Dagster server at {self.url} cannot be reached: {error}") from error
        body = response.json()
        if "errors" in body:
            raise LaunchError(f"the Dagster server at {self.url} refused the request: {body['errors']}")
        return body["data"]

    def launch(self, request: RunRequest, run_config: Mapping[str, Any] | None = None) -> None:
        tags = {**partition_tags(request.partition_key), **request.tags}
        params = {
            "selector": {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY, "jobName": request.job_name},
            "executionMetadata": {"tags": [{"key": key, "value": value} for key, value in tags.items()]},
            "runConfigData": dict(run_config or {}),
        }
        launched = self._query(LAUNCH_RUN, params=params)["launchRun"]
        if launched["__typename"] != "LaunchRunSuccess":
            raise LaunchError(f"the Dagster server at {self.url} did not launch {request.job_name}: {launched}")
        run_id = launched["run"]["runId"]
        if self.dagster_instance.get_run_by_id(run_id) is None:
            raise LaunchError(
                f"the Dagster server at {self.url} uses another instance than this command's DAGSTER_HOME;"
                " start both with the same DAGSTER_HOME"
            )
        self._running.add(run_id)

    def in_flight(self) -> int:
        return len(self._running)

    def wait(self, timeout_s: float | None = None) -> list[str]:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self._running:
            finished = [
                run_id for run_id in self._running if launched_run(self.dagster_instance, run_id).status in FINISHED
            ]
            if finished:
                self._running.difference_update(finished)
                return finished
            if deadline is not None and time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        return []

    def close(self, abort: bool = False) -> None:
        """With `abort`, terminate the runs still in flight: the next cycle runs their partitions again."""
        if abort and self._running:
            self._query(TERMINATE_RUNS, ids=sorted(self._running))
            self._running.clear()


@contextmanager
def open_launcher(
    campaign: Campaign,
    paths: Paths,
    dagster_instance: DagsterInstance,
    capacity: int,
    workers: ProcessPoolExecutor | None = None,
) -> Iterator[Launcher]:
    """Through the Dagster server at EVAL_PIPELINE_DAGSTER_URL when it is set, else in worker processes
    (`workers`, when started already: `run_workers.embedded_run_workers`); whatever is still in flight when the
    block ends (Ctrl-C) is stopped."""
    url = os.environ.get(DAGSTER_URL_VARIABLE)
    if url and workers is not None:  # started by a caller that decided otherwise: not to be left running
        stop_run_workers(workers)
    launcher: Launcher = (
        ServerLauncher(url, dagster_instance, capacity)
        if url
        else WorkerPoolLauncher(campaign, paths, dagster_instance, capacity, workers)
    )
    try:
        yield launcher
    except BaseException:
        launcher.close(abort=True)
        raise
    launcher.close()
