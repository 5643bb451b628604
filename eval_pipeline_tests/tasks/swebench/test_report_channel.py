"""The report channel and the statuses that count for a patch: what the launcher sends, what the grader believes.

The launcher (pytest_launcher.py) writes each test's reports on the test
command's captured output as they happen; report_channel.py believes a
channel only whole and the launcher's alone. An XFAIL or SKIPPED counts only
where the graded test's restored source can make it (test_source.py), and a
twin is judged beside its original by whether both bodies passed
(canaries.passed_with_its_original). The attacks on whole gradings, on every
backend, are test_forged_verdicts.py's `STATUS_FORGERIES`.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.tasks.swebench.canaries import passed_with_its_original
from eval_pipeline.tasks.swebench.grading import decide, graded_tests
from eval_pipeline.tasks.swebench.instance import Instance
from eval_pipeline.tasks.swebench.pytest_run import LAUNCHER_SOURCE
from eval_pipeline.tasks.swebench.report_channel import read_channel
from eval_pipeline.tasks.swebench.test_source import RestoredSource

EVERY_KIND = """import unittest

import pytest


@pytest.fixture
def broken():
    raise RuntimeError("in setup")


@pytest.fixture
def bad_teardown():
    yield
    raise RuntimeError("in teardown")


def test_pass():
    pass


def test_fail():
    assert 0


@pytest.mark.xfail
def test_xfail():
    assert 0


@pytest.mark.xfail
def test_xpass():
    pass


@pytest.mark.xfail(strict=True)
def test_xpass_strict():
    pass


@pytest.mark.xfail(run=False)
def test_not_run():
    pass


@pytest.mark.skip
def test_skip():
    pass


def test_skip_called():
    pytest.skip("no")


def test_xfail_called():
    pytest.xfail("no")


def test_setup_error(broken):
    pass


def test_teardown_error(bad_teardown):
    pass


class TestSubtests(unittest.TestCase):
    def test_one_fails(self):
        for number in range(3):
            with self.subTest(number=number):
                self.assertLess(number, 2)
"""
EXPECTED = {
    "test_pass": "PASSED",
    "test_fail": "FAILED",
    "test_xfail": "XFAIL",
    "test_xpass": "XPASS",
    "test_xpass_strict": "FAILED",
    "test_not_run": "XFAIL",
    "test_skip": "SKIPPED",
    "test_skip_called": "SKIPPED",
    "test_xfail_called": "XFAIL",
    "test_setup_error": "ERROR",
    "test_teardown_error": "ERROR",
    "TestSubtests::test_one_fails": "FAILED",
}


def launched(tmp_path: Path, files: dict[str, str], *arguments: str) -> subprocess.CompletedProcess:
    """pytest run by the launcher in `tmp_path` on `files`, as grading runs it: the channel is the captured
    output, the log a file."""
    tmp_path.mkdir(exist_ok=True)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    launcher = tmp_path / "runner" / "pytest_launcher.py"
    launcher.parent.mkdir()
    launcher.write_text(LAUNCHER_SOURCE)
    command = f"{sys.executable} {launcher} module -p no:cacheprovider {' '.join(arguments)} 3>&1 > log 2>&1"
    return subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_the_launcher_reports_every_status_pytest_makes_on_the_channel(tmp_path):
    """An xpass is told from a pass (JUnit cannot), an error in setup or teardown is an error, a failed subtest
    fails its test; the log still holds pytest's own output."""
    run = launched(tmp_path, {"test_kinds.py": EVERY_KIND}, "-rA", "test_kinds.py")
    results = read_channel(run.stdout, truncated=False)
    assert (results.forged, results.incomplete) == ("", ""), run.stdout
    assert results.statuses == {f"test_kinds.py::{name}": status for name, status in EXPECTED.items()}
    assert results.summary == {"channel_lines": 13, "channel_truncated": False, "pytest_exit": 1}
    assert "short test summary info" in (tmp_path / "log").read_text()


def test_a_collection_error_is_reported_and_the_channel_ends_with_pytest(tmp_path):
    run = launched(tmp_path, {"test_broken.py": "import no_such_module\n"}, "test_broken.py")
    assert read_channel(run.stdout, truncated=False).statuses == {"test_broken.py": "ERROR"}
    assert json.loads(run.stdout.splitlines()[-1]) == ["end", 2, 1]


