"""The results warehouse: DuckDB tables rebuilt from the artifact store alone.

`trials` has one row per planned trial; `attempts` one per kept attempt at a
trial's environment, generation or evaluation; `instances`, `variants` and
`lineage` say what was evaluated, with what, by which versions. `validation`,
present when the campaign's instances were validated (validation.py), has one
row per validated instance, `current` when it validated the instance as this
campaign evaluates it (not an older version, nor one the campaign excludes).

Every key is recomputed from the campaign and the benchmark, so the table
reflects exactly what is stored, whatever Dagster did or did not record. A
trial is scored only by its final evaluation; one with none shows the outcome
of its last kept attempt (its evaluation's, else its generation's, else its
environment's build), or `missing`, and `attempts` counts every attempt kept. The DuckDB file is written to a temporary path and moved into
place, so readers never see a half-written table.
"""

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.artifacts import ArtifactStore, attempts_prefix
from eval_pipeline.campaign import Campaign, Trial
from eval_pipeline.environments import environment_failures
from eval_pipeline.evaluation import Evaluation, evaluation_key
from eval_pipeline.generation import GENERATION_VERSION, Generation, failed_attempts, generation_key
from eval_pipeline.grading import GRADING_VERSION
from eval_pipeline.outcomes import Outcome
from eval_pipeline.portfolio import Portfolio
from eval_pipeline.sandbox import SandboxBackend
from eval_pipeline.tasks import Task

MISSING = "missing"
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
class TrialResult:
    campaign: str
    slice: str
    instance_id: str
    repo: str
    trial: str
    variant: str
    seed: int
    agent: str
    agent_config_hash: str
    outcome: str
    outcome_kind: str | None
    scored: bool
    resolved: bool
    attempts: int
    generation_key: str | None
    evaluation_key: str | None
    patch_sha256: str | None
    generation_duration_s: float | None
    evaluation_duration_s: float | None
    peak_memory_mb: float | None
    oom_killed: bool
    test_infrastructure_changes: int  # files of test infrastructure the patch changed (undone before grading)
    input_tokens: int
    output_tokens: int
    cost_usd: float
    harness_version: str
    dataset_version: str
    sandbox_backend: str
    sandbox_mode: str
    environment_image: str | None
    memory_floor_mb: int
    memory_ceiling_mb: int
    cpu_floor: float
    cpu_ceiling: float
    resource_multiplier: float | None
    effective_memory_ceiling_mb: int | None
    pids_limit: int
    enforced_limits: str


@dataclass(frozen=True)
class AttemptRecord:
    """One kept attempt at a trial's stage (an environment's attempts count for each of its trials)."""

    campaign: str
    instance_id: str
    trial: str
    stage: str  # environment, generation or evaluation
    outcome: str
    outcome_kind: str
    final: bool  # the attempt whose artifact is the stage's stored result
    started_at: str
    duration_s: float | None
    detail: str


def _kept_evaluations(store: ArtifactStore, key: str) -> list[Evaluation]:
    """Every kept evaluation attempt at `key`, oldest first."""
    attempts = [store.get(k) for k in store.keys(attempts_prefix(key))]
    kept = sorted((a for a in attempts if a), key=lambda a: a["started_at"])
    return [Evaluation.from_payload(attempt, reused=True) for attempt in kept]


def _unfinished_outcome(outcome: str) -> Outcome:
    """A kept attempt's outcome for a trial with no final evaluation.

    A scored verdict that has no final artifact could not be stored: the trial
    is not scored, and its outcome says so.
    """
    return Outcome.STORAGE_ERROR if Outcome(outcome).is_scored else Outcome(outcome)


def _peak_memory_mb(evaluation: Evaluation | None) -> float | None:
    """The largest peak any grading step measured; None where none was measured."""
    peaks = [step["peak_memory_mb"] for step in evaluation.steps if step.get("peak_memory_mb")] if evaluation else []
    return max(peaks, default=None)


