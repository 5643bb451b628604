"""Release gates: whether a campaign's report lets its candidate variant be promoted to an environment.

A policy file (one per environment: staging, prod) sets, for the candidate
variant:

- `floors`: the lowest resolved rate per slice (`"*"` for every slice not
  named). Each slice is checked on its own, so a slice below its floor blocks
  promotion even when the portfolio's rate rises.
- `max_regression`: the largest tolerated regression against the campaign's
  baseline variant, on every slice: `resolved_rate` in rate points (the paired
  difference, candidate minus baseline, may not fall below minus this);
  `p95_duration` and `cost_per_resolved` as fractions above the baseline's.
- `max_hard_violations` (default 0): scored trials whose patch reached for the
  test runner: changed test infrastructure (conftest.py, test files, pytest
  settings), which the grader undid, raised a patch audit flag, or forged its
  report (`report_forged`); an attempt to game the grader is never tolerated
  by default.
- `min_coverage` (default 0): the share of planned trials that were scored.

Evaluating a policy is a pure function of the policy and the report; its
decision (report_model.GateDecision: passed, and every violation with its
rule, slice, measured value and limit) is stored in the report itself, which
the CLI, the HTML report and the Dagster gate checks read.
"""

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from eval_pipeline.config_validation import describe_errors, problem_lines
from eval_pipeline.report_model import GateDecision, Report, VariantSummary, Violation

ANY_SLICE = "*"
# The metrics a regression is measured on relative to the baseline's value, and where a summary holds them.
_RELATIVE_METRICS: dict[str, Callable[[VariantSummary], float | None]] = {
    "p95_duration": lambda summary: summary.duration_s.p95,
    "cost_per_resolved": lambda summary: summary.cost_per_resolved,
}
Limit = Annotated[float, Field(ge=0, strict=True)]  # strict: `true` or "0.5" in a policy is a mistake, not a number


class GatePolicyError(ValueError):
    """A policy file that cannot be used; the message names the file and field."""


class GatePolicy(BaseModel):
    """One environment's release gate, as its policy file sets it (every field validated at load)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    environment: Annotated[str, Field(min_length=1, strict=True)]
    candidate: Annotated[str, Field(min_length=1, strict=True)]
    floors: dict[str, Limit] = {}
    max_regression: dict[Literal["resolved_rate", "p95_duration", "cost_per_resolved"], Limit] = {}
    max_hard_violations: Annotated[int, Field(ge=0, strict=True)] = 0
    min_coverage: Limit = 0.0

    @field_validator("floors", "max_regression", mode="before")
    @classmethod
    def _empty_mapping(cls, value: Any) -> Any:
        """`floors:` with nothing under it is YAML's null: no floors, as when the field is left out."""
        return {} if value is None else value

    def floor_for(self, slice_name: str) -> float | None:
        return self.floors.get(slice_name, self.floors.get(ANY_SLICE))


def parse_policy(data: Any, origin: str) -> GatePolicy:
    """A GatePolicy from parsed YAML; `origin` names the file in error messages."""
    try:
        return GatePolicy.model_validate(data)
    except ValidationError as error:
        raise GatePolicyError(problem_lines(origin, describe_errors(error, GatePolicy))) from None


def load_policy(path: Path) -> GatePolicy:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise GatePolicyError(f"gate policy {path}: cannot be read: {error}") from None
    except yaml.YAMLError as error:
        raise GatePolicyError(f"{path}: not valid YAML: {error}") from None
    return parse_policy(data, str(path))


def _slice_violations(policy: GatePolicy, slice_name: str, variants: Mapping[str, VariantSummary]) -> list[Violation]:
    """Every rule of the policy on one slice's summaries of the candidate and the baseline."""
    candidate = variants[policy.candidate]
    found = []

    def violated(rule: str, value: float | None, limit: float, message: str) -> None:
        found.append(
            Violation(rule=rule, slice=slice_name, value=value, limit=limit, message=f"{slice_name}: {message}")
        )

    rate, floor = candidate.resolved_rate, policy.floor_for(slice_name)
    if floor is not None and (rate is None or rate < floor):
        violated("floor", rate, floor, f"resolved rate {rate} is below the floor {floor}")
    if (coverage := candidate.coverage) < policy.min_coverage:
        violated(
            "min_coverage", coverage, policy.min_coverage, f"coverage {coverage:.3f} is below {policy.min_coverage}"
        )
    if (hard := candidate.hard_violations) > policy.max_hard_violations:
        violated(
            "max_hard_violations", hard, policy.max_hard_violations, f"{hard} trial(s) reached for the test runner"
        )
    versus = candidate.vs_baseline
    tolerated = policy.max_regression.get("resolved_rate")
    if tolerated is not None and versus and (diff := versus.diff) is not None and diff < -tolerated:
        message = f"resolved rate {diff:+.3f} against the baseline, beyond -{tolerated}"
        violated("max_regression.resolved_rate", diff, tolerated, message)
    baseline = variants.get(versus.baseline) if versus else None
    for metric in sorted(_RELATIVE_METRICS.keys() & policy.max_regression.keys()):
        ours, theirs = _RELATIVE_METRICS[metric](candidate), _RELATIVE_METRICS[metric](baseline) if baseline else None
        if ours is None or not theirs:
            continue  # nothing to compare: no resolved trial, or no baseline on this slice
        increase, tolerated = ours / theirs - 1, policy.max_regression[metric]
        if increase > tolerated:
            message = f"{metric} {increase:+.1%} against the baseline, beyond +{tolerated:.0%}"
            violated(f"max_regression.{metric}", increase, tolerated, message)
    return found


def evaluate_gate(policy: GatePolicy, report: Report) -> GateDecision:
    """Check every slice of the report against the policy; a slice the candidate did not run fails it."""
    violations: list[Violation] = []
    for slice_name, variants in report.slices.items():
        if policy.candidate not in variants:
            message = f"{slice_name}: no results for {policy.candidate}"
            violations.append(Violation(rule="candidate", slice=slice_name, value=None, limit=0, message=message))
            continue
        violations += _slice_violations(policy, slice_name, variants)
    return GateDecision(
        environment=policy.environment,
        candidate=policy.candidate,
        baseline=report.baseline,
        passed=not violations,
        violations=tuple(violations),
    )


def with_gates(report: Report, policies: Sequence[GatePolicy]) -> Report:
    """The report carrying each policy's decision on it, by environment."""
    return report.model_copy(
        update={"gates": {policy.environment: evaluate_gate(policy, report) for policy in policies}}
    )
