"""Run one shell command under limits and report what it did: the sandboxes' common executor.

Standard library only, and compatible with Python 3.9: the local backend
imports it, and the container backend runs it as root on the harness's own
interpreter, from the runtime every container mounts (tool_runtime.py; never
the environment's `python3`, which may be 3.6), where it drops to the trial's
uid for the command and prints one JSON result (`--reap` makes it an
environment pod's PID 1; `--sweep UID` ends a trial, see `sweep_uid`; `--serve`
is the local backend's runner, see `serve`). The
request (command, environment, limits) arrives as one line on stdin, never
as an argument or in the exec's environment: a process's command line is
readable by every uid in the pod, and the request carries the agent's secrets
(`pass_env`), while a root process's stdin is not; and an environment
variable holds at most 128 KiB, which an agent's command may pass.

A `view` runs the command in a mount namespace of its own (inside a user
namespace, so no privilege beyond the container's defaults is needed) where
the trial's workspace is bind-mounted over the environment's repository, or
(a terminal task's agent, root in its own container) where the verifier's
paths are `hide`den under empty mounts of its own. Every
process of the trial then finds its own files at the environment's path, so
editable installs, src layouts and absolute paths recorded at install time
import the trial's code, while concurrent trials each see only theirs. The command's
output travels inside that JSON, already capped, so a command cannot forge the
result, and gigabytes of output never leave the container.
"""

import base64
import ctypes
import errno
import fcntl
import json
import math
import os
import re
import resource
import select
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
import traceback
import warnings

_HAS_AFFINITY = hasattr(os, "sched_setaffinity")  # Linux; not macOS
_OOM_COUNTERS = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_WATCH_INTERVAL_S = 0.02
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4
_REAP_GRACE_S = 2.0
_SESSION_POLL_S = 0.1  # how often a session runner looks whether the child answering it was stopped
_MAPS_TIMEOUT_S = 30.0  # how long a command's child waits for its parent to write its id maps
_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_MS_RDONLY, _MS_REMOUNT = 1, 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8
_PR_CAPBSET_DROP, _CAP_SYS_ADMIN = 24, 21
_HIDING_MOUNT = b"size=64m,mode=755"  # an empty, small tmpfs over each hidden path
_LIBC = ctypes.CDLL(None, use_errno=True)
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


class ViewUnavailable(OSError):
    """The kernel or the engine's seccomp profile refused a user or mount namespace for the trial's view."""


def _libc_call(name, *args):
    if getattr(_LIBC, name)(*args) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{name}: {os.strerror(number)}")


def _identity_map(kind, uid):
    """A map for a child user namespace (`uid` or `gid`), keeping ids as they are.

    With the trial's `uid` given (pods: root dropping to it), only that id is
    mapped: mapping root itself would take CAP_SETFCAP, which hardened pods drop.
    Otherwise root maps every range it has, anyone else only their own id.
    """
    if uid is not None:
        return f"{uid} {uid} 1\n"
    if os.geteuid() != 0:
        return f"{os.geteuid() if kind == 'uid' else os.getegid()} " * 2 + "1\n"
    with open(f"/proc/self/{kind}_map") as current:
        ranges = [line.split() for line in current if line.strip()]
    return "".join(f"{inside} {inside} {count}\n" for inside, _, count in ranges)


def _bring_up_loopback():
    """Bring `lo` up in a new network namespace (it starts down), so that a command's own servers on
    localhost still work while it reaches nothing else."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sh14x", b"lo", 0)
        flags = struct.unpack("16sh14x", fcntl.ioctl(probe, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack("16sh14x", b"lo", flags | _IFF_UP))


# statvfs's flags of a mount and the mount flags that keep them: a remount in a user namespace must keep them.
_KEPT_FLAGS = {2: 2, 4: 4, 8: 8, 1024: 1024, 2048: 2048, 4096: 1 << 21}  # nosuid nodev noexec noatime ... relatime


# Kernel interfaces and device nodes, left as they are in a walled view: no place to leave a file in (/dev/shm and
# /dev/mqueue, which are, get private empty mounts).
_LEFT_AS_THEY_ARE = ("/proc", "/sys", "/dev")
_PRIVATE_IN_DEV = (b"/dev/shm", b"/dev/mqueue")


def _mount_points():
    """Every mount point in this mount namespace (mountinfo's fifth field, its octal escapes decoded)."""
    with open("/proc/self/mountinfo") as info:
        return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4]) for line in info]


def _under(path, places):
    return any(path == place or path.startswith(place.rstrip("/") + "/") for place in places)


def _read_only_but(writable):
    """Make every file system read-only in this mount namespace, but for `writable` paths (bind-mounted on
    themselves first, so that they are mounts of their own) and the kernel's interfaces, and give /dev/shm and
    /dev/mqueue private empty mounts: what a command writes outside its workspace, for a later trial or another
    campaign to find, is refused. Every mount, not only the root: a host's /run, /var/lib/containers or any
    disk mounted apart would otherwise stay writable. A mount that cannot be made read-only fails the view,
    but one this user cannot reach at all (another user's, deleted), which the trial cannot reach either."""
    for path in writable:
        _libc_call("mount", path, path, None, ctypes.c_ulong(_MS_BIND | _MS_REC), None)
    kept_writable = [path.decode() for path in writable]
    for point in _mount_points():
        if _under(point, kept_writable) or _under(point, _LEFT_AS_THEY_ARE):
            continue
        try:
            kept = sum(flag for stat_flag, flag in _KEPT_FLAGS.items() if os.statvfs(point).f_flag & stat_flag)
            flags = ctypes.c_ulong(_MS_BIND | _MS_REMOUNT | _MS_RDONLY | kept)
            _libc_call("mount", None, point.encode(), None, flags, None)
        except OSError as error:  # a mount this user cannot reach (another's, deleted, hidden): nor can the trial
            if error.errno not in (errno.EACCES, errno.ENOENT):
                raise
    for private in _PRIVATE_IN_DEV:
        if os.path.isdir(private):
            _libc_call("mount", b"tmpfs", private, b"tmpfs", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV), b"mode=1777")


