"""The command's output handed over when a process it left running still holds it: a drainer.

A terminal task's command may leave a process in the background that writes to the command's stdout and stderr
(`python server.py &`, no redirection), as Harbor's exec leaves it: Harbor returns when the command's process
ends, and the process runs on. The runner answers once the command's process has ended, and then exits; a
process writing to a pipe whose read ends are all closed dies of SIGPIPE, and one writing to a pipe nobody reads
blocks once its buffer is full. So the read ends pass to a drainer: a process of the runner's own, forked before
the command starts (where the command exhausts the pids limit, no fork is needed at its end), in a session of
its own, holding nothing but the read ends and the runner's word. Told to (`Drainer.take`) once the runner has
stopped reading, it reads the pipes to their end (every writer gone), discarding what it reads, and exits;
dismissed (`Drainer.dismiss`), it is killed. It inherits the runner's credentials and its not being
dumpable: no process of the trial opens its descriptors through /proc.
"""

import os
import resource
import select
import signal
import warnings
from collections.abc import Sequence

__all__ = ["Drainer"]

READ_CHUNK_BYTES = 65536
_TAKE = b"t"  # the runner's word: read the pipes to their end; its control pipe closed instead: exit


class Drainer:
    """A forked process holding the read ends of the command's output until told to drain them or to exit."""

    def __init__(self, pid: int, control: int) -> None:
        self.pid = pid
        self._control = control  # the runner's end of the control pipe; closed once the drainer was told

    @classmethod
    def fork(cls, read_ends: Sequence[int]) -> "Drainer | None":
        """A drainer forked now, holding `read_ends` (and no other descriptor of this process); None where no
        process can be forked (the pids limit exhausted): the command's output then has no drainer."""
        control_read, control_write = os.pipe()
        try:
            with warnings.catch_warnings():  # forking a threaded process is safe here: the child only reads
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            os.close(control_read)
            os.close(control_write)
            return None
        if pid == 0:
            _drain_when_told(read_ends, control_read)
        os.close(control_read)
        return cls(pid, control_write)

    def take(self) -> None:
        """Hand the pipes over: the drainer reads them to their end, and exits (reaped by this process's
        successor as subreaper, the container's PID 1, once this process exits). One the command killed takes
        nothing: the processes still holding the output then get SIGPIPE, their own doing."""
        try:
            os.write(self._control, _TAKE)
        except BrokenPipeError:
            pass
        os.close(self._control)

    def dismiss(self) -> None:
        """The pipes need no drainer: it is killed, never waited for (a command may have stopped it), and reaped
        if it has ended already; else by this process's successor as subreaper once this process exits (the runner
        keeps processes left running only where it exits after its command: a container's runner)."""
        os.close(self._control)
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, os.WNOHANG)
        except (ProcessLookupError, ChildProcessError):  # reaped already, by a wait for any child
            pass


def _drain_when_told(read_ends: Sequence[int], control: int) -> None:
    """In the forked child: keep only `read_ends` and `control`, wait for the runner's word, drain if told to,
    and exit, never returning into the runner's code."""
    try:
        os.setsid()
        _close_all_but({*read_ends, control})
        if os.read(control, 1) == _TAKE:
            _drain(read_ends)
    finally:
        os._exit(0)


def _close_all_but(kept: set[int]) -> None:
    """Close every descriptor of this process but `kept`: the session's stdin (the requests), the answer's pipe,
    the exec's stderr, the command's write ends."""
    ceiling = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    ceiling = 2**20 if ceiling == resource.RLIM_INFINITY else ceiling
    low = 0
    for descriptor in sorted(kept):
        os.closerange(low, descriptor)
        low = descriptor + 1
    os.closerange(low, max(low, ceiling))


def _drain(read_ends: Sequence[int]) -> None:
    """Read `read_ends` until every writer of each has closed it, keeping nothing."""
    poller = select.poll()
    for descriptor in read_ends:
        poller.register(descriptor, select.POLLIN)
    remaining = set(read_ends)
    while remaining:
        for descriptor, _ in poller.poll():
            if not os.read(descriptor, READ_CHUNK_BYTES):
                poller.unregister(descriptor)
                remaining.discard(descriptor)
