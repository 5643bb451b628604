"""Grading: JUnit parsing, the resolved rule, and patches that try to cheat or break."""

from dataclasses import replace

import pytest

from eval_pipeline.benchmark import EnvironmentSpec
from eval_pipeline.grading import grade, is_resolved, parse_junit
from eval_pipeline.outcomes import Outcome

JUNIT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase classname="tests.test_a" file="tests/test_a.py" line="1" name="test_ok" time="0.01"/>
  <testcase classname="tests.test_a" file="tests/test_a.py" line="4" name="test_bad"><failure message="x">boom</failure></testcase>
  <testcase classname="tests.test_a.TestGroup" file="tests/test_a.py" line="9" name="test_param[1-2]"/>
  <testcase classname="tests.test_a" file="tests/test_a.py" line="12" name="test_skip"><skipped message="no"/></testcase>
  <testcase classname="tests.test_a" file="tests/test_a.py" line="1" name="test_ok"><error message="teardown">x</error></testcase>
</testsuite></testsuites>"""


def test_junit_statuses_by_pytest_node_id():
    assert parse_junit(JUNIT) == {
        "tests/test_a.py::test_ok": "failed",  # an error in teardown outweighs the pass
        "tests/test_a.py::test_bad": "failed",
        "tests/test_a.py::TestGroup::test_param[1-2]": "passed",
        "tests/test_a.py::test_skip": "skipped",
    }


def test_resolved_needs_every_graded_test_to_pass():
    assert is_resolved({"a": "passed", "b": "passed"})
    assert not is_resolved({"a": "passed", "b": "skipped"})
    assert not is_resolved({"a": "passed", "b": "missing"})
    assert not is_resolved({})


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
    assert verdict.tests["tests/test_arith.py::test_clamp_inside_interval"] == "failed"


def test_tests_that_run_too_long_end_in_timeout_not_unresolved(shared_sandbox, prepare, demo_benchmark, instance):
    slow = replace(EnvironmentSpec(), test_cmd="sleep 30; " + EnvironmentSpec().test_cmd)
    verdict = run_grade(shared_sandbox, prepare, demo_benchmark, instance, instance.patch, spec=slow, timeout=1)
    assert verdict.outcome is Outcome.TEST_TIMEOUT
    assert not verdict.outcome.is_scored


def test_no_report_is_an_error_not_a_failure(shared_sandbox, prepare, demo_benchmark, instance):
    verdict = run_grade(
        shared_sandbox, prepare, demo_benchmark, instance, instance.patch, spec=EnvironmentSpec(test_cmd="true")
    )
    assert verdict.outcome is Outcome.GRADING_ERROR and "no report" in verdict.detail
