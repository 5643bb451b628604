"""Evaluation: grade a stored generation (afresh, or by its verifier's run in place) and keep every attempt.

A scored verdict (resolved, unresolved, patch_apply_failed, and the agent's
own agent_error and agent_timeout) is final: it is stored under a key derived
from the generation, environment, grading version and resources, and reused
from then on. A verdict that could not score the patch (an infrastructure
outcome, a grading error) is kept in the attempt log but never stored as
final, so a retry or the next run of the same trial grades it again. Every
attempt, final or not, is kept; a retry adds one and deletes none. A test run
stopped by a limit within which the instance's reference is known to pass is
the patch's doing, scored and final (limits.py); an oracle's resolved
evaluation is that knowledge.

Every planned trial counts unless the harness shows the fault is its own (intention to treat). Every grading
of the agent's product goes through one choke point (grading/verdict.py: `graded`), so whatever ends it
abnormally, returned (no report, a crash of the runner, the OOM killer, the time limit, a verifier killed by a
signal) or raised (any exception type: the engine refusing a command, a name or a report's encoding the
harness could not read, a re-grade's container from the agent's snapshot in which the verifier cannot be set
up), is followed at once by the instance's reference, graded in the same environment under the same limits,
up to `reference_repeats` times (fewer or more where validation measured its pass rate), again only after a
chance failure of its own (trial/reference.py). If it resolves, the patch broke the run: the trial is scored
not resolved (`patch_broke_test_run`, or the limit's scored twin) and the reference's pass is kept as
evidence. If it never does, the fault is the harness's, retried and never scored. A patch that ends
its test process before any report, makes the tests allocate until they are killed, or leaves a name or a
byte the harness chokes on, so loses the trial instead of leaving the denominator. What fails before grading
begins (the snapshot gone, a workspace that cannot be made) is the machinery's, and no verdict on the patch.

How a generation is graded is its `grading_mode`, recorded with the evaluation: a task whose product is a
patch (a SWE-bench row; a terminal task on the local backend) by `patch_replay` in a fresh workspace; a task
judged in its container by its verifier's run `in_container`, right after the agent (stored with the
generation), scored here; and where that run does not answer this evaluation (it ran under another test time
limit or other resources, as a calibration's multipliers give), by a re-grade from the generation's `snapshot`:
the verifier in a fresh container of the agent's files, without its processes.

A final evaluation's key holds its patch's hash, known only once the
generation exists. So that a campaign can tell its finished trials from one
listing, each final evaluation also leaves a marker under `scored/`, named by
what is known before anything runs (`scored_id`) and by the evaluation, and
sealed with the results key (store/mac.py) so that a scan can believe it.
"""

import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from functools import partial
from typing import Any

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.agents import applies_reference
from eval_pipeline.common.outcomes import InfrastructureError, Outcome
from eval_pipeline.common.text import counted
from eval_pipeline.grading.verdict import (
    GRADING_VERSION,
    REFERENCE_REPEATS,
    Verdict,
    VerifierRun,
    graded,
    interrupted,
)
from eval_pipeline.sandbox import EnvironmentHandle, SandboxBackend
from eval_pipeline.sandbox.base import SnapshotUnusable
from eval_pipeline.store.artifacts import ArtifactStore, StoredRecord
from eval_pipeline.store.attempts import Attempt, Stage, keep_attempt, now
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.task import Task
from eval_pipeline.tasks.terminal.verifier import score_verifier, with_in_place_findings
from eval_pipeline.trial.generation import COMPLETED, Generation
from eval_pipeline.trial.limits import (
    CAMPAIGN,
    GradingConditions,
    ReferencePass,
    record_reference_pass,
    reference_pass,
    scored_at_limits,
    scored_twin,
)
from eval_pipeline.trial.reference import reference_gradings, reference_verdict, resolving_run
from eval_pipeline.trial.spec import evaluation_key, scored_id, scored_marker_key

PATCH_REPLAY, IN_CONTAINER, SNAPSHOT = "patch_replay", "in_container", "snapshot"


class Evaluation(StoredRecord):
    record_version: int = 3
    key: str
    attempt_id: str
    generation_key: str
    instance_id: str
    seed: int
    agent_config_hash: str
    patch_sha256: str
    outcome: str
    detail: str
    tests: dict[str, str]
    steps: list[dict[str, Any]]
    # What the patch reached for on the runner's side (grading/patch_audit.py), whatever the verdict.
    audit: list[dict[str, str]] = []
    environment_key: str
    environment: dict[str, Any]
    resources: dict[str, Any]
    test_timeout_s: float
    started_at: str
    duration_s: float
    harness_version: str
    grading_version: str
    # The reference's pass (limits.py: ReferencePass) that scored a test run stopped by a limit; else None.
    limit_evidence: dict[str, Any] | None = None
    # How the generation was graded (`grading_mode`): patch_replay, in_container or snapshot.
    grading_mode: str = PATCH_REPLAY

    @property
    def outcome_type(self) -> Outcome:
        return Outcome(self.outcome)


