"""Grading a patch: apply it to a pristine workspace, run the tests, decide.

Grading never reuses the agent's workspace: it forks a fresh one from the
environment and applies the model patch, after checking it (no paths outside
the repository, not over the size limit). A code task (SWE-bench) then
restores the test infrastructure to the base commit: the files the test patch
touches, and whatever the model patch changed among test files, conftest.py,
pytest configuration and sitecustomize, so a patch cannot make the tests pass
by rewriting them. It applies the test patch and runs the tests with a JUnit
report written to the harness directory, where the model patch cannot reach;
FAIL_TO_PASS and PASS_TO_PASS decide. A terminal task copies its tests into the
harness directory and runs tests/test.sh; its reward file, or else its exit
code, decides. Nothing a command prints is parsed for a verdict, so output
that forges a test runner's summary changes nothing.
"""

import json
import shlex
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import PurePosixPath
from typing import Any

from eval_pipeline.benchmark import EnvironmentSpec, Instance
from eval_pipeline.outcomes import Outcome
from eval_pipeline.patches import apply_patch, patch_paths, patch_problem
from eval_pipeline.sandbox import ExecResult, Workspace
from eval_pipeline.terminal_tasks import REWARD_FILE, REWARD_JSON, TerminalTask

# Bump when grading logic changes: evaluation artifacts are keyed by it and assets show as stale.
GRADING_VERSION = "2"
# Files that decide how tests run rather than what the code does: a model patch's changes to them are undone.
TEST_INFRASTRUCTURE = (
    "conftest.py",
    "pytest.ini",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "sitecustomize.py",
    "usercustomize.py",
    "test_*.py",
    "*_test.py",
)
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


def protected_files(instance: Instance, model_patch: str) -> tuple[list[str], list[str]]:
    """The files restored before the tests run: the test patch's, and the model patch's test infrastructure.

    Returns (all files to restore, those among them that the model patch changed).
    """
    touched = [
        path
        for path in patch_paths(model_patch)
        if any(fnmatch(PurePosixPath(path).name, p) for p in TEST_INFRASTRUCTURE)
    ]
    return list(dict.fromkeys(patch_paths(instance.test_patch) + touched)), touched


def _restore_test_files(instance: Instance, files: list[str], workspace: Workspace) -> dict[str, Any]:
    """Put each file back to its base-commit state (or remove it, if the base commit has none)."""
    base = shlex.quote(instance.base_commit)
    script = "; ".join(
        f"if git cat-file -e {base}:{shlex.quote(path)} 2>/dev/null; "
        f"then git checkout -q {base} -- {shlex.quote(path)}; else rm -f {shlex.quote(path)}; fi"
        for path in files
    )
    return workspace.run(script or "true", timeout_s=120).summary()


def _apply_model_patch(verdict: Verdict, model_patch: str, workspace: Workspace) -> bool:
    """Apply the model's patch (an empty one trivially); False, with the verdict set, when it does not apply."""
    if not model_patch.strip():
        return True
    if problem := patch_problem(model_patch):
        verdict.outcome, verdict.detail = Outcome.PATCH_APPLY_FAILED, f"the model patch was not applied: {problem}"
        return False
    applied = apply_patch(workspace, model_patch, "model.patch")
    verdict.steps.append({"step": "apply_model_patch", **applied.summary()})
    if not applied.ok:
        verdict.outcome, verdict.detail = Outcome.PATCH_APPLY_FAILED, "the model patch does not apply"
    return applied.ok


def _stopped_by_a_limit(verdict: Verdict, tests: ExecResult, test_timeout_s: float) -> bool:
    """A test run cut off by a limit is no verdict on the patch: the outcome says which limit."""
    if tests.timed_out:
        verdict.outcome, verdict.detail = Outcome.TEST_TIMEOUT, f"the tests ran over {test_timeout_s:g}s"
    elif tests.oom_killed:
        verdict.outcome, verdict.detail = Outcome.OOM_KILLED, "the tests were OOM-killed at the memory ceiling"
    return tests.timed_out or tests.oom_killed