# Where each socket bound at a relative path may be, by inode (`_where_held`): a runner looks once, not at every
# command. The processes its last look found, whose descriptors it reads last on the next.
_RELATIVE_SOCKETS: dict[str, list[str]] = {}
_LOOKED_AT: set[int] = set()
_ACCEPTING = 0x10000  # /proc/net/unix's flag of a listening socket (__SO_ACCEPTCON)
_FD_RELATIVE = re.compile(r"/proc/(?:self|thread-self|\d+)/fd/\d+/(.+)$")


def bound_socket_paths(own=()):
    """The file of every unix socket a connect() may reach (listening, or datagram) bound in this process's
    network namespace (its /proc/net/unix: a container engine's, a database's, a desktop's, the engine's
    attach sockets of containers and exec sessions), but those under `own` paths. connect() finds a socket by
    its file, whatever network namespace the caller is in, and a read-only mount does not refuse it; abstract
    sockets belong to their network namespace, out of reach of a command in another. A socket bound at a path
    relative to its binder (conmon binds `/proc/self/fd/<its directory>/attach`) is looked for where the
    process holding it may have bound it (`_where_held`)."""
    paths, relative = set(), {}
    with open("/proc/net/unix", "rb") as table:
        next(table, None)  # the header
        for line in table:
            fields = line.rstrip(b"\n").split(None, 7)
            if len(fields) != 8 or not fields[0].endswith(b":") or fields[7].startswith(b"@"):
                continue  # unbound, or abstract
            if not int(fields[3], 16) & _ACCEPTING and int(fields[4], 16) != socket.SOCK_DGRAM:
                continue  # a connection (it shows its listener's path), or a socket nothing can connect to
            path = fields[7].decode(errors="surrogateescape")
            if path.startswith("/") and not path.startswith("/proc/"):
                paths.add(path)
            else:
                relative[fields[6].decode()] = path
    for inode in set(_RELATIVE_SOCKETS) - set(relative):
        del _RELATIVE_SOCKETS[inode]  # closed since
    if unseen := {inode: path for inode, path in relative.items() if inode not in _RELATIVE_SOCKETS}:
        _RELATIVE_SOCKETS.update(_where_held(unseen))
    paths.update(path for candidates in _RELATIVE_SOCKETS.values() for path in candidates)
    return sorted(path for path in paths if not _under(path, own))


def _where_held(relative):
    """{inode: candidate files} for the sockets bound at `relative` paths ({inode: path}): the name (after
    `/proc/self/fd/N/`, or the whole relative path) in the working directory of each process holding it, in
    each directory it holds open, and beside each file it holds open (fd N itself may have been closed and its
    number reused since the bind), those that are sockets (another socket of the host found so is covered too,
    as it would be anyway). Processes started since the last look come first (an exec session's conmon is
    one), and the look ends once each socket's holder is found: reading every process's descriptors takes
    tens of milliseconds on a busy host."""
    wanted = {f"socket:[{inode}]": inode for inode in relative}
    found = {inode: set() for inode in relative}
    unheld = set(relative)
    pids = {int(entry) for entry in os.listdir("/proc") if entry.isdigit()}
    for pid in [*(pids - _LOOKED_AT), *(pids & _LOOKED_AT)]:
        if not unheld:
            break
        try:
            held = [os.readlink(f"/proc/{pid}/fd/{descriptor}") for descriptor in os.listdir(f"/proc/{pid}/fd")]
            places = {os.readlink(f"/proc/{pid}/cwd")}
        except OSError:
            continue  # another user's, or ended
        holding = [wanted[link] for link in held if link in wanted]
        if not holding:
            continue
        unheld -= set(holding)
        files = [link for link in held if link.startswith("/") and not link.endswith(" (deleted)")]
        places |= {*files, *map(os.path.dirname, files)}
        for inode in holding:
            match = _FD_RELATIVE.match(relative[inode])
            name = match[1] if match else relative[inode]
            found[inode] |= {os.path.join(place, name) for place in places if not name.startswith("/")}
    _LOOKED_AT.clear()
    _LOOKED_AT.update(pids)
    return {inode: sorted(filter(_is_socket, candidates)) for inode, candidates in found.items()}


def _is_socket(path):
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def _cover_sockets(paths):
    """Bind /dev/null over each socket at `paths` in this mount namespace: a connect() there is refused. A path
    that this process cannot reach, or that is no longer a socket, is left: the command cannot reach it either,
    or finds no socket there."""
    for path in filter(_is_socket, paths):
        try:
            _libc_call("mount", b"/dev/null", os.fsencode(path), None, ctypes.c_ulong(_MS_BIND), None)
        except OSError as error:
            if error.errno not in (errno.ENOENT, errno.EACCES, errno.ENOTDIR, errno.ELOOP):
                raise OSError(error.errno, f"covering the socket {path}: {error.strerror}") from None


def _show_private(private, visible):
    """Mount each trial's own directory at the shared one it stands for (`private`: {shared: own}), where every path
    of `visible` below the shared one is still found as it was: bound again, from a descriptor taken before the own
    directory covered it, onto a directory made for it in the own one (`_mount_point_below`). A local trial whose
    data directory lies under /tmp finds its workspace and its environment where its commands look for them, and
    each keeps its mounts' flags (the environment read-only, the workspace writable)."""
    for shared, own in private.items():
        if not os.path.isdir(shared):
            continue
        below = {path for path in visible if path != shared and _under(path, [shared]) and os.path.isdir(path)}
        outermost = sorted(path for path in below if not _under(os.path.dirname(path), below))
        held = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in outermost]
        _libc_call("mount", own.encode(), shared.encode(), None, ctypes.c_ulong(_MS_BIND), None)
        for path, descriptor in held:
            point = _mount_point_below(shared, os.path.relpath(path, shared))
            source, target = (f"/proc/self/fd/{fd}".encode() for fd in (descriptor, point))
            _libc_call("mount", source, target, None, ctypes.c_ulong(_MS_BIND | _MS_REC), None)
            os.close(point)
            os.close(descriptor)


