"""One trial's records, read from the artifact store alone: its results row, its kept attempts, its stage records.

The results warehouse (results/warehouse.py) and the per-trial folders (results/export.py)
read trials through here, so both say the same about every trial. A trial is
scored only by its final evaluation; one with none shows the outcome of its
last kept attempt (its evaluation's, else its generation's, else its
environment's), or `missing`.
"""

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.sandbox import SandboxBackend
from eval_pipeline.store.artifacts import ArtifactStore, RejectedRecord, attempts_prefix
from eval_pipeline.store.attempts import Attempt, AttemptLog, Stage, environment_artifact_key
from eval_pipeline.tasks.task import Task
from eval_pipeline.trial.evaluation import Evaluation
from eval_pipeline.trial.generation import Generation
from eval_pipeline.trial.limits import ReferencePass
from eval_pipeline.trial.selection import EVERY_TRIAL, TrialSelection
from eval_pipeline.trial.spec import TrialSpec, trial_specs

MISSING = "missing"


@dataclass(frozen=True)
class ResultRow:
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
    audit_flags: str  # the patch audit's flag kinds, comma-separated ("" for none): grading/patch_audit.py
    input_tokens: int
    output_tokens: int
    cost_usd: float
    steps: int  # the agent's model calls (0 for agents without a model)
    stop_reason: str  # why the agent stopped: completed, step limit, token limit, cost limit, wall_time, …
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
    # Why a test run stopped by a limit was scored: where the reference passed within it (trial/limits.py).
    limit_evidence: str | None
    # How the generation was graded: patch_replay, in_container or snapshot (trial/evaluation.py); None before grading.
    grading_mode: str | None = None


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


@dataclass(frozen=True)
class RejectedRow:
    """A stored record of a trial that was not counted (forged, unauthenticated, altered, damaged): the row the
    results and the report show, so a refused result is seen, not silently lost."""

    campaign: str
    instance_id: str
    trial: str
    key: str
    reason: str
    quarantined_as: str


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


def _limit_evidence(final: Evaluation | None) -> str | None:
    """Where the reference passed within the limits a scored test run hit; None for any other trial."""
    if final is None or final.limit_evidence is None:
        return None
    return ReferencePass.from_payload(final.limit_evidence, key=final.key, reused=True).describe()


def _test_infrastructure_changes(evaluation: Evaluation | None) -> int:
    """How many test-infrastructure files (conftest.py, tests, pytest settings) the graded patch changed."""
    steps = evaluation.steps if evaluation else []
    return sum(len(step.get("undone", [])) for step in steps if step.get("step") == "restore_test_files")


@dataclass(frozen=True)
class StoredTrial:
    """What the store holds for one trial: its results row, its kept attempts, and its stage records
    (the final evaluation, else its last evaluation attempt's record)."""

    identity: TrialSpec
    result: ResultRow
    attempts: list[AttemptRecord]
    generation: Generation | None
    evaluation: Evaluation | None
    rejected: tuple[RejectedRow, ...] = ()


def _attempt_record(identity: TrialSpec, attempt: Attempt, final: bool) -> AttemptRecord:
    kind = Outcome(attempt.outcome).kind.value if attempt.outcome in set(Outcome) else ""  # `completed` has none
    return AttemptRecord(
        identity.campaign,
        identity.instance_id,
        identity.trial,
        attempt.stage.value,
        attempt.outcome,
        kind,
        final,
        attempt.started_at,
        attempt.duration_s,
        attempt.detail[-2000:],
    )


def _stored_generation_attempt(generation: Generation) -> Attempt:
    """The stored generation as its stage's final attempt."""
    return Attempt(
        stage=Stage.GENERATION,
        outcome=generation.status,
        started_at=generation.started_at,
        duration_s=generation.duration_s,
        detail=generation.error,
        keys={"artifact": generation.key},
    )


def _outcome(final: Evaluation | None, evaluations: list[Attempt], earlier: list[Attempt]) -> Outcome | None:
    """A scored trial's final outcome, else its last kept attempt's: evaluation's, generation's, environment's."""
    if final is not None:
        return Outcome(final.outcome)
    if evaluations:
        return _unfinished_outcome(evaluations[-1].outcome)
    return Outcome(earlier[-1].outcome) if earlier else None


