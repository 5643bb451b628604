"""The graded pytest run's results as the launcher sent them on the report channel (pytest_launcher.py): what the
harness believes of a run, and when it believes nothing.

The channel is the test command's captured output, a pipe the sandbox's
runner reads as the command runs (sandbox/runner/capture.py: the first
`output_bytes` are kept, the rest drained and the result marked
`output_truncated`). The launcher writes, in this order, and nothing else:

    ["test", NODE_ID, PHASES, SEALED]
                                one per test, once its teardown is reported
    ["collect", NODE_ID]        one per collector that failed
    ["end", EXIT_STATUS, LINES] once pytest has returned: how many lines came before

PHASES holds each report of the test as three letters: when (`s`etup,
`c`all, `t`eardown, or `u` for a subtest's, reported during the call), outcome
(`p`assed, `f`ailed, `s`kipped) and `x` where pytest took it for an expected
failure (`wasxfail`: a skip that is an xfail, a pass that is an xpass), else
`-`. A test keeps its worst report's status (a failed subtest fails it).
SEALED lists the values its sealed assertions handed over, each `[SITE,
VALUE]` (sealed.py judges them).

Code under test shares the process and may write on the channel too; what
it cannot do is take back what the launcher wrote. So a channel is believed
only whole and the launcher's alone: a line of another shape, a test reported
twice, a test's reports out of pytest's order (setup, the call if setup
passed, teardown), a line after the end, or an end that counts other than
the lines before it shows another writer (`forged`: `report_forged`). One cut
short (no end, or past the output cap) with no such sign is `incomplete`: the
run ended abnormally, and the reference judges whose fault that is
(trial/evaluation.py, intention to treat).

Statuses are SWE-bench's, with XPASS for a test pytest expected to fail that
passed (not strict): SWE-bench's parsers read no such line, so it counts as
neither a pass nor a skip.
"""

import json
import re
from dataclasses import dataclass, field
from typing import Any

from eval_pipeline.grading.verdict import ERROR, FAILED, PASSED, SEVERITY, SKIPPED, XFAIL, XPASS

__all__ = ["RunResults", "read_channel"]

_PHASES = re.compile(r"(?:[scut][pfs][x-])+")
_ORDER = {True: re.compile(r"su*ct"), False: re.compile(r"st")}  # by whether setup passed
# Each report's status: an expected failure's skip is an xfail, its pass an xpass; a failure outside the call is an
# error, as pytest counts it.
_PHASE_STATUS = {"p-": PASSED, "px": XPASS, "s-": SKIPPED, "sx": XFAIL}


@dataclass(frozen=True)
class RunResults:
    """A test run's statuses by the runner's test id, and why they cannot be believed: `forged` (another writer
    shows) or `incomplete` (cut short), each '' when not. `summary` is what the run's step records; `sealed` holds the values
    each test's sealed assertions handed over, by test id."""

    statuses: dict[str, str]
    forged: str = ""
    incomplete: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    sealed: dict[str, list[Any]] = field(default_factory=dict)


def _test_status(phases: str) -> str | None:
    """A test's status from its reports, or None when pytest cannot have reported them so: setup, then (exactly
    when setup passed) its subtests and the call, then teardown; an expected failure only on a skip, or on the
    call's pass."""
    reports = [phases[index : index + 3] for index in range(0, len(phases), 3)]
    if not _ORDER[reports[0][1:] == "p-"].fullmatch("".join(report[0] for report in reports)):
        return None
    statuses = []
    for when, outcome, flag in map(tuple, reports):
        if outcome == "f":
            statuses.append(FAILED if when in "cu" else ERROR)
        elif outcome + flag == "px" and when != "c":
            return None
        else:
            statuses.append(_PHASE_STATUS[outcome + flag])
    return max(statuses, key=SEVERITY.__getitem__)


def _line_problem(record: Any, statuses: dict[str, str], sealed: dict[str, list[Any]]) -> str:
    """Why a line before the end is not the launcher's ('' when it can be), recording its status and its sealed
    values."""
    match record:
        case ["test", str(node_id), str(phases), list(values)] if _PHASES.fullmatch(phases):
            if node_id in statuses:
                return f"{node_id} is reported twice"
            status = _test_status(phases)
            if status is None:
                return f"the reports of {node_id} ({phases}) are not in the order pytest makes them"
            statuses[node_id], sealed[node_id] = status, values
        case ["collect", str(node_id)]:
            statuses[node_id] = ERROR
        case _:
            return "a line that is not the launcher's"
    return ""


def _end_problem(record: list[Any], before: int) -> str:
    """Why an end line is not the launcher's ('' when it can be): it counts the lines before it."""
    match record:
        case ["end", int(), int(counted)] if counted == before:
            return ""
    return f"the run's end counts other than the {before} line(s) before it"


def read_channel(output: str, truncated: bool) -> RunResults:
    """What the channel `output` says, `truncated` when the runner kept only its start."""
    *lines, rest = output.split("\n")
    statuses: dict[str, str] = {}
    sealed: dict[str, list[Any]] = {}
    exit_status: int | None = None
    forged = ""
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, or nested past the stack
            record = None
        if exit_status is not None:
            forged = "a line after the run's end"
        elif isinstance(record, list) and record[:1] == ["end"]:
            forged = _end_problem(record, number - 1)
            exit_status = None if forged else record[1]
        else:
            forged = _line_problem(record, statuses, sealed)
        if forged:
            forged = f"the test process wrote on the report channel (line {number}: {forged})"
            break
    summary = {"channel_lines": len(lines), "channel_truncated": truncated, "pytest_exit": exit_status}
    if forged:
        return RunResults({}, forged=forged, summary=summary)
    if truncated or exit_status is None or rest:
        cut = "was cut at the output cap" if truncated else "ended before pytest returned"
        return RunResults({}, incomplete=f"the test run's report channel {cut}", summary=summary)
    return RunResults(statuses, summary=summary, sealed=sealed)
