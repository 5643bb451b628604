"""Dagster's SQLite storage, with the event log's database connections held rather than opened per write.

Dagster's `SqliteEventLogStorage` creates an engine, connects, writes and disposes of the engine for every
event, and twice for an asset event (the run's database, then the index). A trial writes three asset events
(its generation, its evaluation, its `resolved` check) and a run about twenty more, so on the embedded default
this opening and closing is most of what Dagster costs a trial: 14 ms an event, against 4 ms with the
engine kept (a micro-benchmark of 150 materializations, docs/SCALE.md).

`HeldSqliteStorage` is Dagster's `DagsterSqliteStorage` with the same files in the same places (an existing
DAGSTER_HOME reads the same), whose event log keeps one engine per database file: the index and the most
recent runs'. A held SQLite connection holds no lock between transactions, so other processes (run workers,
the daemon, the webserver) read and write the same files as before. PostgreSQL deployments do not use it:
their connections are the database server's to limit (docs/SCALE.md).

Two more costs of Dagster's per run and per event are cut here. Dagster makes a run's database with
`_initdb`, which loads alembic's revision scripts to learn the schema's revision, in the process creating the
run and again in the worker executing it (a fifth of a run worker's Dagster time in a profile of 72 trials);
here it is a copy of a template `_initdb` made once per home. And the held connections commit with SQLite's
`synchronous=NORMAL`, the setting SQLite recommends with the write-ahead log Dagster's event log uses.

Dagster also asks the schema before its queries: whether the index has a table (before every dynamic partition
query, concurrency claim and tagged event) and whether the runs table has its statistics columns (before every
run query and run event), each on an engine and connection made for the question. Both are asked until the
answer is yes, then remembered, and the run storage keeps one engine too (`HeldSqliteRunStorage`): together
about 1.1 s of the 14 s of Python a py-spy profile of the Harbor comparison's 8 trials sampled. Last, a home's
databases that exist at a revision are opened as they are (`_stamped`), where Dagster's `from_local` and
`_initdb` load alembic's revision scripts to learn a head they then leave alone: three databases in each of the
command's processes, all starting at once.

Dagster exports none of the storages extended here: the names come from defs/dagster_internals.py, which says
what is relied on of each.
"""

import os
import sqlite3
import tempfile
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from eval_pipeline.defs.dagster_internals import (
    INDEX_SHARD_NAME,
    SQLITE_BUSY_TIMEOUT_SECONDS,
    DagsterSqliteStorage,
    SqliteEventLogStorage,
    SqliteRunStorage,
    SqliteScheduleStorage,
    event_logs_directory,
    runs_directory,
    schedule_directory,
)

__all__ = ["HeldSqliteEventLogStorage", "HeldSqliteRunStorage", "HeldSqliteStorage"]

# Run databases whose engines stay open besides the index's: the runs this process is writing, and a few more.
HELD_RUN_DATABASES = 8


def _commit_without_waiting_for_the_disk(connection: Any, _record: Any) -> None:
    """SQLite's `synchronous=NORMAL`, its recommended setting with the write-ahead log Dagster's event log uses:
    a commit appends to the log without waiting for the disk, which is synced at checkpoints instead. A crashed
    process loses nothing and the database stays consistent; a power failure may lose the last transactions,
    which the artifact store (the truth the pending scan trusts) does not depend on."""
    connection.execute("PRAGMA synchronous=NORMAL")


def _linked_into_place(content: bytes, path: Path) -> bool:
    """Whether `content` is now at `path`, written beside it and hard-linked there, so that no process sees it
    half written; False when another file got there first or the file system has no hard links."""
    descriptor, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(content)
        os.link(partial, path)
        return True
    except OSError:  # FileExistsError: another process's, made the same way
        return False
    finally:
        os.unlink(partial)


def _stamped(database: Path, table: str) -> bool:
    """Whether `database` exists holding `table` and an alembic revision: Dagster's `from_local` and `_initdb`
    then leave it as it is, after loading alembic's hundred-odd revision scripts to learn the head (0.06 s
    quiet, and three databases in each of the command's processes as they start at once). Opened without
    creating it; any doubt (a database being made, locked past the busy timeout) is left to Dagster's way."""
    if not database.exists():
        return False
    try:
        uri = f"{database.resolve().as_uri()}?mode=rw"  # a name holding ? or # is quoted, never read as options
        connection = sqlite3.connect(uri, uri=True, timeout=SQLITE_BUSY_TIMEOUT_SECONDS)
        try:
            revision = connection.execute("SELECT version_num FROM alembic_version").fetchone()
            found = connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
            return bool(revision and revision[0] and found.fetchone())
        finally:
            connection.close()
    except sqlite3.Error:
        return False