def _mount_point_below(top, relative):
    """A descriptor (O_PATH) of the directory at `relative` below `top`, each directory on the way made where
    missing and made searchable where it is not; anything else found on the way (a file or a link its trial
    left in its own directory between commands, when none of its processes runs) is removed first, never
    followed."""
    current = os.open(top, os.O_PATH | os.O_DIRECTORY)
    for name in relative.split(os.sep):
        try:
            is_directory = stat.S_ISDIR(os.stat(name, dir_fd=current, follow_symlinks=False).st_mode)
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


def _fork():
    pid = _LIBC.fork()
    if pid < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"fork: {os.strerror(number)}")
    return pid


def _close_all_but(kept):
    os.closerange(0, kept)
    os.closerange(kept + 1, os.sysconf("SC_OPEN_MAX"))


def _enter_own_pids():
    """In the forked child, which has unshared a pid namespace: make the namespace's init and, under it, the
    command's process, in which this returns; the child itself and the init never return.

    The child (outside the namespace, the process the runner waits for and whose group it kills) waits for the
    init and ends as the command did: its exit code, or killed by its signal. The init, pid 1 of the
    namespace, mounts a fresh /proc there (which shows the namespace's processes only), reaps orphans until
    the command's process ends, then exits, and the kernel kills every process left in the namespace. It blocks
    every signal and is not dumpable: nothing in the namespace can end it early or reach its descriptors (a
    signal to a namespace's init from inside it is dropped unless the init handles it). The command's process
    is pid 2, not 1, so that signals reach it as they reach any process.

    Both forks are libc's own, not os.fork: this child has one thread, already made ready to run Python after
    a fork (subprocess does so before calling preexec_fn), so Python's own work around a fork (its locks, its
    at-fork callbacks) is time spent on every command for nothing."""
    status_read, status_write = os.pipe()
    init = _fork()
    if init:
        os.close(status_write)
        _close_all_but(status_read)
        _end_as_init_reports(init, status_read)
    os.close(status_read)
    try:
        _libc_call("mount", b"proc", b"/proc", b"proc", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC), None)
    except OSError as error:  # a /proc partly covered (a container engine's masked paths) cannot be mounted afresh
        raise OSError(error.errno, f"mounting a fresh /proc for its own pid namespace: {error.strerror}") from None
    _LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # the init, and the command's process until it execs
    command = _fork()
    if command:
        _serve_as_init(command, status_write)
    os.close(status_write)


def _serve_as_init(command, status_write):
    """The namespace's init: reap every process until `command` ends, write its wait status, exit."""
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        _close_all_but(status_write)
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == command:
                os.write(status_write, struct.pack("i", status))
                break
    finally:
        os._exit(0)


def _end_as_init_reports(init, status_read):
    """Outside the namespace: wait for its init, then end as the command did (`_enter_own_pids`)."""
    code = 255
    try:
        reported = b""
        while len(reported) < 4 and (chunk := os.read(status_read, 4 - len(reported))):
            reported += chunk
        status = os.waitpid(init, 0)[1]
        status = struct.unpack("i", reported)[0] if len(reported) == 4 else status
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            if number != signal.SIGKILL:
                signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
            os.kill(os.getpid(), number)
            code = 128 + number
        else:
            code = os.waitstatus_to_exitcode(status)
    finally:
        os._exit(code)


def pid_namespace_members(child):
    """The init and the command's process (`_enter_own_pids`) under the runner's `child`, once the command has
    started: each the first child of the one before (the init forks the command's process before it adopts
    any orphan). Empty where the kernel lists no children (no CONFIG_PROC_CHILDREN)."""
    members = []
    for _ in range(2):
        try:
            with open(f"/proc/{child}/task/{child}/children") as listed:
                child = int(listed.read().split()[0])
        except (OSError, IndexError, ValueError):
            return []
        members.append(child)
    return members


