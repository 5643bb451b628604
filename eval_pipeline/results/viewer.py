"""`eval-pipeline view`: a campaign's trials as local web pages, served from the artifact store by Python alone.

    /               the matrix (instances × variants, each trial's outcome linking to its page) and the
                    unscored trials with their reasons
    /trial?id=ID    one trial (ID is `<instance id>|<variant>-s<seed>`): its outcome and why, time, tokens
                    and cost, the instruction, the final patch as a diff, the graded tests with their
                    statuses, the grading's steps and output, the trajectory, the lineage and every attempt

Pages are built on each request from the store (what results/export.py reads,
and nothing else), so a running campaign's trials appear as they finish: reload.
No page has a script or fetches anything; every agent-written text is escaped, and every page is valid UTF-8
with its control characters shown as their pictures (common/foreign_text.py).
The server binds to the loopback address unless told otherwise: it has no
authentication, and trajectories may hold what the agent read.
"""

from collections.abc import Callable, Sequence
from html import escape
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from eval_pipeline.common.foreign_text import shown
from eval_pipeline.results.export import grading_output, outcome_summary, trial_lineage
from eval_pipeline.results.html import STYLE as REPORT_STYLE
from eval_pipeline.results.markdown import format_cost
from eval_pipeline.results.matrix import STYLE as MATRIX_STYLE
from eval_pipeline.results.matrix import render_matrix, render_unscored, trial_id, unscored_reasons
from eval_pipeline.results.trajectory import STYLE as TRAJECTORY_STYLE
from eval_pipeline.results.trajectory import as_text, render_patch, render_steps
from eval_pipeline.trial.records import ResultRow, StoredTrial
from eval_pipeline.trial.selection import EVERY_TRIAL, SelectionError, TrialSelection

__all__ = ["TrialPages", "parse_trial_id", "serve", "trial_href"]

ReadTrials = Callable[[TrialSelection], list[StoredTrial]]
STYLE = """.viewer .outcome{font-weight:600}.tests td{text-align:left}.tests .PASSED{color:#2f855a}
.tests .FAILED,.tests .ERROR,.tests .MISSING{color:#c53030}pre{white-space:pre-wrap;word-break:break-word;
background:#f7fafc;padding:6px}nav{margin-bottom:1em}"""


def trial_href(trial: ResultRow) -> str:
    return f"/trial?id={quote(trial_id(trial), safe='')}"


def parse_trial_id(identifier: str) -> TrialSelection | None:
    """The selection of the one trial `<instance id>|<variant>-s<seed>` names; None when it is not of that form."""
    instance_id, bar, trial = identifier.rpartition("|")
    variant, dash, seed = trial.rpartition("-s")
    if not (instance_id and bar and variant and dash and seed.isdigit()):
        return None
    return TrialSelection(instances=(instance_id,), variants=(variant,), seeds=(int(seed),))


def _page(title: str, body: str) -> str:
    """Every page of the viewer, `shown` (common/foreign_text.py): valid UTF-8 with no control character in it,
    whatever an agent's text holds."""
    return shown(
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{REPORT_STYLE}\n{MATRIX_STYLE}\n{TRAJECTORY_STYLE}\n{STYLE}</style></head>"
        f'<body class="viewer">{body}</body></html>\n'
    )


def _facts(records: StoredTrial) -> str:
    """The trial's facts as a two-column table: who, how long, how much, within which resources."""
    result, summary = records.result, outcome_summary(records)
    durations = summary["durations_s"]
    rows = [
        ("slice", result.slice),
        ("agent", f"{result.agent} (variant {result.variant}, seed {result.seed})"),
        ("generation", _seconds(durations["generation"])),
        ("evaluation", _seconds(durations["evaluation"])),
        ("tokens", f"{result.input_tokens} in / {result.output_tokens} out"),
        ("cost", f"${format_cost(result.cost_usd)}"),
        ("model calls", f"{result.steps} (stopped: {result.stop_reason or 'n/a'})"),
        ("peak memory", f"{result.peak_memory_mb:.0f} MB" if result.peak_memory_mb else "not measured"),
        ("memory floor / ceiling", f"{result.memory_floor_mb} / {result.memory_ceiling_mb} MB"),
        ("cpu floor / ceiling", f"{result.cpu_floor:g} / {result.cpu_ceiling:g}"),
    ]
    return "<table>" + "".join(f"<tr><th>{k}</th><td>{escape(str(v))}</td></tr>" for k, v in rows) + "</table>"


def _seconds(value: float | None) -> str:
    return f"{value:.1f} s" if value is not None else "not run"


def _verdict(records: StoredTrial) -> str:
    """The outcome first, with its kind and whether it counts, then why (the evaluation's detail, else the last
    attempt's)."""
    result = records.result
    kind = f" ({result.outcome_kind})" if result.outcome_kind else ""
    counts = "scored" if result.scored else "not scored: it never counts as the agent's failure"
    detail = records.evaluation.detail if records.evaluation and records.evaluation.detail.strip() else ""
    detail = detail or next((a.detail for a in reversed(records.attempts) if a.detail.strip()), "")
    return (
        f'<p><span class="outcome" data-outcome="{escape(result.outcome)}">{escape(result.outcome)}</span>'
        f"{escape(kind)}, {counts}.</p>" + (f"<pre>{escape(detail)}</pre>" if detail else "")
    )


