"""`eval-pipeline view`: a campaign's trials as local web pages, served from the artifact store by Python alone.

    /               the matrix (instances × variants, each trial's outcome linking to its page) and the
                    unscored trials with their reasons
    /trial?id=ID    one trial (ID is `<instance id>|<variant>-s<seed>`): its outcome and why, time, tokens
                    and cost, the instruction, the final patch as a diff, the graded tests with the list
                    each is graded by (FAIL_TO_PASS, PASS_TO_PASS) and their statuses, the harness's own
                    checks that ran beside them (canary, twins, sealed assertions: not graded), the
                    grading's steps and output, the trajectory, the lineage and every attempt

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
from eval_pipeline.grading.verdict import PASSED
from eval_pipeline.results.export import grading_output, outcome_summary, trial_lineage
from eval_pipeline.results.html import STYLE as REPORT_STYLE
from eval_pipeline.results.markdown import format_cost
from eval_pipeline.results.matrix import STYLE as MATRIX_STYLE
from eval_pipeline.results.matrix import render_matrix, render_unscored, trial_id, unscored_reasons
from eval_pipeline.results.trajectory import STYLE as TRAJECTORY_STYLE
from eval_pipeline.results.trajectory import as_text, render_patch, render_steps
from eval_pipeline.tasks.swebench.canaries import graded_name
from eval_pipeline.tasks.swebench.instance import Instance
from eval_pipeline.tasks.task import Task
from eval_pipeline.trial.records import ResultRow, StoredTrial
from eval_pipeline.trial.selection import EVERY_TRIAL, SelectionError, TrialSelection

__all__ = ["TrialPages", "parse_trial_id", "serve", "trial_href"]

ReadTrials = Callable[[TrialSelection], list[StoredTrial]]
STYLE = """.viewer .outcome{font-weight:600}.tests td,.checks td{text-align:left}.PASSED{color:#2f855a}
.FAILED,.ERROR,.MISSING{color:#c53030}pre{white-space:pre-wrap;word-break:break-word;
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


GRADED_AS = {
    "FAIL_TO_PASS": "FAIL_TO_PASS: failed before the fix, must pass",
    "PASS_TO_PASS": "PASS_TO_PASS: passed before the fix, must still pass",
}


def _graded_as(task: Task) -> dict[str, str]:
    """Each graded test's list in a code task's row (SWE-bench's FAIL_TO_PASS and PASS_TO_PASS); none for a
    task graded by its own verifier."""
    if not isinstance(task, Instance):
        return {}
    return {test: "FAIL_TO_PASS" for test in task.FAIL_TO_PASS} | {test: "PASS_TO_PASS" for test in task.PASS_TO_PASS}


def _tests(records: StoredTrial, task: Task) -> str:
    """The graded tests with the list each is graded by and its status, then the harness's own checks that ran
    beside them (`_checks`), then the grading's steps and output."""
    evaluation = records.evaluation
    if evaluation is None:
        return "<p>Not graded yet.</p>"
    graded_as = _graded_as(task)
    rows = "".join(
        f'<tr><td><code>{escape(name)}</code></td><td class="graded-as">'
        f"{escape(GRADED_AS.get(graded_as.get(name, ''), 'the task verifier’s test'))}</td>"
        f'<td class="{escape(status)}">{escape(status)}</td></tr>'
        for name, status in sorted(evaluation.tests.items(), key=lambda item: (graded_as.get(item[0], ""), item[0]))
    )
    rule = (
        "<p>The verdict reads these tests alone: resolved when every FAIL_TO_PASS and PASS_TO_PASS test passed."
        " Other tests in the same files run too and are not graded, as in SWE-bench.</p>"
        if graded_as
        else "<p>The verdict is the task verifier’s: these are the tests it reported.</p>"
    )
    table = (
        f'<table class="tests"><tr><th>test</th><th>graded as</th><th>status</th></tr>{rows}</table>' if rows else ""
    )
    run_tests = next((step for step in evaluation.steps if step.get("step") == "run_tests"), {})
    return (
        (table + rule if table else "<p>No test results recorded.</p>")
        + _checks(run_tests, evaluation.tests)
        + f"<details><summary>the grading's steps and output</summary><pre>{escape(grading_output(evaluation))}</pre>"
        "</details>"
    )


def _check_row(check: str, test: str, meaning: str, reported: str) -> str:
    return (
        f"<tr><td>{escape(check)}</td><td><code>{escape(test)}</code></td><td>{escape(meaning)}</td>"
        f"<td{_status_class(reported)}>{escape(reported)}</td></tr>"
    )


def _status_class(reported: str) -> str:
    """A test status's cell class (PASSED, FAILED, ...: coloured by the style); none for other words."""
    return f' class="{escape(reported)}"' if reported.isupper() else ""


def _graded_status(tests: dict[str, str], function: str) -> str:
    """The status of the graded test whose function is `function` (twin groups name tests by function)."""
    return next((status for test_id, status in tests.items() if graded_name(test_id) == function), "")


def _twin_rows(groups: list[dict[str, Any]], tests: dict[str, str]) -> list[str]:
    """Each twin group's graded test under the name it ran as (its graded status), then its twins, whose
    statuses the verdict does not keep."""
    rows = []
    for group in groups:
        original = str(group.get("original", ""))
        meaning = f"the graded test {original}, run under this name so that it cannot be told from its twins"
        rows.append(
            _check_row("renamed graded test", str(group.get("renamed", "")), meaning, _graded_status(tests, original))
        )
        meaning = (
            f"a copy of {original} changed at one token: meant to fail; passing beside a passing {original} is forged"
        )
        rows += [_check_row("twin", str(twin), meaning, "not kept") for twin in group.get("twins") or []]
    return rows


def _sealed_rows(sealed: dict[str, int], failed: dict[str, str], tests: dict[str, str]) -> list[str]:
    """Each graded test with sealed assertions, and how the harness judged the values it handed over."""
    rows = []
    for function, count in sealed.items():
        status = _graded_status(tests, function)
        why = next((reason for test_id, reason in failed.items() if graded_name(test_id) == function), "")
        judged = (
            f"; failed by the harness: {why}"
            if why
            else "; the harness judged the values it handed over equal"
            if status == PASSED
            else ""
        )
        meaning = (
            f"the graded test {function}: {count} equality assertion(s) whose expected value the harness alone holds"
        )
        rows.append(_check_row("sealed assertions", function, meaning + judged, status))
    return rows


def _checks(run_tests: dict[str, Any], tests: dict[str, str]) -> str:
    """The harness's own checks the test run held besides the graded tests (docs/GRADING.md), none of them
    graded: the canary, each graded test run under another name beside its mutated twins, and the graded tests'
    sealed assertions; with what each must report, and what it did where the verdict recorded it. The log's
    summary line (`2 failed, 4 passed`) counts the canary and the twins with the graded tests."""
    rows = []
    canary = run_tests.get("canary")
    if canary:
        meaning = "written by the harness beside the graded tests under a random name: meant to fail, else forged"
        rows.append(_check_row("canary", canary, meaning, str(run_tests.get("canary_status", "not run"))))
    groups = run_tests.get("twins") or []
    rows += _twin_rows(groups, tests)
    rows += _sealed_rows(run_tests.get("sealed") or {}, run_tests.get("sealed_failed") or {}, tests)
    if not rows:
        return ""
    twins = sum(len(group.get("twins") or []) for group in groups)
    bound = run_tests.get("forger_bound")
    bound_text = (
        " A forger who cannot tell a graded test from its twins passes every failing one without passing a twin"
        f" with a chance of at most {bound:.3g}."
        if isinstance(bound, int | float) and bound < 1
        else ""
    )
    return (
        "<h3>The harness’s own checks (not graded)</h3>"
        f"<p>Besides the {len(tests)} graded test(s), the test run held {1 if canary else 0} canary and {twins}"
        " twin(s) of the harness’s own (docs/GRADING.md), which guard the verdict against forged results and are"
        " not graded. The log’s summary line (such as “2 failed, 4 passed”) counts them with the graded tests:"
        " the canary and the twins are meant to fail. A twin’s status is not kept; one reported passed beside its"
        f" passing original would have made the verdict report_forged.{bound_text}</p>"
        '<table class="checks"><tr><th>check</th><th>test</th><th>what it is</th><th>reported</th></tr>'
        + "".join(rows)
        + "</table>"
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


def render_trial_page(records: StoredTrial, task: Task) -> str:
    """One trial's page: verdict, facts, the task's instruction, patch, tests (the graded ones and the harness's
    own checks), trajectory, lineage, attempts."""
    generation = records.generation
    patch = render_patch(generation.patch) if generation and generation.patch.strip() else "<p>No patch.</p>"
    steps = render_steps(generation.trajectory) if generation else ""
    sections = [
        '<nav><a href="/">all trials</a></nav>',
        f"<h1>{escape(trial_id(records.result))}</h1>",
        _verdict(records),
        _facts(records),
        f"<h2>Instruction</h2><pre>{escape(task.instruction)}</pre>",
        f"<h2>Final patch</h2>{patch}",
        f"<h2>Graded tests</h2>{_tests(records, task)}",
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

    def __init__(self, campaign: str, read: ReadTrials, task: Callable[[str], Task]) -> None:
        """`task`: the campaign's task of an instance id (its instruction, and a code task's lists of tests)."""
        self.campaign, self.read, self.task = campaign, read, task

    def index(self) -> str:
        return render_index(self.campaign, self.read(EVERY_TRIAL))

    def trial(self, identifier: str) -> str | None:
        """The trial's page; None when the campaign has no such trial."""
        selection = parse_trial_id(identifier)
        try:
            found = self.read(selection) if selection else []
        except SelectionError:  # an instance, variant or seed the campaign does not have
            return None
        return render_trial_page(found[0], self.task(found[0].identity.instance_id)) if found else None


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
