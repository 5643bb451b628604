"""Real SWE-bench rows on each backend: what an environment costs once, and what each trial costs.

    python benchmarks/real_rows.py [--backend local|container] [--repeats 2]

Uses the real-data fixtures the tests use (eval_pipeline_tests/support/fixtures.md).
For each row it times preparing the environment (clone, interpreter, installs,
history cut back; for containers the image layers and the pod) and then each
grading of the gold and the empty patch in a fresh workspace, which is the
evaluation half of a trial. Image layers already built are reused, as a second
campaign on the same engine would; build them first for a cold figure.
"""

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from eval_pipeline.sandbox import EnvironmentHandle, ResourceLimits, SandboxBackend, SandboxSettings, make_sandbox
from eval_pipeline.tasks.environment import RepoSource
from eval_pipeline.tasks.swebench.grading import grade
from eval_pipeline.tasks.swebench.instance import benchmark_from_rows
from eval_pipeline_tests.support.real_data import SWEBENCH_ROWS, swebench_mirror, swebench_rows

LIMITS = ResourceLimits(memory_ceiling_mb=2048, output_bytes=200_000)


def measure(backend: str, repeats: int) -> dict[str, dict[str, float | str]]:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        rows = swebench_rows(SWEBENCH_ROWS)
        source = RepoSource(mirror_dir=str(swebench_mirror(rows, root / "mirrors")))
        benchmark = benchmark_from_rows("verified", rows, source=source, swebench_specs=True)
        sandbox = make_sandbox(SandboxSettings.from_mapping({"backend": backend}), root, LIMITS, "bench-real")
        figures = {}
        try:
            for instance in benchmark.instances:
                spec = benchmark.environment_for(instance)
                started = time.perf_counter()
                environment = sandbox.prepare(instance, spec, benchmark.source)
                prepared_s = time.perf_counter() - started
                timings: dict[str, list[float]] = {"gold": [], "empty": []}
                outcomes = set()
                for _ in range(repeats):
                    for name, patch in (("gold", instance.patch), ("empty", "")):
                        started = time.perf_counter()
                        with sandbox.workspace(environment, "bench") as workspace:
                            outcomes.add((name, grade(instance, spec, patch, workspace, 600).outcome.value))
                        timings[name].append(time.perf_counter() - started)
                figures[instance.instance_id] = {
                    "python": spec.python,
                    "environment_s": round(prepared_s, 1),
                    "environment_mb": round(environment_disk_bytes(sandbox, environment) / 2**20),
                    **{f"{name}_grading_s": round(statistics.median(t), 2) for name, t in timings.items()},
                    "outcomes": sorted(f"{name}:{outcome}" for name, outcome in outcomes),
                }
        finally:
            sandbox.release()
        return figures


def environment_disk_bytes(sandbox: SandboxBackend, environment: EnvironmentHandle) -> int:
    """What the environment takes on disk: its directory locally, its image in the engine (shared layers
    counted whole, as the engine reports an image's size)."""
    if environment.backend == "local":
        listing = subprocess.run(["du", "-sb", environment.location], capture_output=True, text=True, check=True)
        return int(listing.stdout.split()[0])
    return int(sandbox.client.images.get(environment.details["image"]).attrs["Size"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=("local", "container"), default="local")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(measure(args.backend, args.repeats), indent=2))


if __name__ == "__main__":
    main()
