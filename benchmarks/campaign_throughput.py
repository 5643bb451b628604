"""Measure the demo campaign: the core's cost per trial, Dagster's overhead, workers, resume.

    python benchmarks/campaign_throughput.py [--workers 1 2]

Each measurement starts from a fresh DAGSTER_HOME in a temporary directory.
Figures: wall-clock seconds on this machine; peak RSS of the largest process.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from eval_pipeline.config.campaign import load_campaign
from eval_pipeline.sandbox import make_sandbox
from eval_pipeline.store.artifacts import LocalArtifactStore
from eval_pipeline.tasks.demo import build_demo_benchmark
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate


def core_costs(root: Path) -> dict[str, float]:
    """Environment preparation, workspace fork, generation and evaluation, without Dagster."""
    campaign = load_campaign("demo")
    benchmark = build_demo_benchmark(root / "mirrors")
    sandbox = make_sandbox(campaign.sandbox, root / "sandboxes", campaign.resources, campaign.name)
    store = LocalArtifactStore(root / "artifacts")
    built, hits, fork, trial = [], [], [], []
    for instance in benchmark.instances:
        fresh = not any(
            (sandbox.root / "environments").glob(
                f"{sandbox.environment_key(instance, benchmark.environment_for(instance))[:24]}"
            )
        )
        started = time.perf_counter()
        environment = sandbox.prepare(instance, benchmark.environment_for(instance), benchmark.source)
        (built if fresh else hits).append(time.perf_counter() - started)
        started = time.perf_counter()
        with sandbox.workspace(environment, "bench"):
            fork.append(time.perf_counter() - started)
        for variant in campaign.variants:
            for seed in campaign.seeds:
                started = time.perf_counter()
                generation = generate(instance, variant.make_agent(), seed, environment, sandbox, store)
                evaluate(
                    instance,
                    benchmark.environment_for(instance),
                    generation,
                    environment,
                    sandbox,
                    store,
                    campaign.test_timeout_s,
                )
                trial.append(time.perf_counter() - started)
    return {
        "environment_build_s": statistics.mean(built),
        "environments_built": len(built),
        "environment_reuse_s": statistics.mean(hits) if hits else None,
        "workspace_fork_and_remove_s": statistics.median(fork),
        "trial_core_s": statistics.median(trial),
        "trials": len(trial),
    }


def cli_run(home: Path, workers: int) -> dict[str, float]:
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    env.pop("EVAL_PIPELINE_DATA_DIR", None)
    started = time.perf_counter()
    completed = subprocess.run(
        ["eval-pipeline", "run", "--campaign", "demo", "--json", "--workers", str(workers)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    elapsed = time.perf_counter() - started
    summary = json.loads(completed.stdout)
    return {
        "wall_s": elapsed,
        "per_trial_s": elapsed / summary["planned"],
        "computed": summary["evaluation"]["computed"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    figures: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        figures["core"] = core_costs(root / "core")
        for workers in args.workers:
            home = root / f"home-{workers}"
            figures[f"cli_workers_{workers}"] = cli_run(home, workers)
            figures[f"resume_workers_{workers}"] = cli_run(home, workers)
    figures["peak_rss_mb_largest_process"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
    core = figures["core"]
    figures["environment_economy"] = {
        "build_per_trial_s": round(core["environment_build_s"] * core["trials"], 2),
        "build_once_plus_forks_s": round(
            core["environment_build_s"] * core["environments_built"]
            + core["workspace_fork_and_remove_s"] * core["trials"],
            2,
        ),
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