WRITER = """import os


def channel():
    for name in os.listdir("/proc/self/fd"):
        path = "/proc/self/fd/" + name
        if int(name) > 2 and os.path.exists(path) and os.readlink(path).startswith("pipe:"):
            return int(name)


def test_write():
    os.write(channel(), b'["test", "t.py::x", "sp-cp-tp-",[]]\\n')
"""


def test_what_the_test_process_writes_on_the_channel_is_seen(tmp_path):
    """A test that finds the channel's descriptor and writes a line of its own there shows another writer; one
    that leaves the process at once leaves a channel that never ends."""
    run = launched(tmp_path, {"test_writer.py": WRITER}, "test_writer.py")
    assert '"t.py::x"' in run.stdout
    assert "wrote on the report channel" in read_channel(run.stdout, truncated=False).forged
    exits = "import os\n\n\ndef test_exit():\n    os._exit(0)\n"
    run = launched(tmp_path / "exits", {"test_exit.py": exits}, "test_exit.py")
    assert read_channel(run.stdout, truncated=False).incomplete.endswith("ended before pytest returned")


LINE = '["test","t.py::test_a","sp-cf-tp-",[]]\n'
END = '["end",1,1]\n'


@pytest.mark.parametrize(
    ("output", "truncated", "forged"),
    [
        (LINE + END + '["test","t.py::test_a","sp-csxtp-",[]]\n', False, "line 3: a line after the run's end"),
        ('["test","t.py::test_a","sp-cp-tp-",[]]\n' + LINE + '["end",1,2]\n', False, "t.py::test_a is reported twice"),
        ('["test","t.py::test_a","cp-sp-tp-",[]]\n' + END, False, "not in the order pytest makes them"),
        ('["test","t.py::test_a","ss-cp-tp-",[]]\n' + END, False, "not in the order pytest makes them"),
        ('["test","t.py::test_a","sp-cpxtpx",[]]\n' + END, False, "not in the order pytest makes them"),
        ("PASSED t.py::test_a\n" + LINE + END, False, "line 1: a line that is not the launcher's"),
        (LINE + '["end",1,2]\n', False, "the run's end counts other than the 1 line(s) before it"),
        ("garbage\n" + LINE * 3, True, "line 1: a line that is not the launcher's"),
        ("[" * 100_000 + "\n" + LINE + END, False, "line 1: a line that is not the launcher's"),
        ('["end"]\n', False, "the run's end counts other than the 0 line(s) before it"),
    ],
)
def test_a_channel_another_writer_touched_is_forged(output, truncated, forged):
    results = read_channel(output, truncated)
    assert forged in results.forged and results.statuses == {}


@pytest.mark.parametrize(
    ("output", "truncated", "incomplete"),
    [
        (LINE, False, "ended before pytest returned"),
        (LINE + END, True, "was cut at the output cap"),
        (LINE + '["test","t.py::test_b","sp-c', True, "was cut at the output cap"),
        (LINE + END + '["test"', False, "ended before pytest returned"),
        ("", False, "ended before pytest returned"),
    ],
)
def test_a_channel_cut_short_is_an_abnormal_end(output, truncated, incomplete):
    """No sign of another writer, but not whole: the run ended abnormally (the reference judges whose fault)."""
    results = read_channel(output, truncated)
    assert incomplete in results.incomplete and not results.forged and results.statuses == {}


CONFTEST_SKIPS = "import pytest\n\n\ndef pytest_runtest_setup(item):\n    if 'net' in item.keywords:\n        pytest.skip('no network')\n"
CONFTEST_FIXTURE = """import pytest


@pytest.fixture
def frame():
    return pytest.importorskip("pandas").DataFrame([[1, 2], [3, 4]])
"""
TESTS = """import pytest
from calclib import area, skip_without_display
from calclib.testing import image_comparison

pytestmark = pytest.mark.filterwarnings("ignore")
requires_x = pytest.mark.skipif(True, reason="no x")


def helper():
    pytest.xfail("known")


@pytest.fixture
def numpy():
    return pytest.importorskip("numpy")


def test_plain():
    assert area(2) == 4


@pytest.mark.parametrize("side", [1, pytest.param(2, marks=pytest.mark.xfail)])
def test_param_mark(side):
    assert area(side) == side


@requires_x
def test_marker_variable():
    assert area(1) == 1


def test_helper():
    helper()


def test_fixture(numpy):
    assert area(numpy.int64(2)) == 4


def test_conftest_fixture(frame):
    assert area(frame.size) == 4


@image_comparison(["plot.png"])
def test_imported_decorator():
    area(3)


@skip_without_display
def test_imported_decorator_named_for_it():
    area(3)


class TestGroup:
    pytestmark = pytest.mark.xfail(reason="all of them")

    def test_in_group(self):
        assert area(3) == 9


class TestOther:
    def setup_method(self):
        pytest.importorskip("scipy")

    def test_other(self):
        assert area(4) == 16

    def test_sibling_xfails(self):
        pytest.xfail("only this one")
"""


