"""The production PostgreSQL storage with one held connection per process, on a real PostgreSQL server: it reads
and writes what Dagster's own storage does, without connecting per query, from many threads at once, and it
survives the server dropping its connection."""

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg2
import pytest
from dagster import DagsterInstance
from sqlalchemy import event

from eval_pipeline.common.settings import Deployment
from eval_pipeline.orchestration.instance_config import ensure_instance_config
from eval_pipeline.orchestration.postgres_storage import HELD_CONNECTIONS, PooledPostgresEventLogStorage
from eval_pipeline.orchestration.run_workers import hold_connections
from eval_pipeline_tests.support.dagster_storage import materialized_partitions, store_materializations

WRITES = 40


@contextmanager
def production_instance(home: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[DagsterInstance]:
    """The instance the eval-pipeline command configures for EVAL_PIPELINE_POSTGRES_URL."""
    monkeypatch.setenv("EVAL_PIPELINE_POSTGRES_URL", postgres_url)
    home.mkdir(exist_ok=True)
    ensure_instance_config(home, Deployment.from_env({"EVAL_PIPELINE_POSTGRES_URL": postgres_url}))
    with DagsterInstance.from_config(str(home)) as instance:
        yield instance


def count_connects(*engines) -> list[int]:
    """A counter of the connections the engines open from now on."""
    opened = [0]

    def on_connect(*_args) -> None:
        opened[0] += 1

    for engine in set(engines):
        event.listen(engine, "connect", on_connect)
    return opened


def storages(instance: DagsterInstance) -> tuple:
    return instance.run_storage, instance.event_log_storage, instance.schedule_storage


def write_and_read(instance: DagsterInstance, writes: int) -> None:
    store_materializations(instance, f"run-{uuid.uuid4().hex[:8]}", [f"i{n}|s0" for n in range(writes)])
    for _ in range(writes):
        instance.get_runs(limit=1)
        instance.get_dynamic_partitions("instances")


@pytest.mark.slow
def test_the_production_storage_holds_one_connection_where_dagsters_connects_per_query(
    tmp_path, postgres_database, monkeypatch
):
    postgres_url = postgres_database()
    with production_instance(tmp_path / "pooled", postgres_url, monkeypatch) as pooled:
        assert isinstance(pooled.event_log_storage, PooledPostgresEventLogStorage)
        hold_connections(pooled)  # as the eval-pipeline command and its run workers do: nothing to change here
        assert len({storage._engine for storage in storages(pooled)}) == 1, "one engine for the three storages"
        write_and_read(pooled, 1)  # the held connection is opened
        opened = count_connects(*(storage._engine for storage in storages(pooled)))
        write_and_read(pooled, WRITES)
        assert opened[0] == 0, f"{opened[0]} connections opened for {WRITES} events and {2 * WRITES} reads"
        assert len(materialized_partitions(pooled)) == WRITES + 1

    # Dagster's own storage on the same tables reads what the pooled one wrote, and connects per query.
    dagster_home = tmp_path / "dagster_postgres"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text(f"storage:\n  postgres:\n    postgres_url: {postgres_url}\n")
    with DagsterInstance.from_config(str(dagster_home)) as dagsters:
        opened = count_connects(*(storage._engine for storage in storages(dagsters)))
        assert len(materialized_partitions(dagsters)) == WRITES + 1
        write_and_read(dagsters, 5)
        assert opened[0] >= 3 * 5


@pytest.mark.slow
def test_the_daemons_threads_share_the_pool_and_leave_one_connection_held(tmp_path, postgres_database, monkeypatch):
    """Dagster's daemon queries from a thread per daemon: threads wanting a connection at once get one each for
    the moment, and one stays held."""
    with production_instance(tmp_path, postgres_database(), monkeypatch) as instance:
        failures: list[BaseException] = []

        def work() -> None:
            try:
                write_and_read(instance, 10)
            except BaseException as error:  # noqa: BLE001 - reported by the assertion below
                failures.append(error)

        threads = [threading.Thread(target=work) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert len(materialized_partitions(instance)) == 6 * 10
        pool = instance.run_storage._engine.pool
        assert (pool.checkedout(), pool.checkedin()) == (0, HELD_CONNECTIONS)


@pytest.mark.slow
def test_a_held_connection_the_server_dropped_is_replaced_not_an_error(tmp_path, postgres_database, monkeypatch):
    """A database restart or an idle timeout ends the held connection's backend; the next query reconnects."""
    postgres_url = postgres_database()
    with production_instance(tmp_path, postgres_url, monkeypatch) as instance:
        write_and_read(instance, 2)
        database = postgres_url.rsplit("/", 1)[1]
        admin = psycopg2.connect(postgres_url.replace("+psycopg2", "").rsplit("/", 1)[0] + "/postgres")
        admin.autocommit = True
        with admin.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            )
            (terminated,) = cursor.fetchone()
        admin.close()
        assert terminated >= HELD_CONNECTIONS
        write_and_read(instance, 2)
        assert len(materialized_partitions(instance)) == 4