def _tests(records: StoredTrial) -> str:
    evaluation = records.evaluation
    if evaluation is None:
        return "<p>Not graded yet.</p>"
    rows = "".join(
        f'<tr><td><code>{escape(name)}</code></td><td class="{escape(status)}">{escape(status)}</td></tr>'
        for name, status in sorted(evaluation.tests.items())
    )
    table = f'<table class="tests"><tr><th>test</th><th>status</th></tr>{rows}</table>' if rows else ""
    return (table or "<p>No test results recorded.</p>") + (
        f"<details><summary>the grading's steps and output</summary><pre>{escape(grading_output(evaluation))}</pre>"
        "</details>"
    )


def _attempts(records: StoredTrial) -> str:
    columns = ("stage", "outcome", "final", "started", "duration", "detail")
    head = "".join(f"<th>{column}</th>" for column in columns)
    rows = "".join(
        f"<tr><td>{escape(a.stage)}</td><td>{escape(a.outcome)}</td><td>{'yes' if a.final else ''}</td>"
        f"<td>{escape(a.started_at)}</td><td>{_seconds(a.duration_s)}</td>"
        f'<td style="text-align:left">{f"<pre>{escape(a.detail)}</pre>" if a.detail.strip() else ""}</td></tr>'
        for a in records.attempts
    )
    return f'<table class="attempts"><tr>{head}</tr>{rows}</table>' if rows else "<p>No attempt yet.</p>"


def render_trial_page(records: StoredTrial, instruction: str) -> str:
    """One trial's page: verdict, facts, instruction, patch, tests, trajectory, lineage, attempts."""
    generation = records.generation
    patch = render_patch(generation.patch) if generation and generation.patch.strip() else "<p>No patch.</p>"
    steps = render_steps(generation.trajectory) if generation else ""
    sections = [
        '<nav><a href="/">all trials</a></nav>',
        f"<h1>{escape(trial_id(records.result))}</h1>",
        _verdict(records),
        _facts(records),
        f"<h2>Instruction</h2><pre>{escape(instruction)}</pre>",
        f"<h2>Final patch</h2>{patch}",
        f"<h2>Graded tests</h2>{_tests(records)}",
        f'<h2>Trajectory</h2><div class="trajectory">{steps or "<p>No trajectory recorded.</p>"}</div>',
        f"<h2>Lineage</h2><pre>{escape(as_text(trial_lineage(records)))}</pre>",
        f"<h2>Attempts</h2>{_attempts(records)}",
    ]
    return _page(trial_id(records.result), "".join(sections))


def render_index(campaign: str, trials: Sequence[StoredTrial]) -> str:
    """The campaign's matrix and its unscored trials, each linking to its trial's page."""
    rows = [records.result for records in trials]
    reasons = unscored_reasons([attempt for records in trials for attempt in records.attempts])
    resolved = sum(row.resolved for row in rows)
    scored = sum(row.scored for row in rows)
    body = (
        f"<h1>Campaign {escape(campaign)}</h1><p>{len(rows)} trials planned, {scored} scored, {resolved} resolved."
        " Reload to see trials that finished since.</p>"
        + render_matrix(rows, trial_href)
        + "<h2>Unscored trials</h2>"
        + render_unscored(rows, reasons, trial_href)
    )
    return _page(f"Campaign {campaign}", body)


class TrialPages:
    """The viewer's pages of one campaign, read from the store on each request."""

    def __init__(self, campaign: str, read: ReadTrials, instruction: Callable[[str], str]) -> None:
        self.campaign, self.read, self.instruction = campaign, read, instruction

    def index(self) -> str:
        return render_index(self.campaign, self.read(EVERY_TRIAL))

    def trial(self, identifier: str) -> str | None:
        """The trial's page; None when the campaign has no such trial."""
        selection = parse_trial_id(identifier)
        try:
            found = self.read(selection) if selection else []
        except SelectionError:  # an instance, variant or seed the campaign does not have
            return None
        return render_trial_page(found[0], self.instruction(found[0].identity.instance_id)) if found else None


def _handler(pages: TrialPages) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlsplit(self.path)
            if url.path == "/":
                self._send(HTTPStatus.OK, pages.index())
            elif url.path == "/trial" and (page := pages.trial(parse_qs(url.query).get("id", [""])[0])):
                self._send(HTTPStatus.OK, page)
            else:
                self._send(HTTPStatus.NOT_FOUND, _page("Not found", '<p>No such page. <a href="/">All trials</a></p>'))

        def _send(self, status: HTTPStatus, page: str) -> None:
            body = page.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # a request per line on stderr would drown the URL
            pass

    return Handler


def serve(pages: TrialPages, host: str = "127.0.0.1", port: int = 8765) -> ThreadingHTTPServer:
    """A server of `pages` bound to (host, port) (port 0: any free one); the caller runs `serve_forever`."""
    return ThreadingHTTPServer((host, port), _handler(pages))
