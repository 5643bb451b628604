"""The campaign report as markdown: report.md, the CLI's summary of a run, and the validation report.

Intervals are shown as report.json holds them, estimate ± t · SE exactly
(docs/STATISTICS.md), even where one reaches past the range its quantity can
take. Each text is
`shown` (common/foreign_text.py): a test's output or an agent's words in a
detail reach a file or a terminal as valid UTF-8 with no control character.
"""

from collections.abc import Mapping
from typing import Any

from eval_pipeline.common.foreign_text import shown
from eval_pipeline.results.gates import verdict
from eval_pipeline.results.model import ID_LISTS, Report, ReportRow, VariantSummary
from eval_pipeline.trial.validation import Status


def format_number(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def format_interval(low: float | None, high: float | None) -> str:
    return f"[{format_number(low)}, {format_number(high)}]"


def clip(value: float, low: float, high: float) -> float:
    """A bound drawn within a chart's axis (the HTML report's): the range its quantity can take."""
    return max(low, min(high, value))


def format_limits(summary: VariantSummary) -> str:
    """Test runs stopped by a limit: how many were scored as failures (the reference passes within it), how
    many stayed infrastructure."""
    return f"{summary.limits_scored} scored, {summary.limits_unscored} infra"


def row_label(row: ReportRow) -> str:
    """The slice column of a markdown table: the portfolio's rows in bold."""
    return f"**{row.slice}**" if row.portfolio else row.slice


def markdown_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    return [f"| {' | '.join(headers)} |", f"|{'---|' * len(headers)}", *(f"| {' | '.join(row)} |" for row in rows)]


def _rate_cells(row: ReportRow) -> list[str]:
    v = row.summary
    return [
        row_label(row),
        row.variant,
        format_number(v.resolved_rate),
        format_interval(v.ci_low, v.ci_high),
        format_interval(v.ci_repo_low, v.ci_repo_high),
        str(v.n),
        f"{v.resolved}/{v.planned}",
        f"{v.scored}/{v.planned}",
        format_number(v.infrastructure_error_rate),
        format_limits(v),
        ", ".join(f"{outcome} {count}" for outcome, count in v.outcomes.items()),
        ", ".join(f"{kind} {count}" for kind, count in v.audit_flags.items()) or "none",
    ]


def _rates(report: Report) -> list[str]:
    headers = ["slice", "variant", "resolved rate", "95% CI (by instance)", "95% CI (by repo)", "instances scored"]
    headers += ["resolved/planned", "scored/planned", "infra error rate", "test limits hit", "outcomes"]
    headers += ["patch audit flags"]
    return markdown_table(headers, [_rate_cells(row) for row in report.rows()])


def _comparisons(report: Report) -> list[str]:
    headers = ["slice", "variant", "difference", "95% CI", "p-value", "correlation", "MDE", "paired instances"]
    rows = [
        [
            row_label(row),
            row.variant,
            format_number(d.diff),
            format_interval(d.ci_low, d.ci_high),
            format_number(d.p_value, 4),
            format_number(d.correlation),
            format_number(d.mde),
            str(d.n),
        ]
        for row in report.rows()
        if (d := row.summary.vs_baseline)
    ]
    return markdown_table(headers, rows) if rows else ["No other variant to compare."]


def format_cost(value: float | None) -> str:
    """An amount in US dollars as the reports show it."""
    return format_number(value, 4)


# The columns of a variant's time and cost, shared by the markdown and HTML reports.
TIME_COST_HEADERS = ["median s", "p95 s", "tokens / resolved", "cost / resolved"]


def time_cost_cells(summary: VariantSummary) -> list[str]:
    """A variant's TIME_COST_HEADERS: its scored trials' median and p95 durations, tokens and cost per resolved
    trial (n/a where undefined: docs/STATISTICS.md)."""
    return [
        format_number(summary.duration_s.median, 1),
        format_number(summary.duration_s.p95, 1),
        format_number(summary.tokens_per_resolved, 0),
        format_cost(summary.cost_per_resolved),
    ]


def _costs(report: Report) -> list[str]:
    headers = ["slice", "variant", *TIME_COST_HEADERS, "seed rates", "seed sd", "pass@k"]
    rows = []
    for row in report.rows():
        v, spread = row.summary, row.summary.seed_spread
        rows.append(
            [
                row_label(row),
                row.variant,
                *time_cost_cells(v),
                format_interval(spread.min, spread.max) if spread else "n/a",
                format_number(spread.sd) if spread else "n/a",
                ", ".join(f"@{k} {format_number(value)}" for k, value in v.pass_at_k.items()) or "n/a",
            ]
        )
    return markdown_table(headers, rows)


def _runs(resolved: int, runs: int) -> str:
    """`resolved/runs`, or n/a for a patch never graded (its environment could not be prepared)."""
    return f"{resolved}/{runs}" if runs else "n/a"


def _one_line(text: str, limit: int) -> str:
    """The start of a detail (a message, or a traceback) on one line, fit for a table cell or a list item."""
    return " ".join(text.split())[:limit].replace("|", "\\|")


def _status_counts(statuses: Mapping[str, int]) -> str:
    return ", ".join(f"{status} {count}" for status, count in statuses.items())


def _validation(report: Report) -> list[str]:
    validation = report.validation
    if validation is None:
        return [
            f"Not validated: `eval-pipeline validate --campaign {report.campaign}` checks that each instance's"
            " reference solution resolves it and the unchanged repository does not."
        ]
    unvalidated = validation.unvalidated
    lines = [
        f"{validation.validated} instances validated: {_status_counts(validation.statuses)}. "
        + (
            f"Evaluated without a validation of their current content: {', '.join(unvalidated)}."
            if unvalidated
            else "Every instance evaluated here has a current validation."
        )
    ]
    if validation.not_valid:
        headers = ["instance", "slice", "status", "gold resolved", "empty resolved", "evaluated here", "detail"]
        rows = [
            [
                row.instance_id,
                row.slice,
                row.status,
                _runs(row.gold_resolved, row.gold_runs),
                _runs(row.empty_resolved, row.empty_runs),
                "yes" if row.evaluated else "no",
                _one_line(row.detail, 200),
            ]
            for row in validation.not_valid
        ]
        lines += ["", *markdown_table(headers, rows)]
    return lines


def _rejected(report: Report) -> list[str]:
    """The stored records refused as forged, unauthenticated, altered or damaged: none of them is counted."""
    if not report.rejected_records:
        return ["None: every stored record read passed its checksum and its MAC."]
    rows = [[f"`{r.instance_id}`", f"`{r.trial}`", r.reason, f"`{r.key}`"] for r in report.rejected_records]
    return [
        f"{len(report.rejected_records)} stored record(s) failed their checks and were not counted; they are kept"
        " under `quarantine/` and their trials run again.",
        "",
        *markdown_table(["instance", "trial", "reason", "record"], rows),
    ]


SHOWN_IDS = 10  # instance ids a list shows before it gives only how many more (report.json has them all)


def _shown_ids(ids: list[str]) -> str:
    more = f" and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else ""
    return ", ".join(f"`{instance_id}`" for instance_id in ids[:SHOWN_IDS]) + more if ids else "none"


def _instances_by_verdict(report: Report) -> list[str]:
    """Each variant's instance ids in SWE-bench's report lists (model.ID_LISTS), the first few of each."""
    lines = []
    for name, summary in report.variants.items():
        lines += [f"`{name}`:", ""]
        for field in ID_LISTS:
            ids = getattr(summary, field)
            lines.append(f"- {field.removesuffix('_ids').replace('_', ' ')} ({len(ids)}): {_shown_ids(ids)}")
        lines.append("")
    return [
        *lines,
        "As in SWE-bench's report, an empty patch is listed under `empty patch`, not `unresolved`; with several"
        " seeds an instance is listed under the verdict of each of its trials, so the lists can hold it more than"
        " once. report.json lists every id (`resolved_ids`, `unresolved_ids`, ... of each variant).",
    ]


def _gates(report: Report) -> list[str]:
    """Each release gate's verdict on one line, and under a failed one each rule it broke on one line."""
    if not report.gates:
        return ["This campaign has no release gates."]
    lines = []
    for environment, decision in report.gates.items():
        lines.append(f"- `{environment}`: {verdict(decision)} (candidate `{decision.candidate}`)")
        lines += [f"  - {violation.rule}: {violation.message}" for violation in decision.violations]
    return lines


def render_validation(validation: Mapping[str, Any]) -> str:
    """A validation report (trial/validation.py) as markdown: every instance's status and runs, then why those
    that are not valid are not."""
    records = validation["instances"]
    rows = [
        [
            r["instance_id"],
            r["slice"],
            r["status"],
            _runs(r["gold_resolved"], r["gold_runs"]),
            _runs(r["empty_resolved"], r["empty_runs"]),
        ]
        for r in records
    ]
    lines = [
        *markdown_table(["instance", "slice", "status", "gold resolved", "empty resolved"], rows),
        "",
        f"{len(records)} instances validated: {_status_counts(validation['statuses'])}."
        f" Quarantine: {len(validation['quarantine'])} instance(s)"
        + (f", {len(validation['excluded'])} of them excluded by the campaign." if validation["excluded"] else "."),
    ]
    lines += [
        f"- {r['instance_id']} ({r['status']}): {_one_line(r['detail'], 300)}"
        for r in records
        if r["status"] != Status.VALID
    ]
    return shown("\n".join(lines) + "\n")


def render_selected_validation(selected: Mapping[str, Mapping[str, Any]]) -> str:
    """The selected instances' validations (`validate` with filters) as markdown, and why the report is not
    rewritten: its quarantine is decided from every instance's validation."""
    rows = [
        [i, r.get("slice", ""), r["status"], r.get("gold_resolved", ""), r.get("empty_resolved", "")]
        for i, r in selected.items()
    ]
    lines = [
        *markdown_table(["instance", "slice", "status", "gold resolved", "empty resolved"], rows),
        "",
        f"{len(selected)} selected instance(s) validated. The validation report (validation.json) and its"
        " quarantine are rewritten only by a validation of every instance.",
    ]
    lines += [
        f"- {i} ({r['status']}): {_one_line(r['detail'], 300)}"
        for i, r in selected.items()
        if r["status"] != Status.VALID
    ]
    return shown("\n".join(lines) + "\n")


def render_markdown(report: Report) -> str:
    lines = [
        f"# Campaign `{report.campaign}`",
        "",
        f"Dataset `{report.dataset_version[:12]}`, plan `{report.plan_version[:12]}`, "
        f"harness {report.harness_version}. Coverage: {report.scored}/{report.planned} trials scored."
        f" Invalid dataset rows quarantined: {report.quarantined_rows}.",
        "",
        *_rates(report),
        "",
        f"## Against the baseline `{report.baseline}` (paired by instance)",
        "",
        *_comparisons(report),
        "",
        "## Instances by verdict",
        "",
        *_instances_by_verdict(report),
        "",
        "## Time, cost and seeds",
        "",
        *_costs(report),
        "",
        "## Release gates",
        "",
        *_gates(report),
        "",
        "## Instance validation",
        "",
        *_validation(report),
        "",
        "## Rejected records",
        "",
        *_rejected(report),
        "",
        "Rates average seeds within each instance first; trials that ended in an infrastructure outcome are not"
        " scored. A test run stopped by a limit is scored as a failure only where the instance's reference passed"
        " within the same limits. Instances scored: those with a scored trial, the n of the rate and its interval"
        " (an instance with none shows only in coverage). Intervals are rate ± t·SE as report.json holds them: over"
        " few instances they reach past [0, 1]. Definitions: docs/STATISTICS.md.",
    ]
    return shown("\n".join(lines) + "\n")


def render_summary(report: Report) -> str:
    """What `eval-pipeline run` prints: the markdown report (rates, comparisons, gates), then its files,
    the HTML report first: it is the one to open."""
    paths = report.paths()
    files = (("html", "HTML report"), ("markdown", "Markdown report"), ("json", "JSON report"))
    return render_markdown(report) + "".join(f"{label}: {paths[form]}\n" for form, label in files if form in paths)
