"""The command's processes: its group and how it is waited for and ended, the processes it leaves running, and
a trial uid's processes, signalled from credentials that none of them can signal back."""

import math
import os
import resource
import select
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable

from eval_pipeline.sandbox.runner.capture import OutputCapture
from eval_pipeline.sandbox.runner.libc import LIBC, PR_SET_CHILD_SUBREAPER, set_dumpable

__all__ = [
    "OUTPUT_GRACE_S",
    "REAP_GRACE_S",
    "SIGNALLER_UID_OFFSET",
    "WORLD_WRITABLE",
    "become_signaller",
    "become_subreaper",
    "become_uid",
    "end_background",
    "end_processes_of",
    "group_killer",
    "pin_to_cores",
    "reap_forever",
    "reap_orphans",
    "remove_files_of",
    "signal_all_of",
    "sweep_uid",
    "wait_for",
]

WATCH_INTERVAL_S = 0.02
REAP_GRACE_S = 2.0
OUTPUT_GRACE_S = 0.25  # for output a kept command's processes are still writing as it ends
# Where any uid may leave files that outlive its workspace: a trial's are removed when it ends.
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")
# A trial's uid is signalled by a process whose real and saved uid are the trial's plus this, and whose effective
# uid is the trial's (`signal_all_of`): the trial's processes cannot signal it back. Trial uids stay below
# 65534 - SIGNALLER_UID_OFFSET, so that both fit the 65536 ids a rootless engine maps (workspace.TRIAL_UIDS).
SIGNALLER_UID_OFFSET = 22767
# One signaller at a time in a runner: a storage walk's SIGSTOP and the command's end's SIGKILL would otherwise
# each reach the other's signaller (both have the same real uid).
_SIGNALLING = threading.Lock()
_SIGNAL_ATTEMPTS = 3  # forks of a signaller that another runner's (the same trial's) killed meanwhile
_HAS_AFFINITY = hasattr(os, "sched_setaffinity")  # Linux; not macOS


def group_killer(group: int) -> Callable[[], None]:
    """A call that SIGKILLs process group `group`, where it still has a process this runner may signal."""

    def kill_group() -> None:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    return kill_group


def wait_for(pid: int, deadline: float, kill_group: Callable[[], None]) -> tuple[int, resource.struct_rusage, bool]:
    """Wait for `pid` in this thread, killing its group at `deadline` (time.monotonic): (wait status, rusage,
    timed_out).

    In this thread, with no timer thread: under a pids limit that the command exhausted, no new thread could
    start. It sleeps on a pidfd (Linux 5.3 on), which wakes it as the process ends; elsewhere it polls, the end
    then seen up to 20 ms late.
    """
    try:
        ended: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        ended = None
    timed_out = False
    pause = 0.001
    try:
        while True:
            waited, status, usage = os.wait4(pid, os.WNOHANG)
            if waited:
                return status, usage, timed_out
            if not timed_out and time.monotonic() >= deadline:
                timed_out = True
                kill_group()
            if ended is None:
                time.sleep(pause)
                pause = min(pause * 2, WATCH_INTERVAL_S)
            else:
                remaining = WATCH_INTERVAL_S if timed_out else max(0.0, deadline - time.monotonic())
                select.select([ended], [], [], remaining)
    finally:
        if ended is not None:
            os.close(ended)


def end_background(
    capture: OutputCapture, keep_background: bool, timed_out: bool, kill_group: Callable[[], None]
) -> bool:
    """Once the command's process has ended: kill its group, unless `keep_background` (a terminal task's
    container, where processes left running are the agent's product, as in Harbor, whose exec returns when the
    command's process ends). Whether a group was killed.

    Kept, processes left running run on, whether they let go of the command's output (`server > log 2>&1 &`)
    or still hold it (`server &`): the output is read for OUTPUT_GRACE_S more, then what the pipes hold is read
    and the rest left to the capture's drainer (`capture.OutputCapture.detach`), so the command's result is
    answered at once and its processes neither block on a full pipe nor die of SIGPIPE. A timed-out command's
    group is killed (at its deadline, by `wait_for`), as is a group holding the output where no drainer could
    be forked (the pids limit was exhausted when the command started), after REAP_GRACE_S."""
    killed = not keep_background or timed_out
    if killed:
        kill_group()
    if not keep_background or capture.wait(OUTPUT_GRACE_S):
        return killed
    if not capture.has_drainer:
        kill_group()
        killed = True
        if capture.wait(REAP_GRACE_S):
            return killed
    capture.detach()
    return killed


def pin_to_cores(cpu_ceiling: float | None) -> None:
    """In the forked child: keep it to `cpu_ceiling` cores (rounded up), drawn at random, so that concurrent trials
    spread over the machine, not all on its first (hosts without cgroups; nothing where the kernel has no
    affinity)."""
    if cpu_ceiling and _HAS_AFFINITY:
        cores = sorted(os.sched_getaffinity(0))
        start, count = int.from_bytes(os.urandom(4), "big"), min(len(cores), max(1, math.ceil(cpu_ceiling)))
        os.sched_setaffinity(0, {cores[(start + i) % len(cores)] for i in range(count)})


