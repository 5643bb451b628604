"""What the per-trial view costs: a trial's commands in their own mount namespace, or in a plain copy.

    python benchmarks/trial_view.py [--commands 200] [--trials 16]
    DOCKER_HOST=... EVAL_PIPELINE_BASE_IMAGE=... python benchmarks/trial_view.py --container

Locally it times one command (`true`) run through the sandbox's runner with and
without the view (unshare of a user and a mount namespace, id maps, a bind
mount), and whole gold trials (workspace fork, patch, tests) of the demo's code
issues both ways. With --container it times the same command through a pod's
exec, with the view (what every trial command does) and without it (the
runner's plain mode, each command in the workspace's own directory).
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from eval_pipeline.sandbox import ResourceLimits, SandboxSettings, make_sandbox
from eval_pipeline.sandbox.pods.exec_transport import HARNESS
from eval_pipeline.sandbox.pods.images import PATH, TESTBED
from eval_pipeline.sandbox.runner.request import RunRequest, View
from eval_pipeline.sandbox.runner.run import run_limited
from eval_pipeline.tasks.demo import build_demo_benchmark
from eval_pipeline.tasks.swebench.grading import grade

LIMITS = ResourceLimits(memory_ceiling_mb=1024, cpu_ceiling=1)


def _median_s(samples: list[float]) -> float:
    return round(statistics.median(samples), 5)


def command_cost(commands: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as scratch:
        view = View(source=scratch, target=scratch)
        timings: dict[str, list[float]] = {"plain": [], "view": []}
        for _ in range(commands):
            for name, chosen in (("plain", None), ("view", view)):
                started = time.perf_counter()
                run_limited(RunRequest("true", cwd=scratch, env={}, timeout_s=10, output_bytes=1000, view=chosen))
                timings[name].append(time.perf_counter() - started)
    return {f"command_{name}_s": _median_s(samples) for name, samples in timings.items()}


def trial_cost(trials: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        benchmark = build_demo_benchmark(root / "mirrors")
        sandbox = make_sandbox(SandboxSettings(), root, LIMITS, "bench")
        instances = [i for i in benchmark.instances if hasattr(i, "FAIL_TO_PASS")]
        environments = {
            i.instance_id: sandbox.prepare(i, benchmark.environment_for(i), benchmark.source) for i in instances
        }
        timings: dict[str, list[float]] = {"copy": [], "view": []}
        for index in range(trials):
            instance = instances[index % len(instances)]
            for name in ("copy", "view"):
                environment = environments[instance.instance_id]
                if name == "copy":  # the workspace at its own path, as before the view
                    environment = type(environment)(
                        **{**environment.__dict__, "details": {**environment.details, "trial_view": "copy"}}
                    )
                started = time.perf_counter()
                with sandbox.workspace(environment, "bench") as workspace:
                    grade(instance, benchmark.environment_for(instance), instance.patch, workspace, 120)
                timings[name].append(time.perf_counter() - started)
    return {f"gold_trial_{name}_s": _median_s(samples) for name, samples in timings.items()}


def container_command_cost(commands: int) -> dict[str, float]:
    """The same `true` sent to a pod's command runner as a slot's uid, in the workspace's own directory (the runner's
    plain mode) and seeing the workspace at /testbed (as every trial command does)."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        benchmark = build_demo_benchmark(root / "mirrors")
        sandbox = make_sandbox(SandboxSettings.from_mapping({"backend": "container"}), root, LIMITS, "bench-view")
        instance = benchmark.instances[0]
        environment = sandbox.prepare(instance, benchmark.environment_for(instance), benchmark.source)
        timings: dict[str, list[float]] = {"plain": [], "view": []}
        try:
            with sandbox.workspace(environment, "bench") as workspace:
                plain = {"command": "true", "env": {"PATH": PATH}, "timeout_s": 10, "output_bytes": 1000}
                requests = {
                    "plain": {**plain, "cwd": workspace.repo, "uid": workspace.uid},
                    "view": {
                        **plain,
                        "cwd": TESTBED,
                        "uid": workspace.uid,
                        "view": {"source": workspace.repo, "target": TESTBED},
                    },
                }
                for _ in range(commands):
                    for name, request in requests.items():
                        started = time.perf_counter()
                        exit_code, _, stderr = workspace.pod.run(HARNESS.runner(), private=json.dumps(request))
                        timings[name].append(time.perf_counter() - started)
                        assert exit_code == 0, stderr
        finally:
            sandbox.release()
    return {f"pod_exec_{name}_s": _median_s(samples) for name, samples in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--container", action="store_true")
    args = parser.parse_args()
    figures = (
        container_command_cost(args.commands)
        if args.container
        else {
            **command_cost(args.commands),
            **trial_cost(args.trials),
        }
    )
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
