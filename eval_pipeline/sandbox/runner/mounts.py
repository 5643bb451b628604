"""The mounts a command's view makes in its own mount namespace (`namespaces.Namespaces`): the file systems
read-only but the trial's own paths, the trial's own directories at the shared temporary ones, the host's
sockets and the verifier's paths covered. Each runs in the forked child, inside the namespace, before exec."""

import errno
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence

from eval_pipeline.sandbox.runner.libc import MS_BIND, MS_NODEV, MS_NOSUID, MS_RDONLY, MS_REC, MS_REMOUNT, mount

__all__ = ["cover_sockets", "hide", "is_socket", "read_only_but", "show_private", "under"]

_HIDING_MOUNT = b"size=64m,mode=755"  # an empty, small tmpfs over each hidden path
# statvfs's flags of a mount and the mount flags that keep them: a remount in a user namespace must keep them.
_KEPT_FLAGS = {2: 2, 4: 4, 8: 8, 1024: 1024, 2048: 2048, 4096: 1 << 21}  # nosuid nodev noexec noatime ... relatime
# Kernel interfaces and device nodes, left as they are in a walled view: no place to leave a file in (/dev/shm and
# /dev/mqueue, which are, get private empty mounts).
_LEFT_AS_THEY_ARE = ("/proc", "/sys", "/dev")
_PRIVATE_IN_DEV = (b"/dev/shm", b"/dev/mqueue")


def under(path: str, places: Iterable[str]) -> bool:
    """Whether `path` is one of `places` or below one."""
    return any(path == place or path.startswith(place.rstrip("/") + "/") for place in places)


def _mount_points() -> list[str]:
    """Every mount point in this mount namespace (mountinfo's fifth field, its octal escapes decoded)."""
    with open("/proc/self/mountinfo") as info:
        return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4]) for line in info]


def hide(paths: Iterable[bytes]) -> None:
    """Cover each of `paths` with an empty, small tmpfs of this namespace's own."""
    for path in paths:
        mount(b"tmpfs", path, b"tmpfs", MS_NOSUID | MS_NODEV, _HIDING_MOUNT)


def read_only_but(writable: Sequence[bytes]) -> None:
    """Make every file system read-only in this mount namespace, but for `writable` paths (bind-mounted on
    themselves first, so that they are mounts of their own) and the kernel's interfaces, and give /dev/shm and
    /dev/mqueue private empty mounts: what a command writes outside its workspace, for a later trial or another
    campaign to find, is refused. Every mount, not only the root: a host's /run, /var/lib/containers or any
    disk mounted apart would otherwise stay writable. A mount that cannot be made read-only fails the view,
    but one this user cannot reach at all (another user's, deleted), which the trial cannot reach either."""
    for path in writable:
        mount(path, path, None, MS_BIND | MS_REC)
    kept_writable = [path.decode() for path in writable]
    for point in _mount_points():
        if under(point, kept_writable) or under(point, _LEFT_AS_THEY_ARE):
            continue
        try:
            kept = sum(flag for stat_flag, flag in _KEPT_FLAGS.items() if os.statvfs(point).f_flag & stat_flag)
            mount(None, point.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY | kept)
        except OSError as error:  # a mount this user cannot reach (another's, deleted, hidden): nor can the trial
            if error.errno not in (errno.EACCES, errno.ENOENT):
                raise
    for private in _PRIVATE_IN_DEV:
        if os.path.isdir(private):
            mount(b"tmpfs", private, b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777")


def cover_sockets(paths: Iterable[str]) -> None:
    """Bind /dev/null over each socket at `paths` in this mount namespace: a connect() there is refused. A path
    that this process cannot reach, or that is no longer a socket, is left: the command cannot reach it either,
    or finds no socket there."""
    for path in paths:
        if not is_socket(path):
            continue
        try:
            mount(b"/dev/null", os.fsencode(path), None, MS_BIND)
        except OSError as error:
            if error.errno not in (errno.ENOENT, errno.EACCES, errno.ENOTDIR, errno.ELOOP):
                raise OSError(error.errno, f"covering the socket {path}: {error.strerror}") from None


def is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def show_private(private: Mapping[str, str], visible: Iterable[str]) -> None:
    """Mount each trial's own directory at the shared one it stands for (`private`: {shared: own}), where every path
    of `visible` below the shared one is still found as it was: bound again, from a descriptor taken before the own
    directory covered it, onto a directory made for it in the own one (`_mount_point_below`). A local trial whose
    data directory lies under /tmp finds its workspace and its environment where its commands look for them, and
    each keeps its mounts' flags (the environment read-only, the workspace writable)."""
    visible = list(visible)
    for shared, own in private.items():
        if not os.path.isdir(shared):
            continue
        below = {path for path in visible if path != shared and under(path, [shared]) and os.path.isdir(path)}
        outermost = sorted(path for path in below if not under(os.path.dirname(path), below))
        held = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in outermost]
        mount(own.encode(), shared.encode(), None, MS_BIND)
        for path, descriptor in held:
            point = _mount_point_below(shared, os.path.relpath(path, shared))
            source, target = (f"/proc/self/fd/{fd}".encode() for fd in (descriptor, point))
            mount(source, target, None, MS_BIND | MS_REC)
            os.close(point)
            os.close(descriptor)


def _mount_point_below(top: str, relative: str) -> int:
    """A descriptor (O_PATH) of the directory at `relative` below `top`, each directory on the way made where
    missing and made searchable where it is not; anything else found on the way (a file or a link its trial
    left in its own directory between commands, when none of its processes runs) is removed first, never
    followed."""
    current = os.open(top, os.O_PATH | os.O_DIRECTORY)
    for name in relative.split(os.sep):
        try:
            is_directory: bool | None = stat.S_ISDIR(os.stat(name, dir_fd=current, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            is_directory = None
        if is_directory is False:
            os.unlink(name, dir_fd=current)
        if is_directory:
            os.chmod(name, 0o755, dir_fd=current)
        else:
            os.mkdir(name, 0o755, dir_fd=current)
        following = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=current)
        os.close(current)
        current = following
    return current
