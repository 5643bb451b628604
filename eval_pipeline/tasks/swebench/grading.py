"""Grading a patch: apply it to a pristine workspace, run the tests, decide.

Grading never reuses the agent's workspace: it forks a fresh one from the
environment and applies the model patch, after checking it (no paths outside
the repository, not over the size limit). A code task (SWE-bench) then
restores the test infrastructure to the base commit: the files the test patch
touches, and whatever the model patch changed among test files, conftest.py,
every file pytest reads as configuration (pytest.ini, .pytest.ini,
pytest.toml, .pytest.toml, tox.ini, setup.cfg, pyproject.toml, in any
directory), sitecustomize and .pth files, so a patch cannot make the tests
pass by rewriting or configuring them. It applies the test patch and runs the
environment's test command on the test patch's files, as SWE-bench does, with
its output written to the harness directory's `out/`. A row with no test patch
(SWE-smith's, whose tests are in its repository) has the files of its
FAIL_TO_PASS tests as that side (specs.graded_files): restored, read and run
alike.

Where that command starts pytest itself, pytest_launcher.py starts it instead
(pytest_run.py): pytest is imported from the environment before the
repository is on sys.path, and a canary test that always fails is added. Code
under test runs in the test process and can always lie to the runner; a lie
that turns failures into passes turns the canary too, and the outcome is
`report_forged`, scored as not resolved. The patch audit (grading/patch_audit.py)
records what the patch reached for on the runner's side, whatever the verdict.

Test statuses come in SWE-bench's vocabulary and ids, so the dataset's lists
match them exactly. Where the launcher runs pytest they come on its report
channel, the command's captured output, as the tests end
(report_channel.py): no file the test process may write decides, and a
channel another writer touched is `report_forged`, one cut short an abnormal
end. Where pytest runs another way (tox) they come from its JUnit report;
each test id is passed through the repository's SWE-bench log parser (which
cuts ids at their first space, as the lists were made), so nothing the tests
print can forge a status. Other runners (django's, sympy's) are read by their
parser from the log. FAIL_TO_PASS must pass (an xfail counts), PASS_TO_PASS
must not fail (a skip is no regression; an xpass, which SWE-bench's parsers do
not read, counts as neither); an xfail or a skip of a graded test, or of a
twin, counts only where the restored test side can make it (test_source.py),
else the run is `report_forged`. A graded test absent from the results makes
the outcome `tests_missing`, and a run that reports no test at all is a
grading error, never a silent `unresolved`.

A terminal task's verifier is tasks/terminal/verifier.py; what both share
(the verdict, applying the model patch, telling a run a limit stopped) is
grading/verdict.py.
"""

from __future__ import annotations

import random
import re
import secrets
import shlex
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from dataclasses import replace
from fnmatch import fnmatch
from pathlib import PurePosixPath
from typing import Any

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.grading.patch_audit import audit_patch
from eval_pipeline.grading.verdict import (
    ERROR,
    FAILED,
    MISSING,
    PASSED,
    SEVERITY,
    SKIPPED,
    XFAIL,
    XPASS,
    Verdict,
    apply_model_patch,
    stopped_by_a_limit,
)
from eval_pipeline.sandbox import ExecResult, Workspace
from eval_pipeline.sandbox.patches import apply_patch, compiled_extensions, patch_paths
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.swebench.canaries import (
    Planted,
    SourceFile,
    TwinSettings,
    graded_name,
    original_ids,
    passed_with_its_original,
    plant_twins,
    twin_statuses,
)
from eval_pipeline.tasks.swebench.pytest_run import (
    LAUNCHER_NAME,
    LAUNCHER_SOURCE,
    Canary,
    channel_redirections,
    launched_command,
)
from eval_pipeline.tasks.swebench.report_channel import RunResults, read_channel
from eval_pipeline.tasks.swebench.row import GradedRow
from eval_pipeline.tasks.swebench.sealed import Sealed, judge, seal_expectations
from eval_pipeline.tasks.swebench.specs import graded_files, log_parser, test_directives
from eval_pipeline.tasks.swebench.test_source import RestoredSource, conftests_above

