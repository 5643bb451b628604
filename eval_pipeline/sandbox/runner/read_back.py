"""Files a command left, read back with its answer: a reward file or a diff comes back in the same exec."""

import base64
import os
import stat
from typing import Literal

__all__ = ["read_back"]


def read_back(path: str, cap: int) -> str | Literal[False] | None:
    """A file the command left, as base64; None where there is no regular file at `path` itself (a link planted
    by the command, which could name another trial's file, a directory, a FIFO whose opening would wait for a
    writer, a device); False where it holds more than `cap` bytes (the caller reads it another way). The file is
    opened first and its path checked after, from the descriptor: a directory on the way that a process still
    running (a terminal task's) swaps for a link between the two is seen."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):  # nothing else is even opened (a device may act on it)
            return None
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode) or os.readlink(f"/proc/self/fd/{descriptor}") != path:
            return None
        chunks, size = [], 0
        while size <= cap:  # up to one byte past the cap, which tells a file over it
            chunk = os.read(descriptor, cap + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(descriptor)
    return False if size > cap else base64.b64encode(b"".join(chunks)).decode()