def _test_infrastructure_changes(evaluation: Evaluation | None) -> int:
    """How many test-infrastructure files (conftest.py, tests, pytest settings) the graded patch changed."""
    steps = evaluation.steps if evaluation else []
    return sum(len(step.get("undone", [])) for step in steps if step.get("step") == "restore_test_files")


def _attempts(
    campaign: Campaign,
    instance_id: str,
    trial: Trial,
    environment_attempts: list[dict[str, Any]],
    generation_failures: list[Generation],
    generation: Generation | None,
    evaluations: list[Evaluation],
    final_attempt_id: str | None,
) -> list[AttemptRecord]:
    """Every kept attempt at the trial's stages; the stored generation, and the evaluation attempt whose id is
    `final_attempt_id`, are final."""

    def record(stage: str, outcome: str, final: bool, started_at: str, duration_s: float | None, detail: str):
        kind = Outcome(outcome).kind.value if outcome in set(Outcome) else ""  # a finished generation is `completed`
        return AttemptRecord(
            campaign.name, instance_id, trial.key, stage, outcome, kind, final, started_at, duration_s, detail[-2000:]
        )

    generations = [(g, False) for g in generation_failures] + ([(generation, True)] if generation else [])
    return [
        *(record("environment", a["outcome"], False, a["started_at"], None, a["detail"]) for a in environment_attempts),
        *(record("generation", g.status, final, g.started_at, g.duration_s, g.error) for g, final in generations),
        *(
            record("evaluation", e.outcome, e.attempt_id == final_attempt_id, e.started_at, e.duration_s, e.detail)
            for e in evaluations
        ),
    ]


def trial_records(
    campaign: Campaign,
    portfolio: Portfolio,
    instance: Task,
    trial: Trial,
    sandbox: SandboxBackend,
    store: ArtifactStore,
    environment_key: str,
) -> tuple[TrialResult, list[AttemptRecord]]:
    """The trial's results row, and every attempt kept at its stages, from the store alone."""
    agent = trial.variant.make_agent()
    gen_key = generation_key(instance, agent, trial.seed, campaign.timeout_multiplier)
    stored_generation = store.get(gen_key)
    generation = Generation.from_payload(stored_generation, reused=True) if stored_generation else None
    generation_failures = failed_attempts(store, gen_key)
    environment_attempts = environment_failures(store, environment_key)
    evaluations: list[Evaluation] = []
    evaluation, eval_key, final = None, None, None
    if generation:
        eval_key = evaluation_key(generation, environment_key, sandbox, campaign.test_timeout_for(instance))
        evaluations = _kept_evaluations(store, eval_key)
        evaluation = evaluations[-1] if evaluations else None
        if (final := store.get(eval_key)) is not None:
            evaluation = Evaluation.from_payload(final, reused=True)
    if final is not None:
        outcome: Outcome | None = Outcome(evaluation.outcome)
    elif evaluation:
        outcome = _unfinished_outcome(evaluation.outcome)
    elif generation_failures:
        outcome = Outcome(generation_failures[-1].status)
    else:
        outcome = Outcome(environment_attempts[-1]["outcome"]) if environment_attempts else None
    attempts = _attempts(
        campaign,
        instance.instance_id,
        trial,
        environment_attempts,
        generation_failures,
        generation,
        evaluations,
        evaluation.attempt_id if final is not None else None,
    )
    limits = sandbox.limits
    result = TrialResult(
        campaign=campaign.name,
        slice=portfolio.slice_of(instance.instance_id),
        instance_id=instance.instance_id,
        repo=instance.repo,
        trial=trial.key,
        variant=trial.variant.name,
        seed=trial.seed,
        agent=trial.variant.agent,
        agent_config_hash=agent.config_hash,
        outcome=outcome.value if outcome else MISSING,
        outcome_kind=outcome.kind.value if outcome else None,
        scored=final is not None,
        resolved=bool(final is not None and outcome and outcome.is_resolved),
        attempts=len(evaluations) + len(generation_failures),
        generation_key=gen_key if generation else None,
        evaluation_key=eval_key if evaluation else None,
        patch_sha256=generation.patch_sha256 if generation else None,
        generation_duration_s=generation.duration_s if generation else None,
        evaluation_duration_s=evaluation.duration_s if evaluation else None,
        peak_memory_mb=_peak_memory_mb(evaluation),
        oom_killed=bool(evaluation and any(step.get("oom_killed") for step in evaluation.steps)),
        test_infrastructure_changes=_test_infrastructure_changes(evaluation),
        input_tokens=generation.input_tokens if generation else 0,
        output_tokens=generation.output_tokens if generation else 0,
        cost_usd=generation.cost_usd if generation else 0.0,
        harness_version=evaluation.harness_version if evaluation else HARNESS_VERSION,
        dataset_version=portfolio.version,
        sandbox_backend=sandbox.name,
        sandbox_mode=sandbox.settings.mode,
        environment_image=evaluation.environment.get("image_id") if evaluation else None,
        memory_floor_mb=limits.memory_floor_mb,
        memory_ceiling_mb=limits.memory_ceiling_mb,
        cpu_floor=limits.cpu_floor,
        cpu_ceiling=limits.cpu_ceiling,
        resource_multiplier=limits.multiplier,
        effective_memory_ceiling_mb=limits.effective_memory_ceiling_mb,
        pids_limit=limits.pids,
        enforced_limits=json.dumps(sandbox.enforced_limits(), sort_keys=True),
    )
    return result, attempts