def _conn_string(base_dir: str, name: str) -> str:
    """Where Dagster's `from_local` keeps the database `name` under `base_dir`."""
    return f"sqlite:///{os.path.abspath(base_dir)}/{name}.db"


def _schema_only(content: bytes) -> tuple[bytes, str] | None:
    """The template and its revision, if it holds Dagster's schema alone: tables and their indexes, no row but
    alembic's revision."""
    with tempfile.NamedTemporaryFile(suffix=".db") as copy:
        copy.write(content)
        copy.flush()
        engine = create_engine(f"sqlite:///{copy.name}", poolclass=NullPool)
        try:
            with engine.connect() as connection:
                kinds = connection.execute(text("SELECT DISTINCT type FROM sqlite_master")).scalars().all()
                tables = connection.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'")).scalars()
                rows = sum(
                    connection.execute(text(f'SELECT count(*) FROM "{table}"')).scalar_one()
                    for table in tables.all()
                    if table != "alembic_version" and not table.startswith("sqlite_")
                )
                revision = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except OperationalError:
            return None
        finally:
            engine.dispose()
    return (content, revision) if set(kinds) <= {"table", "index"} and rows == 0 and revision else None


class HeldSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's SQLite event log, one engine per database file (one connection kept open) rather than one per query."""

    def __init__(self, base_dir: str, inst_data: Any = None) -> None:
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._run_template: tuple[bytes, str] | tuple[()] | None = None  # (): none usable
        self._tables: set[str] = set()  # tables the index is known to have
        super().__init__(base_dir, inst_data)

    def has_table(self, table_name: str) -> bool:
        """Whether the index has the table, asked until it has: Dagster asks before every dynamic partition query,
        concurrency claim and tagged asset event, each time on an engine and connection of its own. No process
        drops one (a migration adds tables, a wipe deletes rows)."""
        if table_name not in self._tables and super().has_table(table_name):
            self._tables.add(table_name)
        return table_name in self._tables

    def _engine(self, shard: str) -> Engine:
        """The shard's engine, created (and its database initialised) on first use; the least recently used run
        database's engine is closed past HELD_RUN_DATABASES."""
        engine = self._engines.pop(shard, None)
        if engine is None:
            engine = create_engine(
                self.conn_string_for_shard(shard),
                pool_size=1,
                max_overflow=4,  # Dagster opens more than one while it creates a database (_initdb)
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
            )
            event.listen(engine, "connect", _commit_without_waiting_for_the_disk)
            if shard not in self._initialized_dbs:
                if shard == INDEX_SHARD_NAME:
                    ready = _stamped(Path(self.path_for_shard(shard)), "event_logs")
                else:
                    ready = self._run_database_from_template(shard, engine)
                if not ready:
                    self._initdb(engine)
                self._initialized_dbs.add(shard)
        self._engines[shard] = engine
        runs = [name for name in self._engines if name != INDEX_SHARD_NAME]
        for name in runs[: max(0, len(runs) - HELD_RUN_DATABASES)]:
            self._engines.pop(name).dispose()
        return engine

    def _run_database_from_template(self, shard: str, engine: Engine) -> bool:
        """Whether the run's database is at the schema's current revision without Dagster's `_initdb`, which
        loads alembic's hundred-odd revision scripts to learn it: 0.06 s quiet, about 0.3 s a run on a busy
        worker, paid by the process creating the run and again by the worker executing it. A new run's
        database is a copy of a template `_initdb` itself made (`_template`), linked into place so that no
        process ever sees it half written; one another process created is accepted if it is at the
        template's revision. Otherwise (a database being created by Dagster's own storage, a file system
        without hard links, a template that is not what `_initdb` makes), `_initdb`."""
        template = self._template()
        if template is None:
            return False
        content, revision = template
        path = Path(self.path_for_shard(shard))
        if not path.exists() and _linked_into_place(content, path):
            return True
        try:
            with engine.connect() as connection:
                found = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except OperationalError:  # no alembic_version table yet
            return False
        return found == revision

    def _template(self) -> tuple[bytes, str] | None:
        """An empty run database as Dagster's `_initdb` makes it, and its alembic revision: made once per
        DAGSTER_HOME and Dagster version (a file beside the run databases, not named *.db, which Dagster would
        take for a run's), read once per process, and used only while it holds nothing but the schema (no row
        but its revision, no trigger or view: what a process that can write the home might have added)."""
        if self._run_template is None:
            path = Path(self._base_dir) / f".run-template-dagster-{dagster.__version__}.sqlite"
            if not path.exists():
                with tempfile.TemporaryDirectory(dir=self._base_dir) as scratch:
                    engine = create_engine(f"sqlite:///{scratch}/template.db", poolclass=NullPool)
                    self._initdb(engine)
                    engine.dispose()
                    _linked_into_place((Path(scratch) / "template.db").read_bytes(), path)
            self._run_template = _schema_only(path.read_bytes()) or ()
        return self._run_template or None

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        # Dagster's lock: one connection of this storage at a time, so one pooled connection per file suffices.
        with self._db_lock, self._engine(shard).connect() as connection, connection.begin():
            yield connection

    def _close_engines(self) -> None:
        with self._db_lock:
            while self._engines:
                self._engines.popitem()[1].dispose()

    def wipe(self) -> None:
        self._close_engines()  # before the run databases' files are removed
        super().wipe()

    def dispose(self) -> None:
        self._close_engines()
        super().dispose()


