"""The results warehouse: DuckDB tables rebuilt from the artifact store alone.

`trials` has one row per planned trial; `attempts` one per kept attempt at a
trial's environment, generation or evaluation; `instances`, `variants` and
`lineage` say what was evaluated, with what, by which versions. `validation`,
present when the campaign's instances were validated (trial/validation.py), has one
row per validated instance, `current` when it validated the instance as this
campaign evaluates it (not an older version, nor one the campaign excludes).

`rejected_records` has one row per stored record of a trial that failed its
checks (a forged or altered result, one with no MAC: artifacts.Rejection); it
was not counted, and its trial shows as not scored until it runs again.

Every key is recomputed from the campaign and the benchmark (trial/spec.py), and
each trial read from the store (trial/records.py), so the table reflects
exactly what is stored, whatever Dagster did or did not record. The DuckDB
file is written to a temporary path and moved into place, so readers never see
a half-written table.
"""

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

import duckdb

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.common.foreign_text import valid_unicode
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.grading.verdict import GRADING_VERSION
from eval_pipeline.sandbox import SandboxBackend
from eval_pipeline.store.artifacts import ArtifactStore
from eval_pipeline.tasks.task import Task
from eval_pipeline.trial.records import MISSING as MISSING  # where report readers have always found it
from eval_pipeline.trial.records import AttemptRecord, RejectedRow, ResultRow, read_trials
from eval_pipeline.trial.spec import GENERATION_VERSION

# The `validation` table: these fields of the validation report's records, then `outcomes` (JSON:
# {"gold": {outcome: runs}, "empty": {outcome: runs}}) and `current`.
_VALIDATION_FIELDS = (
    "slice",
    "instance_id",
    "status",
    "gold_resolved",
    "gold_runs",
    "empty_resolved",
    "empty_runs",
    "detail",
    "repeats",
)
VALIDATION_COLUMNS = (*_VALIDATION_FIELDS, "outcomes", "current")


@dataclass(frozen=True)
class Warehouse:
    """The campaign's results as tables: what `write_warehouse` stores in DuckDB, one writer, atomically."""

    trials: list[ResultRow]
    attempts: list[AttemptRecord]
    instances: list[dict[str, Any]]
    variants: list[dict[str, Any]]
    lineage: dict[str, Any]
    validation: list[dict[str, Any]] | None = None  # None: the campaign's instances were never validated
    rejected: list[RejectedRow] = field(default_factory=list)  # stored records not counted (forged, altered, ...)


def validation_rows(validation: Mapping[str, Any], portfolio: Portfolio) -> list[dict[str, Any]]:
    """The `validation` table from a validation report: one row per validated instance."""
    evaluated = {instance.instance_id: instance.content_hash for instance in portfolio.instances}
    return [
        {
            **{name: record[name] for name in _VALIDATION_FIELDS},
            "outcomes": json.dumps({"gold": record["gold"], "empty": record["empty"]}, sort_keys=True),
            "current": evaluated.get(record["instance_id"]) == record["content_hash"],
        }
        for record in validation["instances"]
    ]


def collect_warehouse(
    campaign: Campaign,
    portfolio: Portfolio,
    sandbox_for: Callable[[Task], SandboxBackend],
    store: ArtifactStore,
    validation: Mapping[str, Any] | None = None,
) -> Warehouse:
    """Every table, from the campaign, the portfolio and the store alone; `sandbox_for` gives a task's sandbox,
    `validation` is the campaign's validation report, if it has one.

    One row per planned (instance, trial) in `trials`, in a stable order, and one per kept attempt in `attempts`.
    """
    records = read_trials(campaign, portfolio, sandbox_for, store)
    environment_keys = {r.identity.instance_id: r.identity.environment_key for r in records}
    instances = [
        {
            "instance_id": instance.instance_id,
            "slice": portfolio.slice_of(instance.instance_id),
            "repo": instance.repo,
            "base_commit": instance.base_commit,
            "version": instance.version,
            "content_hash": instance.content_hash,
            "environment_key": environment_keys.get(instance.instance_id),
        }
        for instance in sorted(portfolio.instances, key=lambda i: i.instance_id)
    ]
    trials = [r.result for r in records]
    attempts = [attempt for r in records for attempt in r.attempts]
    variants = [
        {
            "variant": variant.name,
            "agent": variant.agent,
            "agent_config_hash": variant.make_agent().config_hash,
            "params": json.dumps(dict(variant.params), sort_keys=True),
            "is_baseline": variant.name == campaign.baseline,
        }
        for variant in campaign.variants
    ]
    lineage = {
        "campaign": campaign.name,
        "dataset_version": portfolio.version,
        "plan_version": campaign.plan_version,
        "harness_version": HARNESS_VERSION,
        "generation_version": GENERATION_VERSION,
        "grading_version": GRADING_VERSION,
        "seeds": json.dumps(list(campaign.seeds)),
        "sandbox_backend": campaign.sandbox.backend,
        "sandbox_mode": campaign.sandbox.mode,
        "resources": json.dumps(campaign.resources.as_record(), sort_keys=True),
        "quarantined_rows": len(portfolio.quarantined),
    }
    rows = validation_rows(validation, portfolio) if validation is not None else None
    rejected = [row for r in records for row in r.rejected]
    return Warehouse(trials, attempts, instances, variants, lineage, rows, rejected)