def mark_scored(store: ArtifactStore, trial_scored_id: str, evaluation_key: str, stored: dict[str, Any]) -> None:
    """Leave the marker of a stored final evaluation (`stored`: its payload as stored). Best effort: without
    it, a scan reads the trial's generation to find its evaluation, and leaves the marker then."""
    marker = scored_marker_key(store, trial_scored_id, evaluation_key, store.fingerprint(evaluation_key, stored))
    with suppress(InfrastructureError):
        store.put(marker, {"evaluation_key": evaluation_key})


def grading_mode(generation: Generation, test_timeout_s: float, resources: dict[str, Any]) -> str:
    """How `generation` is graded under `test_timeout_s` and `resources` (the sandbox's record): by its
    in-container run only if that ran under both (the module's docstring says why)."""
    verification = generation.verification
    if verification and (verification["test_timeout_s"], generation.verified_resources) == (test_timeout_s, resources):
        return IN_CONTAINER
    return SNAPSHOT if generation.snapshot is not None else PATCH_REPLAY


def _judge(
    task: Task,
    spec: EnvironmentSpec,
    generation: Generation,
    environment: EnvironmentHandle,
    sandbox: SandboxBackend,
    test_timeout_s: float,
) -> Verdict:
    """The verdict, whatever happens: the agent's own failure, the grading's, or the infrastructure's. Every
    grading of the agent's product goes through `graded`, so what it raises leaves the `grading_interrupted`
    step, which tells it from the machinery failing before (a snapshot gone, a workspace that cannot be made).
    So does a re-grade's container, started from the agent's snapshot, in which the harness could not set the
    verifier up (`SnapshotUnusable`): the agent, root in its container, may have broken it. A verdict reached
    stands if what follows it (removing its workspace) fails."""
    if generation.status != COMPLETED:  # the agent crashed or ran out of time: its failure, already final
        return Verdict(Outcome(generation.status), detail=generation.error[-2000:])
    mode = grading_mode(generation, test_timeout_s, sandbox.resources_record())
    if mode == IN_CONTAINER:
        return graded(lambda: score_verifier(VerifierRun.from_record(generation.verification or {})))
    verdict: Verdict | None = None
    try:
        if mode == SNAPSHOT:  # the agent's files are in the snapshot: nothing to apply
            environment = sandbox.snapshot_environment(environment, generation.snapshot or {})
        patch = "" if mode == SNAPSHOT else generation.patch
        with sandbox.workspace(environment, label=f"eval-{generation.seed}") as workspace:
            verdict = graded(partial(task.grade, spec, patch, workspace, test_timeout_s))
        return with_in_place_findings(verdict, generation.verification) if mode == SNAPSHOT else verdict
    except Exception as error:  # noqa: BLE001 - every failure is an outcome, not a crash
        if verdict is not None:  # reached: what came after it (removing its workspace) failed
            return replace(verdict, detail=f"{verdict.detail}\nonce the verdict was reached: {error!r}")
        failure = interrupted(error)  # typed as grading types it (an infrastructure outcome, a full disk)
        return failure if isinstance(error, SnapshotUnusable) else replace(failure, steps=[])  # grading never began


def _by_intention_to_treat(
    verdict: Verdict,
    generation: Generation,
    reference: Callable[[], Verdict],
    store: ArtifactStore,
    under: GradingConditions,
    repeats: int,
) -> tuple[Verdict, ReferencePass | None]:
    """A grading of the agent's product that ended abnormally (a verdict with a grading step that is not
    scored), judged by `reference` (the instance's reference graded at once in the same environment under the
    same limits, up to as often as `reference_gradings` says: `resolving_run`): resolved once, the patch broke
    the run and the trial is scored; never resolved, the fault is the harness's, left unscored."""
    # The reference's own grading is never judged by grading the reference again: that would be a retry.
    if verdict.outcome.is_scored or not verdict.steps or applies_reference(generation.agent_config):
        return verdict, None
    gradings = reference_gradings(repeats, reference_pass(store, under))
    resolved, outcomes = resolving_run(reference, gradings)
    ended = ", ".join(outcome.value for outcome in outcomes)
    if not resolved:
        graded_at_once = f"the reference, graded at once {counted(len(outcomes), 'time')} under the same limits"
        detail = f"{verdict.detail}\n{graded_at_once}, ended {ended}: the harness's fault, not the patch's"
        return replace(verdict, detail=detail), None
    evidence = record_reference_pass(store, under, CAMPAIGN, f"graded at once after {generation.key}")
    detail = (
        f"{verdict.detail}\nscored: the reference, graded at once in this environment under these limits, resolved"
        f" (its gradings ended {ended})"
    )
    return replace(verdict, outcome=scored_twin(verdict.outcome), detail=detail), evidence


