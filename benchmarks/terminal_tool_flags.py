"""The terminal verifier's tool check on honest work: the oracle on terminal tasks, its flags and the check's time.

    python benchmarks/terminal_tool_flags.py --tasks DIR [--names TASK ...] [--results FILE]

DIR holds task directories (Terminal-Bench 2.0's `terminal-bench-2/` folder, or eval_pipeline/demo_tasks). Each
task is built as the container backend builds it (its FROM replaced by its family's stand-in:
EVAL_PIPELINE_TASK_BASE_IMAGES, from scripts/build_task_base.sh), its reference solution (`solution/solve.sh`,
the oracle) is generated and its verifier's run in its container scored, as a campaign does. What the run
found of the agent's changes to the verifier's tools (flag `verifier_tools`: a false flag here, since the oracle
is honest) and what left it exposed (`verifier_exposed`) are printed per task, with the check's own seconds
(the engine's two listings of the container's changes, its stats of paths, and the count of processes left),
then the totals. Each result is appended to FILE (JSON lines) as soon as it is known, and a task already there
is skipped, so a run cut short resumes.

Needs the container engine of `.ci/run` (DOCKER_HOST) and the variables it exports.
"""

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from terminal_population import CAMPAIGN, LIMITS, _remove_snapshots  # beside

from eval_pipeline.agents.builtin import OracleAgent
from eval_pipeline.sandbox import SandboxSettings, make_sandbox
from eval_pipeline.sandbox.container.workspace import ContainerWorkspace
from eval_pipeline.store.artifacts import LocalArtifactStore
from eval_pipeline.tasks.terminal.task import load_terminal_tasks, task_directories
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate

CHECK_CALLS = ("image_changes", "real_path", "processes_left")  # what the check asks the engine and the container
_spent: dict[str, float] = {}


def _timed(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            _spent[name] = _spent.get(name, 0.0) + time.perf_counter() - started

    return timed


def measure(directory: Path, scratch: Path) -> dict[str, Any]:
    """Build the task, then the oracle once: its outcome, flags, processes left and the check's seconds."""
    tasks = load_terminal_tasks(directory, scratch / "mirrors")
    task = tasks.instances[0]
    settings = SandboxSettings.from_mapping({"backend": "container"})
    sandbox = make_sandbox(settings, scratch, LIMITS, CAMPAIGN, network=True)
    store = LocalArtifactStore(scratch / "artifacts")
    try:
        try:
            environment = sandbox.prepare(task, task.environment, tasks.source)
        except Exception as error:  # noqa: BLE001 - a build that fails is this task's result
            return {"status": "environment_failed", "detail": str(error)[-300:]}
        _spent.clear()
        timeout = task.verifier_timeout_s
        generation = generate(
            task, OracleAgent(), 0, environment, sandbox, store, network=task.allow_internet, test_timeout_s=timeout
        )
        evaluation = evaluate(task, task.environment, generation, environment, sandbox, store, timeout)
        run = (generation.verification or {}).get("run", {})
        return {
            "status": generation.status,
            "outcome": evaluation.outcome,
            "flags": [
                {"kind": flag["kind"], "path": flag["path"], "reason": flag["reason"]} for flag in evaluation.audit
            ],
            "processes_left": run.get("processes_beside"),
            "tools_unread": run.get("tools_unread"),
            "verifier_s": run.get("duration_s"),
            "check_s": round(sum(_spent.values()), 3),
        }
    finally:
        sandbox.release()
        _remove_snapshots()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=Path, required=True, help="a folder of terminal task directories")
    parser.add_argument("--names", nargs="*", default=[], help="only these tasks")
    parser.add_argument("--results", type=Path, default=Path("terminal_tool_flags.jsonl"))
    args = parser.parse_args()
    for name in CHECK_CALLS:
        setattr(ContainerWorkspace, name, _timed(name, getattr(ContainerWorkspace, name)))
    done = {json.loads(line)["task"] for line in args.results.open()} if args.results.exists() else set()
    directories = [d for d in task_directories(args.tasks) if (not args.names or d.name in args.names)]
    for directory in (d for d in directories if d.name not in done):
        with tempfile.TemporaryDirectory() as scratch:
            record = {"task": directory.name, **measure(directory, Path(scratch)), "load": os.getloadavg()[0]}
        with args.results.open("a") as results:
            results.write(json.dumps(record) + "\n")
        kinds = sorted({flag["kind"] for flag in record.get("flags", [])})
        print(f"{directory.name}: {record.get('outcome', record['status'])} {kinds} check {record.get('check_s')} s")
    records = [json.loads(line) for line in args.results.open()]
    ran = [r for r in records if "outcome" in r]
    false_flags = [r["task"] for r in ran if any(f["kind"] == "verifier_tools" for f in r["flags"])]
    exposed = [r["task"] for r in ran if any(f["kind"] == "verifier_exposed" for f in r["flags"])]
    checks = sorted(r["check_s"] for r in ran)
    print(f"{len(ran)} oracle runs: {len(false_flags)} flagged verifier_tools {false_flags}")
    print(f"{len(exposed)} exposed: {exposed}")
    if checks:
        print(f"check: median {checks[len(checks) // 2]} s, max {checks[-1]} s a verification")


if __name__ == "__main__":
    main()
