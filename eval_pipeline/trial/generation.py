"""Generation: an agent works on a fresh workspace of the instance and leaves a patch.

Generation is the expensive half of a trial (minutes and tokens with a real
model), so its artifact is keyed by what determines it (instance content,
agent config, seed) and never recomputed once stored, not even when its
evaluation is re-run.

A task whose product is its container's state (a terminal task, on the container backend) is judged where
Harbor judges it: right after its agent, in the agent's own container, its processes still running. So its
generation also keeps the container's filesystem as a snapshot image (taken before the verifier touches it) and
the verifier's raw run, which evaluation scores (trial/evaluation.py says when it re-grades from the snapshot instead).

The agent's own failures (it raised, ran over its time or used up its steps,
tokens or cost) are stored as the generation, final like any other, with what
it did until then. An infrastructure failure under the agent
stores nothing final: it is kept in the attempt log and raised, so the step
is retried.
"""

import time
import traceback
from typing import Any

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.agents.base import (
    Agent,
    AgentLimitReached,
    AgentOutput,
    AgentStopped,
    AgentTask,
    AgentTimeout,
    agent_task,
)
from eval_pipeline.common.hashing import sha256_text
from eval_pipeline.common.outcomes import InfrastructureError, Outcome, no_space_left
from eval_pipeline.sandbox import EnvironmentHandle, SandboxBackend, Workspace
from eval_pipeline.sandbox.base import RunnerEnded
from eval_pipeline.sandbox.patches import WorkspaceDiffError, workspace_diff
from eval_pipeline.store.artifacts import ArtifactStore, StoredRecord
from eval_pipeline.store.attempts import Stage, failures_kept, now
from eval_pipeline.tasks.task import Task
from eval_pipeline.trial.spec import GENERATION_VERSION, task_generation_key

COMPLETED = "completed"


class Generation(StoredRecord):
    """A stored generation: the patch, how it was made (the agent's trajectory, its steps and why it stopped),
    and what it cost."""

    record_version: int = 4
    key: str
    instance_id: str
    agent_config: dict[str, Any]
    agent_config_hash: str
    seed: int
    status: str
    error: str
    patch: str
    patch_sha256: str
    trajectory: list[dict[str, Any]]
    input_tokens: int
    output_tokens: int
    cost_usd: float
    steps: int = 0
    stop_reason: str = ""
    # A task judged in its container: the container's snapshot ({image, image_id}), the verifier's run in it
    # right after the agent (grading.VerifierRun.as_record) and the sandbox's resources record it ran under (an
    # evaluation under other limits re-grades); None where the product is the patch.
    snapshot: dict[str, str] | None = None
    verification: dict[str, Any] | None = None
    verified_resources: dict[str, Any] | None = None
    started_at: str
    duration_s: float
    harness_version: str
    generation_version: str


def _solve(agent: Agent, assignment: AgentTask, workspace: Workspace) -> tuple[AgentOutput | None, str, str]:
    """Run the agent: its output, status (completed, agent_error, agent_timeout, agent_limit) and error text."""
    try:
        return agent.solve(assignment, workspace), COMPLETED, ""
    except InfrastructureError:
        raise  # the infrastructure failed under the agent: retry, never blame the agent
    except AgentTimeout as error:
        return error.output, Outcome.AGENT_TIMEOUT.value, str(error)
    except AgentLimitReached as error:
        return error.output, Outcome.AGENT_LIMIT.value, str(error)
    except AgentStopped as error:  # the agent ended itself (mini's repeated format errors): its work is kept
        return error.output, Outcome.AGENT_ERROR.value, str(error)
    except Exception as error:  # noqa: BLE001 - any agent crash is recorded as the agent's failure...
        if full := no_space_left(error):  # ...but the machine's full disk under it, which is retried
            raise full from error
        return None, Outcome.AGENT_ERROR.value, traceback.format_exc(limit=20)


