"""The instance's reference solution, graded now, as a campaign grades a trial.

Validation grades it to judge the instance (trial/validation.py). Evaluation grades it
at once when a trial's test phase ended abnormally (no report, a crash, the OOM
killer, the time limit, the engine refusing the command: trial/evaluation.py), so that
such a trial leaves the denominator only when the harness shows the fault is its
own: the reference, run right then in the same environment under the same limits,
failed too.
"""

import traceback
from collections.abc import Callable

from eval_pipeline.agents.base import AgentTimeout, agent_task
from eval_pipeline.agents.builtin import OracleAgent
from eval_pipeline.common.outcomes import InfrastructureError, Outcome
from eval_pipeline.grading.verdict import Verdict, grade_task
from eval_pipeline.sandbox import EnvironmentHandle, SandboxBackend
from eval_pipeline.sandbox.patches import WorkspaceDiffError, workspace_diff
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.task import Task
from eval_pipeline.tasks.terminal.verifier import score_verifier

__all__ = ["grade_in_fresh_workspace", "judged", "reference_verdict"]


def judged(run: Callable[[], Verdict]) -> Verdict:
    """A run's verdict, whatever happens, typed as evaluation types it: the machine's failure is an
    infrastructure outcome, a harness bug a grading error."""
    try:
        return run()
    except InfrastructureError as error:
        return Verdict(error.outcome, detail=str(error))
    except Exception:  # noqa: BLE001 - a harness bug is this run's outcome, not a crash of its caller
        return Verdict(Outcome.GRADING_ERROR, detail=traceback.format_exc(limit=20))


def grade_in_fresh_workspace(
    task: Task,
    spec: EnvironmentSpec,
    patch: str,
    environment: EnvironmentHandle,
    sandbox: SandboxBackend,
    test_timeout_s: float,
    label: str,
) -> Verdict:
    with sandbox.workspace(environment, label=label) as workspace:
        return grade_task(task, spec, patch, workspace, test_timeout_s)


def reference_verdict(
    task: Task,
    spec: EnvironmentSpec,
    environment: EnvironmentHandle,
    sandbox: SandboxBackend,
    test_timeout_s: float,
    timeout_multiplier: float = 1.0,
) -> Verdict:
    """Grade the reference: its patch where the kind has one (a code task's gold patch), else what its
    reference (solve.sh) leaves in a fresh workspace, made as the oracle agent makes it in a campaign (a
    solve.sh that fails or runs out of time is the reference's failure), judged as a campaign judges it: in that
    very workspace where it is judged in place (a terminal task's container), else as its diff."""
    if task.reference_patch is not None:
        return grade_in_fresh_workspace(
            task, spec, task.reference_patch, environment, sandbox, test_timeout_s, "reference"
        )
    try:
        with sandbox.workspace(environment, label="reference-oracle") as workspace:
            OracleAgent().solve(agent_task(task, seed=0, timeout_multiplier=timeout_multiplier), workspace)
            patch = workspace_diff(workspace, task.base_commit)
            if workspace.judged_in_place and (run := task.verify_in_place(workspace, test_timeout_s)):
                return score_verifier(run)
    except AgentTimeout as error:
        return Verdict(Outcome.AGENT_TIMEOUT, detail=f"solve.sh: {error}")
    except WorkspaceDiffError as error:
        return Verdict(Outcome.AGENT_ERROR, detail=f"solve.sh left a workspace that makes no patch: {error}")
    return grade_in_fresh_workspace(task, spec, patch, environment, sandbox, test_timeout_s, "reference")
