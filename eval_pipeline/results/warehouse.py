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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from eval_pipeline import HARNESS_VERSION
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
    """Write every table to a DuckDB file at a temporary path, then move it into place; return its path."""
    import pandas as pd  # here, not at the top: every run worker imports this module; only the results step writes

    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    scratch.unlink(missing_ok=True)
    frames = {
        "trials": pd.DataFrame([asdict(t) for t in warehouse.trials], columns=list(ResultRow.__dataclass_fields__)),
        "attempts": pd.DataFrame(
            [asdict(a) for a in warehouse.attempts], columns=list(AttemptRecord.__dataclass_fields__)
        ),
        "instances": pd.DataFrame(warehouse.instances),
        "variants": pd.DataFrame(warehouse.variants),
        "lineage": pd.DataFrame([warehouse.lineage]),
        "rejected_records": pd.DataFrame(
            [asdict(r) for r in warehouse.rejected], columns=list(RejectedRow.__dataclass_fields__)
        ),
    }
    if warehouse.validation is not None:
        frames["validation"] = pd.DataFrame(warehouse.validation, columns=list(VALIDATION_COLUMNS))
    with duckdb.connect(str(scratch)) as connection:
        for table, frame in frames.items():
            connection.register("frame", frame)
            connection.execute(f"CREATE TABLE {table} AS SELECT * FROM frame")
            connection.unregister("frame")
    os.replace(scratch, path)
    return path


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