@dataclass(frozen=True)
class Warehouse:
    """The campaign's results as tables: what `write_warehouse` stores in DuckDB, one writer, atomically."""

    trials: list[TrialResult]
    attempts: list[AttemptRecord]
    instances: list[dict[str, Any]]
    variants: list[dict[str, Any]]
    lineage: dict[str, Any]
    validation: list[dict[str, Any]] | None = None  # None: the campaign's instances were never validated


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
    trials, attempts, instances = [], [], []
    for instance in sorted(portfolio.instances, key=lambda i: i.instance_id):
        sandbox = sandbox_for(instance)
        environment_key = sandbox.environment_key(instance, portfolio.environment_for(instance))
        instances.append(
            {
                "instance_id": instance.instance_id,
                "slice": portfolio.slice_of(instance.instance_id),
                "repo": instance.repo,
                "base_commit": instance.base_commit,
                "version": instance.version,
                "content_hash": instance.content_hash,
                "environment_key": environment_key,
            }
        )
        for trial in campaign.trials:
            result, kept = trial_records(campaign, portfolio, instance, trial, sandbox, store, environment_key)
            trials.append(result)
            attempts.extend(kept)
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
    return Warehouse(trials, attempts, instances, variants, lineage, rows)


def collect_results(
    campaign: Campaign,
    portfolio: Portfolio,
    sandbox_for: Callable[[Task], SandboxBackend],
    store: ArtifactStore,
) -> list[TrialResult]:
    """The `trials` table alone: one result per planned (instance, trial)."""
    return collect_warehouse(campaign, portfolio, sandbox_for, store).trials


def write_warehouse(warehouse: Warehouse, path: Path) -> Path:
    """Write every table to a DuckDB file at a temporary path, then move it into place; return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    scratch.unlink(missing_ok=True)
    frames = {
        "trials": pd.DataFrame([asdict(t) for t in warehouse.trials], columns=list(TrialResult.__dataclass_fields__)),
        "attempts": pd.DataFrame(
            [asdict(a) for a in warehouse.attempts], columns=list(AttemptRecord.__dataclass_fields__)
        ),
        "instances": pd.DataFrame(warehouse.instances),
        "variants": pd.DataFrame(warehouse.variants),
        "lineage": pd.DataFrame([warehouse.lineage]),
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


def read_results_table(path: Path) -> list[TrialResult]:
    with duckdb.connect(str(path), read_only=True) as connection:
        cursor = connection.execute("SELECT * FROM trials ORDER BY instance_id, trial")
        columns = [column[0] for column in cursor.description]
        return [TrialResult(**dict(zip(columns, row, strict=True))) for row in cursor.fetchall()]