# Files that decide how tests run rather than what the code does: a model patch's changes to them are undone.
TEST_INFRASTRUCTURE = (
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "pytest.toml",
    ".pytest.toml",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "sitecustomize.py",
    "usercustomize.py",
    "*.pth",
    "test_*.py",
    "*_test.py",
)
# Directories whose files configure the run, matched in any case as importlib.metadata matches them: package
# metadata (a `pytest11` entry point is a plugin pytest loads on its own) and pytest's cache (which `--lf` and
# `--sw` read to choose the tests).
TEST_INFRASTRUCTURE_DIRS = ("*.dist-info", "*.egg-info", ".pytest_cache")
# Written by the tests' command, run as the workspace's uid: under the harness's `out/`, the one place it may write.
REPORT_NAME = "out/junit.xml"
LOG_NAME = "out/tests.log"
# The test side's source on its way to the source rule (test_source.py): read before the twins are planted, and
# removed before the run.
SOURCE_NAME = "out/test_source"
TEST_PATCH_NAME = "test.patch"
RESTORED_PER_COMMAND = 200  # files put back per command: well under the 128 KiB a command may take
TWIN_SOURCE = "out/twin_source.py"  # a test file on its way to canaries.plant_twins; removed before the run
TWIN_PLANTED = "twin_planted.py"  # and on its way back, with its twins; emptied before the run


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


def _junit_status(testcase: ElementTree.Element) -> str:
    """A test's status. JUnit tells no xpass from a pass: a report read from it counts one as passed."""
    children = {child.tag: child for child in testcase}
    if "error" in children:
        return ERROR
    if "failure" in children:
        return FAILED
    if "skipped" in children:
        return XFAIL if children["skipped"].get("type") == "pytest.xfail" else SKIPPED
    return PASSED


def _worst(statuses: dict[str, str], test_id: str, status: str) -> None:
    """Record `status` for `test_id`; a test reported twice keeps its worst status."""
    statuses[test_id] = max(statuses.get(test_id, PASSED), status, key=SEVERITY.__getitem__)


def as_listed(node_statuses: dict[str, str], parser_name: str = "") -> dict[str, str]:
    """pytest's statuses by node id, each also recorded as a SWE-bench parser reads the node id from a `-rA`
    summary line (`PASSED <node id>`), which is how the dataset's test lists spell it."""
    parse = log_parser(parser_name) if parser_name else None
    statuses: dict[str, str] = {}
    for node_id, status in node_statuses.items():
        _worst(statuses, node_id, status)
        for test_id in parse(f"{PASSED} {node_id}") if parse else ():
            _worst(statuses, test_id, status)
    return statuses


def parse_junit(report: bytes, parser_name: str = "") -> dict[str, str]:
    """Test id -> status from pytest's JUnit report, as listed (`as_listed`)."""
    node_statuses: dict[str, str] = {}
    for testcase in ElementTree.fromstring(report).iter("testcase"):
        _worst(node_statuses, _node_id(testcase), _junit_status(testcase))
    return as_listed(node_statuses, parser_name)


def _lookup(statuses: dict[str, str], test_id: str) -> str:
    """A graded test's status; an id the dataset stored cut short (`test_x[a b` of `test_x[a b c]`) matches
    every test it is the start of."""
    if test_id in statuses:
        return statuses[test_id]
    if "[" in test_id and not test_id.endswith("]"):
        matches = [status for name, status in statuses.items() if name.startswith(test_id)]
        if matches:
            return max(matches, key=SEVERITY.__getitem__)
    return MISSING


# pytest's progress counter: SWE-bench's log parser took it for a test id where a test's own output left
# `PASSED [100%]` on a line of its own (two Verified rows of pytest 4.5 and 6.0 list it). No test has that name.
_PROGRESS_COUNTER = re.compile(r"\[\s*\d+%\]")


