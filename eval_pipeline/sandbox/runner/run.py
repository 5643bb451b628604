"""`run_limited`: one command run under every limit of its request, composed from the runner's modules."""

import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from eval_pipeline.sandbox.runner.capture import OutputCapture
from eval_pipeline.sandbox.runner.libc import set_dumpable
from eval_pipeline.sandbox.runner.memory import MemoryWatch, OomCounter, children_peak_mb, prefer_for_oom_kill
from eval_pipeline.sandbox.runner.namespaces import Namespaces, ViewUnavailable, pid_namespace_members
from eval_pipeline.sandbox.runner.processes import (
    REAP_GRACE_S,
    become_subreaper,
    become_uid,
    end_background,
    end_processes_of,
    group_killer,
    pin_to_cores,
    reap_orphans,
    wait_for,
)
from eval_pipeline.sandbox.runner.quota import StorageWatch
from eval_pipeline.sandbox.runner.read_back import read_back
from eval_pipeline.sandbox.runner.request import RunRequest
from eval_pipeline.sandbox.runner.result import ReadBackResult, RunResult, not_started

__all__ = ["run_limited"]


def run_limited(request: RunRequest) -> RunResult:
    """Run `sh -c command` in its own process group, under every limit `request` sets, and report what it did.

    - output: stdout and stderr each kept to `output_bytes` (`capture.OutputCapture`);
    - time: the group killed at `timeout_s` (`processes.wait_for`);
    - processes: the group killed when the command ends, unless `keep_background` (`processes.end_background`):
      then the processes it left run on, the output they still hold read on by a drainer (`drainer.Drainer`);
      with a `uid` (a pod's trial) every process of that uid is ended then, whatever group or session it moved
      to (`processes.end_processes_of`);
    - memory: where no cgroup enforces it, `memory_ceiling_mb` on the group's resident memory and `cpu_ceiling`
      as a core affinity; a command over its ceiling ends `oom_killed`. In a container (`watch_cgroup_oom`) the
      engine's cgroup enforces both, and an OOM kill is told from any other SIGKILL by the cgroup's counter
      (`memory`);
    - disk: the `storage` quota (`quota.StorageWatch`): the command ends `storage_exceeded` once the trial's
      files take more, or when it starts with the quota already spent;
    - view: the command's own namespaces (`namespaces.Namespaces`); ViewUnavailable where the system refuses
      them;
    - read-back: the files `read_after` names, read once the command has ended (`read_back.read_back`), come
      back in the result's `files` (`result.ReadBackResult`).
    """
    oom = OomCounter() if request.watch_cgroup_oom else None
    started = time.monotonic()
    if request.watch_cgroup_oom:  # in a container, this runner is a process of its own: it may adopt orphans
        become_subreaper()
    # First: a view that cannot be given (ViewUnavailable) leaves no thread or pipe of the command's behind.
    namespaces = Namespaces(request.view, request.uid) if request.view is not None else None
    capture = OutputCapture(request.output_bytes, detachable=request.keep_background)
    disk = _storage_watch(request)
    try:
        process = _start(request, namespaces, capture)
    except (ViewUnavailable, OSError) as error:
        if disk:
            disk.disarm()
        capture.wait()  # every command end is closed: the readers end at once
        capture.close()
        if isinstance(error, ViewUnavailable):
            raise
        # its working directory is gone (an earlier command removed it): the command fails
        return not_started(request.command, error, time.monotonic() - started)
    kill_group = group_killer(process.pid)
    # In a pid namespace of its own, the command's process is the init's child, under the runner's child.
    members = pid_namespace_members(process.pid) if namespaces and namespaces.own_pids else []
    if disk:
        disk.arm(kill_group, members[-1] if members else process.pid)
    memory = _memory_watch(request, process.pid, members, kill_group)
    try:
        status, usage, timed_out = wait_for(process.pid, started + request.timeout_s, kill_group)
    finally:
        for watcher in (memory, disk):
            if watcher:
                watcher.exited.set()
    process.returncode = os.waitstatus_to_exitcode(status)
    killed = end_background(capture, request.keep_background, timed_out, kill_group)
    if request.uid:
        end_processes_of(request.uid)
        killed = True
    capture.wait()
    capture.close()
    if disk:
        disk.finish()
    if request.watch_cgroup_oom:  # the killed take a moment to end; what runs on passes to PID 1 with this runner
        reap_orphans(time.monotonic() + (REAP_GRACE_S if killed else 0.0))
    result: RunResult = {
        "command": request.command,
        "exit_code": process.returncode,
        "stdout": capture.stdout,
        "stderr": capture.stderr,
        "duration_s": time.monotonic() - started,
        "timed_out": timed_out,
        "output_truncated": capture.truncated.is_set(),
        # Locally the sampled peak (None for a command that ended before the first sample); in a container the
        # kernel's, this runner being small and alone there.
        "peak_memory_mb": memory.peak_memory_mb if memory else children_peak_mb(usage),
        "oom_killed": bool(memory and memory.exceeded) or bool(oom and oom.killed(timed_out)),
        "storage_exceeded": bool(disk and disk.exceeded),
    }
    if request.read_after:
        files = {path: read_back(path, request.read_cap) for path in request.read_after}
        return ReadBackResult(files=files, **result)
    return result


