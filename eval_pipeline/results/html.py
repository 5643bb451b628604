"""The campaign report as one self-contained HTML file: tables and inline SVG plots, no scripts, no network.

Plots: resolved rates with their 95% intervals per slice and variant; paired
differences against the baseline with their intervals; each variant's trial
durations in seconds (every scored trial a dot, median and p95 marked); and
the outcome taxonomy per variant, one colour per outcome. Then each release
gate's verdict and broken rules, the time, tokens and cost of each variant,
and, when given, the trajectories of chosen trials (results/trajectory.py: their
agent-controlled text escaped, never markup). Every number comes from the
Report (docs/STATISTICS.md) or, for the duration dots, from the results table.
Intervals are shown as report.json holds them (docs/STATISTICS.md) and drawn
within the range of their quantity ([0, 1] for rates, [-1, 1] for differences).
"""

from collections import defaultdict
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from eval_pipeline.common.foreign_text import shown
from eval_pipeline.results.gates import verdict
from eval_pipeline.results.markdown import (
    TIME_COST_HEADERS,
    clip,
    format_cost,
    format_interval,
    format_limits,
    format_number,
    time_cost_cells,
)
from eval_pipeline.results.matrix import OUTCOME_COLOURS, render_matrix, render_unscored, trial_id
from eval_pipeline.results.matrix import STYLE as MATRIX_STYLE
from eval_pipeline.results.model import REPORT_FILES, Report, ReportRow
from eval_pipeline.results.report import report_directory, write_text_atomically
from eval_pipeline.results.trajectory import STYLE as TRAJECTORY_STYLE
from eval_pipeline.results.trajectory import anchor, is_failed, render_trajectories
from eval_pipeline.results.warehouse import ResultRow

WIDTH, ROW, LABEL, MARGIN = 760, 26, 220, 30
MAX_DOTS = 300  # per variant: beyond it, evenly spaced quantiles keep the file small and the shape intact
STYLE = """body{font:14px system-ui,sans-serif;margin:2em;color:#1a202c}h1,h2{font-weight:600}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #cbd5e0;padding:4px 8px;text-align:right}
td:first-child,td:nth-child(2),th{text-align:left}svg{display:block;margin:1em 0}text{font:12px sans-serif}
.passed{color:#2f855a}.failed{color:#c53030}"""


def _svg(height: int, body: list[str], title: str) -> str:
    return (
        f'<svg role="img" aria-label="{escape(title)}" width="{WIDTH}" height="{height}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>{"".join(body)}</svg>'
    )


def _x(value: float, low: float, high: float) -> float:
    return LABEL + (value - low) / (high - low) * (WIDTH - LABEL - MARGIN)


def _axis(low: float, high: float, bottom: int, ticks: Sequence[float], unit: str = "") -> list[str]:
    """The x axis with its ticks, and under it the unit of its values when they have one."""
    parts = [f'<line x1="{LABEL}" y1="{bottom}" x2="{WIDTH - MARGIN}" y2="{bottom}" stroke="#718096"/>']
    for tick in ticks:
        x = _x(tick, low, high)
        parts.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}" stroke="#718096"/>')
        parts.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{tick:.3g}</text>')
    if unit:
        middle = _x((low + high) / 2, low, high)
        parts.append(f'<text class="axis-unit" x="{middle:.1f}" y="{bottom + 32}" text-anchor="middle">{unit}</text>')
    return parts


def interval_chart(
    title: str, rows: Sequence[tuple[str, float | None, float | None, float | None]], domain: tuple[float, float]
) -> str:
    """One row per (label, estimate, low, high): a dot at the estimate and a line over the interval, both
    within the domain (the range the quantity can take). A zero line is drawn when the domain spans zero."""
    low, high = domain
    body = []
    if low < 0 < high:
        zero = _x(0, low, high)
        body.append(f'<line x1="{zero:.1f}" y1="0" x2="{zero:.1f}" y2="{len(rows) * ROW}" stroke="#a0aec0"/>')
    for index, (label, estimate, ci_low, ci_high) in enumerate(rows):
        y = index * ROW + ROW / 2
        body.append(f'<text x="{LABEL - 8}" y="{y + 4}" text-anchor="end">{escape(label)}</text>')
        if ci_low is not None and ci_high is not None:
            left, right = (_x(clip(v, low, high), low, high) for v in (ci_low, ci_high))
            body.append(
                f'<line class="interval" x1="{left:.1f}" y1="{y}" x2="{right:.1f}" y2="{y}" stroke="#2b6cb0"'
                ' stroke-width="2"/>'
            )
        if estimate is not None:
            body.append(f'<circle class="estimate" cx="{_x(estimate, low, high):.1f}" cy="{y}" r="5" fill="#2b6cb0"/>')
    ticks = [low + (high - low) * step / 4 for step in range(5)]
    return _svg(len(rows) * ROW + 30, body + _axis(low, high, len(rows) * ROW + 4, ticks), title)


