"""Validating a campaign's instances before it runs, as SWE-bench validates its datasets.

An instance measures an agent only if its reference solution resolves it and
the unchanged repository does not, every time. Validation grades both with the
campaign's own grading (`Task.grade`), each K times in fresh workspaces, and
classifies the instance as exactly one of:

- `valid`: the reference resolved every time, the empty patch never;
- `flaky`: the reference or the empty patch gave different results across repeats;
- `gold_fails`: the reference never resolved (a reference that does not apply included);
- `empty_passes`: the empty patch resolved every time: the tests do not show the bug;
- `environment_failed`: the environment could not be prepared, or a run ended in an
  infrastructure or harness outcome, so the instance was not judged at all.

The reference of a code task is its gold patch. A terminal task has none: its
reference is what the oracle agent produces in a campaign, the diff of a fresh
workspace after `solution/solve.sh` ran there, made anew for every repeat since
solve.sh itself may be what is unreliable.

A reference that resolved, never stopped by a limit, is also kept as evidence
that the instance passes within the campaign's limits (`leave_limit_evidence`,
trial/limits.py), so that a patch whose tests hit them is scored.

Every instance that is not valid goes into the validation report's
`quarantine`, which a campaign leaves out with `exclude: {validation: <file>}`
(config/campaign.py, datasets/portfolio.py). Instances the campaign already leaves out are not
validated again and stay in the quarantine, so a campaign may point at the
very report that its next validation rewrites.
"""

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.common.outcomes import InfrastructureError, Outcome
from eval_pipeline.grading.verdict import GRADING_VERSION, PASSED, Verdict, graded
from eval_pipeline.sandbox import EnvironmentHandle, SandboxBackend
from eval_pipeline.store.artifacts import ArtifactStore
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.task import Task
from eval_pipeline.trial.limits import UNSCORED_LIMITS, VALIDATION, GradingConditions, record_reference_pass
from eval_pipeline.trial.reference import grade_in_fresh_workspace, reference_verdict

# Bump when the validation procedure or its classification changes: the validation asset shows as stale.
VALIDATION_VERSION = "1"
VALIDATION_FILE = "validation.json"
DEFAULT_REPEATS = 3
GOLD, EMPTY = "gold", "empty"  # the two patches an instance is validated with
_DETAIL_CHARS = 2000
_LISTED_TESTS = 10


class Status(StrEnum):
    VALID = "valid"
    GOLD_FAILS = "gold_fails"
    EMPTY_PASSES = "empty_passes"
    FLAKY = "flaky"
    ENVIRONMENT_FAILED = "environment_failed"


@dataclass(frozen=True)
class InstanceValidation:
    """One instance's validation: how often each patch ended in each outcome, and why it is not valid.

    `content_hash` is the validated instance's, so a report can tell a validation of
    the instance as it is now from one of an older version of it.
    """

    slice: str
    instance_id: str
    content_hash: str
    status: str
    repeats: int
    gold: dict[str, int]  # outcome -> runs, for the reference solution
    empty: dict[str, int]  # outcome -> runs, for the empty patch
    detail: str  # the first run that made the instance not valid, or the environment's failure; empty when valid
    # The typed outcome an environment that could not be prepared ended in (`image_not_found`, `engine_error`),
    # '' otherwise: a report lists the instances whose images a registry would not give, by outcome.
    environment_outcome: str = ""

    @property
    def gold_resolved(self) -> int:
        return self.gold.get(Outcome.RESOLVED, 0)

    @property
    def gold_runs(self) -> int:
        return sum(self.gold.values())

    @property
    def empty_resolved(self) -> int:
        return self.empty.get(Outcome.RESOLVED, 0)

    @property
    def empty_runs(self) -> int:
        return sum(self.empty.values())

    def as_record(self) -> dict[str, Any]:
        """The JSON record, with the resolved and run counts spelled out for readers of the file (the environment's
        outcome only where there is one)."""
        record = asdict(self)
        if not self.environment_outcome:
            del record["environment_outcome"]
        return {
            **record,
            "gold_resolved": self.gold_resolved,
            "gold_runs": self.gold_runs,
            "empty_resolved": self.empty_resolved,
            "empty_runs": self.empty_runs,
        }