class _View:
    """The trial's workspace (`source`) at the environment's path (`target`), in the command's own namespaces.

    The child unshares a user and a mount namespace before exec and waits; unless
    `network` is allowed it unshares a network namespace too, where only its own
    loopback exists (a pod's network is shared by every variant on it, so a trial
    that did not opt in is cut off here, per command, not per pod). This
    process (in the parent namespace, where writing another namespace's id maps
    is allowed) writes its id maps from a thread; the child then bind-mounts the
    workspace and enters it. Mounts made there never reach the rest of the system,
    and a trial process cannot undo them: they are locked to its less privileged namespace.

    With `hide` the child covers those paths with empty tmpfs mounts and drops CAP_SYS_ADMIN from its
    bounding set: its root may do all else root does in its container (its uids are the container's), but
    cannot unmount them, and in any namespace it makes they come locked. Processes of the container's own
    namespaces (the verifier) are out of its reach: it holds no capability there, so /proc/<pid>/root and
    setns are refused to it (sending them signals is not).

    With `own_pids` the command runs in a pid namespace of its own (`_enter_own_pids`), with a fresh /proc:
    it sees, and may signal, only its own processes (a user namespace alone does not stop a signal to the
    harness's processes or a neighbour's, all of the same uid), and they all end with it. With `hide_sockets`
    every unix socket bound in this runner's network namespace outside the trial's own paths is covered
    (`bound_socket_paths`): the container engine's, a database's.

    With `private` ({shared directory: the trial's own}) the command finds the trial's own directory at each
    shared one (/tmp, /var/tmp; in a pod /dev/shm, /run/lock and /dev/mqueue too), writable and kept from one
    command to the next, where its `writable` paths, the target and the `visible` paths (a local environment's
    interpreter) are still found as they are (`_show_private`).
    """

    def __init__(
        self,
        source,
        target,
        uid,
        network=False,
        hide=(),
        writable=None,
        private=None,
        own_pids=False,
        hide_sockets=False,
        visible=(),
    ):
        self.source, self.target = source and source.encode(), target
        self.network = network
        self.hide = [path.encode() for path in hide]
        self.writable = None if writable is None else [path.encode() for path in writable]
        self.private = dict(private or {})
        self.own_pids = own_pids
        own = [*(writable or ()), *([target] if source else [])]
        self.visible = [*own, *visible]
        try:
            self.sockets = bound_socket_paths(own) if hide_sockets else []
        except OSError as error:
            raise ViewUnavailable(f"cannot list the host's unix sockets to cover: {error}") from None
        self.to_parent = os.pipe()
        self.to_child = os.pipe()
        self.failure = os.pipe()  # what stopped the child, in a line, for ViewUnavailable
        self.error = None
        self._maps = {kind: _identity_map(kind, uid) for kind in ("uid", "gid")}
        self._helper = threading.Thread(target=self._write_maps, daemon=True)
        self._helper.start()

    def _write_maps(self):
        try:
            pid = os.read(self.to_parent[0], 32).decode()
            if not pid:
                return  # the child never got that far: Popen reports why
            if os.geteuid() != 0:
                with open(f"/proc/{pid}/setgroups", "w") as setgroups:
                    setgroups.write("deny")
            for kind, content in self._maps.items():
                with open(f"/proc/{pid}/{kind}_map", "w") as id_map:
                    id_map.write(content)
            os.write(self.to_child[1], b"1")
        except OSError as error:
            self.error = error
            os.write(self.to_child[1], b"0")

    def enter(self):
        """Runs in the forked child before exec, which still holds every descriptor of its parent (close_fds
        comes after this): it closes the parent's ends and waits a bounded time, so that a parent killed
        meanwhile (Ctrl-C) never leaves it blocked forever, holding the command's own output pipes open."""
        os.close(self.to_parent[0])
        os.close(self.to_child[1])
        os.close(self.failure[0])
        try:
            self._enter()
        except OSError as error:
            os.write(self.failure[1], str(error).encode(errors="replace")[:1000])
            raise

    def _enter(self):
        # System V and POSIX IPC of its own, with its own directories (a pod trial's, or a walled local one's).
        ipc = _CLONE_NEWIPC if self.private or self.writable is not None else 0
        pids = _CLONE_NEWPID if self.own_pids else 0
        _libc_call("unshare", _CLONE_NEWUSER | _CLONE_NEWNS | ipc | pids | (0 if self.network else _CLONE_NEWNET))
        os.write(self.to_parent[1], str(os.getpid()).encode())
        answered, _, _ = select.select([self.to_child[0]], [], [], _MAPS_TIMEOUT_S)
        if not answered or os.read(self.to_child[0], 1) != b"1":
            raise ViewUnavailable("the id maps of the trial's user namespace could not be written")
        _libc_call("mount", None, b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None)
        if self.source:
            _libc_call("mount", self.source, self.target.encode(), None, ctypes.c_ulong(_MS_BIND | _MS_REC), None)
        for path in self.hide:
            _libc_call("mount", b"tmpfs", path, b"tmpfs", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV), _HIDING_MOUNT)
        if self.writable is not None:  # the workspace, seen at the target, among them
            _read_only_but(self.writable + ([self.target.encode()] if self.source else []))
        # After the file systems are made read-only: the trial's own directories, and what stays visible below
        # them, keep the flags of the mounts they come from.
        _show_private(self.private, self.visible)
        _cover_sockets(self.sockets)
        if self.own_pids:
            _enter_own_pids()
        if self.hide or self.writable is not None:  # without CAP_SYS_ADMIN, nothing it starts can undo the mounts
            _libc_call("prctl", _PR_CAPBSET_DROP, _CAP_SYS_ADMIN, 0, 0, 0)
        if not self.network:
            _bring_up_loopback()

    def close(self):
        """After the child exec'd (or failed): the child's ends first, so a waiting helper sees end of file."""
        os.close(self.to_parent[1])
        os.close(self.to_child[0])
        os.close(self.failure[1])
        self._helper.join(timeout=5)
        os.close(self.to_parent[0])
        os.close(self.to_child[1])
        os.set_blocking(self.failure[0], False)
        try:
            self.error = self.error or os.read(self.failure[0], 1000).decode(errors="replace") or None
        except BlockingIOError:  # the child exec'd: nothing to say
            pass
        os.close(self.failure[0])


def _become_subreaper():
    """Adopt the command's orphans (Linux), so that they can be reaped before this runner returns.

    Until a killed process is reaped it holds its pid: a fork bomb's hundreds
    of zombies would otherwise keep the pids limit exhausted, and the engine
    could not start the next command in the container.
    """
    try:
        _LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def end_processes_of(uid):
    """SIGKILL every process of `uid` (`signal_all_of`).

    Why this ends every process of a trial where killing its process group did not: a process can leave
    its group (setsid) but not its uid, and each trial in a pod has a uid of its own, the only id mapped in
    its user namespace (nothing to change to; set-uid files are ignored there). kill(-1) signals under the
    lock fork takes, and a process with a pending SIGKILL cannot fork, so none escapes by forking.
    """
    signal_all_of(uid, signal.SIGKILL)


def signal_all_of(uid, number):
    """Send `number` to every process of `uid`, from a forked child that takes it as its effective uid and
    calls kill(-1): the child sends it, not this runner, since as root kill(-1) would reach every process in
    the pod.

    The child's real and saved uid are the trial's plus SIGNALLER_UID_OFFSET, which no process of the pod
    has (`become_signaller`): the kernel lets a process signal one whose real or saved uid is its own real or
    effective uid, so the child reaches the trial's processes and those processes cannot reach the child.
    With a uid of their own, a loop of kill(-1, SIGKILL or SIGSTOP) in a trial's process killed or froze the
    child, and with it the storage quota's walk or the end of the trial. Only another signaller of the same
    trial can reach the child now (a sweep beside a runner): a child it stopped is continued, and one it
    killed is forked again."""
    if not uid:
        raise ValueError("only a trial's own uid is signalled, never root's")
    with _SIGNALLING:
        for _ in range(_SIGNAL_ATTEMPTS):
            status = _signal_from_child(uid, number)
            if os.WIFEXITED(status):
                break
        if os.waitstatus_to_exitcode(status) != 0:
            raise OSError(f"could not signal the processes of uid {uid}")


