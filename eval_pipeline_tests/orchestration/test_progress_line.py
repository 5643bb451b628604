"""The live line of `eval-pipeline run`: the time spent and the runs in flight move between trials' ends, on a
terminal redrawn in place, in a log said after a quiet minute; rendered on a fake clock, then seen ticking in a
real campaign whose one trial's agent is slow."""

import io
import re
import sys
import threading
import time

import pytest
import yaml
from dagster import DagsterInstance, RunRequest, job, op

from eval_pipeline.agents.builtin import OracleAgent
from eval_pipeline.cli import main
from eval_pipeline.defs.progress import REQUEST_TAG
from eval_pipeline.defs.stages import ENVIRONMENTS, STAGE_TAG, TRIALS
from eval_pipeline.orchestration.live_line import Heartbeat, LiveLine, LiveStatus, WatchedLauncher
from eval_pipeline.orchestration.tally import Tally


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def tags(stage: str, target: str) -> dict[str, str]:
    return {STAGE_TAG: stage, REQUEST_TAG: f"cli-abc:{stage}:{target}"}


TRIAL_BATCH = tags(TRIALS, "calc-1|oracle-s0..oracle-s1")
ENVIRONMENT = tags(ENVIRONMENTS, "calc-2")


def test_the_status_renders_the_time_and_each_run_in_flight_at_the_moment_it_is_drawn():
    clock = Clock()
    status = LiveStatus(clock)
    status.launched(tags("prepare", ""))
    clock.now += 4
    assert status.line() == "4s since start · running: dataset 4s"
    status.finished("cli-abc:prepare:")
    tally = Tally(total=2, clock=clock)
    status.follow(tally.line)
    status.launched(TRIAL_BATCH)
    clock.now += 30
    status.launched(ENVIRONMENT)
    clock.now += 35  # no trial ended: the line still moves
    assert status.line() == (
        "0/2 done · 0 resolved · 1m05s elapsed · ETA ? · 0 tokens · $0.00"
        " · running: calc-1|oracle-s0..oracle-s1 1m05s, environment calc-2 35s"
    )
    status.finished(ENVIRONMENT[REQUEST_TAG])
    assert status.line().endswith("running: calc-1|oracle-s0..oracle-s1 1m05s")
    assert status.line(width=40) == status.line()[:39] + "…", "a line wider than the terminal would wrap"


def test_a_terminals_line_is_redrawn_at_each_tick_and_lines_said_go_above_it():
    clock, stream = Clock(), io.StringIO()
    status = LiveStatus(clock)
    live = LiveLine(status, stream, width=lambda: 200)
    status.launched(TRIAL_BATCH)
    live.show(Tally(total=2, clock=clock).line)
    clock.now += 1
    live.tick()
    clock.now += 1
    live.tick()
    live.print_line("calc-1 oracle-s0: agent_error")
    live.close()
    frames = stream.getvalue().split("\r\x1b[K")[1:]
    assert [re.search(r"(\d+)s elapsed", frame)[1] for frame in frames] == ["0", "1", "2", "2"]
    assert frames[-1].startswith("calc-1 oracle-s0: agent_error\n0/2 done"), "the line is drawn again under it"
    assert stream.getvalue().endswith("\n")


def test_a_log_gets_the_status_after_a_quiet_minute_and_no_line_a_second():
    clock, stream = Clock(), io.StringIO()
    status = LiveStatus(clock)
    heartbeat = Heartbeat(status, stream, quiet=60)
    heartbeat.print_line("demo: 1 instance x 1 trial")
    status.launched(TRIAL_BATCH)
    for _ in range(59):
        clock.now += 1
        heartbeat.tick()
    assert stream.getvalue() == "demo: 1 instance x 1 trial\n"
    clock.now += 1
    heartbeat.tick()
    heartbeat.tick()
    assert stream.getvalue().splitlines()[1:] == [
        "… still running: 1m00s since start · running: calc-1|oracle-s0..oracle-s1 1m00s"
    ]
    status.finished(TRIAL_BATCH[REQUEST_TAG])
    clock.now += 600
    heartbeat.tick()
    assert len(stream.getvalue().splitlines()) == 2, "nothing in flight: nothing to say"


class FakeLauncher:
    capacity, environment_lanes = 2, 0

    def __init__(self) -> None:
        self.launched: list = []
        self.done: list[str] = []  # run ids finished and not yet reported
        self.reported = 0

    def launch(self, request, run_config=None):
        self.launched.append(request)

    def in_flight(self) -> int:
        return len(self.launched) - self.reported

    def wait(self, timeout_s=None) -> list[str]:
        finished, self.done = self.done, []
        self.reported += len(finished)
        return finished

    def close(self, abort=False):
        pass


@op
def nothing() -> None:
    pass


@job
def trials() -> None:
    nothing()


def test_the_watched_launcher_keeps_the_runs_in_flight():
    """A run is in flight from its launch until the launcher reports it finished; its request is read from the
    finished run's tags in the instance, as a worker recorded them."""
    instance = DagsterInstance.ephemeral()
    clock = Clock()
    status, inner = LiveStatus(clock), FakeLauncher()
    launcher = WatchedLauncher(inner, instance, status)
    launcher.launch(RunRequest(run_key="k", tags=TRIAL_BATCH))
    launcher.launch(RunRequest(run_key="e", tags=ENVIRONMENT))
    clock.now += 3
    assert status.line().endswith("running: calc-1|oracle-s0..oracle-s1 3s, environment calc-2 3s")
    result = trials.execute_in_process(instance=instance, tags=TRIAL_BATCH)  # the run a worker executed
    inner.done = [result.run_id]
    assert launcher.wait(0) == [result.run_id]
    assert status.line().endswith("running: environment calc-2 3s")
    assert (launcher.capacity, launcher.in_flight()) == (2, 1)


class Terminal(io.StringIO):
    """What the command writes on a terminal's stderr, kept."""

    def isatty(self) -> bool:
        return True


@pytest.mark.slow
def test_a_slow_trial_on_a_terminal_shows_the_time_moving_while_it_runs(campaign_env, tmp_path, monkeypatch):
    """One trial of a code issue whose agent takes 4 s: the command (its runs in this process, one worker) redraws
    the live line while the trial runs, with the elapsed time rising and the trial's batch named."""
    solve = OracleAgent.solve

    def slow_solve(self, task, workspace):
        time.sleep(4)
        return solve(self, task, workspace)

    monkeypatch.setattr(OracleAgent, "solve", slow_solve)
    campaign = tmp_path / "slow.yaml"
    campaign.write_text(
        yaml.safe_dump(
            {
                "name": "slow_line",
                "benchmark": {"kind": "demo"},
                "variants": [{"name": "oracle", "agent": "oracle"}],
                "seeds": 1,
            }
        )
    )
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("COLUMNS", "400")  # the terminal's width: the whole line fits
    first = "eval-pipeline-demo__calclib-1"
    assert main(["run", "--campaign", str(campaign), "--workers", "1", "--instance", first]) == 0
    frames = terminal.getvalue().split("\r\x1b[K")
    running = [frame for frame in frames if f"running: {first}|oracle-s0" in frame]
    seconds = [int(re.search(rf"running: {re.escape(first)}\|oracle-s0 (\d+)s", frame)[1]) for frame in running]
    assert len(set(seconds)) >= 2 and seconds == sorted(seconds), frames
    assert "live-line" not in {thread.name for thread in threading.enumerate()}, "the redrawing thread ended"
