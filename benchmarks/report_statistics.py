"""Measure the report's statistics, gates and HTML at campaign scale, on synthetic results.

    python benchmarks/report_statistics.py [--instances 2294] [--variants 4] [--seeds 5] [--slices 4]

Builds results rows for every (instance, variant, seed) with random outcomes
(3% infrastructure), then times `build_report` (every statistic per slice and
variant, paired differences against the baseline), a release gate, the HTML
report, and writing and reading the DuckDB `trials` table. Figures:
wall-clock seconds; this process's peak RSS.
"""

import argparse
import json
import random
import resource
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from eval_pipeline.config.gates import parse_policy
from eval_pipeline.results.gates import evaluate_gate
from eval_pipeline.results.html import render_html
from eval_pipeline.results.report import build_report
from eval_pipeline.results.warehouse import ResultRow, Warehouse, read_results_table, write_warehouse

TEMPLATE = ResultRow(
    **{name: None for name in ResultRow.__dataclass_fields__}
    | {"campaign": "bench", "attempts": 1, "input_tokens": 1000, "output_tokens": 200, "cost_usd": 0.05}
    | {"test_infrastructure_changes": 0, "oom_killed": False, "seed": 0, "memory_floor_mb": 256}
    | {"memory_ceiling_mb": 2048, "cpu_floor": 0.5, "cpu_ceiling": 1.0, "pids_limit": 256, "enforced_limits": "{}"}
)


def synthetic_results(instances: int, variants: int, seeds: int, slices: int) -> list[ResultRow]:
    rng = random.Random(0)
    rows = []
    for i in range(instances):
        difficulty = rng.random()
        for v in range(variants):
            for seed in range(seeds):
                infrastructure = rng.random() < 0.03
                resolved = not infrastructure and rng.random() < (1 - difficulty) * (0.5 + 0.1 * v)
                rows.append(
                    replace(
                        TEMPLATE,
                        slice=f"slice-{i % slices}",
                        instance_id=f"inst-{i}",
                        repo=f"owner/repo-{i % 40}",
                        trial=f"v{v}-s{seed}",
                        variant=f"v{v}",
                        seed=seed,
                        agent=f"v{v}",
                        outcome="oom_killed" if infrastructure else ("resolved" if resolved else "unresolved"),
                        outcome_kind="infrastructure" if infrastructure else "agent",
                        scored=not infrastructure,
                        resolved=resolved,
                        generation_duration_s=rng.lognormvariate(4, 1),
                        evaluation_duration_s=rng.lognormvariate(3, 0.5),
                    )
                )
    return rows


def timed(action) -> tuple[float, object]:
    started = time.perf_counter()
    result = action()
    return round(time.perf_counter() - started, 3), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--instances", type=int, default=2294)
    parser.add_argument("--variants", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--slices", type=int, default=4)
    args = parser.parse_args()
    rows = synthetic_results(args.instances, args.variants, args.seeds, args.slices)
    report_s, report = timed(lambda: build_report("bench", "d" * 64, "p" * 64, rows, baseline="v0"))
    policy = parse_policy({"environment": "prod", "candidate": "v1", "floors": {"*": 0.3}}, "bench")
    gate_s, _ = timed(lambda: evaluate_gate(policy, report))
    html_s, html = timed(lambda: render_html(report, rows))
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "bench.duckdb"
        warehouse = Warehouse(rows, [], [{"instance_id": "x"}], [{"variant": "x"}], {"campaign": "bench"})
        write_s, _ = timed(lambda: write_warehouse(warehouse, path))
        read_s, read_back = timed(lambda: read_results_table(path))
    print(
        json.dumps(
            {
                "trials": len(rows),
                "build_report_s": report_s,
                "gate_s": gate_s,
                "html_s": html_s,
                "html_bytes": len(html),
                "warehouse_write_s": write_s,
                "trials_read_s": read_s,
                "rows_read": len(read_back),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