def graded_tests(instance: GradedRow, statuses: dict[str, str]) -> dict[str, str]:
    """The status of every FAIL_TO_PASS and PASS_TO_PASS test; absent ones are MISSING. An entry that is
    pytest's progress counter names no test and grades nothing (the row itself keeps it, as published)."""
    listed = instance.FAIL_TO_PASS + instance.PASS_TO_PASS
    return {test_id: _lookup(statuses, test_id) for test_id in listed if not _PROGRESS_COUNTER.fullmatch(test_id)}


def decide(instance: GradedRow, tests: dict[str, str]) -> Outcome:
    """SWE-bench's rule: every FAIL_TO_PASS test passes (or xfails) and no PASS_TO_PASS test fails or is
    missing (a skip is no regression); an xpass, which SWE-bench's parsers do not read, is neither. An xfail or a
    skip counts only where the test's source can make it (`_unexplained`), else the run is `report_forged`. A
    graded test missing from the results is `tests_missing`. `tests` is
    `graded_tests`' view: a listed entry it leaves out grades nothing, and a row needs one graded FAIL_TO_PASS."""
    fail_to_pass = [tests[test_id] for test_id in instance.FAIL_TO_PASS if test_id in tests]
    pass_to_pass = [tests[test_id] for test_id in instance.PASS_TO_PASS if test_id in tests]
    fail_to_pass_ok = all(status in (PASSED, XFAIL) for status in fail_to_pass)
    pass_to_pass_ok = all(status in (PASSED, XFAIL, SKIPPED) for status in pass_to_pass)
    if fail_to_pass and fail_to_pass_ok and pass_to_pass_ok:
        return Outcome.RESOLVED
    return Outcome.TESTS_MISSING if MISSING in tests.values() else Outcome.UNRESOLVED


def _is_test_infrastructure(path: PurePosixPath) -> bool:
    return any(fnmatch(path.name, pattern) for pattern in TEST_INFRASTRUCTURE) or any(
        fnmatch(part.lower(), pattern) for part in path.parts[:-1] for pattern in TEST_INFRASTRUCTURE_DIRS
    )


def protected_files(instance: GradedRow, model_patch: str) -> tuple[list[str], list[str]]:
    """The files restored before the tests run: the test patch's, and the model patch's test infrastructure
    and new modules named as the runner's (which a sys.path entry ahead of the environment's would import).

    Returns (all files to restore, those among them that the model patch changed).
    """
    touched = [path for path in patch_paths(model_patch) if _is_test_infrastructure(PurePosixPath(path))]
    touched += [flag.path for flag in audit_patch(model_patch) if flag.kind == "shadows_runner"]
    touched = list(dict.fromkeys(touched))
    return list(dict.fromkeys(graded_files(instance) + touched)), touched


def restore_test_files(instance: GradedRow, files: list[str], workspace: Workspace) -> dict[str, Any]:
    """Put each file back to its state in the environment (or remove it, if the environment has none), a part
    of the files per command: a container's command travels in one environment variable, which Linux caps at
    128 KiB, and a patch may touch thousands of test files. The summary is the last part's, or the first that
    failed."""
    base = shlex.quote(workspace.base_revision or instance.base_commit)
    result: ExecResult  # the range has one part at least
    for start in range(0, max(len(files), 1), RESTORED_PER_COMMAND):
        script = "; ".join(
            f"if git cat-file -e {base}:{shlex.quote(path)} 2>/dev/null; "
            f"then git checkout -q {base} -- {shlex.quote(path)}; else rm -f -- {shlex.quote(path)}; fi"
            for path in files[start : start + RESTORED_PER_COMMAND]
        )
        result = workspace.run(script or "true", timeout_s=120, env=workspace.harness_git_env)
        if not result.ok:
            break
    return result.summary()


