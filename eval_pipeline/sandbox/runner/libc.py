"""The C library calls and kernel constants the runner uses beyond the os module: mount, unshare, prctl, fork."""

import ctypes
import os

LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
PR_CAPBSET_DROP, CAP_SYS_ADMIN = 24, 21
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18


def libc_call(name: str, *args: object) -> None:
    """Call the C library's `name`; OSError (with errno and the call's name) where it returns non-zero."""
    if getattr(LIBC, name)(*args) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{name}: {os.strerror(number)}")


def mount(source: bytes | None, target: bytes, kind: bytes | None, flags: int, data: bytes | None = None) -> None:
    """mount(2) with `flags` as the C unsigned long it takes."""
    libc_call("mount", source, target, kind, ctypes.c_ulong(flags), data)


def set_dumpable(dumpable: bool) -> None:
    """Whether this process's /proc files (its descriptors, memory, id maps) are its own uid's or root's alone."""
    LIBC.prctl(PR_SET_DUMPABLE, int(dumpable), 0, 0, 0)


def fork() -> int:
    """libc's fork, without Python's own work around it (its locks, its at-fork callbacks): for a child that
    has one thread and is already ready to run Python after a fork."""
    pid: int = LIBC.fork()
    if pid < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"fork: {os.strerror(number)}")
    return pid
