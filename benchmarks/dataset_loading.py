"""Measure loading datasets: SWE-bench rows at full-benchmark scale, and terminal task directories.

    python benchmarks/dataset_loading.py [--rows 2294] [--tasks 200]

SWE-bench: the demo's rows, repeated under new instance ids up to `--rows`
(the full SWE-bench test split has 2,294), written as parquet and loaded
through `datasets` with validation and the content hash, cold (no cache) and
warm. Terminal: the 8 demo tasks copied under new names up to `--tasks`,
loaded with a fresh mirror (every working tree committed) and again with the
mirror in place. Figures: wall-clock seconds; this process's peak RSS.
"""

import argparse
import json
import resource
import shutil
import tempfile
import time
from pathlib import Path

import pandas

from eval_pipeline.common.settings import Paths
from eval_pipeline.datasets.sources import load_benchmark
from eval_pipeline.tasks.demo import build_demo_benchmark
from eval_pipeline.tasks.terminal.task import DEMO_TASKS_DIR


def timed(action) -> tuple[float, object]:
    started = time.perf_counter()
    result = action()
    return round(time.perf_counter() - started, 3), result


def swebench(root: Path, rows: int) -> dict[str, object]:
    demo = build_demo_benchmark(root / "mirrors")
    base = [instance.to_row() for instance in demo.instances]
    table = [{**base[i % len(base)], "instance_id": f"scale__repo-{i}"} for i in range(rows)]
    pandas.DataFrame(table).to_parquet(root / "rows.parquet")
    source = {"kind": "swebench", "path": str(root / "rows.parquet"), "mirror_dir": str(root / "mirrors")}
    cold_s, benchmark = timed(lambda: load_benchmark(source, Paths(root / "data")))
    warm_s, again = timed(lambda: load_benchmark(source, Paths(root / "data")))
    assert benchmark.version == again.version and len(benchmark.instances) == rows
    return {"rows": rows, "cold_load_s": cold_s, "warm_load_s": warm_s, "per_row_ms": round(warm_s / rows * 1000, 3)}


def terminal(root: Path, tasks: int) -> dict[str, object]:
    demo = sorted(p for p in DEMO_TASKS_DIR.iterdir() if p.is_dir())
    for i in range(tasks):
        shutil.copytree(demo[i % len(demo)], root / "tasks" / f"{demo[i % len(demo)].name}-{i}")
    source = {"kind": "terminal", "path": str(root / "tasks"), "mirror_dir": str(root / "mirrors")}
    fresh_s, benchmark = timed(lambda: load_benchmark(source, Paths(root / "data")))
    warm_s, again = timed(lambda: load_benchmark(source, Paths(root / "data")))
    assert benchmark.version == again.version and len(benchmark.instances) == tasks
    return {
        "tasks": tasks,
        "fresh_mirror_s": fresh_s,
        "warm_mirror_s": warm_s,
        "per_task_fresh_ms": round(fresh_s / tasks * 1000, 1),
        "per_task_warm_ms": round(warm_s / tasks * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2294)
    parser.add_argument("--tasks", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        figures = {
            "swebench": swebench(Path(scratch) / "swebench", args.rows),
            "terminal": terminal(Path(scratch) / "terminal", args.tasks),
        }
    figures["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
