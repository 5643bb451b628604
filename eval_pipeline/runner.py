"""Run or resume a campaign in process, one Dagster run per partition.

Each stage is a job of the campaign's definitions; the runner executes only
what is not done yet: environments not materialized, and trials whose final
evaluation is not stored or not recorded by Dagster. One run per partition
keeps a failing trial from failing others (Dagster fails a multi-partition
run as a whole), and the artifact store makes a re-run of a finished trial
cost a lookup, not a regeneration.
"""

import multiprocessing
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagster import AssetKey, BetaWarning, DagsterInstance, Definitions, ExecuteInProcessResult

from eval_pipeline.campaign import Campaign
from eval_pipeline.defs import RELEASE_STAGE, build_definitions, stage_job_name
from eval_pipeline.defs.assets import ENVIRONMENT_POOL, MODEL_API_POOL, failure_outcomes
from eval_pipeline.defs.partitions import trial_run_key
from eval_pipeline.report_model import Report
from eval_pipeline.results import collect_results
from eval_pipeline.settings import Paths

if TYPE_CHECKING:
    from dagster._core.instance.ref import InstanceRef

QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


class CampaignRunError(RuntimeError):
    """A stage that every trial depends on failed; the message carries the underlying error."""


def _failure(run: ExecuteInProcessResult, what: str) -> CampaignRunError:
    """The error behind a failed run, unwrapped from Dagster's step error, with the run to look up."""
    messages = []
    for event in run.get_step_failure_events():
        error = event.step_failure_data.error
        while error and error.cause:
            error = error.cause
        messages.append(error.message.strip() if error else "unknown error")
    return CampaignRunError(f"{what} failed (Dagster run {run.run_id}): {'; '.join(messages)}")


@dataclass
class StageCounts:
    """How many steps computed, reused a stored artifact, or failed."""

    computed: int = 0
    reused: int = 0
    failed: int = 0

    def add(self, status: str) -> None:
        setattr(self, status, getattr(self, status) + 1)


@dataclass(frozen=True)
class TrialRun:
    """What one trial partition's run did, small enough to send back from a worker process."""

    generation: str
    evaluation: str
    outcome: str


def _status(run: ExecuteInProcessResult, node: str) -> str:
    materializations = run.asset_materializations_for_node(node)
    if not materializations:
        return "failed"
    return "reused" if materializations[0].metadata["reused"].value else "computed"


@dataclass
class CampaignRun:
    report: Report | None = None  # set by run_campaign once the results stage has built it
    environments_prepared: int = 0
    generation: StageCounts = field(default_factory=StageCounts)
    evaluation: StageCounts = field(default_factory=StageCounts)

    def as_json(self) -> dict[str, Any]:
        """The report's summary (Report.summary: numbers, gates' verdicts, files) and this run's step counts."""
        assert self.report is not None, "run_campaign returns a run with its report"
        return {
            **self.report.summary(),
            "environments_prepared": self.environments_prepared,
            "generation": vars(self.generation),
            "evaluation": vars(self.evaluation),
        }


class CampaignExecutor:
    """Executes a campaign's stage jobs in this process against one Dagster instance."""

    def __init__(self, campaign: Campaign, defs: Definitions, instance: DagsterInstance) -> None:
        self.campaign = campaign
        self.defs = defs
        self.instance = instance
        # Hold database connections open across this process's many runs, as Dagster's webserver does.
        # Dagster's PostgreSQL storage otherwise connects anew for every query: 3,300 connections of
        # about 7 ms each (password authentication) for 16 trials. SQLite storage ignores this.
        instance.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=4)

    def asset_key(self, name: str) -> AssetKey:
        return AssetKey([self.campaign.name, name])

    def execute(self, stage: str, **kwargs: Any) -> ExecuteInProcessResult:
        job = self.defs.resolve_job_def(stage_job_name(self.campaign, stage))
        return job.execute_in_process(
            instance=self.instance, run_config=QUIET_RUN_CONFIG, raise_on_error=False, **kwargs
        )

    def prepare_environment(self, instance_id: str) -> bool:
        return self.execute("environments", partition_key=instance_id).success

    def run_trial(self, instance_id: str, trial_key: str) -> TrialRun:
        result = self.execute("trials", partition_key=trial_run_key(instance_id, trial_key))
        if result.success:
            outcome = result.asset_value(self.asset_key("evaluation")).outcome
        else:
            failed_on = [o.value for o in failure_outcomes(result.get_step_failure_events())] or ["failed"]
            outcome = f"{', '.join(failed_on)} (run {result.run_id})"
        return TrialRun(
            generation=_status(result, f"{self.campaign.name}__generation"),
            evaluation=_status(result, f"{self.campaign.name}__evaluation"),
            outcome=outcome,
        )


_worker: CampaignExecutor | None = None


def _start_worker(campaign: Campaign, data_dir: str, instance_ref: "InstanceRef") -> None:
    """Each worker process builds its own definitions and opens the same Dagster instance."""
    global _worker
    warnings.filterwarnings("ignore", category=BetaWarning)
    _worker = CampaignExecutor(
        campaign, build_definitions([campaign], Paths(Path(data_dir))), DagsterInstance.from_ref(instance_ref)
    )


def _in_worker(method: str, *args: str) -> Any:
    return getattr(_worker, method)(*args)


