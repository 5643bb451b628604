"""Grading a SWE-bench Pro row as its authors grade it, with its parser out of the patch's reach.

Pro's own harness (swe_bench_pro_eval.py) runs, in the instance's container: the patch applied, the last line of
`before_repo_set_cmd` (`git checkout <fix commit> -- <test files>`), `bash run_script.sh <selected tests>` with
its output to files, then `python parser.py stdout stderr output.json` in the same container, and calls the row
resolved when every FAIL_TO_PASS and PASS_TO_PASS test is reported PASSED. The parser there runs on the image's
Python, from a directory the patch can write, on files the patch's processes can rewrite: a patch that plants a
`sitecustomize`, a `json.py` or a finished `output.json` decides the verdict.

Here the same tests, lists and rule, with these constructions:

- the test side is the harness's: the files the test patch and `before_repo_set_cmd` name, and the test
  infrastructure the model patch touched (tasks/swebench/grading.py: `protected_files`), are restored to the base
  commit and the row's test patch applied (its test files at the fix commit, as the checkout gives them: the
  image's later commits are cut away, so the agent never reads them);
- the run script is the dataset's code, run in the trial's sandbox like a test command, from a harness file, after
  the `export` lines Pro's harness makes of the row's Dockerfiles' `ENV` lines, on the selected test files and
  (where they are Python files) a canary beside them (tasks/swebench/pytest_run.py);
- its stdout and stderr are what the sandbox's runner captured from the command (no file in the workspace), cut
  at the trial's output cap (a run cut there is an abnormal end);
- the parser runs after the run's processes are gone (every command's processes end with it), in the sandbox,
  on the harness's own interpreter isolated (`ToolRuntime.python`, `-I`: no PYTHON* variable, user site or
  script directory; its standard library read-only), from the harness's read-only copy of `parser.py`, on the
  harness's read-only copies of the captured output, in a directory made for it, writing `out/pro_output.json`
  (removed first), which the harness reads back and checks (report.py);
- the log is read beside it: a graded test or the canary reported both passed and failed, by pytest's lines or
  by the parser, is `report_forged`; so is the canary reported passed, or missing from a run that resolves.
"""

import re
import shlex
from typing import Any, Protocol

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.grading.verdict import MISSING, PASSED, Verdict, stopped_by_a_limit
from eval_pipeline.sandbox import ExecResult, Workspace
from eval_pipeline.sandbox.patches import apply_patch
from eval_pipeline.sandbox.tool_runtime import ToolRuntime
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.swebench.grading import apply_code_patch, canary_forged, protected_files, restore_test_files
from eval_pipeline.tasks.swebench.pro.report import ParsedReport, read_report, reported_both_ways
from eval_pipeline.tasks.swebench.pytest_run import Canary
from eval_pipeline.tasks.swebench.row import GradedRow

__all__ = ["checked_out_files", "decide", "grade"]

RUN_SCRIPT_NAME, PARSER_NAME = "pro/run_script.sh", "pro/parser.py"
STDOUT_NAME, STDERR_NAME = "pro/stdout.log", "pro/stderr.log"
OUTPUT_NAME = "out/pro_output.json"
PARSER_DIR = "out/pro_parser"
PARSER_TIMEOUT_S = 300
# The line of before_repo_set_cmd that Pro's harness runs: the test files taken from the fix commit.
_CHECKOUT = re.compile(r"^\s*git checkout [0-9a-fA-F]{4,64} -- (.+)$")


class ProRow(GradedRow, Protocol):
    """What Pro's grading reads of a row beyond SWE-bench's (instance.py's ProInstance is one)."""

    @property
    def run_script(self) -> str: ...

    @property
    def parser(self) -> str: ...

    @property
    def env_exports(self) -> str: ...

    @property
    def before_repo_set_cmd(self) -> str: ...

    @property
    def selected_test_files_to_run(self) -> tuple[str, ...]: ...


def checked_out_files(before_repo_set_cmd: str) -> list[str]:
    """The files the last line of `before_repo_set_cmd` takes from a later commit (Pro's harness runs that line
    alone), [] where it takes none."""
    lines = before_repo_set_cmd.strip().splitlines()
    match = _CHECKOUT.match(lines[-1]) if lines else None
    return shlex.split(match[1]) if match else []


def decide(tests: dict[str, str]) -> Outcome:
    """Pro's rule: resolved when every FAIL_TO_PASS and PASS_TO_PASS test is PASSED; a graded test the report lacks
    makes it `tests_missing`."""
    if all(status == PASSED for status in tests.values()):
        return Outcome.RESOLVED
    return Outcome.TESTS_MISSING if MISSING in tests.values() else Outcome.UNRESOLVED


def _canary_for(row: ProRow) -> Canary | None:
    """A canary beside the selected tests where they are Python test files (a pytest run); None otherwise."""
    files = row.selected_test_files_to_run
    return Canary.beside(files[0]) if all(file.endswith(".py") for file in files) else None