def become_uid(uid: int) -> None:
    """In the forked child: drop to `uid` (and gid `uid`), no supplementary group kept."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def become_subreaper() -> None:
    """Adopt the command's orphans (Linux), so that they can be reaped before this runner returns.

    Until a killed process is reaped it holds its pid: a fork bomb's hundreds
    of zombies would otherwise keep the pids limit exhausted, and the engine
    could not start the next command in the container.
    """
    try:
        LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def reap_orphans(deadline: float) -> None:
    """Reap every adopted child that has ended, waiting for the rest until `deadline` (time.monotonic); one
    look at least, a deadline passed."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            continue
        if time.monotonic() >= deadline:
            return
        time.sleep(0.01)


def reap_forever() -> None:
    """PID 1 of an environment pod: reap the orphans that trials leave behind, until killed."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(1)


def end_processes_of(uid: int) -> None:
    """SIGKILL every process of `uid` (`signal_all_of`).

    Why this ends every process of a trial where killing its process group does not: a process can leave
    its group (setsid) but not its uid, and each trial in a pod has a uid of its own, the only id mapped in
    its user namespace (nothing to change to; set-uid files are ignored there). kill(-1) signals under the
    lock fork takes, and a process with a pending SIGKILL cannot fork, so none escapes by forking.
    """
    signal_all_of(uid, signal.SIGKILL)


def signal_all_of(uid: int, number: int) -> None:
    """Send `number` to every process of `uid`, from a forked child that takes it as its effective uid and
    calls kill(-1): the child sends it, not this runner, since as root kill(-1) would reach every process in
    the pod.

    The child's real and saved uid are the trial's plus SIGNALLER_UID_OFFSET, which no process of the pod
    has (`become_signaller`): the kernel lets a process signal one whose real or saved uid is its own real or
    effective uid, so the child reaches the trial's processes and those processes cannot reach the child
    (a loop of kill(-1, SIGKILL or SIGSTOP) in a trial's process would otherwise kill or freeze it, and with it
    the storage quota's walk or the end of the trial). Only another signaller of the same trial can reach the
    child (a sweep beside a runner): a child it stopped is continued, and one it killed is forked again."""
    if not uid:
        raise ValueError("only a trial's own uid is signalled, never root's")
    with _SIGNALLING:
        for _ in range(_SIGNAL_ATTEMPTS):
            status = _signal_from_child(uid, number)
            if os.WIFEXITED(status):
                break
        if os.waitstatus_to_exitcode(status) != 0:
            raise OSError(f"could not signal the processes of uid {uid}")


def become_signaller(uid: int) -> None:
    """Drop this process (a forked child of the root runner) to the credentials that signal `uid`'s processes
    and that none of them can signal back: effective uid `uid`, real and saved uid `uid` + SIGNALLER_UID_OFFSET,
    no capability left (no uid is 0), and not dumpable (its /proc files stay root's)."""
    os.setgroups([])
    os.setgid(uid)
    os.setresuid(uid + SIGNALLER_UID_OFFSET, uid, uid + SIGNALLER_UID_OFFSET)
    if sys.platform == "linux":
        set_dumpable(False)


def _signal_from_child(uid: int, number: int) -> int:
    """The wait status of a child that sent `number` to `uid`'s processes (a stopped child is continued)."""
    for _ in range(100):  # under an exhausted pids limit, fork fails until the killed group is reaped
        try:
            with warnings.catch_warnings():  # forking a threaded process is safe here: the child only signals
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            break
        except BlockingIOError:
            time.sleep(0.02)
    else:
        raise OSError(f"cannot fork to signal the processes of uid {uid}")
    if pid == 0:
        code = 0
        try:
            become_signaller(uid)
            os.kill(-1, number)
        except ProcessLookupError:
            pass  # no process of the uid was left
        except BaseException:  # noqa: BLE001 - the parent reports a failed signal by its exit code
            code = 1
        os._exit(code)
    while True:
        _, status = os.waitpid(pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            return status
        os.kill(pid, signal.SIGCONT)


def remove_files_of(uid: int, places: Iterable[str] = WORLD_WRITABLE) -> None:
    """Remove what `uid` left in `places` (world-writable directories), without following links."""
    for place in places:
        for top, directories, files in os.walk(place):
            for name in list(directories) + files:
                path = os.path.join(top, name)
                try:
                    info = os.lstat(path)
                    if info.st_uid != uid:
                        continue
                    if name in directories and not os.path.islink(path):
                        directories.remove(name)
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        os.unlink(path)
                except OSError:
                    continue  # gone meanwhile


def sweep_uid(uid: int) -> None:
    """End a trial in a pod: its processes, then its files outside its workspace (the caller removes that)."""
    end_processes_of(uid)
    remove_files_of(uid)
