"""The harness's way into pytest, copied into each grading workspace and run there by the environment's Python.

    python pytest_launcher.py (module|script) PYTEST_ARGS... 3>&1 >LOG 2>&1

`python -m pytest` puts the repository first on sys.path before it imports
pytest, so a patch's `pytest.py` at the root replaces the runner. Here pytest,
the plugins it ships and the modules it imports late (pdb and its kin) are
imported while sys.path holds only the environment; the repository is put on
the path afterwards, as `python -m` would (`module`), or not at all, as the
`pytest` script runs (`script`).

The run's results leave the process as they happen, on the report channel:
descriptor 3, which the harness's shell opens on the command's captured
output before it sends the output and errors to the log. The launcher moves it
to a descriptor no process the tests start inherits, and writes one line per
test as its teardown is reported (every report of the test, its subtests'
too: when, outcome, whether pytest took it for an expected failure), one line
per collector that failed, and, once pytest has returned, a last line with
pytest's exit status and how many lines came before it. A line written is gone
from the process: nothing it does at exit rewrites what the harness reads
(report_channel.py reads and judges the lines).

A test's line also carries the values its sealed assertions handed over
(sealed.py): the harness rewrote each such assertion to call `seal(SITE,
actual)` of the module SEAL_MODULE, which the launcher registers; the values
go out as plain data (`sealed_value`), and the harness, which alone holds the
expected ones, compares them.

Runs on every Python and pytest an environment may have (SWE-bench's go back
to Python 3.5 and pytest 4): no syntax or API newer than those.
"""

import json
import numbers
import os
import sys
import types
from decimal import Decimal

CHANNEL_FD = 3
# Standard modules pytest imports only when it needs them: imported now, before the repository can shadow them.
LATE_IMPORTS = ("pdb", "bdb", "cmd", "code", "codeop", "doctest", "readline", "unittest")
# A report as one line's letters: when (setup, call, teardown; u for a subtest's, made during the call), outcome,
# and x for an expected failure or pass.
WHEN = {"setup": "s", "call": "c", "teardown": "t"}
SUBTEST_REPORTS = ("SubtestReport", "SubTestReport")  # pytest 9's own, and the pytest-subtests plugin's
OUTCOME = {"passed": "p", "failed": "f", "skipped": "s"}
SEAL_MODULE = "_eval_pipeline_seal"  # what a sealed assertion imports to hand its value over
SEALED_ITEMS_AT_MOST = 100000  # the parts of one value sent; a larger value is opaque
SEALED_DEPTH_AT_MOST = 50


class _TooLarge(Exception):
    pass


def sealed_value(value):
    """`value` as plain JSON data: [kind, ...], kind one of none, bool, int, float, complex, decimal, str,
    bytes, tuple, list, set, dict, or opaque (with the type's name) for a value that is none of these."""
    budget = [SEALED_ITEMS_AT_MOST]
    try:
        return _encoded(value, budget, 0)
    except _TooLarge:
        return ["opaque", "too large"]
    except Exception as error:  # a value whose conversion raises
        return ["opaque", type(error).__name__]


def _encoded(value, budget, depth):
    budget[0] -= 1
    if budget[0] < 0 or depth > SEALED_DEPTH_AT_MOST:
        raise _TooLarge()
    if value is None:
        return ["none"]
    if isinstance(value, bool):
        return ["bool", bool(value)]
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return _encoded(value.item(), budget, depth + 1)
    if isinstance(value, Decimal):
        return ["decimal", str(Decimal.__str__(value))]
    if isinstance(value, numbers.Integral):
        return ["int", str(int(value))]
    if isinstance(value, numbers.Real):
        return ["float", repr(float(value))]
    if isinstance(value, numbers.Complex):
        return ["complex", repr(complex(value))]
    if isinstance(value, str):
        return ["str", str.__str__(value)]
    if isinstance(value, (bytes, bytearray)):
        budget[0] -= len(value) // 64
        return ["bytes", bytes(value).hex()]
    for kind, types_ in (("tuple", tuple), ("list", list), ("set", (set, frozenset))):
        if isinstance(value, types_):
            return [kind, [_encoded(item, budget, depth + 1) for item in value]]
    if isinstance(value, dict):
        return ["dict", [[_encoded(k, budget, depth + 1), _encoded(v, budget, depth + 1)] for k, v in value.items()]]
    return ["opaque", type(value).__name__]


def _import_runner():
    """pytest, its built-in plugins and the modules they import late, from the environment only."""
    sys.path.pop(0)  # this file's directory: nothing of the harness's is for the tests to import
    import pytest
    from _pytest.config import default_plugins

    for name in ["_pytest." + plugin for plugin in default_plugins] + list(LATE_IMPORTS):
        try:
            __import__(name)
        except ImportError:  # a name this pytest lists but ships elsewhere, a module this Python lacks
            pass
    return pytest


class Channel:
    """The report channel: whole lines of JSON, counted."""

    def __init__(self, fd):
        self._fd = os.dup(fd)  # a descriptor of its own, which no process started by the tests inherits
        os.close(fd)
        self.lines = 0

    def write(self, record):
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode("ascii")
        while data:
            data = data[os.write(self._fd, data) :]
        self.lines += 1


class ReportChannel:
    """The plugin that writes each test's reports, and the values its sealed assertions handed over, to the
    channel once its teardown is reported."""

    def __init__(self, channel):
        self._channel = channel
        self._phases = {}
        self._running = None
        self._sealed = {}

    def seal(self, site, value):
        """Keep the value a sealed assertion of the running test computed; the assertion holds in the process."""
        if self._running is not None:
            self._sealed.setdefault(self._running, []).append([site, sealed_value(value)])
        return True

    def pytest_runtest_logstart(self, nodeid, location):
        self._running = nodeid
        self._sealed.pop(nodeid, None)

    def pytest_runtest_logreport(self, report):
        phases = self._phases.pop(report.nodeid, "")
        if report.outcome == "rerun" or phases is None:  # a run a plugin repeats: only the last one is reported
            self._sealed.pop(report.nodeid, None)
            if report.when != "teardown":
                self._phases[report.nodeid] = None
            return
        subtest = type(report).__name__ in SUBTEST_REPORTS
        phases += ("u" if subtest else WHEN.get(report.when, "?")) + OUTCOME.get(report.outcome, "?")
        phases += "x" if hasattr(report, "wasxfail") else "-"
        if report.when == "teardown":
            self._channel.write(["test", report.nodeid, phases, self._sealed.pop(report.nodeid, [])])
        else:
            self._phases[report.nodeid] = phases

    def pytest_collectreport(self, report):
        if report.failed:
            self._channel.write(["collect", report.nodeid])


def main(argv):
    channel = Channel(CHANNEL_FD)
    mode = argv[0]
    pytest = _import_runner()
    if mode == "module":
        sys.path.insert(0, os.getcwd())
    reports = ReportChannel(channel)
    sealing = types.ModuleType(SEAL_MODULE)
    sealing.seal = reports.seal
    sys.modules[SEAL_MODULE] = sealing
    status = int(pytest.main(argv[1:], plugins=[reports]))
    channel.write(["end", status, channel.lines])
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