def grade(
    instance: Instance, spec: EnvironmentSpec, model_patch: str, workspace: Workspace, test_timeout_s: float
) -> Verdict:
    """Judge `model_patch` on a pristine workspace of the code task."""
    verdict = Verdict(outcome=Outcome.GRADING_ERROR)
    if not _apply_model_patch(verdict, model_patch, workspace):
        return verdict
    restored, undone = protected_files(instance, model_patch)
    verdict.steps.append(
        {"step": "restore_test_files", "undone": undone, **_restore_test_files(instance, restored, workspace)}
    )
    applied = apply_patch(workspace, instance.test_patch, "test.patch")
    verdict.steps.append({"step": "apply_test_patch", **applied.summary()})
    if not applied.ok:
        verdict.detail = f"the test patch of {instance.instance_id} does not apply"
        return verdict

    files = " ".join(shlex.quote(path) for path in instance.test_files or patch_paths(instance.test_patch))
    report_path = shlex.quote(workspace.harness_path(REPORT_NAME))
    tests = workspace.run(f"{spec.test_cmd} --junitxml={report_path} {files}", timeout_s=test_timeout_s)
    verdict.steps.append({"step": "run_tests", **tests.summary()})
    if _stopped_by_a_limit(verdict, tests, test_timeout_s):
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
    if undone:
        verdict.detail = f"graded with the model patch's changes to test infrastructure undone: {', '.join(undone)}"
    return verdict


def _reward(workspace: Workspace) -> float | None:
    """The verifier's reward: reward.txt (a number) or reward.json ({"reward": number}); None if it wrote none."""
    if (text := workspace.read_harness_file(REWARD_FILE)) is not None:
        return float(text.decode().strip())
    if (text := workspace.read_harness_file(REWARD_JSON)) is not None:
        return float(json.loads(text)["reward"])
    return None


def grade_terminal(task: TerminalTask, model_patch: str, workspace: Workspace, test_timeout_s: float) -> Verdict:
    """Judge `model_patch` on a pristine workspace of the terminal task: resolved at reward 1 (or exit 0)."""
    verdict = Verdict(outcome=Outcome.GRADING_ERROR)
    if not _apply_model_patch(verdict, model_patch, workspace):
        return verdict
    tests_dir = workspace.write_harness_tree("tests", task.tests)
    reward_file = workspace.harness_path(REWARD_FILE)
    tests = workspace.run(
        f"mkdir -p {shlex.quote(reward_file.rsplit('/', 1)[0])} && bash {shlex.quote(tests_dir + '/test.sh')}",
        timeout_s=test_timeout_s,
        env={**task.verifier_env, "EVAL_TESTS_DIR": tests_dir, "EVAL_REWARD_FILE": reward_file},
    )
    verdict.steps.append({"step": "run_tests", **tests.summary()})
    if _stopped_by_a_limit(verdict, tests, test_timeout_s):
        return verdict
    try:
        reward = _reward(workspace)
    except (ValueError, KeyError, TypeError) as error:
        verdict.detail = f"the reward file is not a number: {error!r}"
        return verdict
    passed = reward >= 1.0 if reward is not None else tests.exit_code == 0
    verdict.tests = {"tests/test.sh": PASSED if passed else FAILED}
    verdict.detail = f"reward {reward:g}" if reward is not None else f"test.sh exited {tests.exit_code}"
    verdict.outcome = Outcome.RESOLVED if passed else Outcome.UNRESOLVED
    return verdict


def grade_task(
    task: Instance | TerminalTask, spec: EnvironmentSpec, model_patch: str, workspace: Workspace, test_timeout_s: float
) -> Verdict:
    """Grade either kind of task."""
    if isinstance(task, TerminalTask):
        return grade_terminal(task, model_patch, workspace, test_timeout_s)
    return grade(task, spec, model_patch, workspace, test_timeout_s)
