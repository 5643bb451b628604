"""Grading a patch: apply it to a pristine workspace, run the tests, decide by test ids.

Grading never reuses the agent's workspace: it forks a fresh one from the
environment, applies the model patch, restores the graded test files to the
base commit (so the patch cannot pre-empt them), applies the test patch, and
runs the tests with a JUnit report written to the harness directory, where the
model patch cannot reach.
"""

import shlex
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from typing import Any

from eval_pipeline.benchmark import EnvironmentSpec, Instance
from eval_pipeline.outcomes import Outcome
from eval_pipeline.patches import apply_patch, patch_files
from eval_pipeline.sandbox import Workspace

# Bump when grading logic changes: evaluation artifacts are keyed by it and assets show as stale.
GRADING_VERSION = "1"
REPORT_NAME = "junit.xml"

PASSED, FAILED, SKIPPED, MISSING = "passed", "failed", "skipped", "missing"
_SEVERITY = {PASSED: 0, SKIPPED: 1, FAILED: 2}


@dataclass
class Verdict:
    outcome: Outcome
    tests: dict[str, str] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    detail: str = ""


def _node_id(testcase: ElementTree.Element) -> str:
    """Rebuild pytest's node id from an xunit1 testcase (`file`, `classname`, `name`)."""
    name = testcase.get("name", "")
    classname = testcase.get("classname", "")
    path = testcase.get("file")
    if not path:  # not xunit1: guess the module path from the dotted class name
        return "::".join([classname.replace(".", "/") + ".py", name])
    module = path.removesuffix(".py").replace("/", ".")
    classes = classname[len(module) + 1 :].split(".") if classname.startswith(module + ".") else []
    return "::".join([path, *classes, name])


def parse_junit(report: bytes) -> dict[str, str]:
    """Test id -> passed | failed | skipped; a test reported twice keeps its worst status."""
    statuses: dict[str, str] = {}
    for testcase in ElementTree.fromstring(report).iter("testcase"):
        children = {child.tag for child in testcase}
        status = FAILED if children & {"failure", "error"} else SKIPPED if "skipped" in children else PASSED
        test_id = _node_id(testcase)
        previous = statuses.get(test_id, PASSED)
        statuses[test_id] = max(previous, status, key=_SEVERITY.__getitem__)
    return statuses


def graded_tests(instance: Instance, statuses: dict[str, str]) -> dict[str, str]:
    """The status of every FAIL_TO_PASS and PASS_TO_PASS test; absent ones are `missing`."""
    return {test_id: statuses.get(test_id, MISSING) for test_id in instance.FAIL_TO_PASS + instance.PASS_TO_PASS}


def is_resolved(tests: dict[str, str]) -> bool:
    """Resolved means every graded test passed: the failing ones now pass, nothing else broke."""
    return bool(tests) and all(status == PASSED for status in tests.values())


def _restore_test_files(instance: Instance, workspace: Workspace) -> dict[str, Any]:
    """Put every file the test patch touches back to its base-commit state (or remove it)."""
    base = shlex.quote(instance.base_commit)
    script = "; ".join(
        f"if git cat-file -e {base}:{shlex.quote(path)} 2>/dev/null; "
        f"then git checkout -q {base} -- {shlex.quote(path)}; else rm -f {shlex.quote(path)}; fi"
        for path in patch_files(instance.test_patch)
    )
    return workspace.run(script or "true", timeout_s=120).summary()


def grade(
    instance: Instance, spec: EnvironmentSpec, model_patch: str, workspace: Workspace, test_timeout_s: float
) -> Verdict:
    """Judge `model_patch` on a pristine workspace of the instance."""
    verdict = Verdict(outcome=Outcome.ERROR)
    if model_patch.strip():
        applied = apply_patch(workspace, model_patch, "model.patch")
        verdict.steps.append({"step": "apply_model_patch", **applied.summary()})
        if not applied.ok:
            verdict.outcome, verdict.detail = Outcome.PATCH_APPLY_FAILED, "the model patch does not apply"
            return verdict
    verdict.steps.append({"step": "restore_test_files", **_restore_test_files(instance, workspace)})
    applied = apply_patch(workspace, instance.test_patch, "test.patch")
    verdict.steps.append({"step": "apply_test_patch", **applied.summary()})
    if not applied.ok:
        verdict.detail = f"the test patch of {instance.instance_id} does not apply"
        return verdict

    files = " ".join(shlex.quote(path) for path in instance.test_files or patch_files(instance.test_patch))
    report_path = shlex.quote(workspace.harness_path(REPORT_NAME))
    tests = workspace.run(f"{spec.test_cmd} --junitxml={report_path} {files}", timeout_s=test_timeout_s)
    verdict.steps.append({"step": "run_tests", **tests.summary()})
    if tests.timed_out:
        verdict.outcome, verdict.detail = Outcome.TIMEOUT, f"the tests ran over {test_timeout_s:g}s"
        return verdict
    if tests.oom_killed:
        verdict.outcome, verdict.detail = Outcome.OOM_KILLED, "the tests were OOM-killed at the memory ceiling"
        return verdict
    report = workspace.read_harness_file(REPORT_NAME)
    if report is None:
        verdict.detail = f"the test run wrote no report (exit {tests.exit_code})"
        return verdict
    try:
        verdict.tests = graded_tests(instance, parse_junit(report))
    except ElementTree.ParseError as error:
        verdict.detail = f"the test report is not valid XML: {error}"
        return verdict
    verdict.outcome = Outcome.RESOLVED if is_resolved(verdict.tests) else Outcome.UNRESOLVED
    return verdict
