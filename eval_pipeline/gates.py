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
- `max_hard_violations` (default 0): scored trials whose patch changed test
  infrastructure (conftest.py, test files, pytest settings), which the grader
  undid; an attempt to game the grader is never tolerated by default.
- `min_coverage` (default 0): the share of planned trials that were scored.

Evaluating a policy gives a machine-readable decision: passed, and every
violation with its rule, slice, measured value and limit.
"""

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

ANY_SLICE = "*"
_RELATIVE_METRICS = {"p95_duration": ("duration_s", "p95"), "cost_per_resolved": ("cost_per_resolved", None)}
_FIELDS = {"environment", "candidate", "floors", "max_regression", "max_hard_violations", "min_coverage"}


class GatePolicyError(ValueError):
    """A policy file that cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class GatePolicy:
    environment: str
    candidate: str
    floors: Mapping[str, float] = field(default_factory=dict)
    max_regression: Mapping[str, float] = field(default_factory=dict)
    max_hard_violations: int = 0
    min_coverage: float = 0.0

    def floor_for(self, slice_name: str) -> float | None:
        return self.floors.get(slice_name, self.floors.get(ANY_SLICE))


@dataclass(frozen=True)
class Violation:
    rule: str
    slice: str
    value: float | None
    limit: float
    message: str


@dataclass(frozen=True)
class GateDecision:
    environment: str
    candidate: str
    baseline: str
    passed: bool
    violations: tuple[Violation, ...]

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


def _number(raw: Any, where: str, origin: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw < 0:
        raise GatePolicyError(f"{origin}: field {where}: expected a non-negative number, got {raw!r}")
    return float(raw)


def parse_policy(data: Any, origin: str) -> GatePolicy:
    """A GatePolicy from parsed YAML; `origin` names the file in error messages."""
    if not isinstance(data, Mapping):
        raise GatePolicyError(f"{origin}: expected a mapping at the top level")
    if unknown := set(data) - _FIELDS:
        raise GatePolicyError(f"{origin}: unknown field(s) {sorted(unknown)}")
    for name in ("environment", "candidate"):
        if not isinstance(data.get(name), str) or not data[name]:
            raise GatePolicyError(f"{origin}: field {name}: expected a name, got {data.get(name)!r}")
    floors, regression = data.get("floors") or {}, data.get("max_regression") or {}
    if not isinstance(floors, Mapping) or not isinstance(regression, Mapping):
        raise GatePolicyError(f"{origin}: fields floors and max_regression: expected mappings")
    if unknown := set(regression) - {"resolved_rate", *_RELATIVE_METRICS}:
        raise GatePolicyError(f"{origin}: field max_regression: unknown metric(s) {sorted(unknown)}")
    hard = data.get("max_hard_violations", 0)
    if isinstance(hard, bool) or not isinstance(hard, int) or hard < 0:
        raise GatePolicyError(f"{origin}: field max_hard_violations: expected a count, got {hard!r}")
    return GatePolicy(
        environment=data["environment"],
        candidate=data["candidate"],
        floors={str(name): _number(value, f"floors.{name}", origin) for name, value in floors.items()},
        max_regression={name: _number(value, f"max_regression.{name}", origin) for name, value in regression.items()},
        max_hard_violations=hard,
        min_coverage=_number(data.get("min_coverage", 0), "min_coverage", origin),
    )


def load_policy(path: Path) -> GatePolicy:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise GatePolicyError(f"gate policy {path}: cannot be read: {error}") from None
    except yaml.YAMLError as error:
        raise GatePolicyError(f"{path}: not valid YAML: {error}") from None
    return parse_policy(data, str(path))


def _metric(summary: Mapping[str, Any], metric: str) -> float | None:
    name, part = _RELATIVE_METRICS[metric]
    value = summary.get(name)
    return value.get(part) if part and value is not None else value


def _slice_violations(policy: GatePolicy, slice_name: str, variants: Mapping[str, Any]) -> list[Violation]:
    """Every rule of the policy on one slice's summaries of the candidate and the baseline."""
    candidate = variants[policy.candidate]
    found = []

    def violated(rule: str, value: float | None, limit: float, message: str) -> None:
        found.append(Violation(rule, slice_name, value, limit, f"{slice_name}: {message}"))

    rate, floor = candidate["resolved_rate"], policy.floor_for(slice_name)
    if floor is not None and (rate is None or rate < floor):
        violated("floor", rate, floor, f"resolved rate {rate} is below the floor {floor}")
    if candidate["coverage"] < policy.min_coverage:
        coverage = candidate["coverage"]
        violated(
            "min_coverage", coverage, policy.min_coverage, f"coverage {coverage:.3f} is below {policy.min_coverage}"
        )
    if (hard := candidate["hard_violations"]) > policy.max_hard_violations:
        violated(
            "max_hard_violations", hard, policy.max_hard_violations, f"{hard} trial(s) changed test infrastructure"
        )
    versus = candidate.get("vs_baseline") or {}
    tolerated = policy.max_regression.get("resolved_rate")
    if tolerated is not None and (diff := versus.get("diff")) is not None and diff < -tolerated:
        message = f"resolved rate {diff:+.3f} against the baseline, beyond -{tolerated}"
        violated("max_regression.resolved_rate", diff, tolerated, message)
    baseline = variants.get(versus.get("baseline"))
    for metric in sorted(_RELATIVE_METRICS.keys() & policy.max_regression.keys()):
        ours, theirs = _metric(candidate, metric), _metric(baseline, metric) if baseline else None
        if ours is None or not theirs:
            continue  # nothing to compare: no resolved trial, or no baseline on this slice
        increase, tolerated = ours / theirs - 1, policy.max_regression[metric]
        if increase > tolerated:
            message = f"{metric} {increase:+.1%} against the baseline, beyond +{tolerated:.0%}"
            violated(f"max_regression.{metric}", increase, tolerated, message)
    return found


def evaluate_gate(policy: GatePolicy, report: Mapping[str, Any]) -> GateDecision:
    """Check every slice of the report against the policy; a slice the candidate did not run fails it."""
    violations: list[Violation] = []
    for slice_name, variants in report["slices"].items():
        if policy.candidate not in variants:
            violations.append(
                Violation("candidate", slice_name, None, 0, f"{slice_name}: no results for {policy.candidate}")
            )
            continue
        violations += _slice_violations(policy, slice_name, variants)
    return GateDecision(
        environment=policy.environment,
        candidate=policy.candidate,
        baseline=report["baseline"],
        passed=not violations,
        violations=tuple(violations),
    )
