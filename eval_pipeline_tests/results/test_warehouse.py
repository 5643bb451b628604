"""The results warehouse's DuckDB file: what is written is read back exactly, in columns typed by what they hold."""

import math
import typing
from dataclasses import fields, replace

import duckdb

from eval_pipeline.results.warehouse import (
    VALIDATION_COLUMNS,
    Warehouse,
    read_attempts_table,
    read_rejected_table,
    read_results_table,
    read_validation_table,
    write_warehouse,
)
from eval_pipeline.trial.records import AttemptRecord, RejectedRow, ResultRow

# What an agent's output can put into a stored text field: quotes, a backslash, newlines, a NUL-free control
# character, non-ASCII and JSON's own syntax.
AWKWARD = 'say "hi"\\ \n\t\r é 漢 \u2028 {"outcome": "resolved"}, null'
SAMPLE = {str: "text", int: 7, float: 0.25, bool: True}


def sample(row_type: type, **changes: typing.Any) -> typing.Any:
    """A row of `row_type` with a value of its type in every field (None where a field may be None)."""
    hints = typing.get_type_hints(row_type)
    values = {}
    for f in fields(row_type):
        kinds = typing.get_args(hints[f.name]) or (hints[f.name],)
        values[f.name] = None if type(None) in kinds else SAMPLE[kinds[0]]
    return row_type(**{**values, **changes})


def test_every_table_reads_back_what_was_written_typed_from_its_rows(tmp_path):
    trials = [
        sample(ResultRow, instance_id="a", trial="s0"),
        sample(ResultRow, instance_id="b", trial="s1", stop_reason=AWKWARD, cost_usd=1e-9, seed=2**40),
        sample(ResultRow, instance_id="c", trial="s2", peak_memory_mb=math.inf, limit_evidence=AWKWARD),
        sample(ResultRow, instance_id="d", trial="s3", peak_memory_mb=-math.inf, cost_usd=math.nan),
    ]
    attempts = [sample(AttemptRecord, detail=AWKWARD, duration_s=None), sample(AttemptRecord, started_at="z")]
    rejected = [sample(RejectedRow, reason=AWKWARD)]
    validation = [
        {name: index for index, name in enumerate(VALIDATION_COLUMNS)}
        | {"slice": "s", "instance_id": "a", "status": AWKWARD, "gold_resolved": True, "detail": None},
    ]
    instances = [{"instance_id": "a", "n": None}, {"instance_id": "b", "later": 3}]
    warehouse = Warehouse(trials, attempts, instances, [{"variant": "v"}], {"x": 1.5})
    path = write_warehouse(replace(warehouse, validation=validation, rejected=rejected), tmp_path / "r.duckdb")

    read = read_results_table(path)
    assert math.isnan(read[-1].cost_usd) and read[:-1] == trials[:-1]
    assert read[-1] == replace(trials[-1], cost_usd=read[-1].cost_usd)
    assert read_attempts_table(path) == sorted(attempts, key=lambda a: a.started_at)
    assert read_rejected_table(path) == rejected
    assert read_validation_table(path) == validation
    with duckdb.connect(str(path), read_only=True) as connection:
        types = {
            (table, name): kind
            for table, name, kind in connection.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns"
            ).fetchall()
        }
    # Every trial leaves these empty: each column still has the type its field says, not a null type.
    assert types["trials", "environment_image"] == "VARCHAR"
    assert types["trials", "effective_memory_ceiling_mb"] == "BIGINT"
    assert types["trials", "resource_multiplier"] == "DOUBLE"
    assert (types["trials", "seed"], types["trials", "scored"]) == ("BIGINT", "BOOLEAN")
    assert (types["validation", "gold_resolved"], types["validation", "gold_runs"]) == ("BOOLEAN", "BIGINT")
    assert (types["instances", "n"], types["instances", "later"], types["lineage", "x"]) == (
        "VARCHAR",
        "BIGINT",
        "DOUBLE",
    )
    assert not list(tmp_path.glob(".*")), "no scratch file is left beside the warehouse"

    empty = write_warehouse(replace(warehouse, trials=[], attempts=[]), tmp_path / "empty.duckdb")
    assert read_results_table(empty) == [] and read_attempts_table(empty) == []
