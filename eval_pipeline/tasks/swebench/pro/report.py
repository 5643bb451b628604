"""What a SWE-bench Pro row's parser reported, checked as any report is, and the run's log read beside it.

A Pro row ships its own parser (`parser.py`): the dataset's code, which reads the run's stdout and stderr and
writes `{"tests": [{"name": ..., "status": ...}]}`. Its authors grade by that file alone: every FAIL_TO_PASS and
PASS_TO_PASS test must be among the names reported PASSED. The harness runs the parser where the patch cannot
reach it (grading.py) and believes its output only in the form the parser writes it:

- a JSON object whose `tests` is a list of objects, each a non-empty string `name` and a `status` of the parser's
  vocabulary (PASSED, FAILED, SKIPPED, ERROR), at most MAX_REPORT_BYTES in all; anything else is
  `malformed` (the parser failed on what the run printed: an abnormal end, which the reference judges);
- a name reported twice keeps its worst status; a graded test or the canary reported both passed and not is
  `forged` (an honest run reports a test once: the second report was printed by the code under test).

The log is read beside it (`reported_both_ways`): pytest prints one line a test in its verbose mode
(`path::test PASSED`) and one in its summary (`FAILED path::test - ...`); a graded test or the canary that the log
reports both passed and failed was reported twice, once by the code under test (Pro's parsers keep the last
line they read, which such code can print after pytest's own).
"""

import json
import re
from dataclasses import dataclass, field
from typing import Any

from eval_pipeline.grading.verdict import ERROR, FAILED, PASSED, SEVERITY, SKIPPED, XFAIL

__all__ = ["MAX_REPORT_BYTES", "PARSER_STATUSES", "ParsedReport", "read_report", "reported_both_ways"]

PARSER_STATUSES = (PASSED, FAILED, SKIPPED, ERROR)  # Pro's parsers' TestStatus names
MAX_REPORT_BYTES = 16 * 2**20  # far above any honest report (a test's name and status are under 1 KB)
_PASSING = {PASSED, XFAIL}
_NOT_PASSING = {FAILED, ERROR}
# A pytest verbose line (`path::test PASSED [ 50%]`) and a summary line (`FAILED path::test - why`), each read for
# the one id it names.
_VERBOSE = re.compile(r"^(\S+::\S+)\s+(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+::\S+)")
_NEWLINES = re.compile(r"\r\n|\r|\n")  # where a file opened as text (universal newlines) ends its lines
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")  # a terminal's colour codes, which some parsers remove first


@dataclass(frozen=True)
class ParsedReport:
    """The parser's statuses by test name, and why they cannot be believed: `malformed` (not the parser's form:
    an abnormal end) or `forged` (reported both ways), each '' when not."""

    statuses: dict[str, str] = field(default_factory=dict)
    malformed: str = ""
    forged: str = ""


def _entry_problem(entry: Any) -> str:
    """Why one entry of `tests` is not the parser's form ('' when it is)."""
    match entry:
        case {"name": str(name), "status": str(status)} if name and status in PARSER_STATUSES:
            return ""
        case {"name": str(name), "status": status} if name:
            return f"{name!r} has the status {status!r}, none of {', '.join(PARSER_STATUSES)}"
    return f"an entry that is not {{name, status}}: {str(entry)[:200]!r}"


def read_report(data: bytes | None, judged: set[str]) -> ParsedReport:
    """The parser's `output.json` (None: it wrote none). `judged` are the names a second report of which is a
    forgery: the graded tests and the canary."""
    if data is None:
        return ParsedReport(malformed="the parser wrote no output.json")
    if len(data) > MAX_REPORT_BYTES:
        return ParsedReport(malformed=f"the parser's output.json holds {len(data)} bytes, over {MAX_REPORT_BYTES}")
    try:
        report = json.loads(data)
    except (ValueError, RecursionError) as error:
        return ParsedReport(malformed=f"the parser's output.json is not JSON: {str(error)[:200]}")
    tests = report.get("tests") if isinstance(report, dict) else None
    if not isinstance(tests, list):
        return ParsedReport(malformed="the parser's output.json has no list `tests`")
    statuses: dict[str, str] = {}
    for entry in tests:
        if problem := _entry_problem(entry):
            return ParsedReport(malformed=f"the parser's output.json: {problem}")
        name, status = entry["name"], entry["status"]
        before = statuses.get(name)
        if before and name in judged and {before, status} & _PASSING and {before, status} & _NOT_PASSING:
            return ParsedReport(forged=f"the parser reported {name} both {before} and {status}")
        statuses[name] = max(before or status, status, key=SEVERITY.__getitem__)
    return ParsedReport(statuses)


def reported_both_ways(log: str, judged: set[str]) -> str:
    """The first of `judged` that pytest's lines in `log` report both passed (or xfailed) and failed (or in error),
    '' when none."""
    seen: dict[str, set[str]] = {}
    for line in _readings(log):
        for match in (_VERBOSE.match(line), _SUMMARY.match(line)):
            if match is None:
                continue
            test, status = (match[1], match[2]) if match.re is _VERBOSE else (match[2], match[1])
            if test in judged:
                seen.setdefault(test, set()).add(status)
    return next((test for test, found in seen.items() if found & _PASSING and found & _NOT_PASSING), "")


def _readings(log: str) -> list[str]:
    """Each line of `log` as a dataset's parser may read it, in order: split at newlines as a file read as text is,
    and at every line boundary Python's `splitlines` knows (form feed, vertical tab, ...), each without its colour
    codes and stripped of the whitespace around it. A line one reading hides (a test's line indented, or a form
    feed between its id and its status) is another's."""
    lines = [*_NEWLINES.split(log), *log.splitlines()]
    return list(dict.fromkeys(_COLOURS.sub("", line).strip() for line in lines))
