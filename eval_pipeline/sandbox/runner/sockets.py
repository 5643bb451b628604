"""The unix sockets bound on the host that a command's view covers (`namespaces.Namespaces`, `hide_sockets`):
connect() finds a socket by its file, whatever network namespace the caller is in, and a read-only mount does
not refuse it."""

import os
import re
import socket
from collections.abc import Iterable

from eval_pipeline.sandbox.runner.mounts import is_socket, under

__all__ = ["bound_socket_paths"]

# Where each socket bound at a relative path may be, by inode (`_where_held`): a runner looks once, not at every
# command. The processes its last look found, whose descriptors it reads last on the next.
_RELATIVE_SOCKETS: dict[str, list[str]] = {}
_LOOKED_AT: set[int] = set()
_ACCEPTING = 0x10000  # /proc/net/unix's flag of a listening socket (__SO_ACCEPTCON)
_FD_RELATIVE = re.compile(r"/proc/(?:self|thread-self|\d+)/fd/\d+/(.+)$")


def bound_socket_paths(own: Iterable[str] = ()) -> list[str]:
    """The file of every unix socket a connect() may reach (listening, or datagram) bound in this process's
    network namespace (its /proc/net/unix: a container engine's, a database's, a desktop's, the engine's
    attach sockets of containers and exec sessions), but those under `own` paths. connect() finds a socket by
    its file, whatever network namespace the caller is in, and a read-only mount does not refuse it; abstract
    sockets belong to their network namespace, out of reach of a command in another. A socket bound at a path
    relative to its binder (conmon binds `/proc/self/fd/<its directory>/attach`) is looked for where the
    process holding it may have bound it (`_where_held`)."""
    kept = list(own)
    paths: set[str] = set()
    relative: dict[str, str] = {}
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
    return sorted(path for path in paths if not under(path, kept))


def _where_held(relative: dict[str, str]) -> dict[str, list[str]]:
    """{inode: candidate files} for the sockets bound at `relative` paths ({inode: path}): the name (after
    `/proc/self/fd/N/`, or the whole relative path) in the working directory of each process holding it, in
    each directory it holds open, and beside each file it holds open (fd N itself may have been closed and its
    number reused since the bind), those that are sockets (another socket of the host found so is covered too,
    as it would be anyway). Processes started since the last look come first (an exec session's conmon is
    one), and the look ends once each socket's holder is found: reading every process's descriptors takes
    tens of milliseconds on a busy host."""
    wanted = {f"socket:[{inode}]": inode for inode in relative}
    found: dict[str, set[str]] = {inode: set() for inode in relative}
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
    return {inode: sorted(filter(is_socket, candidates)) for inode, candidates in found.items()}
