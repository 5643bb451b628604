"""What each per-trial wall costs: per command, per trial, per campaign.

    python benchmarks/wall_cost.py [--repeats N] [--repo PATH]

Per command, on this machine (`true` run by the local backend's command runner, command_runner.run_command,
as every local command is; median of N): no view; the trial's view
(user, mount and network namespaces, the workspace bind-mounted); the view with private world-writable
directories and IPC namespaces (a pod trial's); the view with everything outside the workspace read-only; that
with a pid namespace of its own (an init and a fresh /proc); that with every unix socket the host has bound
covered too (local.WALLS); that with the trial's own /tmp and /var/tmp (the local opt-in's whole view); and the
disk quota, on a workspace holding `--repo` (a checkout of django, by default made from /work/mirrors-full, about
6,900 files): walked by a trial's first command, carried by the later ones.

Per trial, in a pod on the container engine (DOCKER_HOST; skipped without one): a workspace's making and
removal, then a command with the pod's full placement against the same command without its private
directories and quota. Per campaign, the walls that cost only what they do: the twins (k extra runs of each
twinned graded test, at most `twins.per_run`, 9 by default, per grading; benchmarks/twin_forger.py grades them) and the reference run that
follows an abnormal grading only.
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from eval_pipeline.sandbox.command_runner import run_command
from eval_pipeline.sandbox.local import PRIVATE_TMP, WALLS, walled_view
from eval_pipeline.sandbox.runner.quota import allocated_bytes
from eval_pipeline.sandbox.runner.request import RunRequest
from eval_pipeline.sandbox.runner.sockets import bound_socket_paths

DJANGO_MIRROR = Path("/work/mirrors-full/django/django")


def medians_ms(runs: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Each run's median time, the runs interleaved round by round, so that a machine's drift (a loaded VM)
    weighs on all of them alike."""
    timings: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            timings[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(values) for name, values in timings.items()}


def checkout(scratch: Path, repo: Path | None) -> Path:
    if repo:
        return repo
    tree = scratch / "django"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{DJANGO_MIRROR}", str(tree)], check=True)
    return tree


def per_command(scratch: Path, tree: Path, beneath_tmp: Path, repeats: int) -> dict[str, float]:
    """`beneath_tmp`, a directory under /tmp, holds a second (empty) trial: a data directory there is bound again
    inside the trial's own /tmp (runner/mounts.py: show_private)."""
    target = scratch / "target"
    target.mkdir()
    for made in ("repo", "target", "python", "tmp"):
        (beneath_tmp / made).mkdir()
    below = {"source": str(beneath_tmp / "repo"), "target": str(beneath_tmp / "target")}
    below |= walled_view(beneath_tmp, beneath_tmp / "python")
    private = {place: str(scratch / "own-tmp") for place in ("/tmp", "/var/tmp", "/dev/shm")}
    (scratch / "own-tmp").mkdir()
    walled = {"source": str(tree), "target": str(target), "writable": [str(tree)]}
    own_tmp = {place: str(scratch / "own-tmp") for place in PRIVATE_TMP}
    sockets = len(bound_socket_paths([str(tree), str(target)]))
    views = {
        "no view": None,
        "view (user, mount, network namespaces)": {"source": str(tree), "target": str(target)},
        "view + private tmp dirs + IPC namespace": {"source": str(tree), "target": str(target), "private": private},
        "view + read-only but the workspace": walled,
        "view + read-only + own pid namespace": {**walled, "own_pids": True},
        f"view + read-only + own pids + {sockets} host sockets covered": {**walled, **WALLS},
        "that + the trial's own /tmp and /var/tmp (local opt-in)": {**walled, **WALLS, "private": own_tmp},
        "the local opt-in, its data directory under /tmp": below,
    }
    request = {"command": "true", "cwd": str(tree), "env": dict(os.environ), "timeout_s": 30, "output_bytes": 1000}
    runs: dict[str, Callable[[], object]] = {
        name: lambda view=view: run_command(RunRequest.from_fields({**request, "view": view}))
        for name, view in views.items()
    }
    quota = {"paths": [str(tree)], "limit_bytes": 2**40}
    carried = {**quota, "state": str(scratch / "quota.json")}
    runs["no view + disk quota, walked (a trial's first command)"] = lambda: run_command(
        RunRequest.from_fields({**request, "storage": quota})
    )
    runs["no view + disk quota, carried (every later command)"] = lambda: run_command(
        RunRequest.from_fields({**request, "storage": carried})
    )
    runs["the quota's walk alone"] = lambda: allocated_bytes([str(tree)])
    return medians_ms(runs, repeats)


def per_trial_in_a_pod(repeats: int) -> dict[str, float]:
    """A pod on the demo's first instance: workspace made and removed; a command with and without walls."""
    from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
    from eval_pipeline.sandbox.container.sandbox import ContainerSandbox
    from eval_pipeline.tasks.demo import build_demo_benchmark

    with tempfile.TemporaryDirectory() as scratch:
        benchmark = build_demo_benchmark(Path(scratch) / "mirrors")
        settings = SandboxSettings.from_mapping({"backend": "container", "pod_parallelism": 2})  # two workspaces
        sandbox = ContainerSandbox(Path(scratch) / "sandbox", ResourceLimits(), settings, "wall-cost")
        instance = benchmark.instances[0]
        environment = sandbox.prepare(instance, benchmark.environment_for(instance), benchmark.source)
        try:

            def made_and_removed() -> None:
                with sandbox.workspace(environment, "cost"):
                    pass

            with sandbox.workspace(environment, "cost") as workspace:
                full = workspace.command_placement()
                bare = {**full, "view": {**full["view"], "private": None}, "storage": None}
                return medians_ms(
                    {
                        "workspace made and removed": made_and_removed,
                        "command, all walls": lambda: workspace._run_placed(full, "true", 30, None),
                        "command, no private dirs or quota": lambda: workspace._run_placed(bare, "true", 30, None),
                    },
                    repeats,
                )
        finally:
            sandbox.release()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--repo", type=Path, help="a working tree to measure the quota's walk on")
    args = parser.parse_args()
    # The main trial not under /tmp, as a data directory usually is: the second one is (`beneath_tmp`).
    with (
        tempfile.TemporaryDirectory(dir=Path.home()) as scratch,
        tempfile.TemporaryDirectory(dir="/tmp") as beneath_tmp,
    ):
        tree = checkout(Path(scratch), args.repo)
        files = sum(len(names) for _, _, names in os.walk(tree))
        print(f"per command, on this machine (workspace of {files} files, median of {args.repeats}):")
        for name, ms in per_command(Path(scratch), tree, Path(beneath_tmp), args.repeats).items():
            print(f"  {name}: {ms:.1f} ms")
    if os.environ.get("DOCKER_HOST"):
        print(f"per trial, in a pod (median of {args.repeats}):")
        for name, ms in per_trial_in_a_pod(args.repeats).items():
            print(f"  {name}: {ms:.1f} ms")


if __name__ == "__main__":
    main()
