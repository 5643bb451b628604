"""The embedded default's run workers: processes that each open the Dagster instance and build the definitions once,
then execute run after run (`launchers.WorkerPoolLauncher` hands them the runs).

The command's workers are forked from it once it has imported what a run needs (`embedded_run_workers`):
Dagster, the definitions, the instance's storage and the campaign's sandbox backend, about 1.5 s of CPU that
each of them would otherwise spend again, on the same cores, while the command and the first runs wait for them
(5 workers at concurrency 4 on 2 cores: 10 s of CPU). Only from a process that has opened no instance and runs
no other thread: a fork would share what is open (database connections, the artifact store's and the engine's
clients, cached per process) and a lock another thread held. Otherwise (calibrate's second multiplier, a
launcher that opened its instance, a test under pytest-xdist) the workers are spawned.
"""

import ctypes
import fcntl
import gc
import hashlib
import importlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval_pipeline.common.settings import Paths, dagster_home
from eval_pipeline.config.campaign import Campaign

if TYPE_CHECKING:
    from dagster import DagsterInstance, Definitions, RunRequest

__all__ = [
    "DAGSTER_URL_VARIABLE",
    "QUIET_RUN_CONFIG",
    "embedded_run_workers",
    "environment_lanes",
    "execute_in_worker",
    "execute_request",
    "hold_connections",
    "open_dagster_instance",
    "start_run_workers",
    "stop_run_workers",
]

# Set, the command's runs are launched through this Dagster server, and it starts no workers (launchers.py).
DAGSTER_URL_VARIABLE = "EVAL_PIPELINE_DAGSTER_URL"
# In-process runs log to the Dagster instance (the UI shows everything); the console shows only what breaks
# Dagster itself.
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
PR_SET_PDEATHSIG = 1  # prctl(2)
# Longer than a database connection's own timeouts: a process opening the Dagster instance is then stuck, not slow.
INSTANCE_LOCK_TIMEOUT_S = 300.0
# Left in DAGSTER_HOME by the first process that opened its instance: the digest of the dagster.yaml it used.
OPENED_MARK = ".eval-pipeline-opened"

_definitions: "Definitions | None" = None
_dagster_instance: "DagsterInstance | None" = None
# Whether this process has opened a Dagster instance (`open_dagster_instance`): it then forks no workers.
_opened_a_dagster_instance = False


def environment_lanes(campaign: Campaign) -> int:
    """Runs preparing environments that may run besides `capacity` others: one for a campaign in containers,
    whose environments (an image, a pod) take seconds each, so that the next instance's is prepared while
    trials run rather than after them; none on the local backend, whose prepared environments are shared
    directories and whose builds compete with its trials for the same cores."""
    return 0 if campaign.sandbox.backend == "local" else 1


def embedded_run_workers(campaign: Campaign, paths: Paths, capacity: int) -> ProcessPoolExecutor | None:
    """The command's run workers, forked now from the command, with what a run needs imported (module
    docstring): none when its runs go to a Dagster server or run in the command itself, one at a time. Called
    before the command opens its Dagster instance or starts a thread."""
    if os.environ.get(DAGSTER_URL_VARIABLE) or capacity + environment_lanes(campaign) <= 1:
        return None
    if _opened_a_dagster_instance or threading.active_count() > 1:  # nothing may be open or held when forking
        return start_run_workers(campaign, paths, capacity)
    _import_what_a_run_needs(campaign)
    gc.freeze()  # the workers' collections then leave the imported objects' pages alone (still shared)
    return start_run_workers(campaign, paths, capacity, start_method="fork")


def start_run_workers(
    campaign: Campaign, paths: Paths, capacity: int, instance_ref: Any = None, start_method: str = "spawn"
) -> ProcessPoolExecutor:
    """`capacity` workers and the campaign's `environment_lanes` on the instance of `instance_ref`
    (DAGSTER_HOME's when None), every one started now. A spawning pool starts a worker per task submitted while
    none is idle, so the second would otherwise start when the first trials are launched, and spend their first
    seconds importing (and not deaf to Ctrl-C: `_started_deaf_to_ctrl_c`)."""
    workers = capacity + environment_lanes(campaign)
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context(start_method),
        initializer=_start_worker,
        initargs=(campaign, str(paths.data_dir), instance_ref),
    )
    with _started_deaf_to_ctrl_c():
        for _ in range(workers):
            pool.submit(_started)
    return pool


