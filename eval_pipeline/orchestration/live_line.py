"""What `eval-pipeline run` shows while it runs, between the lines it says: the time spent, the tally of the
trials that ended (orchestration/tally.py), and each run in flight (a batch of trials, an environment, the
dataset, the results) with how long it has been running.

`LiveStatus` holds it and renders it at any moment, from its clock; `WatchedLauncher` keeps its runs in flight,
as they are launched and reported finished. On a terminal, `LiveLine` redraws it in place every REDRAW_S seconds
from a thread of its own, so the time moves when no trial ends (a trial may take half an hour). Elsewhere (a
log, CI), `Heartbeat` writes it as a line of its own only after HEARTBEAT_S seconds without any line, so a log
shows the command is alive without a line a second.
"""

import shutil
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TextIO

from dagster import DagsterInstance, RunRequest

from eval_pipeline.defs.progress import REQUEST_TAG
from eval_pipeline.defs.stages import ENVIRONMENTS, STAGE_TAG, TRIALS
from eval_pipeline.orchestration.launchers import Launcher
from eval_pipeline.orchestration.tally import duration

__all__ = ["REDRAW_S", "Heartbeat", "LiveLine", "LiveStatus", "WatchedLauncher"]

REDRAW_S = 1.0  # how often the terminal's line is redrawn
HEARTBEAT_S = 60.0  # without a terminal: the longest a log goes without a line while runs are in flight
STAGE_NAMES = {"prepare": "dataset", ENVIRONMENTS: "environment"}  # how a run of a stage is named on the line


@dataclass(frozen=True)
class InFlight:
    """A run launched and not yet finished: what it does, and when it was launched (on the status's clock)."""

    label: str
    since: float


def run_label(tags: Mapping[str, str]) -> str:
    """What a run requested with these tags does: a batch of trials by its range of trial partitions
    (`instance|first..last`), an instance's environment, or its stage (dataset, results, release)."""
    stage = tags.get(STAGE_TAG, "")
    target = tags.get(REQUEST_TAG, "").rpartition(f":{stage}:")[2]
    if stage == TRIALS:
        return target
    name = STAGE_NAMES.get(stage, stage)
    return f"{name} {target}" if target else name


class LiveStatus:
    """The status at any moment: the tally's line once the campaign's trials are counted (its time elapsed since
    the trials started and the time left, worked out when it is rendered), else the time since the status
    began (`since start`: the dataset's preparation, say, comes before the tally); then the runs in flight,
    the longest-running first, each with how long it has run. Safe to update from one thread and render
    from another."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self._lock = threading.Lock()
        self._runs: dict[str, InFlight] = {}  # by the request's key (REQUEST_TAG)
        self._tally: Callable[[], str] | None = None

    def follow(self, tally: Callable[[], str]) -> None:
        """Render the tally's line (a Tally's `line`) at the head from now on."""
        self._tally = tally

    def launched(self, tags: Mapping[str, str]) -> None:
        with self._lock:
            self._runs[tags.get(REQUEST_TAG, "")] = InFlight(run_label(tags), self.clock())

    def finished(self, request_key: str) -> None:
        with self._lock:
            self._runs.pop(request_key, None)

    @property
    def running(self) -> bool:
        with self._lock:
            return bool(self._runs)

    def line(self, width: int = 0) -> str:
        """The status in one line, cut to `width` characters (0: whole)."""
        now = self.clock()
        with self._lock:
            runs = sorted(self._runs.values(), key=lambda run: run.since)
        head = self._tally() if self._tally else f"{duration(now - self.started)} since start"
        running = ", ".join(f"{run.label} {duration(now - run.since)}" for run in runs)
        text = f"{head} · running: {running}" if running else head
        return text if not width or len(text) <= width else text[: max(width - 1, 0)] + "…"


class WatchedLauncher:
    """A launcher that keeps `status`'s runs in flight: each request as it is launched (before the launcher
    takes it: the one-process launcher runs it to its end within `launch`), each run as it is reported
    finished (its request read from its tags in `instance`)."""

    def __init__(self, launcher: Launcher, dagster_instance: DagsterInstance, status: LiveStatus) -> None:
        self.launcher, self.dagster_instance, self.status = launcher, dagster_instance, status
        self.capacity, self.environment_lanes = launcher.capacity, launcher.environment_lanes

    def launch(self, request: RunRequest, run_config: Mapping[str, Any] | None = None) -> None:
        self.status.launched(request.tags)
        self.launcher.launch(request, run_config)

    def in_flight(self) -> int:
        return self.launcher.in_flight()

    def wait(self, timeout_s: float | None = None) -> list[str]:
        finished = self.launcher.wait(timeout_s)
        for run_id in finished:
            run = self.dagster_instance.get_run_by_id(run_id)
            self.status.finished(run.tags.get(REQUEST_TAG, "") if run else "")
        return finished

    def close(self, abort: bool = False) -> None:
        self.launcher.close(abort)


class _Ticking(ABC):
    """Lines said on `stream`, and `tick` called every `interval` seconds by a daemon thread while the object is
    entered (its exit stops the thread, on an error or Ctrl-C too). Writes are serialized."""

    def __init__(self, status: LiveStatus, stream: TextIO, interval: float) -> None:
        self.status, self.stream, self.interval = status, stream, interval
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="live-line", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()

    def _write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text)
            self.stream.flush()

    @abstractmethod
    def tick(self) -> None:
        """What the thread does every `interval` seconds."""

    @abstractmethod
    def close(self) -> None:
        """The last write, once the thread has stopped."""


class LiveLine(_Ticking):
    """The status rewritten in place at the bottom of a terminal, redrawn at each tick and when shown a new
    tally; lines said above it. The line is cut to the terminal's width (read at each redraw), since a line that
    wraps cannot be rewritten in place."""

    def __init__(
        self,
        status: LiveStatus,
        stream: TextIO,
        interval: float = REDRAW_S,
        width: Callable[[], int] = lambda: shutil.get_terminal_size().columns - 1,
    ) -> None:
        super().__init__(status, stream, interval)
        self.width = width
        self.drawn = ""

    def print_line(self, line: str) -> None:
        with self._lock:
            self.drawn = self.status.line(self.width())
            self.stream.write(f"\r\x1b[K{line}\n{self.drawn}")
            self.stream.flush()

    def show(self, tally: Callable[[], str]) -> None:
        self.status.follow(tally)
        self.tick()

    def tick(self) -> None:
        with self._lock:
            self.drawn = self.status.line(self.width())
            self.stream.write(f"\r\x1b[K{self.drawn}")
            self.stream.flush()

    def close(self) -> None:
        if self.drawn:
            self._write("\n")


class Heartbeat(_Ticking):
    """Plain lines, and while runs are in flight the status as a line of its own (`… still running: …`) once
    `quiet` seconds have passed without a line (on the status's clock), checked at each tick."""

    def __init__(self, status: LiveStatus, stream: TextIO, quiet: float = HEARTBEAT_S, interval: float = REDRAW_S):
        super().__init__(status, stream, interval)
        self.quiet = quiet
        self.last = status.clock()

    def print_line(self, line: str) -> None:
        self.last = self.status.clock()
        self._write(f"{line}\n")

    def close(self) -> None:
        pass  # every line it wrote is whole

    def tick(self) -> None:
        if self.status.running and self.status.clock() - self.last >= self.quiet:
            self.print_line(f"… still running: {self.status.line()}")
