"""How often the forger that knows the twins' design wins: every demo code issue, graded once per seed.

    python benchmarks/twin_forger.py [--seeds N]

The forger is eval_pipeline_tests/forgeries.TWIN_AWARE (canaries.py says what it faces). It wins a grading when
the instance resolves; `report_forged` (a twin reported passed) and `unresolved` (it spared a graded test) are
losses. Seeds fix the twins' dice (grading's random source), so a run is reproducible.
"""

import argparse
import tempfile
from pathlib import Path

from eval_pipeline.demo_benchmark import build_demo_benchmark
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline_tests.test_canaries import forged_runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        benchmark = build_demo_benchmark(root / "mirrors")
        sandbox = LocalSandbox(root / "sandbox", ResourceLimits(memory_ceiling_mb=1024), SandboxSettings(), "bench")

        def prepare(instance):
            return sandbox.prepare(instance, benchmark.environment_for(instance), benchmark.source)

        outcomes = forged_runs(benchmark, sandbox, prepare, range(args.seeds))
    total = outcomes.total()
    for outcome, count in outcomes.most_common():
        print(f"{outcome}: {count} of {total} ({count / total:.1%})")


if __name__ == "__main__":
    main()