def _start(request: RunRequest, namespaces: Namespaces | None, capture: OutputCapture) -> subprocess.Popen[bytes]:
    """`sh -c command` started in a session (and process group) of its own, its output into `capture`;
    ViewUnavailable where its child could not enter `namespaces`, OSError where it could not start."""
    try:
        return subprocess.Popen(
            ["/bin/sh", "-c", request.command],
            cwd=request.cwd,
            env=dict(request.env),
            stdin=subprocess.DEVNULL,
            stdout=capture.stdout_fd,
            stderr=capture.stderr_fd,
            start_new_session=True,
            preexec_fn=lambda: _prepare_child(request, namespaces),
        )
    except subprocess.SubprocessError as error:  # the child could not enter its view
        walls = ", ".join(request.view.walls() if request.view else [])
        why = namespaces.error if namespaces and namespaces.error else error
        raise ViewUnavailable(f"cannot give the command its own view ({walls}): {why}") from None
    finally:
        capture.close_command_ends()
        if namespaces:
            namespaces.close()


def _memory_watch(
    request: RunRequest, group: int, members: list[int], kill_group: Callable[[], None]
) -> MemoryWatch | None:
    """The group's memory watch, its thread started, where no cgroup watches it (and /proc can be read): the
    runner's own forks in a pid namespace (the first of `members` and the group's leader) are not the command's."""
    if request.watch_cgroup_oom or not os.path.isdir("/proc"):
        return None
    runners_forks = [group, members[0]] if members else []
    watch = MemoryWatch(group, (request.memory_ceiling_mb or 0) * 2**20, kill_group, runners_forks)
    threading.Thread(target=watch.run, daemon=True).start()
    return watch


def _storage_watch(request: RunRequest) -> StorageWatch | None:
    """The request's quota watch, its thread started (before the command is: `quota.StorageWatch`)."""
    if request.storage is None:
        return None
    quota = request.storage
    watch = StorageWatch(quota.paths, quota.limit_bytes, quota.state, request.uid)
    watch.start()
    return watch


def _prepare_child(request: RunRequest, namespaces: Namespaces | None) -> None:
    """Runs in the forked child before exec: enter the view, apply the ceilings the kernel can enforce, then
    drop privileges."""
    if sys.platform == "linux":  # a runner's child (serve) is not dumpable: its id maps could not be written
        set_dumpable(True)
    prefer_for_oom_kill()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # before the view: its init and the child ending as it did
    if namespaces is not None:
        namespaces.enter()
    pin_to_cores(request.cpu_ceiling)
    if request.uid is not None:
        become_uid(request.uid)
    if namespaces is not None and namespaces.target:  # as the trial's uid, which owns the workspace mounted there
        os.chdir(namespaces.target)