def classify(gold: Sequence[Outcome], empty: Sequence[Outcome]) -> Status:
    """The instance's status from its runs' outcomes.

    A run that was not judged (an infrastructure or harness outcome), or no run at all,
    leaves the instance unjudged. Disagreement across repeats comes next: a result
    that changes says nothing reliable about the reference or the tests. Then a
    reference that never resolves, whatever the empty patch did, since it is the
    first thing to fix; then an empty patch that always resolves.
    """
    if not gold or not empty or not all(outcome.is_scored for outcome in (*gold, *empty)):
        return Status.ENVIRONMENT_FAILED
    gold_resolved = sum(outcome.is_resolved for outcome in gold)
    empty_resolved = sum(outcome.is_resolved for outcome in empty)
    if 0 < gold_resolved < len(gold) or 0 < empty_resolved < len(empty):
        return Status.FLAKY
    if gold_resolved == 0:
        return Status.GOLD_FAILS
    if empty_resolved == len(empty):
        return Status.EMPTY_PASSES
    return Status.VALID


def _run_detail(patch: str, number: int, repeats: int, verdict: Verdict) -> str:
    """What one run that made the instance not valid shows: its outcome, why, the graded tests that did not
    pass (failed or missing), and the last lines of the test run's log, which say why where the list cannot."""
    text = f"{patch} patch, run {number} of {repeats}: {verdict.outcome}"
    if verdict.detail:
        text += f": {verdict.detail[-_DETAIL_CHARS // 2 :]}"
    failing = [f"{test} ({status})" for test, status in verdict.tests.items() if status != PASSED]
    if failing:
        more = f" and {len(failing) - _LISTED_TESTS} more" if len(failing) > _LISTED_TESTS else ""
        text += f"; tests not passing: {', '.join(failing[:_LISTED_TESTS])}{more}"
    elif verdict.outcome.is_resolved and patch == EMPTY:
        text += "; every graded test passed without a fix"
    if patch == GOLD and (log := _log_tail(verdict)):
        text += f"; the test log ends: {log}"
    return text