def _kept_as_evidence(
    evaluation: Evaluation, generation: Generation, store: ArtifactStore, under: GradingConditions
) -> Evaluation:
    """The evaluation, kept first as evidence that the instance passes within its limits if it is the oracle's
    and resolved (the oracle's patch is the reference solution)."""
    if evaluation.outcome_type.is_resolved and applies_reference(generation.agent_config):
        record_reference_pass(store, under, CAMPAIGN, evaluation.key)
    return evaluation


def evaluate(
    task: Task,
    spec: EnvironmentSpec,
    generation: Generation,
    environment: EnvironmentHandle,
    sandbox: SandboxBackend,
    store: ArtifactStore,
    test_timeout_s: float,
    reference_repeats: int = REFERENCE_REPEATS,
) -> Evaluation:
    """The final evaluation of a generation, grading it only when none is stored. An oracle's resolved
    evaluation, stored or new, is kept as evidence that the instance passes within these limits.
    `reference_repeats` is R, how often the reference may be graded before an abnormal end of grading is called
    the harness's (module docstring)."""
    resources = sandbox.resources_record()
    key = evaluation_key(generation.key, generation.patch_sha256, environment.key, resources, test_timeout_s)
    under = GradingConditions.of(task, environment.key, sandbox, test_timeout_s)
    if (stored := store.get(key)) is not None:
        return _kept_as_evidence(Evaluation.from_payload(stored, key=key, reused=True), generation, store, under)

    started_at = now()
    clock = time.monotonic()
    verdict, evidence = scored_at_limits(
        _judge(task, spec, generation, environment, sandbox, test_timeout_s), store, under
    )
    if evidence is None:
        reference = partial(reference_verdict, task, spec, environment, sandbox, test_timeout_s)
        verdict, evidence = _by_intention_to_treat(verdict, generation, reference, store, under, reference_repeats)
    evaluation = Evaluation(
        key=key,
        attempt_id=uuid.uuid4().hex,
        generation_key=generation.key,
        instance_id=task.instance_id,
        seed=generation.seed,
        agent_config_hash=generation.agent_config_hash,
        patch_sha256=generation.patch_sha256,
        outcome=verdict.outcome.value,
        detail=verdict.detail,
        tests=verdict.tests,
        steps=verdict.steps,
        audit=[flag.as_record() for flag in verdict.audit],
        environment_key=environment.key,
        environment=dict(environment.details),
        resources=under.resources,
        test_timeout_s=test_timeout_s,
        started_at=started_at,
        duration_s=round(time.monotonic() - clock, 3),
        harness_version=HARNESS_VERSION,
        grading_version=GRADING_VERSION,
        limit_evidence=evidence.payload() if evidence else None,
        grading_mode=grading_mode(generation, test_timeout_s, under.resources),
    )
    attempt = Attempt(
        stage=Stage.EVALUATION,
        outcome=evaluation.outcome,
        started_at=started_at,
        duration_s=evaluation.duration_s,
        detail=evaluation.detail,
        keys={"artifact": key, "generation": generation.key, "attempt_id": evaluation.attempt_id},
        record=evaluation.payload(),
    )
    try:
        keep_attempt(store, key, attempt)
    except InfrastructureError as error:  # the verdict is lost with the store: an infrastructure outcome
        detail = f"{error}\nthe verdict was {verdict.outcome}"
        return evaluation.model_copy(update={"outcome": error.outcome.value, "detail": detail})
    if not verdict.outcome.is_scored:
        return evaluation
    stored = evaluation.payload()
    if not store.put(key, stored):  # a concurrent run stored it first: theirs is the record
        stored = store.get(key) or stored
        evaluation = Evaluation.from_payload(stored, key=key, reused=True)
    mark_scored(store, scored_id(generation.key, environment.key, evaluation.resources, test_timeout_s), key, stored)
    return _kept_as_evidence(evaluation, generation, store, under)