class HeldSqliteRunStorage(SqliteRunStorage):
    """Dagster's SQLite run storage on one engine kept for the process, which Dagster's makes anew (and a
    connection with it) for every query; whether the runs table has its statistics columns, which Dagster asks
    before every run query and every run event, is asked until it has them (a migration adds them, no
    process removes them)."""

    def __init__(self, conn_string: str, inst_data: Any = None) -> None:
        super().__init__(conn_string, inst_data)
        # One connection kept; more at once (the webserver's threads) are opened and closed, as Dagster's were.
        self._engine = create_engine(
            conn_string, pool_size=1, max_overflow=-1, connect_args={"check_same_thread": False}
        )
        self._has_run_stats_columns = False

    @classmethod
    def from_local(cls, base_dir: str, inst_data: Any = None) -> "HeldSqliteRunStorage":
        """Dagster's, but without its alembic check for a database already made (`_stamped`)."""
        if _stamped(Path(base_dir) / "runs.db", "instance_info"):
            return cls(_conn_string(base_dir, "runs"), inst_data)
        return super().from_local(base_dir, inst_data)

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with self._engine.connect() as connection, connection.begin():
            yield connection

    def has_run_stats_index_cols(self) -> bool:
        self._has_run_stats_columns = self._has_run_stats_columns or super().has_run_stats_index_cols()
        return self._has_run_stats_columns

    def dispose(self) -> None:
        self._engine.dispose()
        super().dispose()


def _schedule_storage(base_dir: str) -> SqliteScheduleStorage:
    """Dagster's `from_local`, but without its alembic check for a database already made (`_stamped`)."""
    if _stamped(Path(base_dir) / "schedules.db", "job_ticks"):
        return SqliteScheduleStorage(_conn_string(base_dir, "schedules"))
    return SqliteScheduleStorage.from_local(base_dir)


class HeldSqliteStorage(DagsterSqliteStorage):
    """`DagsterSqliteStorage` (the same directories under `base_dir`) with the held event log and run storage."""

    def __init__(self, base_dir: str, inst_data: Any = None) -> None:
        self.base_dir = base_dir
        self._run_storage = HeldSqliteRunStorage.from_local(runs_directory(base_dir))
        self._event_log_storage = HeldSqliteEventLogStorage(event_logs_directory(base_dir))
        self._schedule_storage = _schedule_storage(schedule_directory(base_dir))
        self._inst_data = inst_data
        super(DagsterSqliteStorage, self).__init__()  # DagsterStorage's: the storages are set above

    @classmethod
    def from_config_value(  # ty: ignore[invalid-method-override]
        cls, inst_data: Any, config_value: Mapping[str, Any]
    ) -> "HeldSqliteStorage":
        Path(config_value["base_dir"]).mkdir(parents=True, exist_ok=True)
        return cls(config_value["base_dir"], inst_data=inst_data)