def _parse(workspace: Workspace, stdout: str, stderr: str, parser: str) -> tuple[dict[str, Any], bytes | None]:
    """The parser run on the captured output as set out in the module's docstring: its run's summary and the
    output it wrote (None: none)."""
    inputs = [workspace.write_harness_file(name, text) for name, text in ((STDOUT_NAME, stdout), (STDERR_NAME, stderr))]
    script = workspace.write_harness_file(PARSER_NAME, parser)
    output, directory = workspace.harness_path(OUTPUT_NAME), shlex.quote(workspace.harness_path(PARSER_DIR))
    python = shlex.join(ToolRuntime().python(script, *inputs, output))
    command = f"rm -rf {directory} {shlex.quote(output)} && mkdir {directory} && cd {directory} && {python}"
    run, files = workspace.run_then_read(command, [OUTPUT_NAME], timeout_s=PARSER_TIMEOUT_S)
    return run.summary(), files[OUTPUT_NAME]


def _prepare_tests(row: ProRow, model_patch: str, verdict: Verdict, workspace: Workspace) -> bool:
    """The test side put in place: the files the test patch and `before_repo_set_cmd` name and the test
    infrastructure the model patch touched restored, then the test patch applied; False, with the verdict's detail
    set, when the test patch does not apply. The model patch's files it undid are in its step (`undone`)."""
    restored, undone = protected_files(row, model_patch)
    restored = list(dict.fromkeys(restored + checked_out_files(row.before_repo_set_cmd)))
    restoring = restore_test_files(row, restored, workspace)
    verdict.steps.append({"step": "restore_test_files", "undone": undone, **restoring})
    applied = apply_patch(workspace, row.test_patch, "test.patch")
    verdict.steps.append({"step": "apply_test_patch", **applied.summary()})
    if not applied.ok:
        verdict.detail = f"the test patch of {row.instance_id} does not apply"
    return applied.ok


def _run_tests(
    row: ProRow, spec: EnvironmentSpec, workspace: Workspace, timeout_s: float
) -> tuple[ExecResult, Canary | None]:
    """The row's run script on its selected tests and the canary, after its Dockerfiles' exports."""
    canary = _canary_for(row)
    tests = [*row.selected_test_files_to_run, *([canary.file] if canary else [])]
    script = workspace.write_harness_file(RUN_SCRIPT_NAME, row.run_script)
    run_script = f"bash {shlex.quote(script)} {shlex.quote(','.join(tests))}"
    command = f"{row.env_exports}\n{canary.write_command() + ' && ' if canary else ''}{run_script}"
    return workspace.run(command, timeout_s=timeout_s, env=spec.test_env), canary


def _forgery(log: str, report: ParsedReport, judged: set[str]) -> str:
    """Why the run's results cannot be believed ('' when they can): the log or the parser reports a graded test or
    the canary both ways."""
    if twice := reported_both_ways(log, judged):
        return f"the run's log reports {twice} both passed and failed: the code under test printed one of them"
    return report.forged


def grade(row: ProRow, spec: EnvironmentSpec, model_patch: str, workspace: Workspace, test_timeout_s: float) -> Verdict:
    """Judge `model_patch` on a pristine workspace of the Pro row: `ProInstance.grade`."""
    verdict = Verdict(outcome=Outcome.GRADING_ERROR)
    if not apply_code_patch(verdict, model_patch, workspace):
        return verdict
    if not _prepare_tests(row, model_patch, verdict, workspace):
        return verdict
    run, canary = _run_tests(row, spec, workspace, test_timeout_s)
    step = {"step": "run_tests", **run.summary(), "canary": canary and canary.node_id}
    verdict.steps.append(step)
    if stopped_by_a_limit(verdict, run.summary(), test_timeout_s):
        return verdict
    if run.output_truncated:  # an abnormal end, which the reference judges (trial/evaluation.py)
        verdict.detail = "the test run's output was cut at the trial's output cap: the parser cannot read it whole"
        return verdict

    parsed, output = _parse(workspace, run.stdout, run.stderr, row.parser)
    judged = {*row.FAIL_TO_PASS, *row.PASS_TO_PASS, *([canary.node_id] if canary else [])}
    report = read_report(output, judged)
    verdict.steps.append({"step": "parse_results", **parsed, "reported": len(report.statuses)})
    if canary:
        step["canary_status"] = report.statuses.get(canary.node_id, MISSING)
    if forged := _forgery(run.stdout + "\n" + run.stderr, report, judged):
        verdict.outcome, verdict.detail = Outcome.REPORT_FORGED, forged
        return verdict
    if report.malformed:  # the parser failed on what the run printed: an abnormal end, judged by the reference
        verdict.detail = f"{report.malformed} (parser exit {parsed['exit_code']}: {parsed['stderr_tail'][-500:]})"
        return verdict
    if not report.statuses:
        verdict.detail = f"the test run reported no test (exit {run.exit_code}): {run.stdout[-1000:]}"
        return verdict
    verdict.tests = {test: report.statuses.get(test, MISSING) for test in (*row.FAIL_TO_PASS, *row.PASS_TO_PASS)}
    verdict.outcome = decide(verdict.tests)
    if forged := canary_forged(canary, report.statuses, verdict.outcome):
        verdict.outcome, verdict.detail = Outcome.REPORT_FORGED, forged
    elif undone := next(step["undone"] for step in verdict.steps if step["step"] == "restore_test_files"):
        verdict.detail = f"graded with the model patch's changes to test infrastructure undone: {', '.join(undone)}"
    return verdict
