"""One trial, followed through the code: `Trial.run` is the whole lifecycle, and every file it enters does work
of its own.

A demo trial of each kind (a code issue, a terminal task) runs on the local backend under a profiler that
records every function of the package entered in this process while `Trial.run` runs (generation, evaluation,
storing; the command runner's own process is not traced). The files entered are the files a newcomer reads to
follow the trial. A file is entered only to pass a call on when every function of it that ran is a
pass-through: a body (less its docstring) of one call whose arguments are names, attributes or constants.
"""

import ast
import sys
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import eval_pipeline
from eval_pipeline.config.campaign import parse_campaign
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline.store.artifacts import LocalArtifactStore
from eval_pipeline.tasks.dataset import Benchmark
from eval_pipeline.tasks.terminal.task import DEMO_TASKS_DIR, load_terminal_tasks
from eval_pipeline.trial.run import TrialSetup
from eval_pipeline.trial.spec import trial_spec

PACKAGE = Path(eval_pipeline.__file__).parent
# The most files one trial enters in-process, by kind: the lifecycle (trial/: 5), the agent (3), the sandbox (4)
# and the runner's request, read-back and quota (3), the store (3), the foundation (common/: 3), what every
# grading shares (2) and the task kind's own: a terminal task and its verifier (2), or a code issue's row and
# grading with its defences against forged reports (canaries, twins, seals, the report channel, the restored
# test source, the launched command), its spec and its environment's (10), each a module of its own.
MOST_FILES = {"terminal": 25, "code-issues": 34}


def _entered(run: Callable[[], Any]) -> dict[str, set[tuple[str, int]]]:
    """Every (function, first line) of the package entered while `run` runs, in any thread, by file."""
    entered: dict[str, set[tuple[str, int]]] = defaultdict(set)
    root = f"{PACKAGE}/"

    def profile(frame: FrameType, event: str, arg: object) -> None:
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(root):
            entered[code.co_filename.removeprefix(root)].add((code.co_name, code.co_firstlineno))

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        outcome = run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    assert outcome.is_resolved, "the oracle's trial resolved: the whole lifecycle ran"
    return dict(entered)


def _is_pass_through(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body of one call (returned or not) whose arguments are names, attributes or constants."""
    body = function.body[1:] if ast.get_docstring(function) is not None else function.body
    if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr):
        return False
    call = body[0].value
    simple = ast.Name | ast.Attribute | ast.Constant | ast.Starred
    return isinstance(call, ast.Call) and all(
        isinstance(argument, simple) for argument in [*call.args, *(k.value for k in call.keywords)]
    )


def _functions_by_line(path: Path) -> dict[int, ast.FunctionDef | ast.AsyncFunctionDef]:
    """The file's functions by the line a code object of each starts at (its first decorator's, or its own)."""
    functions = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for line in {node.lineno, *(decorator.lineno for decorator in node.decorator_list)}:
                functions[line] = node
    return functions


def _pass_through_files(entered: dict[str, set[tuple[str, int]]]) -> list[str]:
    """The files every function entered in which is a pass-through (comprehensions and lambdas aside)."""
    found = []
    for file, functions in entered.items():
        by_line = _functions_by_line(PACKAGE / file)
        named = [by_line[line] for name, line in functions if not name.startswith("<") and line in by_line]
        if named and all(map(_is_pass_through, named)):
            found.append(file)
    return sorted(found)


def test_the_pass_through_check_tells_a_pass_through_from_work():
    source = '''
def passes(task, spec):
    """Docstring."""
    return task.grade(spec, *rest)
def works(task):
    return grade(task.spec, hash(task))
def two(task):
    log(task)
    return task
'''
    functions = {node.name: node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}
    assert [name for name, node in functions.items() if _is_pass_through(node)] == ["passes"]


@pytest.fixture(scope="module")
def local_sandbox(tmp_path_factory: pytest.TempPathFactory) -> LocalSandbox:
    return LocalSandbox(tmp_path_factory.mktemp("sandbox"), ResourceLimits(), SandboxSettings(), "lifecycle")


def _trial_files(
    slice_name: str, benchmark: Benchmark, sandbox: LocalSandbox, artifacts: Path
) -> dict[str, set[tuple[str, int]]]:
    """The files the first instance's oracle trial enters, its environment prepared before the trace."""
    source = {"kind": "demo"} if slice_name == "code-issues" else {"kind": "terminal", "path": str(DEMO_TASKS_DIR)}
    campaign = parse_campaign(
        {"name": "lifecycle", "slices": {slice_name: source}, "variants": [{"name": "oracle", "agent": "oracle"}]},
        "test",
    )
    portfolio = Portfolio({slice_name: benchmark})
    task = min(benchmark.instances, key=lambda instance: instance.instance_id)
    environment = sandbox.prepare(task, portfolio.environment_for(task), portfolio.source_for(task))
    setup = TrialSetup(
        campaign, portfolio, LocalArtifactStore(artifacts), lambda _: sandbox, {task.instance_id: environment}
    )
    trial = setup.trial(trial_spec(campaign, portfolio, setup.sandbox_for, task.instance_id, "oracle-s0"))
    return _entered(lambda: trial.run().outcome)


@pytest.mark.parametrize("slice_name", sorted(MOST_FILES))
def test_one_trial_enters_few_files_and_none_only_to_pass_a_call_on(
    slice_name, demo_benchmark, local_sandbox, tmp_path
):
    benchmark = demo_benchmark if slice_name == "code-issues" else load_terminal_tasks(DEMO_TASKS_DIR, tmp_path)
    entered = _trial_files(slice_name, benchmark, local_sandbox, tmp_path / "artifacts")
    assert "trial/run.py" in entered and "trial/generation.py" in entered and "trial/evaluation.py" in entered
    assert len(entered) <= MOST_FILES[slice_name], sorted(entered)
    assert _pass_through_files(entered) == []