def duration_chart(trials: Sequence[ResultRow], report: Report) -> str:
    """Each scored trial's duration (generation + evaluation) as a dot per variant, or `MAX_DOTS` evenly spaced
    quantiles of them; median and p95 as ticks; the axis in seconds."""
    durations: dict[str, list[float]] = defaultdict(list)
    for trial in trials:
        if trial.scored:
            durations[trial.variant].append((trial.generation_duration_s or 0) + (trial.evaluation_duration_s or 0))
    high = max((d for values in durations.values() for d in values), default=1.0) * 1.05 or 1.0
    body = []
    for index, (variant, values) in enumerate(sorted(durations.items())):
        y = index * ROW + ROW / 2
        body.append(f'<text x="{LABEL - 8}" y="{y + 4}" text-anchor="end">{escape(variant)}</text>')
        body += [
            f'<circle cx="{_x(d, 0, high):.1f}" cy="{y}" r="3" fill="#2b6cb0" fill-opacity="0.4"/>'
            for d in _quantiles(sorted(values), MAX_DOTS)
        ]
        spread = report.variants[variant].duration_s
        for quantile, colour in ((spread.median, "#1a202c"), (spread.p95, "#c05621")):
            if quantile is None:  # the report was built from other trials than these
                continue
            x = _x(quantile, 0, high)
            body.append(
                f'<line x1="{x:.1f}" y1="{y - 9}" x2="{x:.1f}" y2="{y + 9}" stroke="{colour}" stroke-width="2"/>'
            )
    rows = len(durations)
    ticks = [high * step / 4 for step in range(5)]
    return _svg(rows * ROW + 46, body + _axis(0, high, rows * ROW + 4, ticks, "seconds"), "Durations (s)")


def _quantiles(ordered: list[float], most: int) -> list[float]:
    if len(ordered) <= most:
        return ordered
    return [ordered[round(i * (len(ordered) - 1) / (most - 1))] for i in range(most)]


def taxonomy_chart(report: Report) -> str:
    """Each variant's trials as one bar split by outcome, each outcome in its own colour, with a legend."""
    body = []
    for index, (variant, summary) in enumerate(report.variants.items()):
        y = index * ROW + 4
        body.append(f'<text x="{LABEL - 8}" y="{y + 14}" text-anchor="end">{escape(variant)}</text>')
        left = float(LABEL)
        for outcome, count in summary.outcomes.items():
            width = count / summary.planned * (WIDTH - LABEL - MARGIN)
            body.append(
                f'<rect x="{left:.1f}" y="{y}" width="{width:.1f}" height="{ROW - 8}" fill="{OUTCOME_COLOURS[outcome]}">'
                f"<title>{escape(outcome)}: {count}</title></rect>"
            )
            left += width
    legend = sorted({outcome for summary in report.variants.values() for outcome in summary.outcomes})
    bottom = len(report.variants) * ROW + 16
    for index, outcome in enumerate(legend):
        x = LABEL + index * 130
        body.append(f'<rect x="{x}" y="{bottom - 10}" width="10" height="10" fill="{OUTCOME_COLOURS[outcome]}"/>')
        body.append(f'<text x="{x + 14}" y="{bottom}">{escape(outcome)}</text>')
    return _svg(bottom + 10, body, "Outcomes per variant")


def _slice_cell(row: ReportRow) -> str:
    """The slice column: the portfolio's rows in bold (HTML's, not markdown's asterisks)."""
    return f"<strong>{escape(row.slice)}</strong>" if row.portfolio else escape(row.slice)


def _table_row(row: ReportRow) -> str:
    v = row.summary
    return (
        f"<tr><td>{_slice_cell(row)}</td><td>{escape(row.variant)}</td><td>{format_number(v.resolved_rate)}</td>"
        f"<td>{format_interval(v.ci_low, v.ci_high)}</td><td>{v.resolved}/{v.planned}</td>"
        f"<td>{v.scored}/{v.planned}</td>"
        f"<td>{format_limits(v)}</td></tr>"
    )


def _table(report: Report) -> str:
    columns = ("slice", "variant", "resolved rate", "95% CI", "resolved/planned", "scored/planned", "test limits hit")
    head = f"<tr>{''.join(f'<th>{column}</th>' for column in columns)}</tr>"
    return f"<table>{head}{''.join(_table_row(row) for row in report.rows())}</table>"


def _time_cost_table(report: Report) -> str:
    """Per slice and variant: median and p95 duration, tokens per resolved trial, total cost and cost per
    resolved trial (the markdown report's cells, with the total cost before the cost per resolved trial)."""
    *times, cost_per_resolved = TIME_COST_HEADERS
    columns = ("slice", "variant", *times, "total cost", cost_per_resolved)
    head = f"<tr>{''.join(f'<th>{escape(column)}</th>' for column in columns)}</tr>"
    rows = []
    for row in report.rows():
        *time_cells, per_resolved = time_cost_cells(row.summary)
        cells = [*time_cells, format_cost(row.summary.cost_usd), per_resolved]
        rows.append(
            f"<tr><td>{_slice_cell(row)}</td><td>{escape(row.variant)}</td>"
            + "".join(f"<td>{escape(cell)}</td>" for cell in cells)
            + "</tr>"
        )
    return f'<table class="time-cost">{head}{"".join(rows)}</table>'