def _test_statuses(
    spec: EnvironmentSpec, workspace: Workspace, run: ExecResult, launched: bool, sealed: Sealed
) -> RunResults:
    """The run's results: the launcher's report channel, the command's captured output, where the launcher ran
    pytest, with each sealed test that passed without handing over its expected values failed (sealed.py);
    pytest's JUnit report where pytest ran another way; else the log through its parser."""
    if launched:
        results = read_channel(run.stdout, run.output_truncated)
        statuses = dict(results.statuses)
        unsealed = judge(statuses, results.sealed, sealed, (PASSED, XPASS, XFAIL))
        summary = results.summary | ({"sealed_failed": unsealed} if unsealed else {})
        return replace(results, statuses=as_listed(statuses, spec.log_parser), summary=summary)
    report = workspace.read_harness_file(REPORT_NAME) if spec.uses_pytest else None
    if report is not None:
        return RunResults(parse_junit(report, spec.log_parser))
    if spec.log_parser and not spec.uses_pytest:
        log = workspace.read_harness_file(LOG_NAME) or b""
        return RunResults(log_parser(spec.log_parser)(log.decode("utf-8", errors="replace")))
    return RunResults({})


def reported_both_ways(parser_name: str, log: str, tests: set[str]) -> list[str]:
    """Which of `tests` (function names) a log-read runner's log reports both passed (or skipped, or xfailed) and
    failed, line by line: a runner reports a test once, so the second report was printed by the code under test.
    SWE-bench's parsers keep the last status they read, which such code can print after the runner's own."""
    parse = log_parser(parser_name)
    seen: dict[str, set[str]] = {}
    for line in log.splitlines():
        for test_id, status in parse(line).items():
            if graded_name(test_id) in tests:
                seen.setdefault(test_id, set()).add(status)
    return sorted(
        test_id for test_id, found in seen.items() if found & {PASSED, SKIPPED, XFAIL} and found & {FAILED, ERROR}
    )


def launches(spec: EnvironmentSpec) -> bool:
    """Whether the launcher runs the spec's tests (pytest_run.py), so that their results come on its channel."""
    return spec.uses_pytest and launched_command(spec.test_cmd, LAUNCHER_NAME) is not None


def _test_command(
    spec: EnvironmentSpec, directives: list[str], workspace: Workspace, canary: Canary | None
) -> tuple[str, bool]:
    """The spec's test command on the test directives, its output to the harness's log, as SWE-bench runs it,
    once the test side's source read for the source rule is removed; and whether the launcher runs it: under
    pytest it does where it can, its results on the report channel, with the canary's file written and run (a
    JUnit report where it cannot)."""
    out = shlex.quote(workspace.harness_path("out"))
    log = workspace.harness_path(LOG_NAME)
    prepare = f"mkdir -p {out} && rm -f {shlex.quote(workspace.harness_path(SOURCE_NAME))}"
    if not spec.uses_pytest:
        return f"{prepare} && {spec.test_cmd} {shlex.join(directives)} > {shlex.quote(log)} 2>&1", False
    prepare += f" && {canary.write_command()}" if canary else ""
    tests = shlex.join([*directives, *([canary.file] if canary else [])])
    runner = launched_command(spec.test_cmd, workspace.write_harness_file(LAUNCHER_NAME, LAUNCHER_SOURCE))
    if runner is not None:
        return f"{prepare} && {runner} {tests} {channel_redirections(log)}", True
    junit = f"--junitxml={shlex.quote(workspace.harness_path(REPORT_NAME))} -o junit_family=xunit1"
    return f"{prepare} && {spec.test_cmd} {junit} {tests} > {shlex.quote(log)} 2>&1", False


