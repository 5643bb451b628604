"""Every forgery of eval_pipeline_tests/support/forgeries.py against every demo code issue, on one backend.

    python benchmarks/forged_verdicts.py --backend local|pod|strict

Prints, per forgery and for the oracle, how many of the demo's 8 code issues
resolved and which outcomes and audit flags the gradings ended with: the
table of issue 19's closing note, with issue 49's status forgeries. The test command is the demo's with
pytest's plugin autoloading on, as every SWE-bench command runs. Run it from a checkout of an older commit
(PYTHONPATH) to see the same doors before the defences. The container modes
need the engine (DOCKER_HOST) and the test settings of README's "Tests".
"""

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

from eval_pipeline.sandbox import ResourceLimits, SandboxSettings, make_sandbox
from eval_pipeline.tasks.demo import build_demo_benchmark
from eval_pipeline.tasks.swebench.grading import grade
from eval_pipeline_tests.support.forgeries import EVASIONS, FORGERIES, STATUS_FORGERIES, as_swebench_runs_it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["local", "pod", "strict"], default="local")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="forged-"))
    benchmark = build_demo_benchmark(root / "mirrors")
    backend = "local" if args.backend == "local" else "container"
    settings = SandboxSettings.from_mapping(
        {"backend": backend, "mode": "strict" if args.backend == "strict" else "pod"}
    )
    sandbox = make_sandbox(settings, root / "sandbox", ResourceLimits(memory_ceiling_mb=1024), "forged-verdicts")
    instances = [instance for instance in benchmark.instances if instance.own_image is None]
    forgeries = {**FORGERIES, **EVASIONS, **STATUS_FORGERIES}
    table: dict[str, list[tuple[str, tuple[str, ...]]]] = {case: [] for case in [*forgeries, "oracle"]}
    started = time.monotonic()
    try:
        for instance in instances:
            spec = as_swebench_runs_it(benchmark.environment_for(instance))
            environment = sandbox.prepare(instance, spec, benchmark.source)
            patches = {case: forge(benchmark, instance) for case, forge in forgeries.items()}
            for case, patch in {**patches, "oracle": instance.patch}.items():
                with sandbox.workspace(environment, "forged") as workspace:
                    verdict = grade(instance, spec, patch, workspace, 120)
                flags = tuple(sorted({flag.kind for flag in getattr(verdict, "audit", [])}))
                table[case].append((verdict.outcome.value, flags))
    finally:
        sandbox.release()
    print(f"| {args.backend} | resolved | outcomes | audit flags |\n|---|---|---|---|")
    for case, rows in table.items():
        outcomes = ", ".join(f"{o} {n}" for o, n in Counter(outcome for outcome, _ in rows).items())
        flags = ", ".join(sorted({flag for _, kinds in rows for flag in kinds})) or "none"
        resolved = sum(outcome == "resolved" for outcome, _ in rows)
        print(f"| {case} | {resolved}/{len(rows)} | {outcomes} | {flags} |")
    print(f"\n{sum(map(len, table.values()))} gradings in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
