"""Evaluation: grade a stored generation in a pristine workspace and keep every attempt.

A scored verdict (resolved, unresolved, patch_apply_failed, and the agent's
own agent_error and agent_timeout) is final: it is stored under a key derived
from the generation, environment, grading version and resources, and reused
from then on. A verdict that could not score the patch (an infrastructure
outcome, a grading error) is kept as an attempt under `attempts/` but never
stored as final, so a retry or the next run of the same trial grades it again.
Every attempt, final or not, is kept; a retry adds one and deletes none.
"""

import time
import traceback
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.artifacts import ArtifactStore, StoredRecord, attempts_prefix
from eval_pipeline.benchmark import EnvironmentSpec
from eval_pipeline.generation import COMPLETED, Generation
from eval_pipeline.grading import GRADING_VERSION, Verdict, grade_task
from eval_pipeline.hashing import stable_hash
from eval_pipeline.outcomes import InfrastructureError, Outcome
from eval_pipeline.sandbox import EnvironmentHandle, SandboxBackend
from eval_pipeline.tasks import Task


@dataclass(frozen=True)
class Evaluation(StoredRecord):
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
    environment_key: str
    environment: dict[str, Any]
    resources: dict[str, Any]
    test_timeout_s: float
    started_at: str
    duration_s: float
    harness_version: str
    grading_version: str
    reused: bool = False

    @property
    def outcome_type(self) -> Outcome:
        return Outcome(self.outcome)


def evaluation_key(generation: Generation, environment_key: str, sandbox: SandboxBackend, test_timeout_s: float) -> str:
    identity = {
        "version": GRADING_VERSION,
        "generation": generation.key,
        "patch": generation.patch_sha256,
        "environment": environment_key,
        "resources": sandbox.resources_record(),
        "test_timeout_s": test_timeout_s,
    }
    return f"evaluation/{stable_hash(identity)}.json"


def _judge(
    instance: Task,
    spec: EnvironmentSpec,
    generation: Generation,
    environment: EnvironmentHandle,
    sandbox: SandboxBackend,
    test_timeout_s: float,
) -> Verdict:
    """The verdict, whatever happens: the agent's own failure, the grading's, or the infrastructure's."""
    if generation.status != COMPLETED:  # the agent crashed or ran out of time: its failure, already final
        return Verdict(Outcome(generation.status), detail=generation.error[-2000:])
    try:
        with sandbox.workspace(environment, label=f"eval-{generation.seed}") as workspace:
            return grade_task(instance, spec, generation.patch, workspace, test_timeout_s)
    except InfrastructureError as error:
        return Verdict(error.outcome, detail=f"{error}\n{traceback.format_exc(limit=20)}")
    except Exception:  # noqa: BLE001 - a harness bug is an outcome, not a crash, and no verdict on the agent
        return Verdict(Outcome.GRADING_ERROR, detail=traceback.format_exc(limit=20))


def evaluate(
    instance: Task,
    spec: EnvironmentSpec,
    generation: Generation,
    environment: EnvironmentHandle,
    sandbox: SandboxBackend,
    store: ArtifactStore,
    test_timeout_s: float,
) -> Evaluation:
    """The final evaluation of a generation, grading it only when none is stored."""
    key = evaluation_key(generation, environment.key, sandbox, test_timeout_s)
    if (stored := store.get(key)) is not None:
        return Evaluation.from_payload(stored, reused=True)

    started_at = datetime.now(UTC).isoformat()
    clock = time.monotonic()
    verdict = _judge(instance, spec, generation, environment, sandbox, test_timeout_s)
    evaluation = Evaluation(
        key=key,
        attempt_id=uuid.uuid4().hex,
        generation_key=generation.key,
        instance_id=instance.instance_id,
        seed=generation.seed,
        agent_config_hash=generation.agent_config_hash,
        patch_sha256=generation.patch_sha256,
        outcome=verdict.outcome.value,
        detail=verdict.detail,
        tests=verdict.tests,
        steps=verdict.steps,
        environment_key=environment.key,
        environment=dict(environment.details),
        resources=sandbox.resources_record(),
        test_timeout_s=test_timeout_s,
        started_at=started_at,
        duration_s=round(time.monotonic() - clock, 3),
        harness_version=HARNESS_VERSION,
        grading_version=GRADING_VERSION,
    )
    try:
        store.put(f"{attempts_prefix(key)}/{evaluation.attempt_id}.json", evaluation.payload())
    except InfrastructureError as error:  # the verdict is lost with the store: an infrastructure outcome
        return replace(evaluation, outcome=error.outcome.value, detail=f"{error}\nthe verdict was {verdict.outcome}")
    if verdict.outcome.is_scored and not store.put(key, evaluation.payload()):
        return Evaluation.from_payload(store.get(key) or evaluation.payload(), reused=True)
    return evaluation
