"""The embedded default's SQLite storage with held connections: Dagster's files, read and written by several
processes at once, with a bounded number of open databases."""

import fcntl
import multiprocessing
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from dagster import (
    DagsterInstance,
    DagsterRunStatus,
    JobDefinition,
    job,
    op,
)
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.runs import SqliteRunStorage

from eval_pipeline.common.settings import Deployment
from eval_pipeline.orchestration import run_workers
from eval_pipeline.orchestration.instance_config import ensure_instance_config
from eval_pipeline.orchestration.run_workers import open_dagster_instance
from eval_pipeline.orchestration.sqlite_storage import (
    HELD_RUN_DATABASES,
    HeldSqliteEventLogStorage,
    HeldSqliteRunStorage,
)
from eval_pipeline_tests.support.dagster_storage import (
    materialized_partitions,
    store_materializations,
    store_materializations_in,
)


def _write_in_a_process(home: str, run_id: str, partitions: list[str]) -> None:
    os.environ["DAGSTER_HOME"] = home
    with DagsterInstance.get() as instance:
        store_materializations(instance, run_id, partitions)


def test_a_home_that_dagsters_own_storage_wrote_reads_the_same_with_held_connections(tmp_path):
    """An existing DAGSTER_HOME (written by Dagster's default SQLite storage) keeps its history when the
    eval-pipeline command first writes its dagster.yaml there: the same files in the same places."""
    with DagsterInstance.from_config(str(tmp_path)) as dagster_default:
        assert type(dagster_default.event_log_storage).__name__ == "SqliteEventLogStorage"
        store_materializations(dagster_default, "run-before", ["a|s0", "b|s0"])
    ensure_instance_config(tmp_path, Deployment())
    with DagsterInstance.from_config(str(tmp_path)) as held:
        assert isinstance(held.event_log_storage, HeldSqliteEventLogStorage)
        assert materialized_partitions(held) == ["a|s0", "b|s0"]
        store_materializations(held, "run-after", ["c|s0"])
        assert [entry.run_id for entry in held.all_logs("run-before")] == ["run-before"] * 2
    assert (tmp_path / "history" / "runs" / "run-after.db").exists()
    with DagsterInstance.from_config(str(tmp_path)) as reread:
        assert materialized_partitions(reread) == ["a|s0", "b|s0", "c|s0"]


def _open_in_a_process(home: str) -> None:
    os.environ["DAGSTER_HOME"] = home
    with open_dagster_instance() as instance:
        store_materializations(instance, f"run-{os.getpid()}", [f"p{os.getpid()}|s0"])


def test_the_command_and_its_workers_opening_a_fresh_home_at_once_all_come_up(tmp_path):
    """The command starts its run workers before it opens the instance itself, so on a fresh home five processes
    may create its databases at once. Dagster's own storage races there (alembic's stamp: "more than one head
    present"; 11 of 25 such processes died here); `open_dagster_instance` lets one create them at a time."""
    ensure_instance_config(tmp_path, Deployment())
    openers = [
        multiprocessing.get_context("spawn").Process(target=_open_in_a_process, args=(str(tmp_path),)) for _ in range(5)
    ]
    for opener in openers:
        opener.start()
    for opener in openers:
        opener.join(timeout=300)
    assert [opener.exitcode for opener in openers] == [0] * 5
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert len(materialized_partitions(instance)) == 5