def read_trial(
    identity: TrialSpec,
    task: Task,
    portfolio: Portfolio,
    sandbox: SandboxBackend,
    store: ArtifactStore,
    log: AttemptLog,
) -> StoredTrial:
    """The trial's results row, every attempt kept at its stages, and its stage records, from the store alone."""
    stored_generation = store.get(identity.generation_key)
    generation = (
        Generation.from_payload(stored_generation, key=identity.generation_key, reused=True)
        if stored_generation
        else None
    )
    generation_failures = log.attempts(identity.generation_key)
    environment_attempts = log.environment_attempts(identity.environment_key)
    eval_key = identity.evaluation_key(generation.patch_sha256) if generation else None
    evaluations = log.attempts(eval_key) if eval_key else []
    stored_final = store.get(eval_key) if eval_key else None
    final = Evaluation.from_payload(stored_final, key=eval_key, reused=True) if stored_final and eval_key else None
    evaluation = final or (
        Evaluation.from_payload(evaluations[-1].record, key=eval_key, reused=True)
        if evaluations and evaluations[-1].record and eval_key
        else None
    )
    outcome = _outcome(final, evaluations, generation_failures or environment_attempts)
    final_attempt_id = final.attempt_id if final else None
    attempts = [
        *(_attempt_record(identity, a, False) for a in environment_attempts + generation_failures),
        *([_attempt_record(identity, _stored_generation_attempt(generation), True)] if generation else []),
        *(_attempt_record(identity, a, a.keys.get("attempt_id") == final_attempt_id) for a in evaluations),
    ]
    limits = sandbox.limits
    result = ResultRow(
        campaign=identity.campaign,
        slice=identity.slice,
        instance_id=identity.instance_id,
        repo=task.repo,
        trial=identity.trial,
        variant=identity.variant,
        seed=identity.seed,
        agent=identity.agent,
        agent_config_hash=identity.agent_config_hash,
        outcome=outcome.value if outcome else MISSING,
        outcome_kind=outcome.kind.value if outcome else None,
        scored=final is not None,
        resolved=bool(final is not None and outcome and outcome.is_resolved),
        attempts=len(evaluations) + len(generation_failures),
        generation_key=identity.generation_key if generation else None,
        evaluation_key=eval_key if evaluation else None,
        patch_sha256=generation.patch_sha256 if generation else None,
        generation_duration_s=generation.duration_s if generation else None,
        evaluation_duration_s=evaluation.duration_s if evaluation else None,
        peak_memory_mb=_peak_memory_mb(evaluation),
        oom_killed=bool(evaluation and any(step.get("oom_killed") for step in evaluation.steps)),
        test_infrastructure_changes=_test_infrastructure_changes(evaluation),
        audit_flags=",".join(sorted({flag["kind"] for flag in evaluation.audit})) if evaluation else "",
        input_tokens=generation.input_tokens if generation else 0,
        output_tokens=generation.output_tokens if generation else 0,
        cost_usd=generation.cost_usd if generation else 0.0,
        steps=generation.steps if generation else 0,
        stop_reason=generation.stop_reason if generation else "",
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
        limit_evidence=_limit_evidence(final),
        grading_mode=evaluation.grading_mode if evaluation else None,
    )
    return StoredTrial(identity, result, attempts, generation, evaluation)


def read_trials(
    campaign: Campaign,
    portfolio: Portfolio,
    sandbox_for: Callable[[Task], SandboxBackend],
    store: ArtifactStore,
    selection: TrialSelection = EVERY_TRIAL,
) -> list[StoredTrial]:
    """Every planned trial's records (or the `selection`'s), by instance then trial; the attempt log is
    listed once per stage, not once per trial, and the quarantine once, after every read (which rejects what
    fails its checks), to give each trial its rejected records."""
    log = AttemptLog(store)
    sandboxes: dict[str, SandboxBackend] = {}
    records = []
    # One instance's: only its specs (an instance the portfolio lacks is left for the selection to name).
    only = selection.instances[0] if len(selection.instances) == 1 and selection.instances[0] in portfolio else None
    for identity in selection.pick(trial_specs(campaign, portfolio, sandbox_for, only)):
        task = portfolio.instance(identity.instance_id)
        sandbox = sandboxes.setdefault(identity.instance_id, sandbox_for(task))
        records.append(read_trial(identity, task, portfolio, sandbox, store, log))
    rejected = store.rejected()
    return [replace(r, rejected=_rejected_rows(r, rejected)) for r in records] if rejected else records


def _rejected_rows(records: StoredTrial, rejected: Sequence[RejectedRecord]) -> tuple[RejectedRow, ...]:
    """The rejected records that were the trial's: its generation, its final evaluation, their attempts, and its
    environment's attempts (an evaluation's key is known only from an intact generation)."""
    identity = records.identity
    evaluation = [identity.evaluation_key(records.generation.patch_sha256)] if records.generation else []
    own = (identity.generation_key, *evaluation, environment_artifact_key(identity.environment_key))
    return tuple(
        RejectedRow(identity.campaign, identity.instance_id, identity.trial, r.key, r.reason, r.quarantined_as)
        for r in rejected
        if any(r.key == key or r.key.startswith(f"{attempts_prefix(key)}/") for key in own)
    )