def become_signaller(uid):
    """Drop this process (a forked child of the root runner) to the credentials that signal `uid`'s processes
    and that none of them can signal back: effective uid `uid`, real and saved uid `uid` + SIGNALLER_UID_OFFSET,
    no capability left (no uid is 0), and not dumpable (its /proc files stay root's)."""
    os.setgroups([])
    os.setgid(uid)
    os.setresuid(uid + SIGNALLER_UID_OFFSET, uid, uid + SIGNALLER_UID_OFFSET)
    if sys.platform == "linux":
        _LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def _signal_from_child(uid, number):
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


def remove_files_of(uid, places=WORLD_WRITABLE):
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


def sweep_uid(uid):
    """End a trial in a pod: its processes, then its files outside its workspace (the caller removes that)."""
    end_processes_of(uid)
    remove_files_of(uid)


def _reap_orphans(deadline):
    """Reap every adopted child that has ended, waiting for the rest until `deadline`."""
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            time.sleep(0.01)


def _read_capped(stream, cap, sink, truncated):
    """Keep the first `cap` bytes and drain the rest, so a chatty command never blocks or floods memory."""
    kept = 0
    while True:
        chunk = stream.read(65536)
        if not chunk:
            break
        room = cap - kept
        if room > 0:
            sink.append(chunk[:room])
            kept += min(room, len(chunk))
        if len(chunk) > room:
            truncated.set()
    stream.close()


def cgroup_oom_kills():
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


def group_resident_bytes(group, skipped=()):
    """The resident memory of every process in process group `group` but the pids `skipped`, from /proc (0 where
    there is none)."""
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


class _MemoryWatch:
    """Samples a process group's resident memory; kills the group once it passes the ceiling.

    The local stand-in for a cgroup: its peak is the group's (children
    included), and an address-space limit (RLIMIT_AS) would have turned the
    same event into a MemoryError inside the tests, indistinguishable from a
    failing patch. The kernel's ru_maxrss cannot serve here: a forked child
    inherits its parent's peak, so it reports the harness's size, not the
    command's. `skipped` are the runner's own forks in the group (a pid namespace's init and the process
    outside it, `_enter_own_pids`), each a copy of the runner's pages, none the command's.
    """

    def __init__(self, group, ceiling_bytes, kill_group, skipped=()):
        self.group = group
        self.skipped = set(skipped)
        self.ceiling_bytes = ceiling_bytes
        self.kill_group = kill_group
        self.peak_bytes = 0
        self.exceeded = False
        self.exited = threading.Event()

    def run(self):
        while True:
            resident = group_resident_bytes(self.group, self.skipped)
            self.peak_bytes = max(self.peak_bytes, resident)
            if self.ceiling_bytes and resident > self.ceiling_bytes:
                self.exceeded = True
                self.kill_group()
                return
            if self.exited.wait(_WATCH_INTERVAL_S):
                return


# What each name under a quota costs besides its blocks: an inode or a directory entry, which an agent making
# millions of empty files or hard links would otherwise take from every trial on the disk for nothing, and
# which bounds a walk's length by the quota (16 KiB: 262,144 names a 4 GiB quota).
INODE_CHARGE = 16 * 1024
_UNREADABLE = 2**62  # a directory the walk cannot list hides what it holds: charged past any quota


def allocated_bytes(paths, stop_above=None):
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


def _listed(directory):
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except PermissionError:
        os.chmod(directory, os.lstat(directory).st_mode & 0o7777 | 0o700)
        with os.scandir(directory) as entries:
            return list(entries)


def deleted_but_open_bytes(uid):
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


def _free_bytes(path):
    """The file system's free space as the quota counts it: free blocks and INODE_CHARGE per free inode (where
    it counts its inodes: some, btrfs among them, report none)."""
    usage = os.statvfs(path)
    return usage.f_bavail * usage.f_frsize + usage.f_favail * INODE_CHARGE


def written_bytes(pid="self"):
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


