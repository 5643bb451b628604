"""What the package relies on of Dagster's private names (eval_pipeline/defs/dagster_internals.py) and of the
form Dagster stores a check evaluation in (defs/verdicts.py): each test pins one behaviour its docstring names, so
that a Dagster upgrade which changes it fails here, not in a deployment."""

import os
import subprocess
import sys
import time
from pathlib import Path

from dagster import (
    AssetCheckEvaluation,
    AssetKey,
    AssetMaterialization,
    DagsterEvent,
    DagsterEventType,
    DagsterInstance,
    define_asset_job,
    deserialize_value,
    serialize_value,
)
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)
from dagster._core.events import StepMaterializationData
from dagster._core.events.log import EventLogEntry

from eval_pipeline.defs import verdicts
from eval_pipeline.defs.dagster_internals import (
    INDEX_SHARD_NAME,
    IO_TYPE_EXTENSION,
    ComputeIOType,
    DagsterSqliteStorage,
    LocalComputeLogManager,
    SqliteEventLogStorage,
    SqliteRunStorage,
    UnresolvedAssetJobDefinition,
    event_logs_directory,
    runs_directory,
    schedule_directory,
)

ASSET = AssetKey(["demo", "evaluation"])


def test_a_check_evaluation_names_its_materialization_in_the_form_the_event_log_stores():
    """defs/verdicts.py writes the pointer to the materialization a verdict is about into the evaluation's stored
    form: it must come back as the record Dagster's own constructor makes, stored byte for byte the same."""
    with DagsterInstance.ephemeral() as instance:
        instance.report_runless_asset_event(AssetMaterialization(ASSET, partition="row-1__t0"))
        [record] = instance.fetch_materializations(ASSET, limit=1).records
        fields = {"asset_key": ASSET, "check_name": verdicts.RESOLVED_CHECK, "passed": True, "partition": "row-1__t0"}
        about = verdicts._about_latest(AssetCheckEvaluation(**fields), instance, "row-1__t0")
    target = AssetCheckEvaluationTargetMaterializationData(
        storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp
    )
    assert about.target_materialization_data == target
    assert serialize_value(about) == serialize_value(AssetCheckEvaluation(**fields, target_materialization_data=target))
    assert deserialize_value(serialize_value(about), AssetCheckEvaluation) == about