def _trajectories(trials: Sequence[ResultRow], trajectories: Mapping[str, Mapping[str, Any]]) -> str:
    failed = sum(is_failed(trial) for trial in trials)
    return (
        f"<h2>Trajectories</h2><p>{len(trajectories)} trial(s) shown; {failed} trial(s) failed (scored, not"
        " resolved); failed trials whose agent left neither a trajectory nor a patch are not shown. Each step"
        " opens to show its text, truncated; costs in US dollars.</p>" + render_trajectories(trajectories)
    )


def _gates(report: Report) -> str:
    """Each release gate: passed, failed or not judged (gates.verdict), and every rule one that did not pass broke."""
    if not report.gates:
        return "<p>This campaign has no release gates.</p>"
    items = []
    for environment, decision in report.gates.items():
        colour = "passed" if decision.passed else "failed"
        rules = "".join(f"<li>{escape(v.rule)}: {escape(v.message)}</li>" for v in decision.violations)
        items.append(
            f'<li class="gate" data-environment="{escape(environment)}"><strong>{escape(environment)}</strong>: '
            f'<span class="{colour}">{verdict(decision).lower()}</span> (candidate {escape(decision.candidate)})'
            + (f"<ul>{rules}</ul>" if rules else "")
            + "</li>"
        )
    return f"<ul>{''.join(items)}</ul>"


def _label(row: ReportRow) -> str:
    return f"{row.slice} / {row.variant}"


def _trials(
    trials: Sequence[ResultRow], reasons: Mapping[str, str], trajectories: Mapping[str, Mapping[str, Any]]
) -> str:
    """The matrix of instances × variants (a trial links to its trajectory when the page shows it), then the
    unscored trials with their reasons."""

    def href(trial: ResultRow) -> str | None:
        return f"#{anchor(trial_id(trial))}" if trial_id(trial) in trajectories else None

    return (
        "<h2>Trials</h2>"
        + render_matrix(trials, href)
        + "<h2>Unscored trials</h2>"
        + render_unscored(trials, reasons, href)
    )


def render_html(
    report: Report,
    trials: Sequence[ResultRow],
    trajectories: Mapping[str, Mapping[str, Any]] | None = None,
    reasons: Mapping[str, str] | None = None,
) -> str:
    """The report's page; with `trajectories` (trajectory.py: trajectories_for), a section per trial; `reasons`
    (matrix.py: unscored_reasons) say why each unscored trial ended as it did. The page is `shown`
    (common/foreign_text.py): whatever an agent's text holds, the page is valid UTF-8 with no control character
    in it."""
    rows = report.rows()
    rates = [(_label(row), row.summary.resolved_rate, row.summary.ci_low, row.summary.ci_high) for row in rows]
    differences = [(_label(row), d.diff, d.ci_low, d.ci_high) for row in rows if (d := row.summary.vs_baseline)]
    sections = [
        f"<h1>Campaign {escape(report.campaign)}</h1>",
        f"<p>Dataset {escape(report.dataset_version[:12])}, plan {escape(report.plan_version[:12])}, harness "
        f"{escape(report.harness_version)}. Coverage: {report.scored}/{report.planned} trials scored; "
        "trials that ended in an infrastructure outcome are not scored and never count as failures; a test run"
        " stopped by a limit counts as a failure only where the instance's reference passed within the same"
        " limits.</p>",
        _table(report),
        "<h2>Resolved rate with 95% interval (clustered by instance)</h2>",
        interval_chart("Resolved rates", rates, (0.0, 1.0)),
        f"<h2>Paired difference against {escape(report.baseline)}</h2>",
        interval_chart("Paired differences", differences, (-1.0, 1.0)) if differences else "<p>No comparison.</p>",
        "<h2>Trial durations in seconds (median black, p95 orange)</h2>",
        duration_chart(trials, report),
        "<h2>Outcome taxonomy</h2>",
        taxonomy_chart(report),
        "<h2>Time, tokens and cost</h2>",
        _time_cost_table(report),
        "<h2>Release gates</h2>",
        _gates(report),
        _trials(trials, reasons or {}, trajectories or {}),
    ]
    if trajectories is not None:
        sections.append(_trajectories(trials, trajectories))
    return shown(
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Campaign {escape(report.campaign)}'
        f"</title><style>{STYLE}\n{MATRIX_STYLE}\n{TRAJECTORY_STYLE}</style></head><body>{''.join(sections)}"
        "</body></html>\n"
    )


def write_html_report(
    report: Report,
    trials: Sequence[ResultRow],
    trajectories: Mapping[str, Mapping[str, Any]] | None = None,
    reasons: Mapping[str, str] | None = None,
) -> Path:
    """Write report.html into the report's directory; return its path."""
    path = report_directory(report) / REPORT_FILES["html"]
    write_text_atomically(path, render_html(report, trials, trajectories, reasons))
    return path
