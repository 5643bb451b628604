"""Dagster's PostgreSQL storage, with one pooled connection per process rather than a connection per query.

Dagster's PostgreSQL storages use SQLAlchemy's `NullPool` in every process but the webserver: each query
connects, and the server forks a backend for it. In Dagster's daemon that was most of a large backfill's time
(a py-spy profile of a 16k-partition backfill: 54% of the backfill thread opening connections, docs/SCALE.md),
and Dagster has no setting for it (dagster-io/dagster#33935). The daemon is Dagster's process, not ours, so the
only way in is the storage class dagster.yaml names.

`PooledPostgresStorage` is Dagster's `DagsterPostgresStorage` (the same tables, the same configuration) whose
run, event log and schedule storages share one engine holding one connection between queries. One, because
every process that reads the dagster.yaml eval-pipeline writes holds it (the daemon, the eval-pipeline
command and each of its run workers), and 64 run workers holding three each would pass PostgreSQL's default
`max_connections` of 100. A query made while another is under way (a thread of the daemon, a nested query)
opens a connection of its own for the moment, however many at once, as Dagster's own storage does. The event
log's `has_table`, which Dagster asks inside each asset event's transaction, is answered from memory once a
table is known to exist, so that it does not. The webserver replaces the engines with its own pools
(`optimize_for_webserver`), leaving this one idle.
"""

from collections.abc import Mapping
from typing import Any

from dagster_postgres import (
    DagsterPostgresStorage,
    PostgresEventLogStorage,
    PostgresRunStorage,
    PostgresScheduleStorage,
)
from dagster_postgres.utils import create_pg_engine, get_token_provider_from_config, pg_url_from_config
from sqlalchemy.engine import Engine

__all__ = ["PooledPostgresEventLogStorage", "PooledPostgresStorage", "pooled_engine"]

# Connections held between queries, per process: see the module's docstring.
HELD_CONNECTIONS = 1
# Connections opened for the moment beyond the held one, when threads or nested queries want more at once: no
# limit (-1), as with Dagster's own storage, whose every query connects; they are closed when returned.
MOMENTARY_CONNECTIONS = -1
# Seconds after which a held connection is replaced, as Dagster's webserver does (its default).
RECYCLE_SECONDS = 3600


def pooled_engine(postgres_url: str, token_provider: Any = None) -> Engine:
    """An engine with Dagster's settings (autocommit) holding HELD_CONNECTIONS connections; a held connection
    is checked before use (`pool_pre_ping`), so a server restart or an idle timeout costs a reconnect, not an
    error."""
    return create_pg_engine(
        postgres_url,
        token_provider,
        isolation_level="AUTOCOMMIT",
        pool_size=HELD_CONNECTIONS,
        max_overflow=MOMENTARY_CONNECTIONS,
        pool_recycle=RECYCLE_SECONDS,
        pool_pre_ping=True,
    )


class PooledPostgresEventLogStorage(PostgresEventLogStorage):
    """Dagster's PostgreSQL event log, remembering which tables exist: Dagster asks, with a query of its own,
    inside every asset event's transaction, and tables are never dropped while a deployment runs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._tables_present: set[str] = set()
        super().__init__(*args, **kwargs)

    def has_table(self, table_name: str) -> bool:
        if table_name not in self._tables_present and super().has_table(table_name):
            self._tables_present.add(table_name)
        return table_name in self._tables_present


class PooledPostgresStorage(DagsterPostgresStorage):
    """`DagsterPostgresStorage` whose three storages share one pooled engine (`pooled_engine`)."""

    def __init__(
        self,
        postgres_url: str,
        should_autocreate_tables: bool = True,
        inst_data: Any = None,
        token_provider: Any = None,
    ) -> None:
        self.postgres_url = postgres_url
        self.should_autocreate_tables = should_autocreate_tables
        self._inst_data = inst_data
        # Dagster's storages create their tables through engines of their own (NullPool, nothing held).
        self._run_storage = PostgresRunStorage(postgres_url, should_autocreate_tables, token_provider=token_provider)
        self._event_log_storage = PooledPostgresEventLogStorage(
            postgres_url, should_autocreate_tables, token_provider=token_provider
        )
        self._schedule_storage = PostgresScheduleStorage(
            postgres_url, should_autocreate_tables, token_provider=token_provider
        )
        self._engine = pooled_engine(postgres_url, token_provider)
        for storage in (self._run_storage, self._event_log_storage, self._schedule_storage):
            storage._engine.dispose()
            storage._engine = self._engine
        super(DagsterPostgresStorage, self).__init__()  # DagsterStorage's: the storages are set above

    @classmethod
    def from_config_value(  # ty: ignore[invalid-method-override]
        cls, inst_data: Any, config_value: Mapping[str, Any]
    ) -> "PooledPostgresStorage":
        return cls(
            pg_url_from_config(config_value),
            config_value.get("should_autocreate_tables", True),
            inst_data=inst_data,
            token_provider=get_token_provider_from_config(config_value),
        )