class _StorageWatch:
    """Ends the command's group once the files under `paths` take more than `limit_bytes` of disk.

    The trial's quota, where no file system quota reaches a trial (a pod's workspaces share the container's
    writable layer). Walking the tree at every sample would cost too much, so a walk is owed only once the
    trial may have spent the room the last walk left, and two triggers say when, sampled as often as memory is:
    - the file system's free space has fallen by the room (a neighbour's writes trigger a walk but never
      count; this catches what writes nothing, such as fallocate);
    - the command's processes have written as many bytes (`written_bytes`), which a neighbour deleting files
      at the same time cannot hide, as it hides a fall in free space.
    The walk then judges whose files they are. A command writing faster than the disk can within one interval
    may pass the quota by that much, no more. With the trial's `uid` (a pod's), its processes are stopped
    while a walk runs, so that none renames a directory under it (a walk misses what moved), and what they
    hold open of files already removed counts too.
    """

    def __init__(self, paths, limit_bytes, state=None, uid=None):
        self.paths = paths
        self.limit_bytes = limit_bytes
        self.uid = uid
        self.kill_group = None  # given once the command has started (`arm`)
        self.pid = None
        self.armed = threading.Event()
        self.state = state
        self.exceeded = False
        self.failure = None
        self.exited = threading.Event()
        self.free = _free_bytes(paths[0])
        self.written = written_bytes()
        carried = self._carried_room()
        # Before the command starts (nothing of the trial runs: no process to stop), a quota already spent ends
        # it at once.
        self.room = carried if carried is not None and carried >= 0 else self._measured_room(running=False)

    def _measured_room(self, running=True):
        if not (self.uid and running):
            return self.limit_bytes - allocated_bytes(self.paths, stop_above=self.limit_bytes)
        signal_all_of(self.uid, signal.SIGSTOP)
        try:
            used = allocated_bytes(self.paths, stop_above=self.limit_bytes) + deleted_but_open_bytes(self.uid)
        finally:
            signal_all_of(self.uid, signal.SIGCONT)
        return self.limit_bytes - used

    def _carried_room(self):
        """The room the previous command left (`state`, a file only this runner's user writes), less what the
        disk lost since; None without one. Walking a large workspace costs tens of milliseconds a command, and
        a trial writes nothing between its commands (its processes end with each), so a walk is owed only
        once the disk has lost what the quota allowed."""
        try:
            with open(self.state) as saved:
                carried = json.load(saved)
            return int(carried["room"]) - max(0, int(carried["free"]) - self.free)
        except (TypeError, OSError, ValueError, KeyError):
            return None

    def _written_now(self):
        # The command first, then this runner: a command reaped in between is counted twice (a walk too
        # many), never missed.
        command = written_bytes(self.pid) if self.pid else 0
        return command + written_bytes()

    def _spent(self, free, written):
        """What the trial may have taken since the last walk: the larger of the two triggers' figures."""
        return max(self.free - free, written - self.written)

    def arm(self, kill_group, pid):
        self.kill_group, self.pid = kill_group, pid
        self.armed.set()

    def run(self):
        """Sample until the command ends, and once more then: a command that wrote past the quota within one
        interval and ended is judged too. The thread starts before the command does (as the output readers
        do: a fork bomb exhausting the pids limit would leave none to start after), and waits to be armed.
        A watch that fails keeps its error for the runner to raise (`failure`): a quota no longer watched
        never reads as one kept."""
        try:
            self._watch()
        except BaseException as error:  # noqa: BLE001 - raised again in the runner's own thread
            self.failure = error
            if self.kill_group:
                self.kill_group()  # the command runs no further unwatched

    def _watch(self):
        self.armed.wait()
        if self.kill_group is None:
            return  # the command never started
        while True:
            if self.room < 0:
                self.exceeded = True
                self.kill_group()
                return
            ended = self.exited.wait(_WATCH_INTERVAL_S)
            free, written = _free_bytes(self.paths[0]), self._written_now()
            if self._spent(free, written) >= self.room:
                self.room, self.free, self.written = self._measured_room(), free, written
            if ended:
                self.exceeded = self.room < 0
                return

    def forget(self):
        """Leave no room for the next command: it walks."""
        if self.state:
            for path in (self.state, f"{self.state}.new"):
                try:
                    os.unlink(path)
                except OSError:
                    pass

    def save(self):
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


def _disarm(disk):
    """End a storage watch whose command never started."""
    if disk:
        disk.armed.set()


def _prefer_for_oom_kill():
    """Make the command (and all it starts) the OOM killer's first choice in its memory cgroup, ahead of this
    runner, an environment's PID 1 and its root tool server, which then survive to report the kill. Raising a
    process's own score needs no privilege; where /proc cannot be written, the kernel's usual choice stands
    (the largest process, usually the command). A best effort for honest memory hogs, not a wall: without
    CAP_SYS_RESOURCE here, the command may lower its score back to 0, which gains it nothing, since an OOM
    kill, its own or the server's, is not scored either way."""
    try:
        with open("/proc/self/oom_score_adj", "w") as score:
            score.write("1000")
    except OSError:
        pass


def _limit_child(cpu_ceiling, uid, view):
    """Runs in the forked child before exec: enter the view, apply the ceilings the kernel can enforce, then
    drop privileges."""
    if sys.platform == "linux":  # a runner's child (serve) is not dumpable: its id maps could not be written
        _LIBC.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
    _prefer_for_oom_kill()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # before the view: its init and the child ending as it did
    if view is not None:
        view.enter()
    if cpu_ceiling and _HAS_AFFINITY:
        # Which cores is drawn at random, so that concurrent trials spread over the machine, not all on its first.
        cores = sorted(os.sched_getaffinity(0))
        start, count = int.from_bytes(os.urandom(4), "big"), min(len(cores), max(1, math.ceil(cpu_ceiling)))
        os.sched_setaffinity(0, {cores[(start + i) % len(cores)] for i in range(count)})
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if view is not None and view.target:  # as the trial's uid, which owns the workspace now mounted there
        os.chdir(view.target)


def _wait(pid, deadline, kill_group):
    """Wait for `pid` in this thread, killing its group at `deadline`: (status, rusage, timed_out).

    In this thread, with no timer thread: under a pids limit that the command exhausted, no new thread could
    start. It sleeps on a pidfd (Linux 5.3 on), which wakes it as the process ends; elsewhere it polls, the end
    then seen up to 20 ms late.
    """
    try:
        ended = os.pidfd_open(pid)
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
                pause = min(pause * 2, 0.02)
            else:
                remaining = _WATCH_INTERVAL_S if timed_out else max(0.0, deadline - time.monotonic())
                select.select([ended], [], [], remaining)
    finally:
        if ended is not None:
            os.close(ended)


def _not_started(command, error, duration_s):
    return {
        "command": command,
        "exit_code": 127,
        "stdout": "",
        "stderr": f"cannot start the command: {error}",
        "duration_s": duration_s,
        "timed_out": False,
        "output_truncated": False,
        "peak_memory_mb": None,
        "oom_killed": False,
        "storage_exceeded": False,
    }


