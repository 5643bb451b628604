"""Every name the package takes from Dagster's private modules (`dagster._...`), and nowhere else: Dagster 1.13
exports none of them. pyproject pins Dagster to 1.13; eval_pipeline_tests/defs/test_dagster_internals.py pins the
behaviour relied on below, so that an upgrade which changes it fails a test, not a deployment.

The held SQLite storage of the embedded default (orchestration/sqlite_storage.py) extends Dagster's:

- `DagsterSqliteStorage`, `SqliteEventLogStorage`, `SqliteRunStorage`, `SqliteScheduleStorage`: the storages it
  subclasses. Relied on: the event log opens every connection through `_connect(shard)` under `_db_lock`, makes
  a database with `_initdb(engine)` and remembers it in `_initialized_dbs`, asks `has_table` before its queries,
  and places a shard at `path_for_shard` / `conn_string_for_shard`; the run storage connects through `connect()`
  and asks `has_run_stats_index_cols()`; each has `from_local(base_dir)`. Public replacement: a storage setting
  for held connections (Dagster has none for SQLite; for PostgreSQL, a pooler such as PgBouncer in front of the
  server does it without a subclass).
- `_runs_directory`, `_event_logs_directory`, `_schedule_directory`: where Dagster's SQLite storage keeps its
  three databases under its `base_dir`, so that a home Dagster's own storage wrote reads the same. Public
  replacement: the same constructor taking the storages to use.
- `INDEX_SHARD_NAME`: the name of the event log's index database (`index`); `SQLITE_BUSY_TIMEOUT_SECONDS`: how
  long Dagster's SQLite connections wait on a lock. Public replacement: exported constants.

The compute log manager (orchestration/compute_logs.py) captures a run's output to Dagster's files without the
copy to the terminal:

- `LocalComputeLogManager`: the manager it subclasses; relied on: `get_captured_local_path(log_key, extension)`
  and `complete_artifact_path(log_key)` say where a capture's files are (the UI reads them there), and
  `capture_logs(log_key)` is the one method that mirrors output to the terminal. `CapturedLogContext`: what
  `capture_logs` yields. `ComputeIOType` and `IO_TYPE_EXTENSION`: the files' extensions (`out`, `err`).
  Public replacement: a setting of LocalComputeLogManager that leaves out the copy to the terminal.
- `redirect_to_file(stream, path)`: the process's file descriptor of `stream` appended to `path` for the
  duration (what its subprocesses print included), without the `tail -F` Dagster's capture adds. Public
  replacement: the same setting.

A campaign's automation (defs/automation.py) names, as a type only, what a public function returns:

- `UnresolvedAssetJobDefinition`: what `define_asset_job` returns and `schedule`, `sensor` and
  `run_failure_sensor` take. Public replacement: an exported type.

One private use imports nothing from here: orchestration/postgres_storage.py, which extends dagster-postgres's
exported storages, replaces the `_engine` each of them keeps by one pooled engine they share (what
eval_pipeline_tests/orchestration/test_postgres_storage.py measures). Public replacement: a connection pooler such as PgBouncer
in front of the server.

This module loads Dagster's SQLite storage (0.4 s), so the code location never imports it: the verdicts
(defs/verdicts.py) name the materialization a check evaluation is about through Dagster's public serializer.
"""

from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition
from dagster._core.execution.compute_logs import redirect_to_file
from dagster._core.storage.compute_log_manager import CapturedLogContext, ComputeIOType
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    INDEX_SHARD_NAME,
    SQLITE_BUSY_TIMEOUT_SECONDS,
    SqliteEventLogStorage,
)
from dagster._core.storage.local_compute_log_manager import IO_TYPE_EXTENSION, LocalComputeLogManager
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sqlite_storage import (
    DagsterSqliteStorage,
    _event_logs_directory,
    _runs_directory,
    _schedule_directory,
)

__all__ = [
    "INDEX_SHARD_NAME",
    "IO_TYPE_EXTENSION",
    "SQLITE_BUSY_TIMEOUT_SECONDS",
    "CapturedLogContext",
    "ComputeIOType",
    "DagsterSqliteStorage",
    "LocalComputeLogManager",
    "SqliteEventLogStorage",
    "SqliteRunStorage",
    "SqliteScheduleStorage",
    "UnresolvedAssetJobDefinition",
    "event_logs_directory",
    "redirect_to_file",
    "runs_directory",
    "schedule_directory",
]

runs_directory = _runs_directory
event_logs_directory = _event_logs_directory
schedule_directory = _schedule_directory
