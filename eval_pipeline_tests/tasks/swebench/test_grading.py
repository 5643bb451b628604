"""Grading: JUnit parsing, SWE-bench's ids and resolved rule, and patches that try to cheat or break."""

from dataclasses import replace

import pytest

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.swebench.grading import decide, grade, graded_tests, parse_junit
from eval_pipeline.tasks.swebench.instance import Instance
from eval_pipeline_tests.support.forgeries import fixed_module, new_files

JUNIT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase classname="tests.test_a" file="tests/test_a.py" line="1" name="test_ok" time="0.01"/>
  <testcase classname="tests.test_a" file="tests/test_a.py" line="4" name="test_bad"><failure message="x">boom</failure></testcase>
  <testcase classname="tests.test_a.TestGroup" file="tests/test_a.py" line="9" name="test_param[1-2]"/>
  <testcase classname="tests.test_a" file="tests/test_a.py" line="12" name="test_skip"><skipped message="no"/></testcase>
  <testcase classname="tests.test_a" file="tests/test_a.py" line="1" name="test_ok"><error message="teardown">x</error></testcase>
  <testcase classname="tests.test_a" file="tests/test_a.py" line="15" name="test_known_bug"><skipped type="pytest.xfail" message="bug"/></testcase>
  <testcase classname="tests.test_a" file="tests/test_a.py" line="20" name="test_mark[xyz abc]"/>
</testsuite></testsuites>"""


def test_junit_statuses_by_pytest_node_id():
    assert parse_junit(JUNIT) == {
        "tests/test_a.py::test_ok": "ERROR",  # an error in teardown outweighs the pass
        "tests/test_a.py::test_bad": "FAILED",
        "tests/test_a.py::TestGroup::test_param[1-2]": "PASSED",
        "tests/test_a.py::test_skip": "SKIPPED",
        "tests/test_a.py::test_known_bug": "XFAIL",
        "tests/test_a.py::test_mark[xyz abc]": "PASSED",
    }


def test_junit_ids_also_as_swebench_parser_spells_them():
    """SWE-bench's pytest parser cuts an id at its first space: the dataset's lists hold such ids."""
    statuses = parse_junit(JUNIT, "parse_log_pytest")
    assert statuses["tests/test_a.py::test_mark[xyz"] == "PASSED"
    assert statuses["tests/test_a.py::test_mark[xyz abc]"] == "PASSED"


def _row(fail_to_pass, pass_to_pass):
    return Instance("x", "o/r", "c", "p", "diff --git a/a b/a", "diff --git a/t b/t", fail_to_pass, pass_to_pass)


@pytest.mark.parametrize(
    ("statuses", "outcome"),
    [
        ({"f": "PASSED", "p": "PASSED"}, Outcome.RESOLVED),
        ({"f": "XFAIL", "p": "PASSED"}, Outcome.RESOLVED),  # SWE-bench counts an xfail as a pass
        ({"f": "PASSED", "p": "SKIPPED"}, Outcome.RESOLVED),  # a skipped PASS_TO_PASS test is no regression
        ({"f": "SKIPPED", "p": "PASSED"}, Outcome.UNRESOLVED),
        ({"f": "PASSED", "p": "FAILED"}, Outcome.UNRESOLVED),
        ({"f": "PASSED", "p": "ERROR"}, Outcome.UNRESOLVED),
        ({"f": "PASSED"}, Outcome.TESTS_MISSING),  # never a silent unresolved
    ],
)
def test_swebench_resolution_rule(statuses, outcome):
    row = _row(("f",), ("p",))
    assert decide(row, graded_tests(row, statuses)) is outcome


def test_a_truncated_listed_id_matches_the_tests_it_starts():
    row = _row(("t.py::test_mark[xyz",), ())
    assert graded_tests(row, {"t.py::test_mark[xyz abc]": "PASSED"}) == {"t.py::test_mark[xyz": "PASSED"}
    assert graded_tests(row, {"t.py::test_mark[abc]": "PASSED"}) == {"t.py::test_mark[xyz": "MISSING"}


def test_pytests_progress_counter_in_a_list_grades_nothing_and_cannot_stand_for_a_fix():
    """Two Verified rows list `[100%]`, which SWE-bench's parser read off a progress line: it names no test."""
    row = _row(("f",), ("p", "[100%]"))
    assert graded_tests(row, {"f": "PASSED", "p": "PASSED"}) == {"f": "PASSED", "p": "PASSED"}
    assert decide(row, graded_tests(row, {"f": "PASSED", "p": "PASSED"})) is Outcome.RESOLVED
    only_counters = _row(("[ 50%]",), ("[100%]",))
    assert decide(only_counters, graded_tests(only_counters, {"[100%]": "PASSED"})) is Outcome.UNRESOLVED