def stop_run_workers(pool: ProcessPoolExecutor) -> None:
    """Kill every worker (SIGKILL, which Dagster's handlers cannot turn into a traceback) and wait for the pool
    to wind down. All of them or none: an idle worker waits on the pool's call queue holding its read lock, so
    killing only some would leave the others waiting forever. A worker still starting (importing Dagster,
    opening the Dagster instance) is killed too, rather than waited on for seconds."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.kill()
    pool.shutdown(wait=True, cancel_futures=True)


def open_dagster_instance(instance_ref: Any = None) -> "DagsterInstance":
    """The instance of `instance_ref`, or DAGSTER_HOME's, opened by one process of the command at a time until
    it has been opened once. The command and its workers open it at once, and on a fresh home each would create
    its databases, racing on alembic's version stamp inside Dagster's own storage ("more than one head
    present"), which killed workers; one at a time, the first creates them and the others find them. Once they
    exist, processes open it side by side: taking turns cost the command 0.6 s and its second worker 1.1 s of
    waiting on every start. `_opened_before` says when they exist."""
    from dagster import DagsterInstance

    global _opened_a_dagster_instance
    _opened_a_dagster_instance = True
    if instance_ref is not None:  # an instance that whoever made the ref has opened: its databases exist
        return DagsterInstance.from_ref(instance_ref)
    home = dagster_home()
    if _opened_before(home):
        return DagsterInstance.get()
    path = home / ".eval-pipeline-instance.lock"
    with open(path, "a") as lock:
        deadline = time.monotonic() + INSTANCE_LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the file is closed
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"another process has been opening the Dagster instance for {INSTANCE_LOCK_TIMEOUT_S:.0f} s"
                        f" (it holds {path}): its database may not answer"
                    ) from None
                time.sleep(0.05)
        dagster_instance = DagsterInstance.get()
        if all(database.exists() for database in _sqlite_databases(home)):
            mark = home / OPENED_MARK
            partial = mark.with_name(f"{mark.name}.{os.getpid()}.tmp")
            partial.write_text(_settings_digest(home))
            os.replace(partial, mark)
        return dagster_instance


def _opened_before(home: Path) -> bool:
    """Whether the home's SQLite databases exist, made by an instance opened with the same dagster.yaml: the mark
    a first opening left names its settings, so that a home moved to PostgreSQL (its old SQLite files still
    there) or a user's dagster.yaml takes turns again, as does a home whose databases were removed."""
    mark = home / OPENED_MARK
    try:
        opened_with = mark.read_text()
    except FileNotFoundError:
        return False
    return opened_with == _settings_digest(home) and all(database.exists() for database in _sqlite_databases(home))


def _sqlite_databases(home: Path) -> list[Path]:
    """The databases Dagster's SQLite storage keeps under `home` (the embedded default's places)."""
    return [home / "history" / "runs.db", home / "history" / "runs" / "index.db", home / "schedules" / "schedules.db"]


def _settings_digest(home: Path) -> str:
    settings = home / "dagster.yaml"
    return hashlib.sha256(settings.read_bytes() if settings.exists() else b"").hexdigest()


def hold_connections(dagster_instance: "DagsterInstance") -> None:
    """Keep a database connection open across this process's many queries, as Dagster's webserver does.
    Dagster's PostgreSQL storage otherwise connects anew for every query (the server forks a backend for each):
    replaying a campaign's runs on PostgreSQL, a writer connecting per query managed 8.8 trials a second and
    one holding a connection 21 (benchmarks/control_plane.py). SQLite storage ignores this, and a storage that
    holds its connections already (the production storage eval-pipeline configures,
    orchestration/postgres_storage.py: one for the process) is left as it is."""
    from sqlalchemy.pool import NullPool

    engine = getattr(dagster_instance.run_storage, "_engine", None)
    if engine is None or isinstance(engine.pool, NullPool):
        dagster_instance.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=4)


