"""The command runner's modules, each exercised alone (eval_pipeline/sandbox/runner/): the request crossing a
process boundary, the output's cap, the background-process policy, the memory and disk watches, read-back, and
the runner's directory run by path from a copy holding nothing else, as a container's runtime ships it."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eval_pipeline.sandbox.runner.capture import OutputCapture
from eval_pipeline.sandbox.runner.memory import MemoryWatch, OomCounter
from eval_pipeline.sandbox.runner.namespaces import ViewUnavailable
from eval_pipeline.sandbox.runner.processes import end_background, group_killer, wait_for
from eval_pipeline.sandbox.runner.quota import INODE_CHARGE, StorageWatch, allocated_bytes
from eval_pipeline.sandbox.runner.read_back import read_back
from eval_pipeline.sandbox.runner.request import Quota, RequestError, RunRequest, View
from eval_pipeline.sandbox.runner.run import run_limited
from eval_pipeline.sandbox.tool_runtime import RUNNER, _harness_files

REQUEST = RunRequest(
    "echo hi",
    "/",
    {"PATH": os.defpath},
    30,
    1000,
    memory_ceiling_mb=512,
    uid=20001,
    view=View(source="/w", target="/testbed", hide=("/tests",), private={"/tmp": "/w/tmp"}, own_pids=True),
    storage=Quota(("/w",), 2**30, "/state"),
    read_after=("/w/out",),
)
REQUEST_LINE = RunRequest("echo hi", "/", {}, 30, 1000).to_json()


def started(command: str, capture: OutputCapture) -> subprocess.Popen:
    """`command` in a process group of its own, its output into `capture`."""
    process = subprocess.Popen(
        ["/bin/sh", "-c", command], stdout=capture.stdout_fd, stderr=capture.stderr_fd, start_new_session=True
    )
    capture.close_command_ends()
    return process


def test_a_request_crosses_as_json_whole_and_a_bad_one_is_refused_by_name():
    assert RunRequest.from_json(REQUEST.to_json()) == REQUEST
    assert RunRequest.from_fields(json.loads(REQUEST.to_json())).view == REQUEST.view
    fields = {"command": "true", "cwd": "/", "env": {}, "timeout_s": 5, "output_bytes": 10}
    assert RunRequest.from_fields(fields) == RunRequest("true", "/", {}, 5.0, 10), "defaults for what is not given"
    refused = {
        "the run request has unknown fields: memory_limit": {**fields, "memory_limit": 1},
        "the run request lacks the fields: cwd": {key: value for key, value in fields.items() if key != "cwd"},
        "the run request's timeout_s is not a number: '5'": {**fields, "timeout_s": "5"},
        "the run request's output_bytes is not an integer: True": {**fields, "output_bytes": True},
        "the run request's env['A'] is not a string: 1": {**fields, "env": {"A": 1}},
        "the run request's view has unknown fields: sauce": {**fields, "view": {"sauce": "/w"}},
        "the run request's storage lacks the fields: limit_bytes": {**fields, "storage": {"paths": ["/w"]}},
        "the run request's read_after is not a list of strings": {**fields, "read_after": "/w/out"},
    }
    for message, bad in refused.items():
        with pytest.raises(RequestError) as refusal:
            RunRequest.from_json(json.dumps(bad))
        assert str(refusal.value).startswith(message)
    with pytest.raises(RequestError, match="not JSON"):
        RunRequest.from_json("{")


def test_the_runners_directory_runs_from_a_copy_on_the_standard_library_alone(tmp_path):
    """What a runtime ships (tool_runtime.py) is enough: the runner's directory copied elsewhere runs by path with
    no site-packages (-S) and no eval_pipeline to import; a bad request is refused there, naming the field, and
    a serving runner answers it with the error and serves the next."""
    for source, name in _harness_files():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, tmp_path / name)
    runner = [sys.executable, "-I", "-S", str(tmp_path / RUNNER.name)]
    ran = subprocess.run(runner, input=REQUEST_LINE, capture_output=True, text=True, cwd=tmp_path, check=True)
    assert json.loads(ran.stdout)["stdout"] == "hi\n"
    bad = json.dumps({**json.loads(REQUEST_LINE), "uid_offset": 1})
    refused = subprocess.run(runner, input=bad, capture_output=True, text=True, cwd=tmp_path)
    assert refused.returncode == 1 and "RequestError: the run request has unknown fields: uid_offset" in refused.stderr
    served = subprocess.run([*runner, "--serve"], input=f"{bad}\n{REQUEST_LINE}\n", capture_output=True, text=True)
    first, second = map(json.loads, served.stdout.splitlines())
    assert "unknown fields: uid_offset" in first["error"] and second["result"]["stdout"] == "hi\n"


def test_output_past_the_cap_is_drained_and_marked_truncated():
    capture = OutputCapture(1000)
    process = started("head -c 5000000 /dev/zero; echo short >&2", capture)
    assert process.wait(timeout=30) == 0, "a writer past the cap is drained, never blocked"
    assert capture.wait()
    assert capture.stdout == "\0" * 1000 and capture.stderr == "short\n" and capture.truncated.is_set()


def group_runs(group: int) -> bool:
    """Whether process group `group` has a process that has not ended (a zombie has)."""
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def test_processes_left_running_end_with_the_command_unless_kept_and_letting_go_of_its_output():
    """The background policy alone: a group is killed when its command ends; kept (a terminal task's container),
    a process left running runs on, whether it let go of the command's output or still holds it (then read on by
    the capture's drainer); where no drainer could be forked, one still holding it is killed after a grace."""
    cases = (
        (False, False, True, False),
        (True, False, True, True),
        (True, True, True, True),
        (True, True, False, False),
    )
    for keep, holding, detachable, survives in cases:
        capture = OutputCapture(1000, detachable=detachable)
        process = started(f"sleep 60 {'' if holding else '> /dev/null 2>&1'} & true", capture)
        kill_group = group_killer(process.pid)
        status, _, timed_out = wait_for(process.pid, time.monotonic() + 30, kill_group)
        assert os.waitstatus_to_exitcode(status) == 0 and not timed_out
        assert end_background(capture, keep, timed_out, kill_group) == (not survives)
        assert capture.wait(10), "the runner reads no more: every end closed, or its output left to the drainer"
        capture.close()
        deadline = time.monotonic() + 10  # a SIGKILL is delivered at once; the exit takes a moment
        while group_runs(process.pid) and not survives and time.monotonic() < deadline:
            time.sleep(0.05)
        assert group_runs(process.pid) == survives, (keep, holding, detachable)
        kill_group()


def pipe_holders(pipe: str) -> set[int]:
    """The processes holding a descriptor of `pipe` ("pipe:[inode]")."""
    holders = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            descriptors = os.listdir(f"/proc/{entry}/fd")
            if any(os.readlink(f"/proc/{entry}/fd/{fd}") == pipe for fd in descriptors):
                holders.add(int(entry))
        except OSError:
            continue
    return holders


def eventually(condition, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def run_by_path(request: RunRequest) -> tuple[dict, float]:
    """`request`'s result from the runner's process, run by path as a container runs it, and the seconds until it
    answered."""
    begun = time.monotonic()
    ran = subprocess.run([sys.executable, "-I", str(RUNNER)], input=request.to_json(), capture_output=True, text=True)
    return json.loads(ran.stdout), time.monotonic() - begun


def test_a_kept_process_that_holds_the_commands_output_runs_on_and_writes_on_as_in_harbor(tmp_path):
    """Terminal-Bench 2's kv-store-grpc ends its solution with `python server.py &`, no redirection, and Harbor's
    exec returns when the command's process ends, the server running on for the verifier. Here, through the
    runner's process as a container runs it: the command is answered at once with what it wrote; its background
    process writes a line a second later, then megabytes (past any pipe's buffer), and neither blocks nor dies of
    SIGPIPE, the runner long gone; the pipe's read end is then the drainer's alone, which exits with the last
    writer."""
    background = f"sh -c 'echo $$ > {tmp_path}/pid; sleep 1; echo late; head -c 4000000 /dev/zero; "
    background += f"echo written > {tmp_path}/marker; exec sleep 60' &"
    command = f"echo before; {background} echo after"
    result, answered_s = run_by_path(
        RunRequest(command, str(tmp_path), {"PATH": os.defpath}, 30, 1000, keep_background=True)
    )
    assert (result["stdout"], result["exit_code"]) == ("before\nafter\n", 0)
    assert answered_s < 1.5, f"answered {answered_s:.2f} s after it began: the background process was waited for"
    assert eventually(lambda: (tmp_path / "marker").exists()), "the late writes blocked, or killed the writer"
    writer = int((tmp_path / "pid").read_text())
    assert group_runs(os.getpgid(writer)), "it ran on after writing"
    pipe = os.readlink(f"/proc/{writer}/fd/1")
    drainers = pipe_holders(pipe) - {writer}
    assert len(drainers) == 1, drainers
    os.killpg(os.getpgid(writer), signal.SIGKILL)
    assert eventually(lambda: not pipe_holders(pipe)), "the drainer exits once the last writer is gone"


def test_a_kept_commands_timeout_kills_its_group_and_a_process_that_left_it_does_not_hold_the_runner(tmp_path):
    """At its deadline a kept command's group is killed, as any command's; a process that left the group (setsid)
    still holding the output runs on, and the runner answers after a grace instead of waiting for it."""
    command = f"setsid sh -c 'echo $$ > {tmp_path}/pid; exec sleep 60' & sleep 60 & sleep 60"
    result, answered_s = run_by_path(
        RunRequest(command, str(tmp_path), {"PATH": os.defpath}, 0.5, 1000, keep_background=True)
    )
    assert result["timed_out"] and answered_s < 3, (answered_s, result)
    escaped = int((tmp_path / "pid").read_text())
    try:
        assert group_runs(escaped), "the process that left the group runs on"
    finally:
        os.kill(escaped, signal.SIGKILL)


def test_a_command_that_stops_or_kills_its_drainer_holds_no_runner(tmp_path):
    """The drainer is a process in the command's container (root there, as a terminal task's agent is): a command
    that stops it is answered all the same (a dismissed drainer is killed, never waited for), and one that kills it
    leaves its own background process to SIGPIPE, the runner answering as it would."""
    siblings = 'for s in /proc/[0-9]*/stat; do read -r pid _ _ ppid _ < "$s"; [ "$ppid" = "$PPID" ] && [ "$pid" != "$$" ] && echo "$pid"; done'
    for signal_name, left in (("STOP", ""), ("KILL", " sh -c 'sleep 0.5; echo late; sleep 60' &")):
        command = f"for pid in $({siblings}); do kill -{signal_name} $pid; done;{left} echo done"
        request = RunRequest(command, str(tmp_path), {"PATH": os.defpath}, 30, 1000, keep_background=True)
        result, answered_s = run_by_path(request)
        assert (result["stdout"], answered_s < 3) == ("done\n", True), (signal_name, answered_s, result)


def test_a_command_is_killed_at_its_deadline():
    capture = OutputCapture(1000)
    process = started("sleep 30", capture)
    begun = time.monotonic()
    status, _, timed_out = wait_for(process.pid, begun + 0.5, group_killer(process.pid))
    assert timed_out and os.waitstatus_to_exitcode(status) == -9 and time.monotonic() - begun < 10


def test_the_memory_watch_kills_a_group_past_its_ceiling_and_keeps_its_peak():
    """Where no cgroup enforces memory: the group's resident memory, a child's included, is sampled."""
    capture = OutputCapture(1000)
    grow = "python3 -c 'import time; b = bytearray(400 * 2**20); time.sleep(30)'"
    process = started(f"{grow} & wait", capture)
    kill_group = group_killer(process.pid)
    watch = MemoryWatch(process.pid, 100 * 2**20, kill_group)
    watch.run()  # in this thread: it returns once it killed the group
    status, _, timed_out = wait_for(process.pid, time.monotonic() + 30, kill_group)
    assert watch.exceeded and not timed_out and os.waitstatus_to_exitcode(status) == -9
    assert watch.peak_memory_mb is not None and watch.peak_memory_mb > 100


def test_no_oom_kill_is_reported_without_a_readable_counter_or_after_a_timeout():
    """OOM kills are told apart by the cgroup's counter rising while the command ran: none where the counter
    cannot be read (hosts without a memory cgroup), and a command that timed out was killed by the runner."""
    counter = OomCounter()
    assert not counter.killed(timed_out=True)
    assert not counter.killed(timed_out=False), "nothing ran: the counter did not rise"


def test_the_quota_watch_stops_a_writer_past_the_quota_and_charges_every_name(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    watch = StorageWatch([str(mine)], 4 * 2**20)
    watch.start()
    capture = OutputCapture(1000)
    write = f"python3 -c \"import os,time\nfor i in range(64): open('{mine}/f%d' % i, 'wb').write(os.urandom(2**20))\""
    process = started(write, capture)
    kill_group = group_killer(process.pid)
    watch.arm(kill_group, process.pid)
    status, _, _ = wait_for(process.pid, time.monotonic() + 60, kill_group)
    watch.exited.set()
    watch.finish()
    assert watch.exceeded and os.waitstatus_to_exitcode(status) == -9
    assert allocated_bytes([str(mine)]) < 12 * 2**20, "stopped within a few samples of its quota"
    (tmp_path / "names").mkdir()
    for number in range(100):
        (tmp_path / "names" / str(number)).touch()
    assert allocated_bytes([str(tmp_path / "names")]) == 100 * INODE_CHARGE, "an empty file costs its name"


def test_read_back_reads_a_regular_file_and_refuses_a_link_to_one(tmp_path):
    (tmp_path / "reward.txt").write_text("1")
    (tmp_path / "link").symlink_to(tmp_path / "reward.txt")
    assert read_back(str(tmp_path / "reward.txt"), 10) == "MQ=="
    assert read_back(str(tmp_path / "link"), 10) is None
    assert read_back(str(tmp_path / "reward.txt"), 0) is False


def test_run_limited_composes_the_limits_into_the_result_a_direct_call_and_the_runner_process_agree_on(tmp_path):
    """The same request run in this process and by the runner's process: the same fields, in the same order,
    the files read back first."""
    (tmp_path / "out").write_text("x")
    request = RunRequest("echo hi", str(tmp_path), {}, 30, 1000, read_after=(str(tmp_path / "out"),))
    direct = run_limited(request)
    ran = subprocess.run([sys.executable, "-I", str(RUNNER)], input=request.to_json(), capture_output=True, text=True)
    remote = json.loads(ran.stdout)
    assert (
        list(direct)
        == list(remote)
        == [
            "files",
            "command",
            "exit_code",
            "stdout",
            "stderr",
            "duration_s",
            "timed_out",
            "output_truncated",
            "peak_memory_mb",
            "oom_killed",
            "storage_exceeded",
        ]
    )
    for result in (direct, remote):
        assert (result["files"], result["stdout"], result["exit_code"]) == ({str(tmp_path / "out"): "eA=="}, "hi\n", 0)


def test_a_view_shows_the_workspace_at_the_target_with_no_network_and_one_refused_names_its_walls(tmp_path):
    """The namespaces alone, through the command they hold: the workspace found at the target and only a loopback
    of its own; a view the kernel refuses (here a hidden path that does not exist) is ViewUnavailable naming the
    view's walls, with no process of the command started."""
    workspace, target = tmp_path / "workspace", tmp_path / "target"
    workspace.mkdir()
    target.mkdir()
    (workspace / "mine").write_text("x\n")
    view = View(source=str(workspace), target=str(target))
    listing = "cat mine && tail -n +3 /proc/net/dev | cut -d: -f1"
    try:
        seen = run_limited(RunRequest(listing, str(target), {"PATH": os.defpath}, 30, 1000, view=view))
    except ViewUnavailable as error:
        pytest.skip(f"this system gives no command a view of its own: {error}")
    assert seen["stdout"].split() == ["x", "lo"], seen
    hidden = View(source=str(workspace), target=str(target), hide=(str(tmp_path / "absent"),))
    with pytest.raises(ViewUnavailable, match=r"^cannot give the command its own view \(hide, source, target\): "):
        run_limited(RunRequest(f"touch {tmp_path}/ran", str(target), {"PATH": os.defpath}, 30, 1000, view=hidden))
    assert not (tmp_path / "ran").exists()