def _verified_in_place(
    task: Task, workspace: Workspace, name: str, status: str, test_timeout_s: float | None
) -> tuple[dict[str, str] | None, dict[str, Any] | None]:
    """(snapshot, verifier run) of a workspace judged in place whose agent completed: the snapshot (named
    `name`) first, so that it holds the agent's state and none of the verifier's; (None, None) where the product
    is the patch or there is nothing to judge. A verifier's run that raised on what the agent left (a reward file
    past what the harness reads) keeps no run: evaluation re-grades the snapshot, through grading's choke point."""
    if status != COMPLETED or test_timeout_s is None or not workspace.judged_in_place:
        return None, None
    snapshot = workspace.snapshot(name)
    try:
        run = task.verify_in_place(workspace, test_timeout_s)
    except InfrastructureError:
        raise  # the machinery's: retried
    except Exception:  # noqa: BLE001 - judged at evaluation, by the re-grade and intention to treat
        return snapshot, None
    return snapshot, run.as_record() if run else None


def _environment_serves(sandbox: SandboxBackend, environment: EnvironmentHandle) -> bool:
    """Whether a fresh workspace of the environment runs a command: then a runner that ended under an agent's
    commands ended by the agent's doing, scored; otherwise the machine failed, and the generation is retried."""
    try:
        with sandbox.workspace(environment, label="probe") as probe:
            return probe.run("true", timeout_s=60).ok
    except InfrastructureError:
        return False


def generate(
    task: Task,
    agent: Agent,
    seed: int,
    environment: EnvironmentHandle,
    sandbox: SandboxBackend,
    store: ArtifactStore,
    timeout_multiplier: float = 1.0,
    network: bool = False,
    test_timeout_s: float | None = None,
) -> Generation:
    """The stored generation for (instance, agent, seed), running the agent only if there is none.

    An exception raised by the agent is the agent's failure: it is stored as an
    `agent_error` generation (`agent_timeout` when it ran out of time) and not
    retried. So is its command runner ending under it with an exit of its own
    (killed by the agent's processes: RunnerEnded) while a fresh workspace of
    its environment runs a command: what the agent's own commands cause is
    scored. Any other
    InfrastructureError (a lost environment, the engine, the store, the model
    API) is kept as a failed attempt and raised, so nothing final is stored
    and the step can be retried.

    The agent's workspace has network only when `network` (its variant opted in). A task judged in its
    container is verified there under `test_timeout_s` right after the agent (no verification without it).
    """
    key = task_generation_key(task, agent.config, seed, timeout_multiplier, network, sandbox.isolation)
    if (stored := store.get(key)) is not None:
        return Generation.from_payload(stored, key=key, reused=True)

    assignment = agent_task(task, seed, timeout_multiplier)
    started_at = now()
    clock = time.monotonic()
    snapshot = verification = None
    with failures_kept(store, Stage.GENERATION, key, {"artifact": key}):
        try:
            with sandbox.workspace(environment, label=f"gen-{assignment.seed}", network=network) as workspace:
                output, status, error = _solve(agent, assignment, workspace)
                try:
                    patch = workspace_diff(workspace, task.base_commit)
                except WorkspaceDiffError as failure:  # the agent left a workspace that makes no patch
                    patch, status, error = "", Outcome.AGENT_ERROR.value, f"{error}\n{failure}".strip()
                name = key.removeprefix("generation/").removesuffix(".json")  # the snapshot is named by its key
                snapshot, verification = _verified_in_place(task, workspace, name, status, test_timeout_s)
        except RunnerEnded as failure:
            if not _environment_serves(sandbox, environment):
                raise  # the machine's fault: retried
            output, patch, status = None, "", Outcome.AGENT_ERROR.value
            error = f"the command runner ended under the agent while its environment still serves others: {failure}"
    generation = Generation(
        key=key,
        instance_id=task.instance_id,
        agent_config=agent.config,
        agent_config_hash=agent.config_hash,
        seed=assignment.seed,
        status=status,
        error=error,
        patch=patch,
        patch_sha256=sha256_text(patch),
        trajectory=output.trajectory if output else [],
        input_tokens=output.input_tokens if output else 0,
        output_tokens=output.output_tokens if output else 0,
        cost_usd=output.cost_usd if output else 0.0,
        steps=output.steps if output else 0,
        stop_reason=output.stop_reason if output else status,
        snapshot=snapshot,
        verification=verification,
        verified_resources=sandbox.resources_record() if verification else None,
        started_at=started_at,
        duration_s=round(time.monotonic() - clock, 3),
        harness_version=HARNESS_VERSION,
        generation_version=GENERATION_VERSION,
    )
    if not store.put(key, generation.payload()):  # a concurrent run stored it first: theirs is the record
        return Generation.from_payload(store.get(key) or generation.payload(), key=key, reused=True)
    return generation
