"""Evidence that an instance passes within given limits, and the scoring of a test run that one of them stopped.

A test run cut off at the memory ceiling or at its time limit is, on its own,
no verdict on the patch: a tight ceiling or a slow machine stops a correct
solution too, so such a run is an infrastructure outcome, retried and never
scored. Were that always so, a patch could buy its way out of scoring by making
the tests allocate until they are killed. What tells the two apart is the
instance's reference solution: once it was graded resolved under exactly the
same limits (the sandbox's resources record: backend, mode, requested and
enforced limits; and the test time limit), in the same environment and by the
same grading, those limits are known to be enough, and a patch whose tests hit
one made them need more. Its outcome is then the limit's scored twin
(`patch_oom_killed`, `patch_test_timeout`: kind agent, not resolved, final,
never retried), and its evaluation names the evidence. Without evidence
nothing changes.

Evidence is a `ReferencePass` under `limit_evidence/`, one per (instance
content, environment, grading version, limits): a trial's evaluation identity
less its patch, so limits that differ in any way (a pass at 4 GB says nothing
of 1 GB) name another record. Validation leaves one when a reference run
resolved; evaluation leaves one when an oracle trial resolved. The first
written stays. A trial graded before its instance's evidence exists has the
reference graded at once under its limits (trial/evaluation.py, intention to treat),
whose pass is kept here too. Evidence that cannot be read counts as none.

Validation's evidence also holds how many of its reference runs resolved, of how many: the reference's pass
rate under these limits, which sets how often intention to treat grades it (trial/reference.py). A campaign's
pass is one run kept because it resolved, which measures no rate.
"""

from contextlib import suppress
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Self

from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.common.outcomes import InfrastructureError, Outcome
from eval_pipeline.grading.verdict import GRADING_VERSION, Verdict
from eval_pipeline.sandbox import SandboxBackend
from eval_pipeline.store.artifacts import ArtifactStore, RecordError, StoredRecord
from eval_pipeline.store.attempts import now
from eval_pipeline.tasks.task import Task

LIMIT_EVIDENCE = "limit_evidence"
VALIDATION, CAMPAIGN = "validation", "campaign"  # where a reference pass was seen
# Each limit's outcome, the flag its grading step records (ExecResult.summary) and its scored twin.
_SCORED_TWIN = {Outcome.TEST_TIMEOUT: Outcome.PATCH_TEST_TIMEOUT, Outcome.OOM_KILLED: Outcome.PATCH_OOM_KILLED}
_STEP_FLAG = {Outcome.TEST_TIMEOUT: "timed_out", Outcome.OOM_KILLED: "oom_killed"}
UNSCORED_LIMITS = frozenset(_SCORED_TWIN)
SCORED_LIMITS = frozenset(_SCORED_TWIN.values())


@dataclass(frozen=True)
class GradingConditions:
    """What a grading's result depends on besides the patch: the instance's content, its environment and the
    limits. A reference pass speaks only for gradings under exactly these."""

    instance_id: str
    content_hash: str
    environment_key: str
    resources: dict[str, Any] = field(hash=False)  # the sandbox's resources record, as evaluations store it
    test_timeout_s: float

    @classmethod
    def of(cls, task: Task, environment_key: str, sandbox: SandboxBackend, test_timeout_s: float) -> Self:
        return cls(task.instance_id, task.content_hash, environment_key, sandbox.resources_record(), test_timeout_s)

    @property
    def evidence_key(self) -> str:
        """Where a reference pass under these limits is kept; the grading version is part of the name, since
        another grading may need more."""
        identity = {
            "version": GRADING_VERSION,
            "instance": self.content_hash,
            "environment": self.environment_key,
            "resources": self.resources,
            "test_timeout_s": self.test_timeout_s,
        }
        return f"{LIMIT_EVIDENCE}/{stable_hash(identity)}.json"


class ReferencePass(StoredRecord):
    """The instance's reference solution, graded resolved under these limits: the evidence that scores a patch
    whose tests hit one of them."""

    record_version: int = 2
    instance_id: str
    content_hash: str
    environment_key: str
    resources: dict[str, Any]
    test_timeout_s: float
    grading_version: str
    source: str  # VALIDATION or CAMPAIGN
    reference: str  # which run resolved: the validation's reference runs, or the oracle trial's evaluation key
    recorded_at: str
    # Validation's reference runs that resolved, of all it graded (0 of 0: a campaign's pass, which measures no rate).
    resolved_runs: int = 0
    runs: int = 0

    def describe(self) -> str:
        return f"{self.source}: {self.reference}"

    @property
    def pass_rate(self) -> float | None:
        """The reference's pass rate as validation measured it, (k + 1) / (K + 2) for k of K runs resolved
        (Laplace's rule of succession: K of K says the reference passes often, not always); None unmeasured."""
        return (self.resolved_runs + 1) / (self.runs + 2) if self.runs else None


def record_reference_pass(
    store: ArtifactStore, under: GradingConditions, source: str, reference: str, resolved_runs: int = 0, runs: int = 0
) -> ReferencePass:
    """Keep the evidence that the reference resolved under `under` (`resolved_runs` of validation's `runs`),
    unless some is kept already, and return it. Best effort: a store that cannot be written keeps none, and
    limits hit later stay unscored."""
    record = ReferencePass(
        **asdict(under),
        grading_version=GRADING_VERSION,
        source=source,
        reference=reference,
        recorded_at=now(),
        resolved_runs=resolved_runs,
        runs=runs,
    )
    with suppress(InfrastructureError):
        store.put(under.evidence_key, record.payload())
    return record


def scored_twin(outcome: Outcome) -> Outcome:
    """The scored outcome of a test run that ended abnormally as `outcome` where the reference passes: a
    limit's own twin, or `patch_broke_test_run`."""
    return _SCORED_TWIN.get(outcome, Outcome.PATCH_BROKE_TEST_RUN)


def reference_pass(store: ArtifactStore, under: GradingConditions) -> ReferencePass | None:
    """The evidence kept for `under`; None when there is none or it cannot be read."""
    with suppress(InfrastructureError, RecordError):
        if (payload := store.get(under.evidence_key)) is not None:
            return ReferencePass.from_payload(payload, key=under.evidence_key, reused=True)
    return None


def _stopped_in_a_step(verdict: Verdict) -> bool:
    """Whether a grading step (the test run) recorded the very limit the outcome names: a limit outcome that
    came from anywhere else is the machinery's, not the patch's."""
    flag = _STEP_FLAG[verdict.outcome]
    return any(step.get(flag) for step in verdict.steps)


def scored_at_limits(
    verdict: Verdict, store: ArtifactStore, under: GradingConditions
) -> tuple[Verdict, ReferencePass | None]:
    """The verdict as scored, with the evidence that scored it: a test run stopped by a limit within which the
    reference passes becomes the limit's scored twin; every other verdict is returned as it is."""
    if verdict.outcome not in _SCORED_TWIN or not _stopped_in_a_step(verdict):
        return verdict, None
    if (evidence := reference_pass(store, under)) is None:
        return verdict, None
    detail = f"{verdict.detail}; scored: the reference passed within these limits ({evidence.describe()})"
    return replace(verdict, outcome=scored_twin(verdict.outcome), detail=detail), evidence