def _log_tail(verdict: Verdict, lines: int = 8) -> str:
    """The last non-empty lines of the run's test log, joined by ' | ' ('' when the tests never ran)."""
    log = next((step.get("log_tail", "") for step in verdict.steps if step.get("step") == "run_tests"), "")
    tail = [line.strip() for line in log.splitlines() if line.strip()][-lines:]
    return " | ".join(tail)[-_DETAIL_CHARS // 3 :]


def _first_failure(runs: Sequence[tuple[str, Verdict]], repeats: int) -> str:
    """The first run whose result an instance that is valid would not have given."""
    numbers: Counter[str] = Counter()
    for patch, verdict in runs:
        numbers[patch] += 1
        if not verdict.outcome.is_scored or verdict.outcome.is_resolved == (patch == EMPTY):
            return _run_detail(patch, numbers[patch], repeats, verdict)[:_DETAIL_CHARS]
    return ""


def validate_task(
    slice_name: str,
    task: Task,
    spec: EnvironmentSpec,
    environment: EnvironmentHandle,
    sandbox: SandboxBackend,
    *,
    repeats: int,
    test_timeout_s: float,
    timeout_multiplier: float = 1.0,
) -> InstanceValidation:
    """Grade the reference `repeats` times, then the empty patch `repeats` times, each in a fresh workspace.

    A run that could not be judged settles the instance as environment_failed, so the
    remaining runs are skipped: they would cost time and tell nothing more.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")

    def reference() -> Verdict:
        return reference_verdict(task, spec, environment, sandbox, test_timeout_s, timeout_multiplier)

    def unchanged() -> Verdict:
        return grade_in_fresh_workspace(task, spec, "", environment, sandbox, test_timeout_s, "validate")

    plan: list[tuple[str, Callable[[], Verdict]]] = [(GOLD, reference)] * repeats + [(EMPTY, unchanged)] * repeats
    runs: list[tuple[str, Verdict]] = []
    for patch, run in plan:
        runs.append((patch, graded(run)))
        if not runs[-1][1].outcome.is_scored:
            break
    outcomes = {patch: [verdict.outcome for kind, verdict in runs if kind == patch] for patch in (GOLD, EMPTY)}
    status = classify(outcomes[GOLD], outcomes[EMPTY])
    return InstanceValidation(
        slice=slice_name,
        instance_id=task.instance_id,
        content_hash=task.content_hash,
        status=status.value,
        repeats=repeats,
        gold=dict(Counter(outcome.value for outcome in outcomes[GOLD])),
        empty=dict(Counter(outcome.value for outcome in outcomes[EMPTY])),
        detail="" if status is Status.VALID else _first_failure(runs, repeats),
    )


def environment_failure(slice_name: str, task: Task, repeats: int, error: Exception) -> InstanceValidation:
    """The validation of an instance whose environment could not be prepared: nothing was graded."""
    outcome = error.outcome.value if isinstance(error, InfrastructureError) else ""
    kind = outcome or type(error).__name__
    return InstanceValidation(
        slice=slice_name,
        instance_id=task.instance_id,
        content_hash=task.content_hash,
        status=Status.ENVIRONMENT_FAILED.value,
        repeats=repeats,
        gold={},
        empty={},
        detail=f"the environment could not be prepared ({kind}): {error}"[-_DETAIL_CHARS:],
        environment_outcome=outcome,
    )


def leave_limit_evidence(store: ArtifactStore, validation: InstanceValidation, under: GradingConditions) -> None:
    """Keep a validation whose reference resolved, and never ran into a limit, as evidence that the instance
    passes within the limits it was validated under (trial/limits.py): a patch whose tests hit them there is
    scored. A reference stopped by a limit even once says those limits are not known to be enough. The counts
    kept with it are the reference's pass rate there, which intention to treat reads (trial/reference.py)."""
    if validation.gold_resolved and not UNSCORED_LIMITS & validation.gold.keys():
        runs = f"{validation.gold_resolved} of {validation.gold_runs} reference runs resolved"
        record_reference_pass(store, under, VALIDATION, runs, validation.gold_resolved, validation.gold_runs)


def build_validation(
    campaign: str,
    dataset_version: str,
    validations: Sequence[InstanceValidation],
    excluded: Mapping[str, str],
) -> dict[str, Any]:
    """The validation report: every validated instance, the count per status, and the quarantine.

    `excluded` (instance id -> reason) are the instances the campaign leaves out: they were
    not validated, and stay quarantined until the campaign includes them again.
    """
    ordered = sorted(validations, key=lambda v: (v.slice, v.instance_id))
    counts = Counter(v.status for v in ordered)
    not_valid = {v.instance_id for v in ordered if v.status != Status.VALID}
    return {
        "campaign": campaign,
        "dataset_version": dataset_version,
        "harness_version": HARNESS_VERSION,
        "grading_version": GRADING_VERSION,
        "validation_version": VALIDATION_VERSION,
        "statuses": {status.value: counts[status.value] for status in Status},
        "quarantine": sorted(not_valid | set(excluded)),
        "excluded": dict(sorted(excluded.items())),
        "instances": [v.as_record() for v in ordered],
    }


def all_valid(validation: Mapping[str, Any]) -> bool:
    """Whether every instance the report validated (or the selection's, `selected`) is valid (instances the
    campaign excludes were not validated)."""
    records = validation["selected"].values() if "selected" in validation else validation["instances"]
    return all(record["status"] == Status.VALID for record in records)