def test_a_process_stuck_opening_the_instance_is_reported_not_waited_on_forever(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setattr(run_workers, "INSTANCE_LOCK_TIMEOUT_S", 0.3)
    lock = tmp_path / ".eval-pipeline-instance.lock"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process of the command, stuck opening it
        with pytest.raises(TimeoutError, match=f"holds {lock}"):
            open_dagster_instance()


def test_a_home_opened_once_is_opened_side_by_side_and_a_changed_one_in_turns_again(tmp_path, monkeypatch):
    """Taking turns is for creating the databases: once they exist, a process opens the instance while another
    holds the lock (here, one stuck). With a database removed, or the home's settings changed (as when it moves
    to PostgreSQL, its SQLite files left behind), processes take turns again."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setattr(run_workers, "INSTANCE_LOCK_TIMEOUT_S", 0.3)
    ensure_instance_config(tmp_path, Deployment())
    open_dagster_instance().dispose()
    with open(tmp_path / ".eval-pipeline-instance.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with open_dagster_instance() as instance:
            store_materializations(instance, "run-side-by-side", ["a|s0"])
        settings = (tmp_path / "dagster.yaml").read_text()
        (tmp_path / "dagster.yaml").write_text(settings + "# changed\n")
        with pytest.raises(TimeoutError):
            open_dagster_instance()
        (tmp_path / "dagster.yaml").write_text(settings)
        shutil.move(tmp_path / "schedules" / "schedules.db", tmp_path / "schedules.db.moved")
        with pytest.raises(TimeoutError):
            open_dagster_instance()


def test_processes_writing_one_home_at_once_lose_no_event(tmp_path):
    """Run workers, the CLI and a daemon hold connections to the same index database: each write still lands.
    The home is created first (by one process at a time, as the CLI and its workers open it: the test above)."""
    ensure_instance_config(tmp_path, Deployment())
    DagsterInstance.from_config(str(tmp_path)).dispose()
    writers = [
        multiprocessing.get_context("spawn").Process(
            target=_write_in_a_process, args=(str(tmp_path), f"run-{n}", [f"i{n}|s{k}" for k in range(40)])
        )
        for n in range(3)
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=300)
        assert writer.exitcode == 0
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert materialized_partitions(instance) == sorted(f"i{n}|s{k}" for n in range(3) for k in range(40))


def test_the_databases_held_open_are_bounded_and_a_wipe_closes_them(tmp_path):
    ensure_instance_config(tmp_path, Deployment())
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        storage = instance.event_log_storage
        assert isinstance(storage, HeldSqliteEventLogStorage)
        for n in range(HELD_RUN_DATABASES + 5):
            store_materializations(instance, f"run-{n}", [f"x|s{n}"])
        held = set(storage._engines)
        assert held == {"index"} | {f"run-{n}" for n in range(5, HELD_RUN_DATABASES + 5)}
        assert len(materialized_partitions(instance)) == HELD_RUN_DATABASES + 5
        instance.wipe()
        assert not list(Path(tmp_path, "history", "runs").glob("run-*.db"))
        store_materializations(instance, "run-new", ["y|s0"])
        assert materialized_partitions(instance) == ["y|s0"]


def _schema(database: Path) -> list[tuple]:
    with sqlite3.connect(database) as connection:
        tables = connection.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        return [*tables, *connection.execute("SELECT version_num FROM alembic_version").fetchall()]


def test_a_new_runs_database_is_a_copy_of_dagsters_own_made_once(tmp_path, monkeypatch):
    """A run's database is copied from a template Dagster's `_initdb` made once for the home, rather than made by
    `_initdb` per run and process (alembic's revision scripts loaded each time): the same schema at the same
    revision, which Dagster's own storage reads; one being made by another process, or by Dagster's own storage,
    is taken as it is or initialised."""
    ensure_instance_config(tmp_path, Deployment())
    runs = tmp_path / "history" / "runs"
    dagsters = SqliteEventLogStorage(str(runs))
    store_materializations_in(dagsters, "run-by-dagster", ["d|s0"])
    initialisations: list[str] = []
    initdb = HeldSqliteEventLogStorage._initdb
    monkeypatch.setattr(
        HeldSqliteEventLogStorage,
        "_initdb",
        lambda self, engine: initialisations.append(str(engine.url)) or initdb(self, engine),
    )
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        for n in range(5):
            store_materializations(instance, f"run-{n}", [f"x|s{n}"])
        store_materializations(instance, "run-by-dagster", ["d|s1"])
        (runs / "run-empty.db").touch()  # a database another process is still creating
        store_materializations(instance, "run-empty", ["e|s0"])
        with instance.event_log_storage.run_connection("run-0") as connection:
            assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL, with the WAL
    made = [url for url in initialisations if "index" not in url]
    assert len(made) == 2 and "template" in made[0] and made[1].endswith("run-empty.db"), made
    assert _schema(runs / "run-0.db") == _schema(runs / "run-by-dagster.db") == _schema(runs / "run-empty.db")
    assert [entry.run_id for entry in SqliteEventLogStorage(str(runs)).get_logs_for_run("run-3")] == ["run-3"]
    assert not list(runs.glob("*.tmp"))


def test_a_home_whose_databases_exist_is_opened_without_alembic_and_an_unstamped_one_is_made(tmp_path, monkeypatch):
    """Opening a home whose databases Dagster made loads none of alembic's revision scripts (each of the
    command's processes did, for three databases, as they started at once); a database file without a revision
    (another process still creating it, or an empty file) is still made by Dagster's own way."""
    from alembic.script import ScriptDirectory

    ensure_instance_config(tmp_path, Deployment())
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        store_materializations(instance, "run-0", ["a|s0"])
    loaded: list[object] = []
    from_config = ScriptDirectory.from_config.__func__
    monkeypatch.setattr(
        ScriptDirectory, "from_config", classmethod(lambda c, *a: loaded.append(a) or from_config(c, *a))
    )
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        store_materializations(instance, "run-1", ["a|s1"])
        assert materialized_partitions(instance) == ["a|s0", "a|s1"]
        assert instance.get_runs() == []
    assert loaded == []
    schedules = tmp_path / "schedules" / "schedules.db"
    schedules.unlink()
    schedules.touch()
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.all_instigator_state() == []
    assert len(loaded) >= 1
    with sqlite3.connect(schedules) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchone()


def test_a_template_holding_more_than_the_schema_is_not_copied(tmp_path):
    """Whoever can write the home (a local-backend agent, say) could add a trigger or rows to the run template,
    to be copied into every later run's database: such a template is not used, and `_initdb` makes each run's."""
    runs = tmp_path / "runs"
    HeldSqliteEventLogStorage(str(runs))._engine("run-first")
    [template] = runs.glob(".run-template-*.sqlite")
    with sqlite3.connect(template) as connection:
        connection.execute("CREATE TRIGGER hide AFTER INSERT ON event_logs BEGIN DELETE FROM event_logs; END")
    storage = HeldSqliteEventLogStorage(str(runs))
    store_materializations_in(storage, "run-after", ["a|s0"])
    with sqlite3.connect(runs / "run-after.db") as connection:
        assert connection.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'").fetchone() == (0,)
        assert connection.execute("SELECT count(*) FROM event_logs").fetchone() == (1,)


def test_a_table_is_asked_for_until_the_index_has_it_then_remembered(tmp_path, monkeypatch):
    """Dagster asks whether the index has a table before every dynamic partition query and tagged asset event,
    each time on a connection of its own: the held storage asks until the table is there, never longer."""
    storage = HeldSqliteEventLogStorage(str(tmp_path / "runs"))
    assert not storage.has_table("added_later")
    with storage.index_connection() as connection:
        connection.exec_driver_sql("CREATE TABLE added_later (x INTEGER)")
    asked: list[str] = []
    ask = SqliteEventLogStorage.has_table
    monkeypatch.setattr(SqliteEventLogStorage, "has_table", lambda self, name: asked.append(name) or ask(self, name))
    assert storage.has_table("added_later") and storage.has_table("added_later")
    assert storage.has_table("dynamic_partitions")
    assert asked == ["added_later", "dynamic_partitions"]
    storage.wipe()  # deletes rows, not tables
    assert storage.has_table("dynamic_partitions") and storage.has_table("added_later")
    assert not storage.has_table("never_made") and not storage.has_table("never_made")
    assert asked.count("never_made") == 2


def test_run_storages_held_by_two_processes_see_each_others_runs(tmp_path, monkeypatch):
    """The run storage keeps one engine per process: a run one process adds, another (the command, a worker)
    reads and ends, and the first reads it ended; whether the runs table has its statistics columns, which
    Dagster asks before every run query and event, is asked once per process."""
    ensure_instance_config(tmp_path, Deployment())
    asked: list[int] = []
    ask = SqliteRunStorage.has_run_stats_index_cols
    monkeypatch.setattr(SqliteRunStorage, "has_run_stats_index_cols", lambda self: asked.append(id(self)) or ask(self))
    with DagsterInstance.from_config(str(tmp_path)) as command, DagsterInstance.from_config(str(tmp_path)) as worker:
        assert isinstance(command.run_storage, HeldSqliteRunStorage)
        run = command.create_run_for_job(job_def=_one_op_job())
        assert worker.get_run_by_id(run.run_id).status is DagsterRunStatus.NOT_STARTED
        worker.report_run_canceled(worker.get_run_by_id(run.run_id))
        for _ in range(3):
            assert command.get_run_record_by_id(run.run_id).dagster_run.status is DagsterRunStatus.CANCELED
        assert sorted(set(asked)) == sorted({id(command.run_storage), id(worker.run_storage)})
        assert len(asked) == 2


def _one_op_job() -> JobDefinition:
    @op
    def nothing() -> None:
        pass

    @job
    def held_job() -> None:
        nothing()

    return held_job
