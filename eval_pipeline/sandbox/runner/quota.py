"""The trial's disk quota: what the files under its paths take, watched while a command runs.

No file system quota reaches a trial where its workspace shares a disk with others (a pod's workspaces share
the container's writable layer; local workspaces share the host's disk), so the runner measures it
(`allocated_bytes`) and ends the command's group once the trial takes more than its quota (`StorageWatch`).
"""

import json
import os
import signal
import threading
from collections.abc import Callable, Iterable, Sequence

from eval_pipeline.sandbox.runner.processes import WATCH_INTERVAL_S, signal_all_of

__all__ = ["INODE_CHARGE", "StorageWatch", "allocated_bytes", "deleted_but_open_bytes", "written_bytes"]

# What each name under a quota costs besides its blocks: an inode or a directory entry, which an agent making
# millions of empty files or hard links would otherwise take from every trial on the disk for nothing, and
# which bounds a walk's length by the quota (16 KiB: 262,144 names a 4 GiB quota).
INODE_CHARGE = 16 * 1024
_UNREADABLE = 2**62  # a directory the walk cannot list hides what it holds: charged past any quota


def allocated_bytes(paths: Iterable[str], stop_above: int | None = None) -> int:
    """What the files under `paths` take of the disk: their allocated blocks (a sparse file counts what it fills,
    not its length, and a file linked many times once) and INODE_CHARGE for every name; links never followed.
    An explicit stack (no recursion limit, however deep the tree), and the walk ends once past `stop_above`.
    A directory that cannot be listed (unreadable to its owner, the local runner, after a chmod; or deeper
    than a path can name) hides what it holds, and is charged past any quota: no honest trial makes one."""
    total, seen, stack = 0, set(), list(paths)
    while stack and (stop_above is None or total <= stop_above):
        top = stack.pop()
        try:
            entries = _listed(top)
        except FileNotFoundError:
            continue  # gone meanwhile
        except OSError:
            return total + _UNREADABLE
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError:
                return total + _UNREADABLE
            total += INODE_CHARGE
            if info.st_nlink > 1 and not entry.is_dir(follow_symlinks=False):
                if (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return total


def _listed(directory: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except PermissionError:
        os.chmod(directory, os.lstat(directory).st_mode & 0o7777 | 0o700)
        with os.scandir(directory) as entries:
            return list(entries)


def deleted_but_open_bytes(uid: int) -> int:
    """What the processes of `uid` hold open of files already removed (or never named, O_TMPFILE): blocks no
    walk finds, freed only when they close."""
    total, seen = 0, set()
    for pid in (entry for entry in os.listdir("/proc") if entry.isdigit()):
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # ended meanwhile
        for descriptor in descriptors:
            try:
                info = os.stat(f"/proc/{pid}/fd/{descriptor}")
            except OSError:
                continue
            if info.st_nlink == 0 and (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
    return total


def _free_bytes(path: str) -> int:
    """The file system's free space as the quota counts it: free blocks and INODE_CHARGE per free inode (where
    it counts its inodes: some, btrfs among them, report none)."""
    usage = os.statvfs(path)
    return usage.f_bavail * usage.f_frsize + usage.f_favail * INODE_CHARGE


def written_bytes(pid: int | str = "self") -> int:
    """What process `pid` and the descendants it has reaped wrote, from /proc/<pid>/io: the larger of their
    write calls' bytes (which count on tmpfs, and count pipes too) and the page-cache bytes they dirtied (which
    count a file mapped and written in memory, with no write call, and writes too, on a disk). The kernel adds
    a reaped child's figures to its parent's, so a runner's own figure grows by its whole command tree as the
    tree ends. 0 where it cannot be read (the process already reaped, or no /proc)."""
    try:
        with open(f"/proc/{pid}/io") as io:
            figures = dict(line.split(":") for line in io)
        return max(int(figures["wchar"]), int(figures["write_bytes"]))
    except (OSError, KeyError, ValueError):
        return 0


class StorageWatch:
    """Ends the command's group once the files under `paths` take more than `limit_bytes` of disk.

    Walking the tree at every sample would cost too much, so a walk is owed only once the trial may have spent
    the room the last walk left, and two triggers say when, sampled as often as memory is:
    - the file system's free space has fallen by the room (a neighbour's writes trigger a walk but never
      count; this catches what writes nothing, such as fallocate);
    - the command's processes have written as many bytes (`written_bytes`), which a neighbour deleting files
      at the same time cannot hide, as it hides a fall in free space.
    The walk then judges whose files they are. A command writing faster than the disk can within one interval
    may pass the quota by that much, no more. With the trial's `uid` (a pod's), its processes are stopped
    while a walk runs, so that none renames a directory under it (a walk misses what moved), and what they
    hold open of files already removed counts too.

    The watch is made before the command starts, and its thread (`run`) started then too (as the output
    readers are: a fork bomb exhausting the pids limit would leave none to start after); `arm` gives it the
    command once started, `disarm` ends it when none started, `exited` is set once the command has ended.
    """

    def __init__(self, paths: Sequence[str], limit_bytes: int, state: str | None = None, uid: int | None = None):
        self.paths = paths
        self.limit_bytes = limit_bytes
        self.uid = uid
        self.kill_group: Callable[[], None] | None = None  # given once the command has started (`arm`)
        self.pid: int | None = None
        self.armed = threading.Event()
        self.state = state
        self.exceeded = False
        self.failure: BaseException | None = None
        self.exited = threading.Event()
        self.free = _free_bytes(paths[0])
        self.written = written_bytes()
        carried = self._carried_room()
        # Before the command starts (nothing of the trial runs: no process to stop), a quota already spent ends
        # it at once.
        self.room = carried if carried is not None and carried >= 0 else self._measured_room(running=False)
        self._thread = threading.Thread(target=self.run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _measured_room(self, running: bool = True) -> int:
        if not (self.uid and running):
            return self.limit_bytes - allocated_bytes(self.paths, stop_above=self.limit_bytes)
        signal_all_of(self.uid, signal.SIGSTOP)
        try:
            used = allocated_bytes(self.paths, stop_above=self.limit_bytes) + deleted_but_open_bytes(self.uid)
        finally:
            signal_all_of(self.uid, signal.SIGCONT)
        return self.limit_bytes - used

    def _carried_room(self) -> int | None:
        """The room the previous command left (`state`, a file only this runner's user writes), less what the
        disk lost since; None without one. Walking a large workspace costs tens of milliseconds a command, and
        a trial writes nothing between its commands (its processes end with each), so a walk is owed only
        once the disk has lost what the quota allowed."""
        if self.state is None:
            return None
        try:
            with open(self.state) as saved:
                carried = json.load(saved)
            return int(carried["room"]) - max(0, int(carried["free"]) - self.free)
        except (TypeError, OSError, ValueError, KeyError):
            return None

    def _written_now(self) -> int:
        # The command first, then this runner: a command reaped in between is counted twice (a walk too
        # many), never missed.
        command = written_bytes(self.pid) if self.pid else 0
        return command + written_bytes()

    def _spent(self, free: int, written: int) -> int:
        """What the trial may have taken since the last walk: the larger of the two triggers' figures."""
        return max(self.free - free, written - self.written)

    def arm(self, kill_group: Callable[[], None], pid: int) -> None:
        """Watch the command started as `pid`, whose group `kill_group` ends."""
        self.kill_group, self.pid = kill_group, pid
        self.armed.set()

    def disarm(self) -> None:
        """End the watch of a command that never started."""
        self.armed.set()

    def run(self) -> None:
        """Sample until the command ends, and once more then: a command that wrote past the quota within one
        interval and ended is judged too. A watch that fails keeps its error for the runner to raise
        (`failure`): a quota no longer watched never reads as one kept."""
        try:
            self._watch()
        except BaseException as error:  # noqa: BLE001 - raised again in the runner's own thread
            self.failure = error
            if self.kill_group:
                self.kill_group()  # the command runs no further unwatched

    def _watch(self) -> None:
        self.armed.wait()
        if self.kill_group is None:
            return  # the command never started
        while True:
            if self.room < 0:
                self.exceeded = True
                self.kill_group()
                return
            ended = self.exited.wait(WATCH_INTERVAL_S)
            free, written = _free_bytes(self.paths[0]), self._written_now()
            if self._spent(free, written) >= self.room:
                self.room, self.free, self.written = self._measured_room(), free, written
            if ended:
                self.exceeded = self.room < 0
                return

    def finish(self) -> None:
        """Once the command and every process it left have ended: wait for the last sample, then leave the room
        for the next command (`save`), or raise the watch's failure, leaving none (the next command walks)."""
        self._thread.join()
        if self.failure:
            self.forget()
            raise self.failure
        self.save()

    def forget(self) -> None:
        """Leave no room for the next command: it walks."""
        if self.state:
            for path in (self.state, f"{self.state}.new"):
                try:
                    os.unlink(path)
                except OSError:
                    pass

    def save(self) -> None:
        """Leave the room for the next command: never more than a walk found, less all either trigger counted
        since (a neighbour's deletions are not this trial's room)."""
        if not self.state:
            return
        free = _free_bytes(self.paths[0])
        room = self.room - max(0, self._spent(free, self._written_now()))
        try:
            with open(f"{self.state}.new", "w") as saved:
                json.dump({"room": room, "free": free}, saved)
            os.replace(f"{self.state}.new", self.state)
        except OSError:  # a full disk, most likely: the next command walks instead, and the result stands
            self.forget()