def run_limited(
    command,
    cwd,
    env,
    timeout_s,
    output_bytes,
    memory_ceiling_mb=None,
    cpu_ceiling=None,
    uid=None,
    watch_cgroup_oom=False,
    view=None,
    keep_background=False,
    storage=None,
    read_after=(),
    read_cap=2**20,
):
    """Run `sh -c command` in its own process group; kill the group on timeout. Returns a JSON-ready dict,
    with `files` ({path: `read_back`}) for the paths `read_after` names, read once the command has ended: a
    reward file or a diff of up to `read_cap` bytes comes back with the command's answer, not in a call of its own.

    The group is killed when the command ends too, unless `keep_background` (a terminal task's container,
    where processes left running are the agent's product, as in Harbor): then only a group still holding
    the command's output a moment after it ended is killed (`nohup server &` with no redirection), and a
    process that let go of it (`server > log 2>&1 &`, setsid or not) runs on.

    `view` ({"source": workspace, "target": environment path, "network": allowed}) runs the command
    with the workspace mounted at the environment's path, `cwd` then being inside `target`, and with
    no network but its own loopback unless `network` is true; ViewUnavailable is raised when the
    system refuses the namespaces that takes. A view with `hide` (paths) and no source covers each of
    those paths with an empty mount of the command's own, which nothing it starts can remove: a
    terminal task's agent, root in its container, never sees the verifier's /tests or reward file,
    nor can the processes it leaves running reach them (`_View`). A view with `writable` (paths) makes
    every file system read-only but for those paths, for the command and all it starts; with `own_pids`
    the command has a pid namespace of its own, where it signals nothing else and every process it starts
    ends with it (`_enter_own_pids`); with `hide_sockets` every unix socket bound on the host outside those
    paths refuses it (`bound_socket_paths`): a local opt-in's walls. A view with
    `private` ({shared directory: the trial's own}) shows the trial's own directory at each shared one
    (/tmp, /var/tmp; in a pod /dev/shm, /run/lock and /dev/mqueue too), and gives the command IPC namespaces of its
    own: nothing a trial leaves there reaches the next trial, in its pod or on the host; paths below a shared
    directory that the command needs (its workspace, `visible` ones) are still found there. With a `uid` (a pod's
    trial), every process of that uid is ended once the command has (`end_processes_of`), whatever group or
    session it moved to.

    For hosts without cgroups, `memory_ceiling_mb` is enforced on the process
    group's resident memory (watched, and checked against the peak at exit)
    and `cpu_ceiling` as a core affinity; either way a command over its memory
    ceiling ends `oom_killed`. Containers leave both to the engine's cgroup and
    set `watch_cgroup_oom` to tell an OOM kill from any other SIGKILL.

    `storage` ({"paths": [...], "limit_bytes": N, "state": file}) is the trial's disk quota: the command's
    group is killed once the files under those paths take more (`_StorageWatch`), and it ends
    `storage_exceeded`, as it does when it starts with the quota already spent. `state`, a file the trial
    cannot write, carries what the quota still allows from one command to the next.
    """
    oom_before = cgroup_oom_kills() if watch_cgroup_oom else None
    started = time.monotonic()
    if watch_cgroup_oom:  # in a container, this runner is a process of its own: it may adopt orphans
        _become_subreaper()
    # First: a view that cannot be given (ViewUnavailable) leaves no thread or pipe of the command's behind.
    namespaces = (
        _View(
            view.get("source"),
            view.get("target"),
            uid,
            view.get("network", False),
            view.get("hide", ()),
            view.get("writable"),
            view.get("private"),
            view.get("own_pids", False),
            view.get("hide_sockets", False),
            view.get("visible", ()),
        )
        if view
        else None
    )
    truncated = threading.Event()
    out, err = [], []
    # The readers start before the command does: a command that exhausts the pids limit (a fork
    # bomb) must not leave this runner unable to start the threads it needs to finish.
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    readers = [
        threading.Thread(target=_read_capped, args=(os.fdopen(fd, "rb"), output_bytes, sink, truncated), daemon=True)
        for fd, sink in ((out_read, out), (err_read, err))
    ]
    for reader in readers:
        reader.start()
    disk = _StorageWatch(storage["paths"], storage["limit_bytes"], storage.get("state"), uid) if storage else None
    if disk:
        disk_thread = threading.Thread(target=disk.run, daemon=True)
        disk_thread.start()
    try:
        process = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out_write,
            stderr=err_write,
            start_new_session=True,
            preexec_fn=lambda: _limit_child(cpu_ceiling, uid, namespaces),
        )
    except OSError as error:  # its working directory is gone (an earlier command removed it): the command fails
        _disarm(disk)
        return _not_started(command, error, time.monotonic() - started)
    except subprocess.SubprocessError as error:  # the child could not enter its view
        _disarm(disk)
        walls = ", ".join(sorted(name for name, value in view.items() if value))
        raise ViewUnavailable(f"cannot give the command its own view ({walls}): {namespaces.error or error}") from None
    finally:
        os.close(out_write)
        os.close(err_write)
        if namespaces:
            namespaces.close()

    def kill_group():
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    watch = None
    # In a pid namespace of its own, the command's process is the init's child, under the runner's child.
    members = pid_namespace_members(process.pid) if namespaces and namespaces.own_pids else []
    runners_forks = [process.pid, members[0]] if members else []
    if disk:
        disk.arm(kill_group, members[-1] if members else process.pid)
    if not watch_cgroup_oom and os.path.isdir("/proc"):
        watch = _MemoryWatch(process.pid, (memory_ceiling_mb or 0) * 2**20, kill_group, runners_forks)
        threading.Thread(target=watch.run, daemon=True).start()
    try:
        status, usage, timed_out = _wait(process.pid, started + timeout_s, kill_group)
    finally:
        for watcher in (watch, disk):
            if watcher:
                watcher.exited.set()
    process.returncode = os.waitstatus_to_exitcode(status)
    if keep_background and not timed_out:  # as Harbor leaves them: only those holding the output end
        for reader in readers:
            reader.join(_REAP_GRACE_S)
    if not keep_background or any(reader.is_alive() for reader in readers):
        kill_group()  # background children left behind would hold the pipes open
    if uid:
        end_processes_of(uid)  # and those that left the group (setsid), which would outlive the command
    for reader in readers:
        reader.join()
    if disk:
        disk_thread.join()
        if disk.failure:
            disk.forget()
            raise disk.failure
        disk.save()
    if watch_cgroup_oom:
        _reap_orphans(time.monotonic() + _REAP_GRACE_S)
    oom_after = cgroup_oom_kills() if watch_cgroup_oom else None
    # In a container this process is small and alone, so the kernel's figure is the command's own.
    # Locally a command that ended before the first sample has no measured peak (None), never 0.
    if watch:
        peak_memory_mb = round(watch.peak_bytes / 2**20, 1) if watch.peak_bytes else None
    else:
        peak_memory_mb = round(usage.ru_maxrss / 1024, 1)
    files = {"files": {path: read_back(path, read_cap) for path in read_after}} if read_after else {}
    return {
        **files,
        "command": command,
        "exit_code": process.returncode,
        "stdout": b"".join(out).decode("utf-8", errors="replace"),
        "stderr": b"".join(err).decode("utf-8", errors="replace"),
        "duration_s": time.monotonic() - started,
        "timed_out": timed_out,
        "output_truncated": truncated.is_set(),
        "peak_memory_mb": peak_memory_mb,
        # The killed process may be any descendant, and a script may carry on after it (a test
        # script that turns a failed run into reward 0 and exits 0): what tells an OOM kill apart
        # is the cgroup's counter rising while the command ran, whatever its exit code.
        "oom_killed": bool(watch and watch.exceeded)
        or bool(oom_before is not None and oom_after is not None and oom_after > oom_before and not timed_out),
        "storage_exceeded": bool(disk and disk.exceeded),
    }


