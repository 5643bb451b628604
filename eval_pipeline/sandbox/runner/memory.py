"""The command's memory: its ceiling watched where no cgroup enforces one, its peak, and an OOM kill told apart.

Locally (no cgroup) the runner samples the process group's resident memory (`MemoryWatch`), kills the group
past the ceiling and reports the sampled peak. In a container the engine's cgroup enforces the ceiling; the
runner, small and alone there, reports the kernel's peak for its children, and tells an OOM kill from any other
SIGKILL by the cgroup's OOM-kill counter rising while the command ran (`OomCounter`).
"""

import os
import resource
import threading
from collections.abc import Callable, Iterable

__all__ = [
    "MemoryWatch",
    "OomCounter",
    "cgroup_oom_kills",
    "children_peak_mb",
    "group_resident_bytes",
    "prefer_for_oom_kill",
]

_OOM_COUNTERS = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
WATCH_INTERVAL_S = 0.02


def cgroup_oom_kills() -> int | None:
    """The kernel's OOM-kill count for this process's memory cgroup, or None where unreadable."""
    for path in _OOM_COUNTERS:
        try:
            with open(path) as counters:
                for line in counters:
                    name, _, value = line.partition(" ")
                    if name == "oom_kill":
                        return int(value)
        except OSError:
            continue
    return None


class OomCounter:
    """The cgroup's OOM-kill counter read before the command starts; `killed` once it has ended.

    The killed process may be any descendant, and a script may carry on after it (a test script that turns a
    failed run into reward 0 and exits 0): what tells an OOM kill apart is the counter rising while the command
    ran, whatever its exit code. A command that timed out was killed by the runner, not the kernel.
    """

    def __init__(self) -> None:
        self.before = cgroup_oom_kills()

    def killed(self, timed_out: bool) -> bool:
        after = cgroup_oom_kills()
        return self.before is not None and after is not None and after > self.before and not timed_out


def group_resident_bytes(group: int, skipped: Iterable[int] = ()) -> int:
    """The resident memory of every process in process group `group` but the pids `skipped`, from /proc (0 where
    there is none)."""
    skipped = set(skipped)
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skipped:
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
            if int(fields[2]) == group:  # after the command name: state, ppid, pgrp, ...
                with open(f"/proc/{entry}/statm") as statm:
                    total += int(statm.read().split()[1]) * _PAGE_BYTES
        except (OSError, IndexError, ValueError):
            continue  # the process ended while we looked
    return total


class MemoryWatch:
    """Samples a process group's resident memory; kills the group once it passes the ceiling (none at 0).

    The local stand-in for a cgroup: its peak is the group's (children included), and an address-space limit
    (RLIMIT_AS) would turn the same event into a MemoryError inside the tests, indistinguishable from a failing
    patch. The kernel's ru_maxrss cannot serve here: a forked child inherits its parent's peak, so it reports
    the harness's size, not the command's. `skipped` are the runner's own forks in the group (a pid namespace's
    init and the process outside it, `namespaces.enter_own_pids`), each a copy of the runner's pages, none the
    command's. `run` samples in a thread of its own until `exited` is set.
    """

    def __init__(
        self, group: int, ceiling_bytes: float, kill_group: Callable[[], None], skipped: Iterable[int] = ()
    ) -> None:
        self.group = group
        self.skipped = set(skipped)
        self.ceiling_bytes = ceiling_bytes
        self.kill_group = kill_group
        self.peak_bytes = 0
        self.exceeded = False
        self.exited = threading.Event()

    def run(self) -> None:
        while True:
            resident = group_resident_bytes(self.group, self.skipped)
            self.peak_bytes = max(self.peak_bytes, resident)
            if self.ceiling_bytes and resident > self.ceiling_bytes:
                self.exceeded = True
                self.kill_group()
                return
            if self.exited.wait(WATCH_INTERVAL_S):
                return

    @property
    def peak_memory_mb(self) -> float | None:
        """The sampled peak in MiB, one decimal; None for a command that ended before the first sample, never 0."""
        return round(self.peak_bytes / 2**20, 1) if self.peak_bytes else None


def children_peak_mb(usage: resource.struct_rusage) -> float:
    """The kernel's peak for the command (its wait4 rusage), in MiB, one decimal: in a container, where this
    runner is small and alone, the figure is the command's own."""
    return round(usage.ru_maxrss / 1024, 1)


def prefer_for_oom_kill() -> None:
    """Make this process (the forked command, and all it starts) the OOM killer's first choice in its memory
    cgroup, ahead of the runner, an environment's PID 1 and its root tool server, which then survive to report
    the kill. Raising a process's own score needs no privilege; where /proc cannot be written, the kernel's
    usual choice stands (the largest process, usually the command). A best effort for honest memory hogs, not a
    wall: without CAP_SYS_RESOURCE here, the command may lower its score back to 0, which gains it nothing,
    since an OOM kill, its own or the server's, is not scored either way."""
    try:
        with open("/proc/self/oom_score_adj", "w") as score:
            score.write("1000")
    except OSError:
        pass