def write_warehouse(warehouse: Warehouse, path: Path) -> Path:
    """Write every table to a DuckDB file at a temporary path, then move it into place; return its path.

    Each table is typed from its rows' dataclass (`X | None` as X) or, for the few rows kept as mappings, from
    each column's first value, and read by DuckDB from a file of JSON lines: no data frame library, whose
    import (half a second) every `eval-pipeline run` paid at its end, after its last trial."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    scratch.unlink(missing_ok=True)
    tables = {
        "trials": _dataclass_table(ResultRow, warehouse.trials),
        "attempts": _dataclass_table(AttemptRecord, warehouse.attempts),
        "instances": _mapping_table(warehouse.instances),
        "variants": _mapping_table(warehouse.variants),
        "lineage": _mapping_table([warehouse.lineage]),
        "rejected_records": _dataclass_table(RejectedRow, warehouse.rejected),
    }
    if warehouse.validation is not None:
        tables["validation"] = _mapping_table(warehouse.validation, VALIDATION_COLUMNS)
    lines = scratch.with_suffix(".jsonl")
    try:
        with duckdb.connect(str(scratch)) as connection:
            for table, (columns, rows) in tables.items():
                _create_table(connection, table, columns, rows, lines)
    except BaseException:
        scratch.unlink(missing_ok=True)
        raise
    finally:
        lines.unlink(missing_ok=True)
    os.replace(scratch, path)
    return path


_Table = tuple[dict[str, str], list[dict[str, Any]]]  # column name -> DuckDB type, and the rows
_DUCKDB_TYPES = {bool: "BOOLEAN", int: "BIGINT", float: "DOUBLE", str: "VARCHAR"}


def _duckdb_type(python_type: Any) -> str:
    """The column type of a field's type: `X | None` as X; anything but bool, int, float and str as text."""
    if get_origin(python_type) in (Union, UnionType):
        python_type = next((t for t in get_args(python_type) if t is not type(None)), str)
    return _DUCKDB_TYPES.get(python_type, "VARCHAR") if isinstance(python_type, type) else "VARCHAR"


def _dataclass_table(row_type: type, rows: list[Any]) -> _Table:
    """A table of dataclass rows, a column per field in the fields' order, typed as the field is."""
    hints = get_type_hints(row_type)
    columns = {f.name: _duckdb_type(hints[f.name]) for f in fields(row_type)}
    return columns, [vars(row) for row in rows]  # the rows' own dicts: 50 ms for 200k rows, 2.5 s built anew


def _mapping_table(rows: list[dict[str, Any]], names: tuple[str, ...] = ()) -> _Table:
    """`rows` with the columns `names` (else every key of the rows, in the order first seen), each typed by
    its first value that is set."""
    names = names or tuple(dict.fromkeys(name for row in rows for name in row))
    columns = {}
    for name in names:
        value = next((row[name] for row in rows if row.get(name) is not None), None)
        columns[name] = _DUCKDB_TYPES.get(type(value), "VARCHAR")
    return columns, rows


def _identifier(name: str) -> str:
    """`name` quoted as an SQL identifier."""
    quote = '"'
    return quote + name.replace(quote, quote * 2) + quote


def _create_table(
    connection: duckdb.DuckDBPyConnection, table: str, columns: dict[str, str], rows: list[dict], lines: Path
) -> None:
    """The table `table` of `columns`, holding `rows` (written to `lines` as JSON for DuckDB's own reader, which
    refuses a lone surrogate: each is U+FFFD in the table, common/foreign_text.py)."""
    with lines.open("w", encoding="utf-8") as out:
        out.writelines(f"{valid_unicode(json.dumps(row, ensure_ascii=False))}\n" for row in rows)
    schema = ", ".join(f"{_identifier(name)}: '{kind}'" for name, kind in columns.items())
    connection.execute(
        f"CREATE TABLE {table} AS SELECT * FROM read_json(?, format = 'newline_delimited', columns = {{{schema}}})",
        [str(lines)],
    )


def read_validation_table(path: Path) -> list[dict[str, Any]] | None:
    """The warehouse's `validation` rows, or None when it has no such table (no validation report)."""
    with duckdb.connect(str(path), read_only=True) as connection:
        tables = {row[0] for row in connection.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        if "validation" not in tables:
            return None
        cursor = connection.execute("SELECT * FROM validation ORDER BY slice, instance_id")
        columns = [column[0] for column in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def read_rejected_table(path: Path) -> list[RejectedRow]:
    """The warehouse's rejected records (none in a warehouse built before records were authenticated)."""
    with duckdb.connect(str(path), read_only=True) as connection:
        tables = {row[0] for row in connection.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        if "rejected_records" not in tables:
            return []
        cursor = connection.execute("SELECT * FROM rejected_records ORDER BY instance_id, trial, key")
        columns = [column[0] for column in cursor.description]
        return [RejectedRow(**dict(zip(columns, row, strict=True))) for row in cursor.fetchall()]


def read_attempts_table(path: Path) -> list[AttemptRecord]:
    """The warehouse's kept attempts, oldest first."""
    with duckdb.connect(str(path), read_only=True) as connection:
        cursor = connection.execute("SELECT * FROM attempts ORDER BY started_at")
        columns = [column[0] for column in cursor.description]
        return [AttemptRecord(**dict(zip(columns, row, strict=True))) for row in cursor.fetchall()]


def read_results_table(path: Path) -> list[ResultRow]:
    with duckdb.connect(str(path), read_only=True) as connection:
        cursor = connection.execute("SELECT * FROM trials ORDER BY instance_id, trial")
        columns = [column[0] for column in cursor.description]
        return [ResultRow(**dict(zip(columns, row, strict=True))) for row in cursor.fetchall()]
