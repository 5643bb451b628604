"""A command's own namespaces: the trial's view of the file system, its network, its IPC and its pids.

A view runs the command in a mount namespace of its own (inside a user namespace, so no privilege beyond the
container's defaults is needed) where the trial's workspace is bind-mounted over the environment's repository,
or (a terminal task's agent, root in its own container) where the verifier's paths are hidden under empty
mounts of its own. Every process of the trial then finds its own files at the environment's path, so editable
installs, src layouts and absolute paths recorded at install time import the trial's code, while concurrent
trials each see only theirs.
"""

import fcntl
import os
import select
import signal
import socket
import struct
import threading

from eval_pipeline.sandbox.runner.libc import (
    CAP_SYS_ADMIN,
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    PR_CAPBSET_DROP,
    fork,
    libc_call,
    mount,
    set_dumpable,
)
from eval_pipeline.sandbox.runner.mounts import cover_sockets, hide, read_only_but, show_private
from eval_pipeline.sandbox.runner.request import View
from eval_pipeline.sandbox.runner.sockets import bound_socket_paths

__all__ = ["Namespaces", "ViewUnavailable", "pid_namespace_members"]

_MAPS_TIMEOUT_S = 30.0  # how long a command's child waits for its parent to write its id maps
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


class ViewUnavailable(OSError):
    """The kernel or the engine's seccomp profile refused a user or mount namespace for the trial's view."""


def _identity_map(kind: str, uid: int | None) -> str:
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


def _bring_up_loopback() -> None:
    """Bring `lo` up in a new network namespace (it starts down), so that a command's own servers on
    localhost still work while it reaches nothing else."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sh14x", b"lo", 0)
        flags = struct.unpack("16sh14x", fcntl.ioctl(probe, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack("16sh14x", b"lo", flags | _IFF_UP))


class Namespaces:
    """The command's namespaces for `view` (request.View), entered by its forked child (`enter`) before exec.

    The child unshares a user and a mount namespace and waits; unless the view's `network` is allowed it
    unshares a network namespace too, where only its own loopback exists (a pod's network is shared by every
    variant on it, so a trial that did not opt in is cut off here, per command, not per pod). This process (in
    the parent namespace, where writing another namespace's id maps is allowed) writes its id maps from a
    thread; the child then bind-mounts the workspace (`source`) at the environment's path (`target`) and enters
    it. Mounts made there never reach the rest of the system, and a trial process cannot undo them: they are
    locked to its less privileged namespace.

    With `hide` the child covers those paths with empty tmpfs mounts and drops CAP_SYS_ADMIN from its
    bounding set: its root may do all else root does in its container (its uids are the container's), but
    cannot unmount them, and in any namespace it makes they come locked. Processes of the container's own
    namespaces (the verifier) are out of its reach: it holds no capability there, so /proc/<pid>/root and
    setns are refused to it (sending them signals is not). With `writable`, every file system is read-only
    but those paths (`mounts.read_only_but`), and CAP_SYS_ADMIN is dropped as well.

    With `own_pids` the command runs in a pid namespace of its own (`enter_own_pids`), with a fresh /proc:
    it sees, and may signal, only its own processes (a user namespace alone does not stop a signal to the
    harness's processes or a neighbour's, all of the same uid), and they all end with it. With `hide_sockets`
    every unix socket bound in this runner's network namespace outside the trial's own paths is covered
    (`sockets.bound_socket_paths`): the container engine's, a database's.

    With `private` ({shared directory: the trial's own}) the command finds the trial's own directory at each
    shared one (/tmp, /var/tmp; in a pod /dev/shm, /run/lock and /dev/mqueue too), writable and kept from one
    command to the next, where its `writable` paths, the target and the `visible` paths (a local environment's
    interpreter) are still found as they are (`mounts.show_private`), and IPC namespaces of its own.
    """

    def __init__(self, view: View, uid: int | None) -> None:
        self.source = view.source.encode() if view.source else None
        self.target = view.target
        self.network = view.network
        self.hide = [path.encode() for path in view.hide]
        self.writable = None if view.writable is None else [path.encode() for path in view.writable]
        self.private = dict(view.private or {})
        self.own_pids = view.own_pids
        own = [*(view.writable or ()), *([view.target] if view.source and view.target else [])]
        self.visible = [*own, *view.visible]
        try:
            self.sockets = bound_socket_paths(own) if view.hide_sockets else []
        except OSError as error:
            raise ViewUnavailable(f"cannot list the host's unix sockets to cover: {error}") from None
        self.to_parent = os.pipe()
        self.to_child = os.pipe()
        self.failure = os.pipe()  # what stopped the child, in a line, for ViewUnavailable
        self.error: OSError | str | None = None
        self._maps = {kind: _identity_map(kind, uid) for kind in ("uid", "gid")}
        self._helper = threading.Thread(target=self._write_maps, daemon=True)
        self._helper.start()

    def _write_maps(self) -> None:
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

    def enter(self) -> None:
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

    def _enter(self) -> None:
        # System V and POSIX IPC of its own, with its own directories (a pod trial's, or a walled local one's).
        ipc = CLONE_NEWIPC if self.private or self.writable is not None else 0
        pids = CLONE_NEWPID if self.own_pids else 0
        libc_call("unshare", CLONE_NEWUSER | CLONE_NEWNS | ipc | pids | (0 if self.network else CLONE_NEWNET))
        os.write(self.to_parent[1], str(os.getpid()).encode())
        answered, _, _ = select.select([self.to_child[0]], [], [], _MAPS_TIMEOUT_S)
        if not answered or os.read(self.to_child[0], 1) != b"1":
            raise ViewUnavailable("the id maps of the trial's user namespace could not be written")
        mount(None, b"/", None, MS_REC | MS_PRIVATE)
        target = self.target.encode() if self.target else None
        if self.source and target:
            mount(self.source, target, None, MS_BIND | MS_REC)
        hide(self.hide)
        if self.writable is not None:  # the workspace, seen at the target, among them
            read_only_but(self.writable + ([target] if self.source and target else []))
        # After the file systems are made read-only: the trial's own directories, and what stays visible below
        # them, keep the flags of the mounts they come from.
        show_private(self.private, self.visible)
        cover_sockets(self.sockets)
        if self.own_pids:
            enter_own_pids()
        if self.hide or self.writable is not None:  # without CAP_SYS_ADMIN, nothing it starts can undo the mounts
            libc_call("prctl", PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0)
        if not self.network:
            _bring_up_loopback()

    def close(self) -> None:
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


def _close_all_but(kept: int) -> None:
    os.closerange(0, kept)
    os.closerange(kept + 1, os.sysconf("SC_OPEN_MAX"))


def enter_own_pids() -> None:
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
    init = fork()
    if init:
        os.close(status_write)
        _close_all_but(status_read)
        _end_as_init_reports(init, status_read)
    os.close(status_read)
    try:
        mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError as error:  # a /proc partly covered (a container engine's masked paths) cannot be mounted afresh
        raise OSError(error.errno, f"mounting a fresh /proc for its own pid namespace: {error.strerror}") from None
    set_dumpable(False)  # the init, and the command's process until it execs
    command = fork()
    if command:
        _serve_as_init(command, status_write)
    os.close(status_write)


def _serve_as_init(command: int, status_write: int) -> None:
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


def _end_as_init_reports(init: int, status_read: int) -> None:
    """Outside the namespace: wait for its init, then end as the command did (`enter_own_pids`)."""
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


def pid_namespace_members(child: int) -> list[int]:
    """The init and the command's process (`enter_own_pids`) under the runner's `child`, once the command has
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