def _restored_source(instance: GradedRow, workspace: Workspace) -> RestoredSource:
    """The test side's source as the run will import it, read before code under test runs: the test patch's
    Python files (restored, then patched) and the `conftest.py` files on their path (restored). Each file goes
    out through the harness's `out/` as its path, a NUL, its size, a newline and its bytes."""
    tests = [path for path in graded_files(instance) if path.endswith(".py")]
    paths = list(dict.fromkeys(tests + [conftest for path in tests for conftest in conftests_above(path)]))
    out = shlex.quote(workspace.harness_path(SOURCE_NAME))
    each = 'if [ -f "$p" ]; then printf \'%s\\0\' "$p"; wc -c < "$p"; cat -- "$p"; fi'
    for start in range(0, len(paths), RESTORED_PER_COMMAND):
        listed = shlex.join(paths[start : start + RESTORED_PER_COMMAND])
        loop = f"for p in {listed}; do {each}; done"
        first = f"mkdir -p {shlex.quote(workspace.harness_path('out'))} && {loop} > {out}"
        workspace.run(first if start == 0 else f"{loop} >> {out}", timeout_s=60)
    return RestoredSource(_framed_files(workspace.read_harness_file(SOURCE_NAME) or b"") if paths else {})


def _framed_files(data: bytes) -> dict[str, str]:
    """Files as `_restored_source` frames them, path -> text."""
    files = {}
    while data:
        path, _, data = data.partition(b"\0")
        size, _, data = data.partition(b"\n")
        if not size.strip().isdigit():
            break
        text, data = data[: int(size)], data[int(size) :]
        files[path.decode("utf-8", errors="surrogateescape")] = text.decode("utf-8", errors="replace")
    return files


def _canary_for(spec: EnvironmentSpec, directives: list[str]) -> Canary | None:
    """A canary for a pytest run given test files; None otherwise."""
    files = [directive for directive in directives if directive.endswith(".py")]
    return Canary.beside(files[0]) if files and spec.uses_pytest else None


def canary_forged(canary: Canary | None, statuses: Mapping[str, str], outcome: Outcome) -> str:
    """Why a run's report cannot be believed by its canary ('' when it can): the canary, which fails in every
    honest run, reported as anything but failed, or missing from a report that would resolve the instance."""
    if canary is None:
        return ""
    status = statuses.get(canary.node_id, MISSING)
    if status in (FAILED, ERROR) or (status == MISSING and not outcome.is_resolved):
        return ""
    return f"the harness's canary test {canary.node_id} was reported {status}, not FAILED: the test process forged its report"


def _forged(canary: Canary | None, statuses: dict[str, str], outcome: Outcome) -> str:
    """`canary_forged`, the canary's result then removed from `statuses`."""
    forged = canary_forged(canary, statuses, outcome)
    if canary is not None:
        statuses.pop(canary.node_id, None)
    return forged


def _plant_twins(
    instance: GradedRow, workspace: Workspace, settings: TwinSettings, seal: bool
) -> tuple[Planted, Sealed]:
    """Seal the FAIL_TO_PASS tests' expectations where `seal` (tasks/swebench/sealed.py), then plant groups of
    twins of the other graded tests (tasks/swebench/canaries.py) in the test patch's files, once the patch is
    applied, and remove the test patch from the harness directory, where code under test could read which tests
    are real and what they expect.

    A file (and its version at the base commit, which the twins' tokens keep clear of) goes out through the
    harness's `out/` (which the workspace's commands write) and comes back through a harness file (which they
    read); both are emptied before the tests run, as the test patch is, by the harness (in a pod the workspace's
    user cannot remove the harness's files)."""
    out = shlex.quote(workspace.harness_path("out"))
    workspace.write_harness_file(TEST_PATCH_NAME, "")  # the workspace's user may not remove the harness's file
    workspace.run(f"mkdir -p {out}", timeout_s=30)
    source = shlex.quote(workspace.harness_path(TWIN_SOURCE))
    base = shlex.quote(workspace.base_revision or instance.base_commit)

    def read(command: str) -> str | None:
        copied = workspace.run(f"{command} > {source}", timeout_s=30, env=workspace.harness_git_env)
        text = workspace.read_harness_file(TWIN_SOURCE) if copied.ok else None
        return None if text is None else text.decode("utf-8", errors="surrogateescape")

    files = {}
    for path in [path for path in graded_files(instance) if path.endswith(".py")]:
        if (text := read(f"cat -- {shlex.quote(path)}")) is not None:
            files[path] = SourceFile(text, read(f"git show {base}:{shlex.quote(path)} 2>/dev/null"))
    failing = [graded_name(test_id) for test_id in instance.FAIL_TO_PASS]
    passing = [graded_name(test_id) for test_id in instance.PASS_TO_PASS]
    sealed = seal_expectations(files, failing) if seal else Sealed()
    files = {path: replace(file, text=sealed.files.get(path, file.text)) for path, file in files.items()}
    failing = [name for name in failing if name not in sealed.expected]
    planted = plant_twins(files, failing, passing, random.Random(secrets.randbits(64)), settings)
    for path, text in (sealed.files | planted.files).items():
        written = workspace.write_harness_file(TWIN_PLANTED, text.encode("utf-8", errors="surrogateescape"))
        workspace.run(f"cat -- {shlex.quote(written)} > {shlex.quote(path)}", timeout_s=30)
    workspace.run(f"rm -f {source}", timeout_s=30)
    if planted.files or sealed.files:
        workspace.write_harness_file(TWIN_PLANTED, "")
    return planted, sealed


