"""Measure where concurrent local trials' commands run under a CPU ceiling, and what it costs them.

    python benchmarks/cpu_placement.py [--commands 4] [--rounds 5]

`--commands` CPU-bound commands (a fixed amount of Python arithmetic) start at once through the local
backend's runner, each with `cpu_ceiling: 1` as the demo campaign sets it, then once with no ceiling;
per round, the wall time until all have finished and the set of cores each was allowed. Figures: the
median over rounds, in seconds, and how many distinct cores the commands were given.
"""

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from eval_pipeline.sandbox.runner.request import RunRequest
from eval_pipeline.sandbox.runner.run import run_limited

WORK = "python3 -c 'sum(i * i for i in range(6_000_000))'; grep Cpus_allowed_list /proc/self/status"


def one_round(commands: int, cpu_ceiling: float | None) -> tuple[float, set[str]]:
    started = time.perf_counter()
    with ThreadPoolExecutor(commands) as pool:
        results = list(
            pool.map(
                lambda _: run_limited(
                    RunRequest(WORK, "/", {"PATH": os.defpath}, 300, 10_000, cpu_ceiling=cpu_ceiling)
                ),
                range(commands),
            )
        )
    cores = {result["stdout"].split()[-1] for result in results}
    return time.perf_counter() - started, cores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    figures = {"machine_cores": len(os.sched_getaffinity(0)), "commands": args.commands}
    for label, ceiling in (("ceiling_1", 1.0), ("no_ceiling", None)):
        rounds = [one_round(args.commands, ceiling) for _ in range(args.rounds)]
        figures[label] = {
            "wall_s_median": round(statistics.median(wall for wall, _ in rounds), 2),
            "distinct_core_sets_median": statistics.median(len(cores) for _, cores in rounds),
        }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