def read_back(path, cap):
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


def reap_forever():
    """PID 1 of an environment pod: reap the orphans that trials leave behind, until killed."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(1)


def serve():
    """`--serve`: run requests in turn, one JSON line in and one out, until stdin closes; a request's
    ViewUnavailable comes back as {"view_unavailable": why}, any other error as {"error": its traceback}.

    The local backend's command runner (sandbox/command_runner.py): a fork copies the whole page table of
    the process that forks, and this process is small (about 20 MB) where a run worker with Dagster loaded
    is 260 MB and more, 20 ms a command or more. It dies with the thread that started it (Linux)."""
    if sys.platform == "linux":
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # Not dumpable: /proc/<this pid>/fd is then closed to every process without CAP_SYS_PTRACE here, so a
        # trial's command (its child, of the same uid) cannot write requests into this process's stdin.
        _LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    for line in sys.stdin:
        try:
            reply = {"result": run_limited(**json.loads(line))}
        except ViewUnavailable as error:
            reply = {"view_unavailable": str(error)}
        except Exception:  # noqa: BLE001 - the caller raises it, with this process's traceback
            reply = {"error": traceback.format_exc()}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def serve_session():
    """`--session`: a container workspace's runner, answering requests in turn until stdin closes: one JSON line
    in ({"id": n, "request": ...}) and one out ({"id": n, ...`run_limited`'s}), so that a workspace's commands
    share one exec of the engine, where each had one (0.3-0.45 s of a command's wall under load). Each request
    is answered by a child forked for it, as an exec of its own answered it: the subreaper of its command's
    orphans, which pass to the container's PID 1 when it exits, so that nothing a terminal task's agent leaves
    running is this process's to wait for. This process alone writes to stdout, relaying a child's answer only
    once the child has exited whole: a child killed or stopped (by the trial's processes, root in a task's
    container) is answered for as {"runner_ended": why}, never half an answer. Not dumpable: nothing reaches
    its stdin or stdout through /proc."""
    if sys.platform == "linux":
        _LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    sys.stdout.write(json.dumps({"id": 0, "pid": os.getpid()}) + "\n")  # where the harness finds it stopped
    sys.stdout.flush()
    for line in sys.stdin:
        message = json.loads(line)
        answer, why = _answer_in_child(message["request"])
        reply = json.loads(answer) if answer is not None else {"runner_ended": why}
        sys.stdout.write(json.dumps({**reply, "id": message["id"]}) + "\n")
        sys.stdout.flush()


def _answer_in_child(request):
    """(the answer's JSON, None) from a child forked to answer `request`, or (None, why) when the child did not
    end whole: killed, or stopped (then killed: it would hold the session for ever)."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        _answer_then_exit(request, write_end)
    os.close(write_end)
    chunks, status = [], None
    with os.fdopen(read_end, "rb", buffering=0) as answers:
        while True:
            if select.select([answers], [], [], _SESSION_POLL_S)[0]:
                if not (chunk := answers.read(65536)):
                    break
                chunks.append(chunk)
            elif status is None and (found := os.waitpid(child, os.WNOHANG | os.WUNTRACED))[0]:
                if os.WIFSTOPPED(found[1]):
                    os.kill(child, signal.SIGKILL)
                    os.waitpid(child, 0)
                    return None, "stopped"
                status = found[1]  # ended; the pipe's end follows
    status = os.waitpid(child, 0)[1] if status is None else status
    answer = b"".join(chunks)
    if status or not answer.endswith(b"\n"):
        return None, f"wait status {status}" if status else "no whole answer"
    return answer, None


def _answer_then_exit(request, answers):
    """In the child: the answer (or the error that stopped it) written whole to `answers`, then exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing else of this child's reaches the session's stdout
    try:
        reply = run_limited(**request)
    except ViewUnavailable as error:
        reply = {"view_unavailable": str(error)}
    except Exception:  # noqa: BLE001 - the caller raises it, with this process's traceback
        reply = {"error": traceback.format_exc()}
    data = (json.dumps(reply) + "\n").encode()
    while data:
        data = data[os.write(answers, data) :]
    os._exit(0)


def read_request():
    """The request: one line of stdin (JSON has no raw newline)."""
    return json.loads(sys.stdin.readline())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reap"]:
        reap_forever()
    if sys.argv[1:2] == ["--sweep"]:
        sys.exit(sweep_uid(int(sys.argv[2])))
    if sys.argv[1:2] == ["--serve"]:
        sys.exit(serve())
    if sys.argv[1:2] == ["--session"]:
        sys.exit(serve_session())
    if sys.argv[1:2] == ["--usage"]:
        sys.exit(print(allocated_bytes(sys.argv[2:])))
    try:
        print(json.dumps(run_limited(**read_request())))
    except ViewUnavailable as error:
        sys.exit(f"{error} (the engine's seccomp profile or the kernel forbids user namespaces)")