def execute_request(
    definitions: "Definitions",
    dagster_instance: "DagsterInstance",
    request: "RunRequest",
    run_config: Mapping[str, Any] | None,
) -> str:
    """Execute the requested run in this process; its id (a failed run is a result: it is not raised)."""
    if request.job_name is None:
        raise ValueError(f"a run request without its job's name (partition {request.partition_key})")
    job = definitions.resolve_job_def(request.job_name)
    result = job.execute_in_process(
        instance=dagster_instance,
        partition_key=request.partition_key,
        tags=dict(request.tags),
        run_config={**QUIET_RUN_CONFIG, **(run_config or {})},
        raise_on_error=False,
    )
    return result.run_id


def execute_in_worker(request: "RunRequest", run_config: Mapping[str, Any] | None) -> str:
    """What a launcher submits to a worker: the run, on the worker's definitions and instance."""
    assert _definitions is not None and _dagster_instance is not None
    return execute_request(_definitions, _dagster_instance, request, run_config)


@contextmanager
def _started_deaf_to_ctrl_c() -> Iterator[None]:
    """Workers started within (`submit` starts them, `start_run_workers` all at once) inherit SIGINT ignored, which Python keeps: a Ctrl-C
    that lands while a worker is still importing, before it could leave the terminal's process group, would
    otherwise print that import's traceback. The command stops its workers itself. A Ctrl-C within these
    few milliseconds of spawning is lost; pressing it again stops the command."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _start_worker(campaign: Campaign, data_dir: str, instance_ref: Any) -> None:
    """Each worker builds the definitions once and opens the Dagster instance, holding its connections."""
    global _definitions, _dagster_instance
    _leave_the_terminal_to_the_parent()
    from dagster import BetaWarning

    from eval_pipeline.defs.location import build_definitions

    warnings.filterwarnings("ignore", category=BetaWarning)
    _definitions = build_definitions([campaign], Paths(Path(data_dir)))
    _dagster_instance = open_dagster_instance(instance_ref)
    hold_connections(_dagster_instance)


def _import_what_a_run_needs(campaign: Campaign) -> None:
    """Dagster, the definitions, the campaign's sandbox backend and the modules the instance's settings name
    (its storage, its compute logs): what a worker's first run would otherwise import; and a container
    backend's runtime identity, which each worker's first trial would otherwise work out."""
    import yaml

    from eval_pipeline.defs import location  # noqa: F401 - imports Dagster and every asset's module
    from eval_pipeline.sandbox import BACKENDS

    modules = [BACKENDS[campaign.sandbox.backend].partition(":")[0]]
    settings = dagster_home() / "dagster.yaml"
    if settings.exists():
        modules += _modules_named(yaml.safe_load(settings.read_text()))
    for module in modules:
        # A name Dagster resolves itself (`dagster.core…`), or a broken one, is left to the worker to say.
        with suppress(ImportError):
            importlib.import_module(module)
    if campaign.sandbox.backend != "local":
        from eval_pipeline.sandbox.tool_runtime import runtime_identity

        runtime_identity()  # names the tool volume or image: read from the installed metadata once, not per worker


def _modules_named(settings: Any) -> list[str]:
    """The `module:` values anywhere in Dagster instance settings (each storage or manager is a module and a class)."""
    if isinstance(settings, dict):
        named = [settings["module"]] if isinstance(settings.get("module"), str) else []
        return named + [module for value in settings.values() for module in _modules_named(value)]
    return []


def _started() -> None:
    """A task that only makes the pool start a worker (its initializer does the work)."""


def _leave_the_terminal_to_the_parent() -> None:
    """Ctrl-C is the command's to handle (it stops its workers and says how to resume): a worker leaves the
    terminal's process group, so that neither it nor the processes of the run it executes are interrupted
    mid-step, and it dies with the command (Linux), so that a killed command leaves no worker running."""
    os.setpgrp()
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the command died before the line above
            os._exit(1)