@contextmanager
def _executor_pool(executor: CampaignExecutor, workers: int) -> Iterator[Callable[..., Iterator[tuple[tuple, Any]]]]:
    """A map over (method, args) jobs, at most `limit` in flight: in this process for one worker, else in
    spawned processes.

    Dagster's SQLite event log keeps one file per run, so runs in parallel
    processes do not contend on one database file.
    """
    if workers <= 1:
        yield lambda method, jobs, limit=None: ((args, getattr(executor, method)(*args)) for args in jobs)
        return
    data_dir = executor.defs.resources["eval_pipeline"].data_dir
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(executor.campaign, data_dir, executor.instance.get_ref()),
    ) as pool:

        def parallel_map(method: str, jobs: list[tuple], limit: int | None = None) -> Iterator[tuple[tuple, Any]]:
            waiting = list(reversed(jobs))
            running: dict[Future, tuple] = {}
            while waiting or running:
                while waiting and len(running) < (limit or workers):
                    args = waiting.pop()
                    running[pool.submit(_in_worker, method, *args)] = args
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    yield running.pop(future), future.result()

        yield parallel_map


def _create_pools(instance: DagsterInstance) -> None:
    """Create the pools' default limits once, before worker processes race to.

    On PostgreSQL two runs creating the same pool at once fail one of them: Dagster's storage
    retries a failed insert as an update inside the transaction the failure aborted.
    A pool that exists (with its default or a limit an operator set) is left as it is.
    """
    existing = instance.event_log_storage.get_concurrency_keys()
    for pool in (ENVIRONMENT_POOL, MODEL_API_POOL):
        if pool not in existing:
            instance.event_log_storage.initialize_concurrency_limit_to_default(pool)


def run_campaign(
    campaign: Campaign,
    defs: Definitions,
    instance: DagsterInstance,
    progress: Callable[[str], None] = lambda _: None,
    workers: int = 1,
) -> CampaignRun:
    executor = CampaignExecutor(campaign, defs, instance)
    _create_pools(instance)
    prepared = executor.execute("prepare")
    if not prepared.success:
        raise _failure(prepared, f"campaign {campaign.name}: preparing the dataset")
    portfolio = prepared.asset_value(executor.asset_key("dataset_snapshot"))
    progress(
        f"{campaign.name}: {len(portfolio.instances)} instances in {len(portfolio.slices)} slice(s)"
        f" x {len(campaign.trials)} trials, dataset {portfolio.version[:12]}"
    )

    run = CampaignRun()
    ready = instance.get_materialized_partitions(executor.asset_key("environment"))
    missing_environments = [(i.instance_id,) for i in portfolio.instances if i.instance_id not in ready]
    eval_pipeline = defs.resources["eval_pipeline"]
    rows = collect_results(
        campaign, portfolio, lambda task: eval_pipeline.sandbox(campaign, task), eval_pipeline.artifact_store()
    )
    recorded = instance.get_materialized_partitions(executor.asset_key("evaluation"))
    pending = [
        (r.instance_id, r.trial)
        for r in rows
        if not r.scored or str(trial_run_key(r.instance_id, r.trial)) not in recorded
    ]
    pending.sort(key=lambda item: (item[1], item[0]))  # neighbours hit different instances' environments
    workers = max(1, min(workers, max(len(pending), len(missing_environments))))  # spawn no idle workers
    progress(
        f"{len(rows) - len(pending)} of {len(rows)} trials already done; running {len(pending)} with {workers} worker(s)"
    )

    try:
        with _executor_pool(executor, workers) as parallel_map:
            builds = parallel_map("prepare_environment", missing_environments, campaign.sandbox.build_parallelism)
            failed_environments = set()
            for (instance_id,), ok in builds:
                if not ok:  # its trials cannot run; the results show the environment's outcome for them
                    failed_environments.add(instance_id)
                    progress(f"environment failed: {instance_id} (see its Dagster run); skipping its trials")
                    continue
                run.environments_prepared += 1
                progress(f"environment ready: {instance_id}")
            runnable = [
                (instance_id, trial) for instance_id, trial in pending if instance_id not in failed_environments
            ]
            for number, ((instance_id, trial_key), trial) in enumerate(parallel_map("run_trial", runnable), start=1):
                run.generation.add(trial.generation)
                run.evaluation.add(trial.evaluation)
                progress(
                    f"[{number}/{len(runnable)}] {instance_id} {trial_key}: {trial.outcome}"
                    f" (generation {trial.generation}, evaluation {trial.evaluation})"
                )
    finally:
        eval_pipeline.sandbox(campaign).release()  # pods are restarted on demand by the next run

    finished = executor.execute("results")
    if not finished.success:
        raise _failure(finished, f"campaign {campaign.name}: building results")
    run.report = finished.asset_value(executor.asset_key("report"))
    if campaign.gates:
        _release(executor)
    return run


def _release(executor: CampaignExecutor) -> None:
    """Run the release gates' checks (which read the report's decisions) and, when all pass, the release
    decision; a failed gate is a result, not an error, but a check that did not run is."""
    released = executor.execute(RELEASE_STAGE)
    if len(released.get_asset_check_evaluations()) != len(executor.campaign.gates):
        raise _failure(released, f"campaign {executor.campaign.name}: evaluating its release gates")
