"""The instance's reference solution, graded now, as a campaign grades a trial, and how often.

Validation grades it to judge the instance (trial/validation.py). Evaluation grades it
at once when the grading of a trial's product ended abnormally (no report, a crash, the OOM
killer, the time limit, the engine refusing the command, anything grading raised:
trial/evaluation.py), so that such a trial leaves the denominator only when the harness
shows the fault is its own: the reference, run right then in the same environment under
the same limits, failed too.

One failure of a reference that passes with probability p happens by chance with probability 1 - p, and with
it a patch that broke its test run would leave the score (a flaky reference let half of a verifier-killer's
trials go unscored). So the reference is graded up to R times (`reference_repeats`; grading/verdict.py's
REFERENCE_REPEATS by default), and the fault is the harness's only if none resolved: a trial the patch broke
stays unscored with probability (1 - p)^R (1/8 for p = 1/2 and R = 3). Grading stops at the reference's first
resolve (the patch's fault), and at its first end that is not scored: the machinery failed the reference too,
which shows the fault is the harness's, and grading it again would only give a passing fault the time to clear
and an honest trial a score it did not earn. Where validation measured the reference's pass rate under the
very same conditions (k of K runs resolved, trial/limits.py), the number of gradings is the fewest that bring
the estimated (1 - p)^n to 2^-R, the rate R gradings give a reference that passes half the time:
`reference_gradings`.
"""

import math
from collections.abc import Callable

from eval_pipeline.agents.base import AgentTimeout, agent_task, finished
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.grading.verdict import Verdict, graded
from eval_pipeline.sandbox import EnvironmentHandle, SandboxBackend
from eval_pipeline.sandbox.patches import WorkspaceDiffError, workspace_diff
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.task import Task
from eval_pipeline.tasks.terminal.verifier import score_verifier
from eval_pipeline.trial.limits import ReferencePass

__all__ = ["grade_in_fresh_workspace", "reference_gradings", "reference_verdict", "resolving_run"]

# The most gradings a validated pass rate may ask for, per `reference_repeats`: a reference that passes so
# rarely that it needs more belongs in validation's quarantine.
MAX_GRADINGS_PER_REPEAT = 3


def reference_gradings(repeats: int, evidence: ReferencePass | None) -> int:
    """How many times the reference is graded before an abnormal end is called the harness's: `repeats`, or,
    where `evidence` holds the pass rate p validation measured, the fewest n with (1 - p)^n <= 2^-repeats (at
    least 1, at most MAX_GRADINGS_PER_REPEAT x `repeats`)."""
    rate = evidence.pass_rate if evidence else None
    if rate is None:
        return repeats
    needed = math.ceil(repeats * math.log(2) / -math.log1p(-rate) - 1e-9)  # less a rounding error's worth
    return max(1, min(needed, MAX_GRADINGS_PER_REPEAT * repeats))


def resolving_run(reference: Callable[[], Verdict], gradings: int) -> tuple[bool, list[Outcome]]:
    """Grade `reference` up to `gradings` times through the grading's choke point (`graded`: whatever it raises
    is its outcome), again only after an end that is scored and not resolved (its own chance failure): whether
    one resolved, and every grading's outcome."""
    outcomes = [graded(reference).outcome]
    while len(outcomes) < gradings and outcomes[-1].is_scored and not outcomes[-1].is_resolved:
        outcomes.append(graded(reference).outcome)
    return outcomes[-1].is_resolved, outcomes


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
        return task.grade(spec, patch, workspace, test_timeout_s)


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
            finished(agent_task(task, seed=0, timeout_multiplier=timeout_multiplier).apply_reference(workspace))
            patch = workspace_diff(workspace, task.base_commit)
            if workspace.judged_in_place and (run := task.verify_in_place(workspace, test_timeout_s)):
                return score_verifier(run)
    except AgentTimeout as error:
        return Verdict(Outcome.AGENT_TIMEOUT, detail=f"solve.sh: {error}")
    except WorkspaceDiffError as error:
        return Verdict(Outcome.AGENT_ERROR, detail=f"solve.sh left a workspace that makes no patch: {error}")
    return grade_in_fresh_workspace(task, spec, patch, environment, sandbox, test_timeout_s, "reference")
