"""Evaluating a release gate (config/gates.py: the policy file) on a campaign's report: a pure function of
the policy and the report, whose decision is stored in the report itself.

A gate judges a whole campaign: on a report some of whose planned trials have not run (a run of a selection of
them, or one stopped early), it is not judged, which no release passes (a single `not_judged` violation saying
how many trials have not run), rather than judged on what happens to have run.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from eval_pipeline.config.gates import GatePolicy
from eval_pipeline.results.model import PORTFOLIO, GateDecision, Report, VariantSummary, Violation
from eval_pipeline.trial.records import MISSING

__all__ = ["NOT_JUDGED", "evaluate_gate", "verdict", "with_gates"]

NOT_JUDGED = "not_judged"  # the rule of a decision on a report with trials not yet run

# The metrics a regression is measured on relative to the baseline's value, and where a summary holds them.
_RELATIVE_METRICS: dict[Literal["p95_duration", "cost_per_resolved"], Callable[[VariantSummary], float | None]] = {
    "p95_duration": lambda summary: summary.duration_s.p95,
    "cost_per_resolved": lambda summary: summary.cost_per_resolved,
}


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
        measured = "no trial scored, so no resolved rate for" if rate is None else f"resolved rate {rate:.3g} is below"
        violated("floor", rate, floor, f"{measured} the floor {floor}")
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


def _not_run(report: Report) -> int:
    """How many of the report's planned trials have no outcome at all (`missing`): never run."""
    return sum(summary.outcomes.get(MISSING, 0) for summary in report.variants.values())


def _violations(policy: GatePolicy, report: Report) -> list[Violation]:
    """Every slice of the report checked against the policy; a slice the candidate did not run fails it."""
    violations: list[Violation] = []
    for slice_name, variants in report.slices.items():
        if policy.candidate not in variants:
            message = f"{slice_name}: no results for {policy.candidate}"
            violations.append(Violation(rule="candidate", slice=slice_name, value=None, limit=0, message=message))
            continue
        violations += _slice_violations(policy, slice_name, variants)
    return violations


def evaluate_gate(policy: GatePolicy, report: Report) -> GateDecision:
    """The policy's decision on the report: every rule on every slice, or, while planned trials have not run,
    not judged (one `not_judged` violation); it passes only a judged report that breaks no rule."""
    if not_run := _not_run(report):
        message = (
            f"{not_run} of the {report.planned} planned trials have not run (a run of a selection, or one stopped"
            " early): a gate judges only a whole campaign; run it without filters"
        )
        violations = [Violation(rule=NOT_JUDGED, slice=PORTFOLIO, value=not_run, limit=0, message=message)]
    else:
        violations = _violations(policy, report)
    return GateDecision(
        environment=policy.environment,
        candidate=policy.candidate,
        baseline=report.baseline,
        passed=not violations,
        violations=tuple(violations),
    )


def verdict(decision: GateDecision) -> str:
    """A decision as a report shows it: passed, FAILED, or not judged (trials of the campaign have not run)."""
    if decision.passed:
        return "passed"
    return "not judged" if any(v.rule == NOT_JUDGED for v in decision.violations) else "FAILED"


def with_gates(report: Report, policies: Sequence[GatePolicy]) -> Report:
    """The report carrying each policy's decision on it, by environment."""
    return report.model_copy(
        update={"gates": {policy.environment: evaluate_gate(policy, report) for policy in policies}}
    )
