"""The command's stdout and stderr, each kept to its first bytes and the rest drained.

The readers start before the command does: a command that exhausts the pids limit (a fork bomb) must not leave
the runner unable to start the threads it needs to finish. The output travels inside the runner's JSON answer,
already capped, so a command cannot forge the result, and gigabytes of output never leave the container.
"""

import os
import threading
from typing import BinaryIO

READ_CHUNK_BYTES = 65536


def read_capped(stream: BinaryIO, cap: int, sink: list[bytes], truncated: threading.Event) -> None:
    """Keep the first `cap` bytes of `stream` in `sink` and drain the rest (setting `truncated`), so a chatty
    command never blocks or floods memory; close `stream` at its end."""
    kept = 0
    while True:
        chunk = stream.read(READ_CHUNK_BYTES)
        if not chunk:
            break
        room = cap - kept
        if room > 0:
            sink.append(chunk[:room])
            kept += min(room, len(chunk))
        if len(chunk) > room:
            truncated.set()
    stream.close()


class OutputCapture:
    """Two pipes, the command's stdout and stderr, each read by a thread of its own up to `cap` bytes.

    The command's ends (`stdout_fd`, `stderr_fd`) are closed here once it started (`close_command_ends`); the
    readers end when every process holding a command's end has closed it or ended.
    """

    def __init__(self, cap: int) -> None:
        self.truncated = threading.Event()
        self._out: list[bytes] = []
        self._err: list[bytes] = []
        out_read, self.stdout_fd = os.pipe()
        err_read, self.stderr_fd = os.pipe()
        self._readers = [
            threading.Thread(target=read_capped, args=(os.fdopen(fd, "rb"), cap, sink, self.truncated), daemon=True)
            for fd, sink in ((out_read, self._out), (err_read, self._err))
        ]
        for reader in self._readers:
            reader.start()

    def close_command_ends(self) -> None:
        os.close(self.stdout_fd)
        os.close(self.stderr_fd)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for both readers (at most `timeout_s` each); whether both have ended, every end closed."""
        for reader in self._readers:
            reader.join(timeout_s)
        return not any(reader.is_alive() for reader in self._readers)

    @property
    def stdout(self) -> str:
        return b"".join(self._out).decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        return b"".join(self._err).decode("utf-8", errors="replace")
