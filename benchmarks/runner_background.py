"""What keeping a terminal command's background processes costs the runner (runner/drainer.py).

A session runner (`--session`, as a task's container runs it) answers the same command under the code rule (its
group killed as it ends) and under `keep_background` (a drainer forked before it, killed as it ends), alternating,
and one command that leaves a process holding its output, whose drainer's memory is read from /proc. Prints JSON.

    python benchmarks/runner_background.py [--commands 300]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from eval_pipeline.sandbox.runner import RunRequest
from eval_pipeline.sandbox.tool_runtime import RUNNER


class Session:
    """A session runner process, asked one request at a time."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(RUNNER), "--session"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.pid = json.loads(self.readline())["pid"]
        self.asked = 0

    def readline(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline()

    def ask(self, request: RunRequest) -> float:
        """Seconds until `request` was answered."""
        assert self.process.stdin is not None
        self.asked += 1
        begun = time.perf_counter()
        self.process.stdin.write(json.dumps({"id": self.asked, "request": request.to_fields()}) + "\n")
        self.process.stdin.flush()
        self.readline()
        return time.perf_counter() - begun

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def drainers_memory_kb(runner_pid: int) -> list[dict[str, int]]:
    """Rss, Pss and Private_Dirty (kB) of each process of a session runner's program but `runner_pid` (the
    drainers left of its commands)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            command_line = Path(f"/proc/{entry}/cmdline").read_text()
            if f"{RUNNER}\0--session" not in command_line or int(entry) == runner_pid:
                continue
            rollup = Path(f"/proc/{entry}/smaps_rollup").read_text().splitlines()
        except OSError:
            continue
        fields = dict(line.split()[:2] for line in rollup[1:])
        found.append({name: int(fields[f"{name}:"]) for name in ("Rss", "Pss", "Private_Dirty")})
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=300)
    arguments = parser.parse_args()
    session = Session()
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for number in range(2 * arguments.commands):
        keep = bool(number % 2)
        request = RunRequest("true", "/tmp", {"PATH": os.defpath}, 30, 1000, keep_background=keep)
        seconds[keep].append(session.ask(request))
    holding = RunRequest("sleep 5 & echo started", "/tmp", {"PATH": os.defpath}, 30, 1000, keep_background=True)
    holding_s = session.ask(holding)
    time.sleep(0.5)
    memory = drainers_memory_kb(session.pid)
    session.close()
    print(
        json.dumps(
            {
                "commands": arguments.commands,
                "median_ms": {
                    "code_rule": round(statistics.median(seconds[False]) * 1000, 2),
                    "keep_background": round(statistics.median(seconds[True]) * 1000, 2),
                },
                "answered_ms_leaving_a_process_holding_its_output": round(holding_s * 1000, 1),
                "drainers_kb": memory,
                "load": os.getloadavg(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
