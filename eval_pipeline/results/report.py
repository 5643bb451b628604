"""The campaign report: resolved rates with intervals, coverage and outcomes, per slice and variant.

`build_report` computes every number (results/statistics.py) into one typed Report
(results/model.py): `variants` summarises each variant over the whole portfolio
(every instance weighs the same), `slices` gives the same summary within each
slice, `validation` says how the campaign's instances fared in their
validation (trial/validation.py), and `gates` holds each release gate's decision
(config/gates.py). `write_report` writes it as report.json (the model itself) and
report.md (results/markdown.py); results/html.py writes report.html.
"""

import json
import os
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.common.foreign_text import valid_unicode
from eval_pipeline.common.hashing import sha256_text
from eval_pipeline.common.outcomes import Outcome, OutcomeKind
from eval_pipeline.config.gates import GatePolicy
from eval_pipeline.results.gates import with_gates
from eval_pipeline.results.markdown import render_markdown
from eval_pipeline.results.model import (
    ID_LISTS,
    REPORT_FILES,
    Durations,
    InvalidInstance,
    PairedComparison,
    RejectedRecordEntry,
    Report,
    SeedSpread,
    ValidationSummary,
    VariantSummary,
)
from eval_pipeline.results.statistics import (
    RateEstimate,
    distribution,
    paired_difference,
    pass_at_k,
    per_resolved,
    planning_mde,
    resolved_rate,
    seed_spread,
)
from eval_pipeline.results.warehouse import ResultRow
from eval_pipeline.tasks.terminal.verifier_tools import EXPOSURE_FLAGS
from eval_pipeline.trial.limits import SCORED_LIMITS, UNSCORED_LIMITS
from eval_pipeline.trial.records import MISSING, RejectedRow
from eval_pipeline.trial.validation import Status


def _scores(results: Sequence[ResultRow]) -> dict[str, list[bool]]:
    """Instance id -> the scored trials' resolved flags (instances with none keep an empty list)."""
    scores: dict[str, list[bool]] = {}
    for result in results:
        flags = scores.setdefault(result.instance_id, [])
        if result.scored:
            flags.append(result.resolved)
    return scores


def _estimate_fields(estimate: RateEstimate | None) -> dict[str, Any]:
    """The rate estimate's fields; all None (and n 0) when nothing was scored."""
    if estimate is None:
        return dict.fromkeys(RateEstimate.__dataclass_fields__) | {"n": 0, "n_repos": 0}
    return asdict(estimate)


def _reached_for_the_runner(result: ResultRow) -> bool:
    """A hard violation: the patch changed test infrastructure, raised an audit flag or forged its report. A flag
    that says only that a trial is exposed (a verifier run beside processes the agent left) is none."""
    flags = {kind for kind in result.audit_flags.split(",") if kind} - EXPOSURE_FLAGS
    return bool(result.test_infrastructure_changes or flags or result.outcome == Outcome.REPORT_FORGED)


EMPTY_PATCH_SHA256 = sha256_text("")


def id_list(result: ResultRow) -> str:
    """Which of SWE-bench's report lists (model.ID_LISTS) a trial's instance is in, by the trial's typed outcome:
    `resolved_ids` resolved; `empty_patch_ids` graded unresolved with no change made; `unresolved_ids` every
    other scored outcome (a patch that failed, an agent's error or limit, a prediction that does not apply or is
    absent); `error_ids` an unscored outcome (infrastructure or harness: the harness could not judge it);
    `incomplete_ids` a planned trial that has not run."""
    if result.outcome == MISSING:
        return "incomplete_ids"
    if not result.scored:
        return "error_ids"
    if result.resolved:
        return "resolved_ids"
    if result.outcome == Outcome.UNRESOLVED and result.patch_sha256 == EMPTY_PATCH_SHA256:
        return "empty_patch_ids"
    return "unresolved_ids"


def _id_lists(results: Sequence[ResultRow]) -> dict[str, Any]:
    """Each of SWE-bench's lists (a list of str), its instance ids sorted: with one seed each instance is in
    exactly one list; with several, in the list of each of its trials."""
    lists: dict[str, set[str]] = {name: set() for name in ID_LISTS}
    for result in results:
        lists[id_list(result)].add(result.instance_id)
    return {name: sorted(ids) for name, ids in lists.items()}


def _variant_summary(results: Sequence[ResultRow], versus: PairedComparison | None) -> VariantSummary:
    """Every number docs/STATISTICS.md promises for one variant on one slice (or the whole portfolio)."""
    scores = _scores(results)
    by_seed: dict[str, dict[int, bool]] = defaultdict(dict)
    for result in results:
        if result.scored:
            by_seed[result.instance_id][result.seed] = result.resolved
    estimate = resolved_rate(scores, {result.instance_id: result.repo for result in results})
    scored = [result for result in results if result.scored]
    resolved = sum(result.resolved for result in scored)
    spread = seed_spread(by_seed)
    durations = distribution([(r.generation_duration_s or 0.0) + (r.evaluation_duration_s or 0.0) for r in scored])
    kinds = Counter(result.outcome_kind or "missing" for result in results)
    return VariantSummary(
        planned=len(results),
        scored=len(scored),
        resolved=resolved,
        coverage=len(scored) / len(results) if results else 0.0,
        outcomes=dict(sorted(Counter(result.outcome for result in results).items())),
        outcome_kinds=dict(sorted(kinds.items())),
        infrastructure_error_rate=kinds[OutcomeKind.INFRASTRUCTURE] / len(results) if results else 0.0,
        limits_scored=sum(result.outcome in SCORED_LIMITS for result in results),
        limits_unscored=sum(result.outcome in UNSCORED_LIMITS for result in results),
        hard_violations=sum(_reached_for_the_runner(result) for result in scored),
        audit_flags=dict(sorted(Counter(kind for r in results for kind in r.audit_flags.split(",") if kind).items())),
        **{"resolved_rate" if name == "rate" else name: value for name, value in _estimate_fields(estimate).items()},
        seed_spread=SeedSpread(**asdict(spread)) if spread else None,
        pass_at_k=pass_at_k(scores),
        planning_mde=planning_mde(scores),
        duration_s=Durations(**asdict(durations)),
        tokens_per_resolved=per_resolved(sum(r.input_tokens + r.output_tokens for r in scored), resolved),
        cost_usd=sum(result.cost_usd for result in scored),
        cost_per_resolved=per_resolved(sum(result.cost_usd for result in scored), resolved),
        vs_baseline=versus,
        **_id_lists(results),
    )