def test_dagsters_sqlite_storage_keeps_its_databases_where_the_held_storage_opens_them(tmp_path):
    """orchestration/sqlite_storage.py opens a home's three databases at `runs_directory`,
    `event_logs_directory` (its index shard named INDEX_SHARD_NAME) and `schedule_directory`: where Dagster's
    own storage made them."""
    storage = DagsterSqliteStorage.from_config_value(None, {"base_dir": str(tmp_path)})
    run_id = "0" * 32
    store_materialization(storage.event_log_storage, run_id)
    storage.schedule_storage.all_instigator_state()
    storage.dispose()
    made = {path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*.db")}
    expected = {
        Path(runs_directory(str(tmp_path)), "runs.db"),
        Path(event_logs_directory(str(tmp_path)), f"{INDEX_SHARD_NAME}.db"),
        Path(event_logs_directory(str(tmp_path)), f"{run_id}.db"),
        Path(schedule_directory(str(tmp_path)), "schedules.db"),
    }
    assert made == {path.relative_to(tmp_path).as_posix() for path in expected}


class CountingEventLog(SqliteEventLogStorage):
    def __init__(self, base_dir: str) -> None:
        self.connected: list[str] = []
        self.initialised: list[str] = []
        super().__init__(base_dir)

    def _connect(self, shard):
        self.connected.append(shard)
        return super()._connect(shard)

    def _initdb(self, engine, for_index_shard=False):
        self.initialised.append(str(engine.url).rsplit("/", 1)[-1])
        return super()._initdb(engine, for_index_shard)


class CountingRuns(SqliteRunStorage):
    connections = 0

    def connect(self):
        CountingRuns.connections += 1
        return super().connect()


def store_materialization(storage, run_id: str) -> None:
    event = DagsterEvent(
        DagsterEventType.ASSET_MATERIALIZATION.value,
        "trials_job",
        event_specific_data=StepMaterializationData(AssetMaterialization(ASSET, partition="p")),
    )
    storage.store_event(EventLogEntry(None, 20, "", run_id, time.time(), dagster_event=event, job_name="trials_job"))


def test_dagsters_sqlite_storages_connect_only_through_the_methods_the_held_storage_overrides(tmp_path):
    """The held event log keeps its engines by overriding `_connect(shard)` (and makes a database with
    `_initdb(engine)`, remembered in `_initialized_dbs`, at `path_for_shard`); the held run storage overrides
    `connect()`. Dagster's writes and reads must go through them, or the held connections are bypassed."""
    run_id = "1" * 32
    events = CountingEventLog(str(tmp_path / "events"))
    store_materialization(events, run_id)
    assert events.get_latest_materialization_events([ASSET])[ASSET] is not None
    assert set(events.connected) == {run_id, INDEX_SHARD_NAME}
    assert set(events.initialised) == {f"{INDEX_SHARD_NAME}.db", f"{run_id}.db"}
    assert events._initialized_dbs == {INDEX_SHARD_NAME, run_id} and events._db_lock is not None
    assert Path(events.path_for_shard(run_id)) == tmp_path / "events" / f"{run_id}.db"
    assert events.conn_string_for_shard(run_id).endswith(events.path_for_shard(run_id))
    events.dispose()

    runs = CountingRuns.from_local(str(tmp_path / "runs"))
    before = CountingRuns.connections
    assert runs.get_runs() == [] and runs.has_run_stats_index_cols() in (True, False)
    assert CountingRuns.connections > before
    runs.dispose()


CAPTURE = """
import os, sys
from eval_pipeline.orchestration.compute_logs import FileComputeLogManager
manager = FileComputeLogManager(base_dir=sys.argv[1])
with manager.capture_logs(["run", "step"]):
    print("from python", flush=True)
    os.system("echo from a subprocess; echo to stderr >&2")
print("after the capture", flush=True)
"""


def test_a_capture_writes_dagsters_files_where_its_manager_reads_them_and_nothing_to_the_terminal(tmp_path):
    """orchestration/compute_logs.py captures with `redirect_to_file` (the process's descriptors, its
    subprocesses' output included) into `get_captured_local_path(key, IO_TYPE_EXTENSION[...])` and marks the
    capture complete at `complete_artifact_path`: Dagster's own manager, which the UI uses, reads it there.
    Nothing of the capture reaches the terminal (Dagster's `capture_logs` would mirror it there)."""
    terminal = subprocess.run(
        [sys.executable, "-c", CAPTURE, str(tmp_path)], capture_output=True, text=True, check=True, timeout=120
    )
    assert (terminal.stdout, "to stderr" in terminal.stderr) == ("after the capture\n", False)
    manager = LocalComputeLogManager(str(tmp_path))
    assert manager.is_capture_complete(["run", "step"])
    log = manager.get_log_data(["run", "step"])
    assert (log.stdout, log.stderr) == (b"from python\nfrom a subprocess\n", b"to stderr\n")
    assert {IO_TYPE_EXTENSION[ComputeIOType.STDOUT], IO_TYPE_EXTENSION[ComputeIOType.STDERR]} == {"out", "err"}
    assert os.path.exists(manager.get_captured_local_path(["run", "step"], "out"))


def test_define_asset_job_returns_the_type_the_automation_names():
    """defs/automation.py types the jobs its schedule and sensors take as what `define_asset_job` returns."""
    assert isinstance(define_asset_job("trials"), UnresolvedAssetJobDefinition)


def test_the_code_location_loads_neither_this_module_nor_dagsters_sqlite_storage():
    """The internals load Dagster's SQLite storage (0.4 s), which a code location on PostgreSQL never needs: the
    definitions import them for types only (defs/automation.py) or not at all (defs/verdicts.py)."""
    code = (
        "import sys, eval_pipeline.definitions\n"
        "print(sorted(m for m in ('eval_pipeline.defs.dagster_internals', 'dagster._core.storage.sqlite_storage')"
        " if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout == "[]\n"