@pytest.fixture
def instance(demo_benchmark):
    return demo_benchmark.instances[0]


def run_grade(shared_sandbox, prepare, demo_benchmark, instance, patch, spec=None, timeout=60):
    spec = spec or demo_benchmark.environment_for(instance)
    environment = prepare(instance)
    with shared_sandbox.workspace(environment, "grade") as workspace:
        return grade(instance, spec, patch, workspace, test_timeout_s=timeout)


def test_a_patch_that_does_not_apply(shared_sandbox, prepare, demo_benchmark, instance):
    broken = instance.patch.replace("-    if value > low:", "-    if value >= low:")
    verdict = run_grade(shared_sandbox, prepare, demo_benchmark, instance, broken)
    assert verdict.outcome is Outcome.PATCH_APPLY_FAILED


def test_a_patch_that_rewrites_the_graded_tests_does_not_help(shared_sandbox, prepare, demo_benchmark, instance):
    cheat = (
        "diff --git a/tests/test_arith.py b/tests/test_arith.py\n"
        "--- a/tests/test_arith.py\n+++ b/tests/test_arith.py\n"
        "@@ -1,4 +1,8 @@\n from calclib.arith import clamp, gcd\n+\n+\n+def test_clamp_inside_interval():\n+    pass\n \n \n def test_clamp_below():\n"
    )
    verdict = run_grade(shared_sandbox, prepare, demo_benchmark, instance, cheat)
    assert verdict.outcome is Outcome.UNRESOLVED
    assert verdict.tests["tests/test_arith.py::test_clamp_inside_interval"] == "FAILED"


def test_tests_that_run_too_long_end_in_timeout_not_unresolved(shared_sandbox, prepare, demo_benchmark, instance):
    slow = replace(EnvironmentSpec(), test_cmd="sleep 30; " + EnvironmentSpec().test_cmd)
    verdict = run_grade(shared_sandbox, prepare, demo_benchmark, instance, instance.patch, spec=slow, timeout=1)
    assert verdict.outcome is Outcome.TEST_TIMEOUT
    assert not verdict.outcome.is_scored


def test_no_report_is_an_error_not_a_failure(shared_sandbox, prepare, demo_benchmark, instance):
    verdict = run_grade(
        shared_sandbox, prepare, demo_benchmark, instance, instance.patch, spec=EnvironmentSpec(test_cmd="true")
    )
    assert verdict.outcome is Outcome.GRADING_ERROR and "reported no test" in verdict.detail


def test_a_run_that_cannot_start_its_tests_is_an_error_not_a_failure(shared_sandbox, prepare, demo_benchmark, instance):
    """pytest exit 4 (usage error) writes a report with no test: never graded as every test missing."""
    spec = replace(EnvironmentSpec(), test_cmd=EnvironmentSpec().test_cmd + " --no-such-option")
    verdict = run_grade(shared_sandbox, prepare, demo_benchmark, instance, instance.patch, spec=spec)
    assert verdict.outcome is Outcome.GRADING_ERROR, verdict


def test_a_compiled_extension_module_beside_a_module_is_refused(shared_sandbox, prepare, demo_benchmark, instance):
    """Python imports `arith.cpython-311-x86_64-linux-gnu.so` in place of `arith.py`: code no diff shows."""
    module = fixed_module(instance).removesuffix(".py")
    patch = new_files({f"{module}.cpython-311-x86_64-linux-gnu.so": "ELF"})
    verdict = run_grade(shared_sandbox, prepare, demo_benchmark, instance, patch)
    assert verdict.outcome is Outcome.PATCH_APPLY_FAILED and "compiled extension" in verdict.detail


def test_a_patch_touching_thousands_of_test_files_is_graded_like_any_other(
    shared_sandbox, prepare, demo_benchmark, instance, monkeypatch
):
    """A command is one `sh -c` argument, which Linux caps at 128 KiB (and its request once travelled in one
    environment variable, capped alike): restoring 800 test files in one command ended `engine_error`,
    unscored, for any patch that wanted out of the count. They are restored in parts."""
    padding = {f"tests/test_padding_{number:04d}_{'x' * 60}.py": "def test_pad():\n    pass\n" for number in range(800)}
    patch = instance.patch + new_files(padding)
    environment = prepare(instance)
    with shared_sandbox.workspace(environment, "many") as workspace:
        run = workspace.run

        def capped(command, **kwargs):
            assert len(command.encode()) < 128 * 1024, f"a command of {len(command.encode())} bytes"
            return run(command, **kwargs)

        monkeypatch.setattr(workspace, "run", capped)
        verdict = grade(instance, demo_benchmark.environment_for(instance), patch, workspace, test_timeout_s=120)
    assert verdict.outcome is Outcome.RESOLVED, verdict.detail
