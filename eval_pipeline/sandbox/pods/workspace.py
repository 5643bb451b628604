"""A trial's workspace inside a long-lived environment pod, reached only by exec.

The container and Kubernetes backends share this: a workspace is a copy of
/testbed under /workspaces, and every command runs through the runner (runner/) in
the pod, as root dropping to the workspace's uid, which enforces the timeout and
output cap and reads the cgroup's OOM counter there. Each command runs in its
own mount namespace where the workspace is mounted at /testbed, so the
environment's editable installs import the trial's code and concurrent trials in
one pod each see only their own files there.

Nothing of one trial reaches another or the harness (`create`): each workspace
gets a uid no other workspace of the pod holds while it lives (claimed in the
pod, `TRIAL_UIDS`), every process of that uid ends with each command and with
the workspace, and its files in world-writable places go with it. The uid owns
its repository, home and temporary directory and the harness's `out/` (what its
commands write for the harness: test reports, logs); the workspace root and
every other harness file are root's, readable by the uid's group only, so it
can neither rewrite what the harness later applies nor rename the workspace
away, and other uids cannot read any of it. Requests and harness files travel
on an exec's private input (`PodExec.run`), never in a command line.

Only the way an exec reaches the pod differs (exec_transport.py, `PodExec`): the Docker Engine
API, or the Kubernetes API's exec subresource.
"""

import base64
import json
import logging
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from eval_pipeline.common.outcomes import InfrastructureError
from eval_pipeline.sandbox.base import (
    HARNESS_FILE_CAP_BYTES,
    OUTPUT_DIR,
    ExecResult,
    HarnessFileTooLarge,
    ResourceLimits,
    RunnerEnded,
    SandboxError,
    SnapshotUnusable,
    ToolChannel,
    Workspace,
)
from eval_pipeline.sandbox.pods.exec_transport import (
    HARNESS,
    HARNESS_COMMAND_TIMEOUT_S,
    ExecPerRequest,
    PodExec,
    RunnerTransport,
)
from eval_pipeline.sandbox.pods.images import ENV_VENV, PATH, TASK_GIT_DIR, TESTBED, WORKSPACES
from eval_pipeline.sandbox.runner.processes import SIGNALLER_UID_OFFSET
from eval_pipeline.sandbox.runner.request import RunRequest

