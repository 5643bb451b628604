"""The command's stdout and stderr, each kept to its first bytes and the rest drained.

The readers start before the command does: a command that exhausts the pids limit (a fork bomb) must not leave
the runner unable to start the threads it needs to finish. The output travels inside the runner's JSON answer,
already capped, so a command cannot forge the result, and gigabytes of output never leave the container.
"""

import fcntl
import os
import select
import threading
import time

from eval_pipeline.sandbox.runner.drainer import Drainer

READ_CHUNK_BYTES = 65536
_F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)  # Linux's; a pipe's capacity
_DEFAULT_PIPE_BYTES = 65536


class _Sink:
    """The first `cap` bytes of a stream, and whether more came."""

    def __init__(self, cap: int, truncated: threading.Event) -> None:
        self.chunks: list[bytes] = []
        self._room = cap
        self._truncated = truncated

    def keep(self, chunk: bytes) -> None:
        if self._room > 0:
            self.chunks.append(chunk[: self._room])
        if len(chunk) > self._room:
            self._truncated.set()
        self._room = max(0, self._room - len(chunk))


def read_capped(descriptor: int, sink: _Sink, stop: int) -> None:
    """Read `descriptor` into `sink` until every writer has closed it, or until `stop` is readable: then what the
    pipe holds at that moment (at most its capacity) is read too, so that nothing a process wrote before the
    runner stopped is lost, and reading ends. `descriptor` is closed at the end."""
    poller = select.poll()
    poller.register(descriptor, select.POLLIN)
    poller.register(stop, select.POLLIN)
    while True:
        ready = dict(poller.poll())
        if stop in ready:  # first: a writer that never pauses must not keep the reader from stopping
            _read_what_is_there(descriptor, sink)
            break
        if not (chunk := os.read(descriptor, READ_CHUNK_BYTES)):
            break
        sink.keep(chunk)
    os.close(descriptor)


def _read_what_is_there(descriptor: int, sink: _Sink) -> None:
    """Read what `descriptor` (a pipe) holds now, at most its capacity, never waiting for more."""
    try:
        budget = fcntl.fcntl(descriptor, _F_GETPIPE_SZ)
    except OSError:
        budget = _DEFAULT_PIPE_BYTES
    poller = select.poll()
    poller.register(descriptor, select.POLLIN)
    while budget > 0 and poller.poll(0):
        if not (chunk := os.read(descriptor, min(READ_CHUNK_BYTES, budget))):
            return
        sink.keep(chunk)
        budget -= len(chunk)


class OutputCapture:
    """Two pipes, the command's stdout and stderr, each read by a thread of its own up to `cap` bytes.

    The command's ends (`stdout_fd`, `stderr_fd`) are closed here once it started (`close_command_ends`); the
    readers end when every process holding a command's end has closed it or ended (`wait`), or when told to stop
    (`detach`). With `detachable` (a terminal task's command, whose processes left running are kept), a drainer
    is forked first (`drainer.Drainer`), holding the read ends too: once the readers stopped it reads on for the
    processes that still hold the output, so that they neither block on a full pipe nor die of SIGPIPE.
    """

    def __init__(self, cap: int, detachable: bool = False) -> None:
        self.truncated = threading.Event()
        out_read, self.stdout_fd = os.pipe()
        err_read, self.stderr_fd = os.pipe()
        self._stop_read, self._stop_write = os.pipe()
        self._drainer = Drainer.fork((out_read, err_read)) if detachable else None
        self._sinks = (_Sink(cap, self.truncated), _Sink(cap, self.truncated))
        self._readers = [
            threading.Thread(target=read_capped, args=(fd, sink, self._stop_read), daemon=True)
            for fd, sink in zip((out_read, err_read), self._sinks, strict=True)
        ]
        for reader in self._readers:
            reader.start()

    @property
    def has_drainer(self) -> bool:
        return self._drainer is not None

    def close_command_ends(self) -> None:
        os.close(self.stdout_fd)
        os.close(self.stderr_fd)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for both readers (at most `timeout_s` in all); whether both have ended, every end closed."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for reader in self._readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(reader.is_alive() for reader in self._readers)

    def detach(self) -> None:
        """Stop reading, keeping what was read and what the pipes hold now; the drainer, if any, reads on (with
        none, the read ends close: a process that writes on then gets SIGPIPE)."""
        os.write(self._stop_write, b"x")
        self.wait()
        if self._drainer is not None:
            self._drainer.take()
            self._drainer = None

    def close(self) -> None:
        """Once the readers have ended: release the stop pipe and a drainer that was not needed."""
        os.close(self._stop_read)
        os.close(self._stop_write)
        if self._drainer is not None:
            self._drainer.dismiss()
            self._drainer = None

    @property
    def stdout(self) -> str:
        return b"".join(self._sinks[0].chunks).decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        return b"".join(self._sinks[1].chunks).decode("utf-8", errors="replace")