@pytest.mark.parametrize(
    ("name", "xfail", "skip"),
    [
        ("test_plain", False, False),
        ("test_param_mark[2]", True, False),
        ("test_marker_variable", False, True),
        ("test_helper", True, False),
        ("test_fixture", False, True),
        ("test_imported_decorator", True, True),  # a decorator the file cannot show: believed
        ("test_imported_decorator_named_for_it", False, True),  # its name says what it does
        ("TestGroup::test_in_group", True, False),
        ("TestOther::test_other", False, True),
    ],
)
def test_an_xfail_or_skip_counts_only_where_the_restored_source_can_make_it(name, xfail, skip):
    source = RestoredSource({"tests/test_area.py": TESTS, "conftest.py": "", "tests/conftest.py": ""})
    test_id = f"tests/test_area.py::{name}"
    assert (source.can_report(test_id, "XFAIL"), source.can_report(test_id, "SKIPPED")) == (xfail, skip)


def test_conftests_on_the_tests_path_count_where_they_act_on_the_test():
    """A hook acts on every test below it; a fixture only on the tests that ask for it."""
    files = {"tests/test_area.py": TESTS, "other/conftest.py": CONFTEST_SKIPS, "conftest.py": CONFTEST_FIXTURE}
    assert not RestoredSource(files).can_report("tests/test_area.py::test_plain", "SKIPPED")
    assert RestoredSource(files).can_report("tests/test_area.py::test_conftest_fixture", "SKIPPED")
    files["tests/conftest.py"] = CONFTEST_SKIPS
    assert RestoredSource(files).can_report("tests/test_area.py::test_plain", "SKIPPED")


def test_twins_and_other_runners_ids_are_judged_by_their_function():
    source = RestoredSource({"tests/test_area.py": TESTS})
    assert source.can_report("tests/test_area.py::test_area_helper", "XFAIL", name="test_helper")
    assert not source.can_report("tests/test_area.py::test_area_plain", "XFAIL", name="test_plain")
    assert source.can_report("test_other (area.tests.TestOther)", "SKIPPED")  # django's spelling
    assert not source.can_report("test_other (area.tests.TestOther.test_other)", "XFAIL")  # from Python 3.11
    assert not source.can_report("test_plain", "SKIPPED")  # sympy's
    assert source.can_report("tests/test_area.py::test_made_at_run_time", "SKIPPED")  # no function to judge


def _row(fail_to_pass, pass_to_pass):
    return Instance("x", "o/r", "c", "p", "diff --git a/a b/a", "diff --git a/t b/t", fail_to_pass, pass_to_pass)


@pytest.mark.parametrize(
    ("statuses", "outcome"),
    [
        ({"f": "XPASS", "p": "PASSED"}, Outcome.UNRESOLVED),
        ({"f": "PASSED", "p": "XPASS"}, Outcome.UNRESOLVED),
        ({"f": "XFAIL", "p": "SKIPPED"}, Outcome.RESOLVED),
    ],
)
def test_an_xpass_counts_as_swebench_counts_it_neither_pass_nor_skip(statuses, outcome):
    row = _row(("f",), ("p",))
    assert decide(row, graded_tests(row, statuses)) is outcome


@pytest.mark.parametrize(
    ("original", "twin", "forged"),
    [
        ("PASSED", "PASSED", True),
        ("PASSED", "XPASS", True),
        ("XPASS", "PASSED", True),
        ("XFAIL", "XFAIL", False),  # a marker both share: judged by the source rule
        ("XPASS", "XFAIL", False),  # an xfail marker both share, the original's body right
        ("SKIPPED", "SKIPPED", False),
        ("FAILED", "PASSED", False),  # buggy code may return the twin's value
    ],
)
def test_a_twin_is_forged_where_its_body_and_its_originals_both_passed(original, twin, forged):
    statuses = {"t.py::test_area": original}
    found = passed_with_its_original(statuses, {"t.py::test_side": twin}, {"test_side": "test_area"})
    assert found == ("t.py::test_side" if forged else "")