# The uids trials get: clear of the image's own users, and, with each one's signaller uid (SIGNALLER_UID_OFFSET
# above it), under 65534 (nobody) and so within the 65536 ids a rootless engine maps into a container.
TRIAL_UIDS = range(20000, 65534 - SIGNALLER_UID_OFFSET)
UID_CLAIMS = f"{WORKSPACES}/.uids"
# World-writable directories every trial in a pod would share: each trial sees its own tmp there (runner/mounts.py).
SHARED_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")
# Harness files travel base64-encoded on an exec's private input, in chunks that keep each exec's line short.
FILE_CHUNK_BYTES = 48 * 1024
_APPEND_BASE64 = (
    "import base64, os, sys\n"
    "data = sys.stdin.readline()\n"
    "path, mode = sys.argv[1], sys.argv[2]\n"
    "os.makedirs(os.path.dirname(path), exist_ok=True)\n"
    "with open(path, mode) as f: f.write(base64.b64decode(data))\n"
)
# A link (planted by the uid in `out/`) is never followed: it could name another trial's file. Nor is anything but
# a regular file opened (a FIFO would wait for a writer, a device may act), checked again once open without waiting,
# since a terminal task's processes may still run; past its cap (argv[2]) a file is read no further.
_PRINT_BASE64 = (
    "import base64, os, stat, sys\n"
    "path, cap = sys.argv[1], int(sys.argv[2])\n"
    "try:\n"
    "    if os.path.realpath(path) != path or not stat.S_ISREG(os.lstat(path).st_mode): sys.exit(3)\n"
    "    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)\n"
    "except OSError: sys.exit(3)\n"
    "if not stat.S_ISREG(os.fstat(descriptor).st_mode): sys.exit(3)\n"
    "data = open(descriptor, 'rb').read(cap + 1)\n"
    "sys.exit(4) if len(data) > cap else sys.stdout.write(base64.b64encode(data).decode())\n"
)
TOO_LARGE_EXIT = 4
# Claims the next free uid of the pod (mkdir is atomic), round-robin from where the last claim stopped, so a
# uid is reused as late as possible; prints it, or exits BUSY_EXIT when all are held. A claim left by a
# crashed run is never broken: its uid is simply not used again in this pod.
_CLAIM_UID = """
import fcntl, os, sys
claims, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(claims, mode=0o700, exist_ok=True)
with open(os.path.join(claims, "next"), "a+") as counter:
    fcntl.flock(counter, fcntl.LOCK_EX)
    counter.seek(0)
    start = int(counter.read() or 0)
    for step in range(count):
        uid = first + (start + step) % count
        try:
            os.mkdir(os.path.join(claims, str(uid)))
        except FileExistsError:
            continue
        counter.seek(0)
        counter.truncate()
        counter.write(str((start + step + 1) % count))
        print(uid)
        sys.exit(0)
sys.exit(75)
"""
# Counts the processes in a mount namespace other than this one (the container's): every agent command runs in one
# of its own (its view hides the verifier's paths, runner/namespaces.py), and nothing it starts can leave it, while every
# harness process runs in the container's. A namespace's mount table is readable whatever the process (a
# non-dumpable one's too); a process that ended, or a zombie, has none and runs nothing.
_COUNT_LEFT = """
import os
own = open("/proc/self/mountinfo").read()
def apart(pid):
    try:
        with open(f"/proc/{pid}/mountinfo") as table:
            return table.read() != own
    except OSError:
        return False
print(sum(apart(pid) for pid in os.listdir("/proc") if pid.isdigit()))
"""
MISSING_FILE_EXIT = 3
# The most of a file the runner reads back with a command's answer (`run_then_read`); a larger one (a big diff)
# is read as `read_harness_file` reads it, so the runner, in the trial's cgroup, never holds much.
READ_BACK_CAP_BYTES = 2**20
# A command's exec may outlast its own timeout by this much (the runner kills it, then reports) before
# the transport counts it as hung.
EXEC_MARGIN_S = 120.0

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskLayout:
    """A terminal task's container as Harbor lays it out: the agent and verifier work as root in `workdir`,
    with the image's own environment; tests, solution and the verifier's logs live at Harbor's paths; the
    working tree's git directory (the harness's, for patches) is kept out of the working tree."""

    workdir: str
    env: Mapping[str, str] = field(default_factory=dict)
    # A re-grade's container, started from a trial's snapshot: what it holds is the agent's, its git directory
    # included, and nothing in a re-grade takes a diff, so the working tree's commit is not read there.
    from_snapshot: bool = False

    HARBOR_DIRS = {"tests": "/tests", "solution": "/solution", "verifier": "/logs/verifier"}
    # What the agent's commands never see (each covered by an empty mount of their own, runner/mounts.py): the
    # verifier's tests and reward, which the harness puts in place only when the verifier runs. Whole top-level
    # directories: a mount deeper down could be moved aside by renaming its parent, which the agent may do.
    VERIFIER_DIRS = ("/tests", "/logs")

    @classmethod
    def from_details(cls, details: Mapping[str, Any]) -> "TaskLayout":
        """The layout an environment handle records; its other keys (a stored handle may hold a commit) are not
        the layout's."""
        return cls(details["workdir"], details.get("env", {}), details.get("from_snapshot", False))

    def path(self, name: str) -> str | None:
        """Where a harness file lives at Harbor's paths (tests/…, solution/…, verifier/…), else None."""
        top, _, rest = name.partition("/")
        return f"{self.HARBOR_DIRS[top]}/{rest}".rstrip("/") if top in self.HARBOR_DIRS else None