def _twins_forged(twins: dict[str, str], statuses: dict[str, str], reported: dict[str, str], outcome: Outcome) -> str:
    """Why the run's results cannot be believed ('' when they can): a twin whose body passed beside its
    original's (tasks/swebench/canaries.py), or no twin reported at all by a run that would resolve the instance.
    `reported` holds the twins' results."""
    if twin := passed_with_its_original(statuses, reported, twins):
        return f"a mutated twin of a graded test was reported passed beside its original ({twin}): forged results"
    if twins and not reported and outcome.is_resolved:
        return "no mutated twin of a graded test was reported by a run that resolves the instance: forged results"
    return ""


def _unexplained(source: RestoredSource, tests: dict[str, str], reported: dict[str, str], twins: dict[str, str]) -> str:
    """The first graded test or twin (`reported`, judged by its original's source) reported XFAIL or SKIPPED
    where its restored source cannot make it so ('' when none): the code under test made that status
    (test_source.py)."""
    judged: list[tuple[str, str, str | None]] = [(test_id, status, None) for test_id, status in tests.items()]
    judged += [(test_id, status, twins[graded_name(test_id)]) for test_id, status in reported.items()]
    for test_id, status, original in judged:
        if status in (XFAIL, SKIPPED) and not source.can_report(test_id, status, original):
            what = f"a mutated twin of {original}" if original else "a graded test"
            return (
                f"{test_id} ({what}) was reported {status}, which nothing in its restored source can make of it: "
                "the code under test made that status"
            )
    return ""


def _forgery(
    instance: GradedRow,
    spec: EnvironmentSpec,
    log: str,
    statuses: dict[str, str],
    tests: dict[str, str],
    canary: Canary | None,
    planted: Planted,
    source: RestoredSource,
    outcome: Outcome,
) -> str:
    """Why the run's results cannot be believed ('' when they can): a log that reports a test both ways, a twin,
    a graded test's or twin's xfail or skip its source cannot make (`_unexplained`), or the canary. The canary's
    and twins' results are removed from `statuses`."""
    twins = planted.twins
    if spec.log_parser and not spec.uses_pytest:
        graded = {graded_name(test_id) for test_id in instance.FAIL_TO_PASS + instance.PASS_TO_PASS}
        graded |= set(twins) | set(planted.renamed)
        if twice := reported_both_ways(spec.log_parser, log, graded):
            return f"the log reports {twice[0]} both passed (or skipped) and failed: the run's results were forged"
    reported = twin_statuses(statuses, twins)
    return (
        _twins_forged(twins, statuses, reported, outcome)
        or _unexplained(source, tests, reported, twins)
        or _forged(canary, statuses, outcome)
    )


