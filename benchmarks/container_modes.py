"""Per-trial sandbox overhead: one multi-tenant pod per instance vs a fresh container per trial.

    DOCKER_HOST=... EVAL_PIPELINE_BASE_IMAGE=... python benchmarks/container_modes.py [--trials-per-instance 6]

Both modes serve the same trials (the demo's 8 instances x N) in one run, on
images built beforehand. Overhead is everything around the trial's own work:
provisioning and starting its workspace (and, for pods, the pod's start,
spread over the trials it serves) and tearing it down. A full oracle trial
(generation + evaluation) is timed too.
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from eval_pipeline.agents import make_agent
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings, make_sandbox
from eval_pipeline.store.artifacts import LocalArtifactStore
from eval_pipeline.tasks.demo import build_demo_benchmark
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate

LIMITS = ResourceLimits(memory_floor_mb=256, memory_ceiling_mb=1024, cpu_ceiling=1)


def measure(mode: str, root: Path, trials_per_instance: int) -> dict[str, float]:
    benchmark = build_demo_benchmark(root / "mirrors")
    sandbox = make_sandbox(
        SandboxSettings.from_mapping({"backend": "container", "mode": mode}), root, LIMITS, f"bench-{mode}"
    )
    for instance in benchmark.instances:  # images first: builds are never part of a trial
        sandbox.build(instance, benchmark.environment_for(instance), benchmark.source)
    started = time.perf_counter()
    environments = {
        i.instance_id: sandbox.prepare(i, benchmark.environment_for(i), benchmark.source) for i in benchmark.instances
    }
    environment_start_s = time.perf_counter() - started  # pods: one start per instance; strict: nothing
    overheads, full_trials = [], []
    try:
        for seed in range(trials_per_instance):
            for instance in benchmark.instances:
                environment = environments[instance.instance_id]
                opened = time.perf_counter()
                with sandbox.workspace(environment, f"bench-{seed}") as workspace:
                    ready = time.perf_counter()
                    workspace.run("true", timeout_s=60)
                    done = time.perf_counter()
                overheads.append((ready - opened) + (time.perf_counter() - done))
                store = LocalArtifactStore(root / "artifacts" / f"{mode}-{seed}-{instance.instance_id}")
                clock = time.perf_counter()
                generation = generate(instance, make_agent("oracle"), seed, environment, sandbox, store)
                evaluate(instance, benchmark.environment_for(instance), generation, environment, sandbox, store, 120)
                full_trials.append(time.perf_counter() - clock)
    finally:
        sandbox.release()
    trials = len(overheads)
    return {
        "trials": trials,
        "environment_starts_s": round(environment_start_s, 3),
        "workspace_overhead_median_s": round(statistics.median(overheads), 3),
        "overhead_per_trial_s": round((environment_start_s + sum(overheads)) / trials, 3),
        "full_oracle_trial_median_s": round(statistics.median(full_trials), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials-per-instance", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        figures = {mode: measure(mode, Path(scratch) / mode, args.trials_per_instance) for mode in ("pod", "strict")}
    figures["strict_over_pod_overhead_ratio"] = round(
        figures["strict"]["overhead_per_trial_s"] / figures["pod"]["overhead_per_trial_s"], 2
    )
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