def _by_variant(results: Sequence[ResultRow], baseline: str) -> dict[str, VariantSummary]:
    """Each variant's summary; every other variant also gets its paired difference against the baseline."""
    grouped: dict[str, list[ResultRow]] = defaultdict(list)
    for result in results:
        grouped[result.variant].append(result)
    baseline_scores = _scores(grouped[baseline]) if baseline in grouped else None

    def versus(name: str, rows: Sequence[ResultRow]) -> PairedComparison | None:
        if baseline_scores is None or name == baseline:
            return None
        paired = paired_difference(_scores(rows), baseline_scores)
        return PairedComparison(baseline=baseline, **(asdict(paired) if paired else {"n": 0}))

    return {name: _variant_summary(rows, versus(name, rows)) for name, rows in grouped.items()}


def _validation_summary(
    validation: Sequence[Mapping[str, Any]] | None, results: Sequence[ResultRow]
) -> ValidationSummary | None:
    """The instances' validation from the warehouse's `validation` rows: counts per status, the instances
    that are not valid, and the evaluated instances with no validation of their current content."""
    if validation is None:
        return None
    validated = {row["instance_id"] for row in validation if row["current"]}
    fields = ("instance_id", "slice", "status", "gold_resolved", "gold_runs", "empty_resolved", "empty_runs", "detail")
    return ValidationSummary(
        validated=len(validation),
        statuses={status.value: sum(row["status"] == status for row in validation) for status in Status},
        not_valid=[
            InvalidInstance(**{name: row[name] for name in fields}, evaluated=row["current"])
            for row in validation
            if row["status"] != Status.VALID
        ],
        unvalidated=sorted({result.instance_id for result in results} - validated),
    )


def build_report(
    campaign: str,
    dataset_version: str,
    plan_version: str,
    results: Sequence[ResultRow],
    quarantined: int = 0,
    baseline: str = "",
    validation: Sequence[Mapping[str, Any]] | None = None,
    gates: Sequence[GatePolicy] = (),
    directory: Path | None = None,
    rejected: Sequence[RejectedRow] = (),
) -> Report:
    """The campaign's numbers per variant, over the portfolio and per slice, with each gate's decision.

    `baseline` names the variant the others are compared with (the first
    variant in the results when empty); `validation` is the warehouse's
    validation table, if the campaign's instances were validated; `directory`
    is where the report's files will be written (write_report); `rejected` are
    the warehouse's rejected records, listed so that a refused result is seen.
    """
    baseline = baseline or (results[0].variant if results else "")
    by_slice: dict[str, list[ResultRow]] = defaultdict(list)
    for result in results:
        by_slice[result.slice].append(result)
    scored = sum(result.scored for result in results)
    report = Report(
        campaign=campaign,
        harness_version=HARNESS_VERSION,
        dataset_version=dataset_version,
        plan_version=plan_version,
        quarantined_rows=quarantined,
        baseline=baseline,
        planned=len(results),
        scored=scored,
        coverage=scored / len(results) if results else 0.0,
        variants=_by_variant(results, baseline),
        slices={name: _by_variant(rows, baseline) for name, rows in sorted(by_slice.items())},
        validation=_validation_summary(validation, results),
        directory=str(directory) if directory is not None else None,
        rejected_records=[
            RejectedRecordEntry(
                instance_id=r.instance_id, trial=r.trial, key=r.key, reason=r.reason, quarantined_as=r.quarantined_as
            )
            for r in rejected
        ],
    )
    return with_gates(report, gates)


def write_text_atomically(path: Path, text: str) -> None:
    """Write to a scratch file beside `path`, then move it into place: readers never see half a file. The file
    is UTF-8 whatever `text` holds (a lone surrogate as U+FFFD: common/foreign_text.py)."""
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    scratch.write_text(valid_unicode(text), encoding="utf-8")
    os.replace(scratch, path)


def write_json(payload: dict[str, Any], path: Path) -> Path:
    """Write `payload` as JSON atomically (readers never see half a file); return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(payload, indent=2, sort_keys=True))
    return path


def report_directory(report: Report) -> Path:
    """Where the report's files go; a report built without a directory cannot be written."""
    if report.directory is None:
        raise ValueError(f"report of campaign {report.campaign}: built without a directory to write it to")
    return Path(report.directory)


def write_report(report: Report) -> Path:
    """Write report.json and report.md into the report's directory; return the markdown path."""
    directory = report_directory(report)
    write_json(report.model_dump(mode="json"), directory / REPORT_FILES["json"])
    markdown = directory / REPORT_FILES["markdown"]
    write_text_atomically(markdown, render_markdown(report))
    return markdown