class ExecWorkspace(Workspace):
    """A workspace in a pod: a copy of /testbed under a uid of its own, seen at /testbed by its commands; or,
    with a `task` layout, a terminal task's own container, where the WORKDIR itself is the workspace.

    `cut_network` gives each command a network namespace of its own with only loopback: for a trial that
    did not opt into network in a pod that has one (shared with a variant that did; a Kubernetes pod always
    has one). Where the container itself has no network, that would cost each command a namespace (about
    10 ms) for nothing.

    Its commands' requests reach the runner through `runner`: by default an exec of their own each.
    """

    def __init__(
        self,
        pod: PodExec,
        root: str,
        extra_env: Mapping[str, str],
        limits: ResourceLimits,
        task: TaskLayout | None = None,
        cut_network: bool = True,
        runner: RunnerTransport | None = None,
    ) -> None:
        self.pod = pod
        self.runner = runner or ExecPerRequest(pod)
        self.root = root
        self.repo = task.workdir if task else f"{root}/repo"
        self.uid: int | None = None  # claimed by `create`; a task works as root
        self.task = task
        self.cut_network = cut_network
        self._extra_env = extra_env
        self._output_bytes = limits.output_bytes
        self._storage_mb = limits.storage_mb
        if task:
            self.git_env = {"GIT_DIR": TASK_GIT_DIR, "GIT_WORK_TREE": task.workdir}

    def _as_root(self, argv: list[str], private: str | None = None) -> bytes:
        exit_code, stdout, stderr = self.pod.run(argv, private=private)
        if exit_code != 0:
            raise self.pod.failure(f"{shlex.join(argv)[:200]} failed (exit {exit_code}): {stderr[-2000:]!r}")
        return stdout

    def create(self) -> None:
        """Claim a uid, copy /testbed for it, and lay out who owns what (the module's docstring says why)."""
        root = self.root
        if self.task:
            self._create_in_task_container(self.task)
            return
        made = " ".join(f"{root}/{name}" for name in ("home", "tmp", f"harness/{OUTPUT_DIR}"))
        owned = f"{root}/repo {made}"
        claim = shlex.join(HARNESS.python("-c", _CLAIM_UID, UID_CLAIMS, str(TRIAL_UIDS.start), str(len(TRIAL_UIDS))))
        script = (
            # Nothing is printed before a line arrives on stdin: output the engine sends with its answer to
            # the exec's start can be lost (docker-py reads that answer through a buffer), and an answer lost
            # here leaves a uid claimed for nothing.
            "read _ && "
            f"uid=$({claim}) && rm -rf {root} && mkdir -p {made} && cp -a {TESTBED} {root}/repo"
            f' && chown -R "$uid:$uid" {owned} && chmod 700 {owned}'
            f' && chown "0:$uid" {root} {root}/harness && chmod 750 {root} {root}/harness'
            # The environment's commit after its install steps (common/git.py: COMMIT_BASELINE), read from the
            # pristine /testbed, which no trial can write: every patch is taken against it.
            f" && baseline=$(git -C {TESTBED} rev-parse HEAD)"
            # What the copy takes on disk: the trial's quota counts from there.
            f" && copied=$({shlex.join(HARNESS.runner('--usage', root))})"
            ' && echo "$uid $baseline $copied"'
        )
        claimed = self._as_root(["sh", "-c", script], private="claim")
        try:
            uid, baseline, copied = claimed.split()
            self.uid = int(uid)
            self.storage_limit_bytes = int(copied) + self._storage_mb * 2**20
        except ValueError:  # the engine lost the exec's output (seen under load): the uid stays claimed, unused
            raise self.pod.failure(f"claiming a uid for {root} answered {claimed[-200:]!r}, not a uid") from None
        self.base_revision = baseline.decode()

    def _create_in_task_container(self, task: TaskLayout) -> None:
        """Before any command of the agent's, in the task's fresh container: the verifier's directories made,
        empty, as mount points for the agent's hiding mounts, and the commit the working tree starts at read
        from the image's own history (the harness layer's commit), which every patch is taken against; through
        the command runner, so that where one runner serves the workspace's commands (a container's session)
        this costs no exec of its own. Not in a snapshot's container: an agent that broke its git directory
        would otherwise fail its own re-grade as the harness's error, unscored. There the harness's trial
        directory is removed first: the agent may have left anything at its place (a file, a link)."""
        made = f"mkdir -p -m 700 {self.root}/harness/{OUTPUT_DIR} && mkdir -p {shlex.join(task.VERIFIER_DIRS)}"
        if task.from_snapshot:
            exit_code, _, stderr = self.pod.run(["sh", "-c", f"rm -rf {self.root} && {made}"])
            if exit_code != 0:
                failure = self.pod.failure(f"setting the verifier up failed (exit {exit_code}): {stderr[-2000:]!r}")
                raise SnapshotUnusable(str(failure)) if type(failure) is SandboxError else failure
            return
        setup = {**self._task_placement(task), "cwd": "/", "env": {}, "timeout_s": HARNESS_COMMAND_TIMEOUT_S}
        request = RunRequest.from_fields({**setup, "command": f"{made} && git --git-dir={TASK_GIT_DIR} rev-parse HEAD"})
        try:
            answer = ExecResult(**self.runner.ask(request, HARNESS_COMMAND_TIMEOUT_S + EXEC_MARGIN_S))
        except RunnerEnded as ended:  # before any command of the agent's: never the agent's doing
            raise SandboxError(str(ended)) from None
        commit = answer.stdout.strip()
        if not answer.ok or not re.fullmatch(r"[0-9a-f]{40,64}", commit):
            raise self.pod.failure(f"reading the task's commit in {self.root} answered {answer.summary()!r}")
        self.base_revision = commit

    def processes_left(self) -> int:
        """The processes the agent's commands left running in a terminal task's container (as Harbor leaves them),
        counted by the runtime's interpreter; a pod's workspace ends its uid's with each command."""
        if not self.task:
            return 0
        stdout = self._as_root(HARNESS.python("-c", _COUNT_LEFT))
        try:
            return int(stdout)
        except ValueError:  # the engine lost the exec's output (as for a uid claim): the transport's failure
            raise self.pod.failure(f"counting the processes left answered {stdout[-200:]!r}") from None

    def destroy(self) -> None:
        """End every process of the uid and remove its files, then the workspace; only then free the uid
        (a sweep that failed keeps it claimed, so no later trial inherits what it missed). A task's workspace
        is its container, which the sandbox removes with everything in it."""
        if self.task:
            return
        if self.uid is None:
            self._as_root(["rm", "-rf", self.root])
            return
        sweep = shlex.join(HARNESS.runner("--sweep", str(self.uid)))
        self._as_root(["sh", "-c", f"{sweep} && rm -rf {self.root} && rmdir {UID_CLAIMS}/{self.uid}"])

    @contextmanager
    def created(self) -> Iterator["ExecWorkspace"]:
        """This workspace, made for the duration of the block and removed after it."""
        self.create()
        try:
            yield self
        finally:
            self.runner.close()
            try:
                self.destroy()
            except InfrastructureError as error:  # the next workspace in this slot starts by removing it
                logger.warning("could not remove workspace %s: %s", self.root, error)

    def command_placement(self) -> dict[str, Any]:
        """Where and as whom a command runs: a task as root in its WORKDIR with its image's variables, the
        verifier's directories hidden (`verify` runs without that view); a pod trial as its own uid,
        seeing its workspace at /testbed and its own tmp at every world-writable directory, with the
        environment's venv first on PATH."""
        if self.task:
            hidden = {"hide": list(self.task.VERIFIER_DIRS), "network": True}  # the container's own network
            return {**self._task_placement(self.task), "view": hidden}
        shared = {directory: f"{self.root}/tmp" for directory in SHARED_WRITABLE_DIRS}
        return {
            "cwd": TESTBED,
            "view": {"source": self.repo, "target": TESTBED, "network": not self.cut_network, "private": shared},
            "uid": self.uid,
            "env": {
                "PATH": PATH,
                "VIRTUAL_ENV": ENV_VENV,
                "HOME": f"{self.root}/home",
                "TMPDIR": f"{self.root}/tmp",
                "PYTHONDONTWRITEBYTECODE": "1",
                **self._extra_env,
            },
            "output_bytes": self._output_bytes,
            "watch_cgroup_oom": True,
            "storage": {
                "paths": [self.root],
                "limit_bytes": self.storage_limit_bytes,
                "state": f"{self.root}/harness/quota.json",  # root's, in root's directory
            },
        }

    def _task_placement(self, task: TaskLayout) -> dict[str, Any]:
        """Root in a terminal task's WORKDIR with its image's variables, in the container's own namespaces,
        the processes a command leaves running kept (the runner's `keep_background`: runner/processes.py)."""
        return {
            "cwd": task.workdir,
            "env": {**task.env, **self._extra_env},
            "output_bytes": self._output_bytes,
            "watch_cgroup_oom": True,
            "keep_background": True,
        }

    def run(self, command: str, *, timeout_s: float, env: Mapping[str, str] | None = None) -> ExecResult:
        return self._run_placed(self.command_placement(), command, timeout_s, env)[0]

    def verify(self, command: str, *, timeout_s: float, env: Mapping[str, str] | None = None) -> ExecResult:
        """A terminal task's verifier runs as Harbor runs it, where the directories the agent never saw are."""
        return self._run_placed(self._verifier_placement(), command, timeout_s, env)[0]

    def run_then_read(
        self,
        command: str,
        names: Sequence[str],
        *,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        verifier: bool = False,
    ) -> tuple[ExecResult, dict[str, bytes | None]]:
        """The runner reads the files as the command ends, in the same exec (runner/read_back.py: a link or
        anything but a regular file is no file); one over READ_BACK_CAP_BYTES is read by `read_harness_file`.
        The names under `out/` are flat, as `read_harness_file`'s."""
        placement = self._verifier_placement() if verifier else self.command_placement()
        paths = {name: self._readable_harness_path(name) for name in names}
        result, files = self._run_placed(placement, command, timeout_s, env, list(paths.values()))
        read = {name: files.get(path) for name, path in paths.items()}
        return result, {name: self.read_harness_file(name) if data is False else data for name, data in read.items()}

    def _verifier_placement(self) -> dict[str, Any]:
        return self._task_placement(self.task) if self.task else self.command_placement()

    def _run_placed(
        self,
        placement: Mapping[str, Any],
        command: str,
        timeout_s: float,
        env: Mapping[str, str] | None,
        read_after: Sequence[str] = (),
    ) -> tuple[ExecResult, dict[str, bytes | Literal[False] | None]]:
        """The command's result, and the files `read_after` names as the runner read them back (False: over the cap)."""
        fields = {**placement, "command": command, "env": {**placement["env"], **(env or {})}, "timeout_s": timeout_s}
        if read_after:
            fields |= {"read_after": list(read_after), "read_cap": READ_BACK_CAP_BYTES}
        answer = self.runner.ask(RunRequest.from_fields(fields), timeout_s + EXEC_MARGIN_S)
        try:
            files = {
                path: data if data in (None, False) else base64.b64decode(data)
                for path, data in answer.pop("files", {}).items()
            }
            return ExecResult(**answer), files
        except (ValueError, TypeError, AttributeError):  # not an answer: the transport's failure, retried
            raise self.pod.failure(f"the command runner's answer was malformed: {str(answer)[-200:]!r}") from None

    def tool_server_command(self) -> tuple[list[str], dict[str, str]]:
        """The runtime mounted in every container (tool_runtime.py)."""
        return HARNESS.argv, HARNESS.env

    def open_tool_channel(self, session: Mapping[str, Any]) -> ToolChannel:
        """The tool server runs as root in the pod; it drops to the workspace's uid and view for every call, as
        `run` does."""
        argv, env = self.tool_server_command()
        return self.pod.open_channel(argv, env, json.dumps(session))

    def harness_path(self, name: str) -> str:
        return (self.task and self.task.path(name)) or f"{self.root}/harness/{name}"

    def write_harness_file(self, name: str, content: str | bytes) -> str:
        path = self._writable_harness_path(name)
        data = content.encode() if isinstance(content, str) else content
        for start in range(0, max(len(data), 1), FILE_CHUNK_BYTES):
            chunk = base64.b64encode(data[start : start + FILE_CHUNK_BYTES]).decode()
            self._as_root(HARNESS.python("-c", _APPEND_BASE64, path, "ab" if start else "wb"), private=chunk)
        return path

    def _writable_harness_path(self, name: str) -> str:
        """Where the harness writes `name`, as root: never under `out/`, which the workspace's uid controls."""
        if not self.task and (name == OUTPUT_DIR or name.startswith(f"{OUTPUT_DIR}/")):
            raise ValueError(f"{name}: {OUTPUT_DIR}/ is for the workspace's commands to write, not the harness")
        return self.harness_path(name)

    def _readable_harness_path(self, name: str) -> str:
        """Where the harness reads `name`: names under `out/` (the uid's directory) are flat, so no directory on
        the way is the uid's."""
        if name.startswith(f"{OUTPUT_DIR}/") and "/" in name.removeprefix(f"{OUTPUT_DIR}/"):
            raise ValueError(f"{name}: names under {OUTPUT_DIR}/ are flat")
        return self.harness_path(name)

    def read_harness_file(self, name: str) -> bytes | None:
        cap = str(HARNESS_FILE_CAP_BYTES)
        exit_code, stdout, stderr = self.pod.run(HARNESS.python("-c", _PRINT_BASE64, self.harness_path(name), cap))
        if exit_code == MISSING_FILE_EXIT:
            return None
        if exit_code == TOO_LARGE_EXIT:
            raise HarnessFileTooLarge(f"the harness file {name} holds more than {cap} bytes")
        if exit_code != 0:
            raise self.pod.failure(f"reading {name} failed (exit {exit_code}): {stderr[-2000:]!r}")
        return base64.b64decode(stdout)
