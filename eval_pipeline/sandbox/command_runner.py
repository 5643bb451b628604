"""Where the local backend's commands are started: a small process of this thread's own, not this process.

Every command of a local trial is forked (with a Python callback in the child that enters the workspace's
view and sets the limits, so Popen cannot use vfork), and a fork copies the page tables of the whole
process that forks. From a run worker with Dagster and a campaign loaded (260 MB and more) that cost 20 ms
and more a command, ten or so a trial: most of what a trial cost beyond the same work done by a plain
loop. A runner is the runner package run with `--serve` (runner/serve.py) on this interpreter, about 20 MB,
where the same fork costs a few milliseconds (benchmarks/orchestration_overhead.py). It runs `run_limited` itself, so a command's
limits, view, watches and result are exactly those of a direct call.

Each thread has its runner, started on its first command (a batch's trials run in threads of their own), and
a runner dies with its thread (runner/serve.py). A runner that ends under a command is RunnerEnded, as the
container backend's is, and the thread's next command starts another.
"""

import json
import subprocess
import sys
import threading
from typing import cast

from eval_pipeline.sandbox.base import RunnerEnded
from eval_pipeline.sandbox.runner.entry import DIRECTORY
from eval_pipeline.sandbox.runner.namespaces import ViewUnavailable
from eval_pipeline.sandbox.runner.request import RunRequest
from eval_pipeline.sandbox.runner.result import RunResult

__all__ = ["CommandRunner", "run_command"]


class CommandRunner:
    """One runner process (`--serve`), a request at a time."""

    def __init__(self) -> None:
        # -I: the harness's own interpreter, isolated from PYTHON* variables and the user's site-packages; the
        # runner's directory run by path, so that the process imports nothing of eval_pipeline but the runner.
        self.process = subprocess.Popen(
            [sys.executable, "-I", DIRECTORY, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def run(self, request: RunRequest) -> RunResult:
        """What `run_limited(request)` returns, run by the runner; its ViewUnavailable raised here."""
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(request.to_json().encode() + b"\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except (BrokenPipeError, ValueError):
            line = b""
        if not line:  # its command's doing, most likely (`kill -9 $PPID`): generation scores it as the container's
            raise RunnerEnded(f"the command runner (pid {self.process.pid}) ended: exit {self.process.wait()}")
        reply = json.loads(line)
        if "view_unavailable" in reply:
            raise ViewUnavailable(reply["view_unavailable"])
        if "error" in reply:
            raise RuntimeError(f"the command runner failed:\n{reply['error']}")
        return cast(RunResult, reply["result"])


_runners = threading.local()


def run_command(request: RunRequest) -> RunResult:
    """`run_limited(request)` in this thread's runner, started (or started again, when it has ended) here."""
    runner = getattr(_runners, "runner", None)
    if runner is None or runner.process.poll() is not None:
        runner = _runners.runner = CommandRunner()
    return runner.run(request)
