"""What grading decides, for a task of any kind: the verdict, a terminal verifier's run, the two steps
every kind of grading shares (applying the model's patch, telling a run a limit stopped), and the one
choke point every grading of an agent's product goes through (`graded`).

Each kind of task owns its grading (`Task.grade`, tasks/task.py): a code task's is
tasks/swebench/grading.py, a terminal task's `TerminalTask.grade` (tasks/terminal/task.py) and its verifier
(tasks/terminal/verifier.py).

`graded` turns whatever a grading raises (any exception type: applying the patch,
reading names, parsing a report in any encoding, reading files back, the
verifier, a re-grade's snapshot) into an abnormal verdict that records the
`grading_interrupted` step. A verdict with a grading step is one the agent's
product reached, and evaluation judges every such verdict that is not scored
by the instance's reference (trial/evaluation.py, intention to treat).
"""

import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from eval_pipeline.common.outcomes import (
    NO_SPACE_TEXT,
    InfrastructureError,
    Outcome,
    StorageError,
    no_space_left,
)
from eval_pipeline.grading.patch_audit import AuditFlag, audit_patch
from eval_pipeline.sandbox import Workspace
from eval_pipeline.sandbox.patches import apply_patch, patch_problem

__all__ = [
    "ERROR",
    "FAILED",
    "GRADING_VERSION",
    "MISSING",
    "PASSED",
    "REFERENCE_REPEATS",
    "SEVERITY",
    "SKIPPED",
    "XFAIL",
    "XPASS",
    "Verdict",
    "VerifierRun",
    "GRADING_INTERRUPTED",
    "apply_model_patch",
    "graded",
    "interrupted",
    "stopped_by_a_limit",
]

# Bump when grading logic changes: evaluation artifacts are keyed by it and assets show as stale.
GRADING_VERSION = "8"


# SWE-bench's statuses (swebench.harness.constants.TestStatus), and ours for a graded test with no result.
PASSED, FAILED, SKIPPED, ERROR, XFAIL, MISSING = "PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL", "MISSING"
# A test pytest expected to fail that passed (not strict): SWE-bench's parsers read no such line, so its grading
# counts it as neither a pass nor a skip.
XPASS = "XPASS"
# From the best report of a test to the worst: a test reported more than once keeps its worst.
SEVERITY = {PASSED: 0, XFAIL: 1, SKIPPED: 2, XPASS: 3, FAILED: 4, ERROR: 5}
# The step of a grading that raised: whatever it raised happened while the agent's product was being graded.
GRADING_INTERRUPTED = "grading_interrupted"
# How many times, by default, the reference is graded at once before an abnormal end of a grading is called the
# harness's (a campaign's `retries.reference_repeats`; trial/reference.py).
REFERENCE_REPEATS = 3


@dataclass
class Verdict:
    """A grading's result. Its `steps` are what grading ran on the agent's product, so a verdict without one
    was reached before grading began (the agent's own failure, or the machinery's)."""

    outcome: Outcome
    tests: dict[str, str] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    detail: str = ""
    audit: list[AuditFlag] = field(default_factory=list)


def interrupted(error: Exception) -> Verdict:
    """The verdict of a grading of the agent's product that raised `error`: the infrastructure outcome it
    carries, a storage error where the machine's full disk is behind it, else a grading error; abnormal, with
    the `grading_interrupted` step, for the reference to judge."""
    if isinstance(error, InfrastructureError):
        outcome = error.outcome
    else:
        outcome = Outcome.STORAGE_ERROR if no_space_left(error) else Outcome.GRADING_ERROR
    step = {"step": GRADING_INTERRUPTED, "outcome": outcome.value, "error": type(error).__name__}
    return Verdict(outcome, steps=[step], detail="".join(traceback.format_exception(error, limit=20)))


def graded(grade: Callable[[], Verdict]) -> Verdict:
    """The choke point: the verdict `grade` reaches on the agent's product (or the reference's), or, whatever
    it raises instead (any exception type), `interrupted`."""
    try:
        return grade()
    except Exception as error:  # noqa: BLE001 - every abnormal end of grading is judged by the reference
        return interrupted(error)


def apply_model_patch(verdict: Verdict, model_patch: str, workspace: Workspace) -> bool:
    """Apply the model's patch (an empty one trivially); False, with the verdict set, when it does not apply."""
    if not model_patch.strip():
        return True
    verdict.audit = audit_patch(model_patch)
    if problem := patch_problem(model_patch):
        verdict.outcome, verdict.detail = Outcome.PATCH_APPLY_FAILED, f"the model patch was not applied: {problem}"
        return False
    applied = apply_patch(workspace, model_patch, "model.patch")
    verdict.steps.append({"step": "apply_model_patch", **applied.summary()})
    if not applied.ok and NO_SPACE_TEXT in applied.stderr:  # the disk, not the patch: never scored against it
        raise StorageError(f"applying the model patch: the machine's disk is full: {applied.stderr[-500:]}")
    if not applied.ok:
        verdict.outcome, verdict.detail = Outcome.PATCH_APPLY_FAILED, "the model patch does not apply"
    return applied.ok


def stopped_by_a_limit(verdict: Verdict, run: Mapping[str, Any], test_timeout_s: float) -> bool:
    """A test run cut off by a limit is no verdict on the patch: the outcome says which limit. Past the disk
    quota it is a grading error, abnormal, so that the reference graded at once tells the patch's fault
    (trial/evaluation.py)."""
    if run["timed_out"]:
        verdict.outcome, verdict.detail = Outcome.TEST_TIMEOUT, f"the tests ran over {test_timeout_s:g}s"
    elif run["oom_killed"]:
        verdict.outcome, verdict.detail = Outcome.OOM_KILLED, "the tests were OOM-killed at the memory ceiling"
    elif run.get("storage_exceeded"):
        verdict.outcome, verdict.detail = Outcome.GRADING_ERROR, "the test run filled more disk than the trial's quota"
    return bool(run["timed_out"] or run["oom_killed"] or run.get("storage_exceeded"))


@dataclass(frozen=True)
class VerifierRun:
    """What a terminal task's verifier did, as read the moment it ended: test.sh's run (`ExecResult.summary`),
    the reward files it left (None for a file it did not write) and the time limit it ran under. Kept with the
    generation when the verifier ran in the agent's own container, and scored by `score_verifier`."""

    run: dict[str, Any]
    reward_txt: str | None
    reward_json: str | None
    test_timeout_s: float
    in_place: bool = False  # in the agent's own container, its processes still running

    def as_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "VerifierRun":
        return cls(**record)
