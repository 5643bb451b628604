"""The campaign at a glance: instances × variants, each cell its trials' outcomes, and the trials not scored, with why.

The HTML report and the trial viewer (results/viewer.py) both show it; each
says where a trial links to (its trajectory in the report, its page in the
viewer). An unscored trial (an infrastructure outcome, or not run yet) never
counts as a failure, so it is named with its last attempt's reason rather
than left to be guessed from a rate.
"""

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from html import escape

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.common.text import truncate
from eval_pipeline.trial.records import MISSING, AttemptRecord, ResultRow

__all__ = ["OUTCOME_COLOURS", "STYLE", "render_matrix", "render_unscored", "trial_id", "unscored_reasons"]

# One colour per outcome, in families by kind: agent verdicts green, grey and blues; infrastructure
# outcomes oranges, reds and browns; the harness's purple. Two outcomes never share a colour.
OUTCOME_COLOURS = {
    Outcome.RESOLVED: "#2f855a",
    Outcome.UNRESOLVED: "#a0aec0",
    Outcome.PATCH_APPLY_FAILED: "#4299e1",
    Outcome.AGENT_ERROR: "#2c5282",
    Outcome.AGENT_TIMEOUT: "#90cdf4",
    Outcome.AGENT_LIMIT: "#63b3ed",
    Outcome.TESTS_MISSING: "#319795",
    Outcome.REPORT_FORGED: "#1a202c",
    Outcome.PATCH_TEST_TIMEOUT: "#718096",
    Outcome.PATCH_OOM_KILLED: "#4a5568",
    Outcome.PATCH_BROKE_TEST_RUN: "#2d3748",
    Outcome.TEST_TIMEOUT: "#dd6b20",
    Outcome.OOM_KILLED: "#9b2c2c",
    Outcome.SANDBOX_LOST: "#f6ad55",
    Outcome.ENGINE_ERROR: "#e53e3e",
    Outcome.MODEL_API_ERROR: "#c05621",
    Outcome.IMAGE_BUILD_FAILED: "#744210",
    Outcome.STORAGE_ERROR: "#d69e2e",
    Outcome.GRADING_ERROR: "#6b46c1",
    Outcome.MODEL_API_REFUSED: "#9f7aea",
    Outcome.IMAGE_NOT_FOUND: "#805ad5",
    Outcome.IMAGE_PULL_DENIED: "#b794f4",
    Outcome.IMAGE_DIGEST_MISMATCH: "#553c9a",
    Outcome.IMAGE_PULL_FAILED: "#c53030",
    Outcome.IMAGE_NO_SPACE: "#975a16",
    MISSING: "#e2e8f0",
}
STYLE = """.matrix td{text-align:left;vertical-align:top}.matrix a,.unscored a{color:inherit}
.trial{display:inline-block;margin:1px 6px 1px 0;white-space:nowrap}
.swatch{display:inline-block;width:.8em;height:.8em;margin-right:3px;border-radius:2px;vertical-align:-1px}
.unscored li{margin:2px 0}"""
REASON_LIMIT = 300  # characters of an unscored trial's reason


def trial_id(trial: ResultRow) -> str:
    """The trial's id in the report and the viewer: its trial partition's key, `<instance id>|<trial>`."""
    return f"{trial.instance_id}|{trial.trial}"


def unscored_reasons(attempts: Sequence[AttemptRecord]) -> dict[str, str]:
    """By trial id, the detail of the trial's last attempt that gave one, on one line: why it ended as it did."""
    reasons: dict[str, str] = {}
    for attempt in sorted(attempts, key=lambda a: a.started_at):
        if detail := " ".join(attempt.detail.split()):
            reasons[f"{attempt.instance_id}|{attempt.trial}"] = truncate(detail, REASON_LIMIT)
    return reasons


def _trial_link(trial: ResultRow, href: Callable[[ResultRow], str | None], label: str) -> str:
    colour = OUTCOME_COLOURS.get(trial.outcome, OUTCOME_COLOURS[MISSING])
    inner = f'<span class="swatch" style="background:{colour}"></span>{escape(label)}'
    target = href(trial)
    link = f'<a href="{escape(target)}">{inner}</a>' if target else inner
    return f'<span class="trial" data-outcome="{escape(trial.outcome)}">{link}</span>'


def render_matrix(trials: Sequence[ResultRow], href: Callable[[ResultRow], str | None]) -> str:
    """A row per instance (by slice, then id) and a column per variant; each cell is its trials, one per seed,
    as `s<seed> <outcome>` in the outcome's colour, linked to `href(trial)` where it gives a target. The last
    row counts each variant's resolved trials of those planned."""
    cells: dict[tuple[str, str], dict[str, list[ResultRow]]] = defaultdict(lambda: defaultdict(list))
    variants = sorted({t.variant for t in trials})
    for trial in trials:
        cells[(trial.slice, trial.instance_id)][trial.variant].append(trial)
    head = "<tr><th>slice</th><th>instance</th>" + "".join(f"<th>{escape(v)}</th>" for v in variants) + "</tr>"
    rows = []
    for (slice_name, instance_id), by_variant in sorted(cells.items()):
        row = "".join(
            "<td>"
            + "".join(
                _trial_link(t, href, f"s{t.seed} {t.outcome}") for t in sorted(by_variant[v], key=lambda t: t.seed)
            )
            + "</td>"
            for v in variants
        )
        rows.append(f"<tr><td>{escape(slice_name)}</td><td><code>{escape(instance_id)}</code></td>{row}</tr>")
    totals = "".join(
        f"<td>{sum(t.resolved for t in trials if t.variant == v)}/{sum(t.variant == v for t in trials)} resolved</td>"
        for v in variants
    )
    return f'<table class="matrix">{head}{"".join(rows)}<tr><th colspan="2">total</th>{totals}</tr></table>'


def render_unscored(
    trials: Sequence[ResultRow], reasons: Mapping[str, str], href: Callable[[ResultRow], str | None]
) -> str:
    """The trials not scored, each with its outcome and the reason its last attempt gave ("not run yet" for a
    trial with no attempt); or a sentence saying every trial was scored."""
    unscored = [t for t in trials if not t.scored]
    if not unscored:
        return '<p class="unscored">Every planned trial was scored.</p>'
    items = []
    for trial in unscored:
        reason = reasons.get(trial_id(trial)) or ("not run yet" if trial.outcome == MISSING else "no detail recorded")
        link = _trial_link(trial, href, trial_id(trial))
        items.append(f"<li>{link}: <strong>{escape(trial.outcome)}</strong>: {escape(reason)}</li>")
    return f'<p>{len(unscored)} of {len(trials)} trials not scored:</p><ul class="unscored">{"".join(items)}</ul>'