def apply_code_patch(verdict: Verdict, model_patch: str, workspace: Workspace) -> bool:
    """Apply the model's patch to a code task's workspace (`apply_model_patch`), refusing one that writes compiled
    extension modules (which no test's source shows); False, with the verdict set, when it is not applied."""
    if compiled := compiled_extensions(model_patch):
        verdict.outcome = Outcome.PATCH_APPLY_FAILED
        verdict.detail = f"the model patch was not applied: it writes compiled extension modules: {compiled[0]}"
        return False
    return apply_model_patch(verdict, model_patch, workspace)


def grade(
    instance: GradedRow,
    spec: EnvironmentSpec,
    model_patch: str,
    workspace: Workspace,
    test_timeout_s: float,
) -> Verdict:
    """Judge `model_patch` on a pristine workspace of the code task, with the campaign's twins (`instance.twins`):
    SWE-bench's grading, the test patch's tests, FAIL_TO_PASS and PASS_TO_PASS. It is `Instance.grade`."""
    verdict = Verdict(outcome=Outcome.GRADING_ERROR)
    if not apply_code_patch(verdict, model_patch, workspace):
        return verdict
    restored, undone = protected_files(instance, model_patch)
    verdict.steps.append(
        {"step": "restore_test_files", "undone": undone, **restore_test_files(instance, restored, workspace)}
    )
    if instance.test_patch:  # a row without one has its tests in the repository already (specs.graded_files)
        applied = apply_patch(workspace, instance.test_patch, TEST_PATCH_NAME)
        verdict.steps.append({"step": "apply_test_patch", **applied.summary()})
        if not applied.ok:
            verdict.detail = f"the test patch of {instance.instance_id} does not apply"
            return verdict
    source = _restored_source(instance, workspace)
    planted, sealed = _plant_twins(instance, workspace, instance.twins, seal=launches(spec))

    directives = test_directives(instance, spec)
    canary = _canary_for(spec, directives)
    command, launched = _test_command(spec, directives, workspace, canary)
    tests = workspace.run(command, timeout_s=test_timeout_s, env=spec.test_env)
    log = (workspace.read_harness_file(LOG_NAME) or b"").decode("utf-8", errors="replace")
    verdict.steps.append(
        {
            "step": "run_tests",
            **tests.summary(),
            "log_tail": log[-4000:],
            "canary": canary and canary.node_id,
            **planted.record(graded_name(test_id) for test_id in instance.FAIL_TO_PASS),
            **sealed.record(),
        }
    )
    if stopped_by_a_limit(verdict, tests.summary(), test_timeout_s):
        return verdict
    try:
        results = _test_statuses(spec, workspace, tests, launched, sealed)
    except (ElementTree.ParseError, LookupError, ValueError) as error:  # an encoding expat cannot read included
        verdict.detail = f"the test report is not valid XML: {error}"
        return verdict
    verdict.steps[-1] |= results.summary
    if results.forged:
        verdict.outcome, verdict.detail = Outcome.REPORT_FORGED, results.forged
        return verdict
    if results.incomplete:  # an abnormal end, which the reference judges (trial/evaluation.py)
        verdict.detail = f"{results.incomplete} (exit {tests.exit_code}): {log[-1000:]}"
        return verdict
    statuses = original_ids(results.statuses, planted.renamed)
    if canary:
        verdict.steps[-1]["canary_status"] = statuses.get(canary.node_id, MISSING)
    if not statuses:
        verdict.detail = f"the test run reported no test (exit {tests.exit_code}): {log[-1000:]}"
        return verdict
    verdict.tests = graded_tests(instance, statuses)
    verdict.outcome = decide(instance, verdict.tests)
    if forged := _forgery(instance, spec, log, statuses, verdict.tests, canary, planted, source, verdict.outcome):
        verdict.outcome, verdict.detail = Outcome.REPORT_FORGED, forged
        return verdict
    missing = [test_id for test_id, status in verdict.tests.items() if status == MISSING]
    notes = [f"{len(missing)} graded test(s) missing from the results: {', '.join(missing[:5])}"] if missing else []
    if undone:
        notes.append(f"graded with the model patch's changes to test infrastructure undone: {', '.join(undone)}")
    verdict.detail = "; ".join(notes)
    return verdict
