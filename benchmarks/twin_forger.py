"""How often the forger that knows the twins' design wins: every demo code issue, graded once per seed.

    python benchmarks/twin_forger.py [--seeds N] [--mode local|pod|strict]

The forger is eval_pipeline_tests/forgeries.TWIN_AWARE (tasks/swebench/canaries.py says what it faces). It wins a grading when
the instance resolves; `report_forged` (a twin reported passed) and `unresolved` (it spared a graded test) are
losses. Seeds fix the twins' dice (grading's random source), so a run is reproducible. `pod` and `strict` grade
in containers (DOCKER_HOST, EVAL_PIPELINE_BASE_IMAGE as for the tests).

What this forger loses to `report_forged` it loses by grouping a passing test's twins wrongly (it then reports
a twin passed beside its passing original). A twin reported passed beside its failing original proves nothing
(buggy code may return the twin's value), so a wrong guess among a failing test's twins goes unseen: a forger
that groups every twin right wins one time in TWINS_PER_TEST + 1 per twinned failing test, and is never caught.
"""

import argparse
import tempfile
from pathlib import Path

from eval_pipeline.sandbox import ResourceLimits, SandboxSettings, make_sandbox
from eval_pipeline.tasks.demo import build_demo_benchmark
from eval_pipeline.tasks.swebench.canaries import TWINS_PER_TEST
from eval_pipeline_tests.test_canaries import forged_runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=25)
    parser.add_argument("--mode", choices=["local", "pod", "strict"], default="local")
    args = parser.parse_args()
    backend = {"backend": "local"} if args.mode == "local" else {"backend": "container", "mode": args.mode}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        benchmark = build_demo_benchmark(root / "mirrors")
        limits = ResourceLimits(memory_ceiling_mb=1024)
        sandbox = make_sandbox(SandboxSettings.from_mapping(backend), root / "sandbox", limits, "twin-forger")

        def prepare(instance):
            return sandbox.prepare(instance, benchmark.environment_for(instance), benchmark.source)

        try:
            outcomes = forged_runs(benchmark, sandbox, prepare, range(args.seeds))
        finally:
            sandbox.release()
    total = outcomes.total()
    print(f"{args.mode}: {total} gradings")
    for outcome, count in outcomes.most_common():
        print(f"  {outcome}: {count} of {total} ({count / total:.1%})")
    print(
        f"  a forger grouping every twin right: {1 / (TWINS_PER_TEST + 1):.0%} per twinned failing test, never caught"
    )


if __name__ == "__main__":
    main()
