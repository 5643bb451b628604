"""The container backend: environment images and pods on any Docker Engine API.

Docker Engine for users, Podman's Docker-compatible service in CI; both are
reached through the `docker` SDK (DOCKER_HOST selects the engine).

In `pod` mode each instance gets one long-lived container, started once, that
serves many trials: each workspace is a copy of /testbed under /workspaces,
under a uid of its own and closed to every other (sandbox/container/workspace.py says how
nothing of a trial outlives it or reaches the harness), and each of its
commands sees it at /testbed (its own mount namespace), so the environment's
installs import the trial's code while /testbed itself stays untouched. At most
`pod_parallelism` trials share a pod at once, and the pod's cgroup limits are
that many times a trial's, so with the default of one the limits are exactly
the trial's. In `strict` mode every workspace gets a fresh container from the
instance image, with the trial's limits. A terminal task always runs as Harbor
runs it: its own image, a container per workspace, the agent as root in its
WORKDIR (tasks/terminal/task.py).

No trial has a network by default: pods and strict containers start with the
engine's network `none` unless a variant of the campaign opted in
(`SandboxBackend.network`), and even then every command of a trial that did
not opt in runs in a network namespace of its own with only loopback
(limited_exec.py), since a pod serves every variant. A terminal task keeps its
own `allow_internet`.

Every command runs through limited_exec.py inside the container, as root
dropping to the workspace's uid: timeout, capped output and the cgroup's OOM
counter are read in the container, and one JSON result comes back.
"""

import base64
import fcntl
import io
import json
import logging
import os
import re
import socket
import struct
import subprocess
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.constants import DEFAULT_DOCKER_API_VERSION
from docker.models.containers import Container
from docker.models.volumes import Volume

from eval_pipeline.common.git import KEEP_ANCESTORS, clone_at
from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.common.outcomes import InfrastructureError, SandboxLost
from eval_pipeline.sandbox.base import (
    EngineUnreachable,
    EnvironmentHandle,
    ImageChange,
    ResourceLimits,
    RunnerEnded,
    SandboxBackend,
    SandboxError,
    ToolChannel,
)
from eval_pipeline.sandbox.container.images import (
    CA_BUNDLE,
    HARNESS_ROOT,
    MANAGED_LABEL,
    WORKSPACES,
    ImageBuilder,
    ImageLayer,
    PythonSource,
    base_layer,
    env_layer,
    find_image,
    instance_layer,
    substitute_from,
    task_layers,
)
from eval_pipeline.sandbox.container.workspace import (
    HARNESS,
    HARNESS_COMMAND_TIMEOUT_S,
    ExecWorkspace,
    PodExec,
    TaskLayout,
)
from eval_pipeline.sandbox.tool_runtime import TOOLS_ROOT, runtime_archive, runtime_identity
from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource
from eval_pipeline.tasks.task import Task, TaskImage

TOOLS_VOLUME_PREFIX = "eval-pipeline-tools-"
VOLUME_ID_LABEL = "eval_pipeline.volume_id"  # a tool volume's own id, new each time one is created
SNAPSHOT_REPOSITORY = "localhost/eval-pipeline-snapshot"  # terminal task containers as their agent left them
CAMPAIGN_LABEL = "eval_pipeline.campaign"
STOPPED_CHECK_TIMEOUT_S = 60.0  # for the exec asking whether a runner that gave no answer in time is stopped
EXEC_END_POLLS = 20  # times a session's exec is asked whether it ended, 0.1 s apart, once its stream closed
RELEASE_PARALLELISM = 8  # containers removed at once when a campaign releases its pods
REMOVAL_THREADS = 2  # trial containers this process removes at once, behind its trials (_remove_soon)
TOOLS_MARKER = ".complete"
_FILLED_VOLUMES: set[tuple[str, str]] = set()  # (engine, volume) filled by this process
# Commands are timed out inside the container; the client waits as long as they may run.
CLIENT_TIMEOUT_S = 24 * 3600
# A container's network, as environment handles record it: the engine's default network, or none at all.
ENGINE_NETWORK, NO_NETWORK = "engine default", "none"
_ENGINE_FAILURES = (docker.errors.DockerException, requests.exceptions.RequestException)
# The engine's kinds of change (`GET /containers/{id}/changes`), Docker's and Podman's alike.
_CHANGE_KINDS = {0: ImageChange.CHANGED, 1: ImageChange.ADDED, 2: ImageChange.DELETED}
# Trial containers being removed behind the trials of this process (ContainerSandbox._remove_soon).
_removals: ThreadPoolExecutor | None = None
_pending_removals: set[Future] = set()
_removals_lock = threading.Lock()

logger = logging.getLogger(__name__)


def _marker_archive() -> bytes:
    """A tar holding TOOLS_MARKER: put last, it says the tool volume is complete."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.addfile(tarfile.TarInfo(TOOLS_MARKER), io.BytesIO(b""))
    return buffer.getvalue()


def _slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", text)[:100]


@contextmanager
def engine_errors(what: str) -> Iterator[None]:
    """Engine failures as typed infrastructure errors: a missing container or image is SandboxLost,
    anything else the engine or its socket raise (it stopped, it refused) a SandboxError (engine_error)."""
    try:
        yield
    except docker.errors.NotFound as error:
        raise SandboxLost(f"{what}: {error}") from error
    except _ENGINE_FAILURES as error:
        raise SandboxError(f"{what}: {error}") from error


def _existing_parent(path: Path) -> Path:
    """`path`, or the nearest of its parents that exists (a data directory not made yet)."""
    return next(candidate for candidate in (path, *path.parents) if candidate.exists())


class EngineExec(PodExec):
    """Exec into a container through the Docker Engine API."""

    def __init__(self, container: Container) -> None:
        self.container = container
        self.name = container.name

    def run(
        self, argv: list[str], timeout_s: float = HARNESS_COMMAND_TIMEOUT_S, private: str | None = None
    ) -> tuple[int, bytes, bytes]:
        """Without `private`, the engine's socket has its own long timeout (CLIENT_TIMEOUT_S); with it, the
        exec's own socket waits `timeout_s` at most. `private` goes as one line on the exec's stdin: a root process's, which no trial uid can read, and of
        any length (an exec's environment holds at most 128 KiB a variable, so an agent's long command there
        failed as the engine's error, unscored)."""
        api = self.container.client.api
        try:
            exec_id = api.exec_create(self.container.id, argv, user="0", stdin=private is not None)["Id"]
            if private is None:
                stdout, stderr = api.exec_start(exec_id, demux=True)
            else:
                stdout, stderr = self._answer_to(api.exec_start(exec_id, socket=True)._sock, private, timeout_s)
            return api.exec_inspect(exec_id)["ExitCode"], stdout or b"", stderr or b""
        except _ENGINE_FAILURES as error:
            raise self.failure(f"exec failed: {error}") from error

    def _answer_to(self, exec_socket: socket.socket, line: str, timeout_s: float) -> tuple[bytes, bytes]:
        """Send `line` to the exec's stdin and read its output to the end: stdout whole, stderr's tail. An answer
        cut short (the socket closed or silent past `timeout_s`) fails to parse where it is read."""
        exec_socket.settimeout(timeout_s)
        channel = EngineChannel(exec_socket, self)
        try:
            channel.send(line.encode() + b"\n")
            stdout = b"".join(iter(channel.receive, b""))
        finally:
            channel.close()
        return stdout, channel.stderr

    def open_channel(self, argv: list[str], env: Mapping[str, str], first_line: str) -> ToolChannel:
        api = self.container.client.api
        try:
            exec_id = api.exec_create(self.container.id, argv, stdin=True, user="0", environment=dict(env))["Id"]
            channel = EngineChannel(api.exec_start(exec_id, socket=True)._sock, self)
        except _ENGINE_FAILURES as error:
            raise self.failure(f"starting the tool server failed: {error}") from error
        channel.send(first_line.encode() + b"\n")
        return channel

    def failure(self, message: str) -> InfrastructureError:
        with engine_errors(self.name):
            try:
                self.container.reload()
                state = self.container.status
            except docker.errors.NotFound:
                state = "removed"
        if state != "running":
            return SandboxLost(f"{self.name} is {state}: {message}")
        return SandboxError(f"{self.name}: {message}")


class EngineChannel(ToolChannel):
    """An exec's stdin and stdout on the engine's socket, which carries the output in frames (an 8-byte
    header: stream, padding, big-endian size) since the exec has no terminal; stderr frames are dropped."""

    def __init__(self, exec_socket: socket.socket, engine_exec: "EngineExec") -> None:
        self.socket, self.engine_exec, self.name = exec_socket, engine_exec, engine_exec.name
        self.pending = b""
        self.stderr = b""

    def send(self, data: bytes) -> None:
        try:
            self.socket.sendall(data)
        except OSError as error:
            raise SandboxLost(f"the tool server in {self.name} is gone: {error}") from error

    def _read(self, size: int) -> bytes:
        while len(self.pending) < size:
            try:
                chunk = self.socket.recv(65536)
            except OSError:  # closed under the read: the session ended
                return b""
            if not chunk:
                return b""
            self.pending += chunk
        data, self.pending = self.pending[:size], self.pending[size:]
        return data

    def receive(self) -> bytes:
        while header := self._read(8):
            stream, size = header[0], struct.unpack(">I", header[4:])[0]
            payload = self._read(size)
            if stream == 1 or not payload:
                return payload
            self.stderr = (self.stderr + payload)[-self.DIAGNOSTICS_CHARS :]
        return b""

    def diagnostics(self) -> str:
        return self.stderr.decode(errors="replace")

    def failure(self, message: str) -> InfrastructureError:
        return self.engine_exec.failure(message)

    def close(self) -> None:
        try:
            self.socket.shutdown(socket.SHUT_RDWR)  # the server sees its stdin end; a read under way returns
        except OSError:
            pass
        self.socket.close()


class RunnerSession:
    """A workspace's command runner in one exec (limited_exec.serve_session): a request and its answer are JSON
    lines on the exec's stdin and stdout, each numbered, so that an answer meant for an earlier request (one
    that timed out) is never taken for the current one."""

    def __init__(self, engine_exec: EngineExec) -> None:
        self.engine_exec = engine_exec
        api = engine_exec.container.client.api
        argv = HARNESS.runner("--session")
        try:
            self.exec_id = api.exec_create(engine_exec.container.id, argv, stdin=True, user="0")["Id"]
            self.channel = EngineChannel(api.exec_start(self.exec_id, socket=True)._sock, engine_exec)
        except _ENGINE_FAILURES as error:
            raise engine_exec.failure(f"starting the command runner failed: {error}") from error
        self.asked = 0
        self.pending = b""
        self.pid: int | None = None  # the runner's, in the container (its first line)

    def ask(self, request: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        """The answer to `request`. A runner whose answer never comes raises: RunnerEnded when it ended (the trial's
        processes may kill it: root in a task's container) while its container runs, the transport's failure
        otherwise; either way the session is done."""
        self.asked += 1
        deadline = time.monotonic() + timeout_s
        self.channel.socket.settimeout(timeout_s)
        try:
            self.channel.send(json.dumps({"id": self.asked, "request": request}).encode() + b"\n")
        except SandboxLost:  # its end of the stream closed: killed since the last command, or the container gone
            raise self._ended("the command runner had ended before the command") from None
        while (line := self._line()) is not None:
            try:
                answer = json.loads(line)
            except ValueError:
                raise self.engine_exec.failure(f"the command runner's answer was cut off: {line[-200:]!r}") from None
            number = answer.pop("id", None)
            if number == 0:
                self.pid = answer.get("pid")
            if number != self.asked:
                continue  # the runner's first line, or a late answer to an earlier request
            if not ({"runner_ended", "error", "view_unavailable"} & answer.keys()):
                return answer
            failure = self.engine_exec.failure(f"the command runner ended: {answer}")
            raise RunnerEnded(str(failure)) if type(failure) is SandboxError else failure
        if time.monotonic() < deadline:
            raise self._ended(f"the command runner ended: {self.channel.diagnostics()[-2000:]!r}")
        if self._stopped():  # by the trial's processes: SIGSTOP holds a runner until any timeout
            raise self._ended(f"the command runner (pid {self.pid}) was stopped")
        raise self.engine_exec.failure(f"no answer from the command runner within {timeout_s:.0f} s")

    def _stopped(self) -> bool:
        """Whether the runner is stopped; if so it is killed, and its exec ends."""
        if self.pid is None:
            return False
        script = f"grep -q '^State:[[:space:]]*[tT]' /proc/{self.pid}/status && kill -9 {self.pid}"
        exit_code, _, _ = self.engine_exec.run(["sh", "-c", script], timeout_s=STOPPED_CHECK_TIMEOUT_S)
        return exit_code == 0

    def _ended(self, message: str) -> InfrastructureError:
        """RunnerEnded when the engine reports the runner's exec ended while its container runs; the container's
        or the transport's failure otherwise."""
        failure = self.engine_exec.failure(message)
        if type(failure) is SandboxError and self._exec_ended():
            return RunnerEnded(str(failure))
        return failure

    def _exec_ended(self) -> bool:
        api = self.engine_exec.container.client.api
        for _ in range(EXEC_END_POLLS):  # the engine notes the end a moment after the stream closes
            try:
                if not api.exec_inspect(self.exec_id)["Running"]:
                    return True
            except _ENGINE_FAILURES:
                return False
            time.sleep(0.1)
        return False

    def _line(self) -> bytes | None:
        while b"\n" not in self.pending:
            chunk = self.channel.receive()  # b"" once the exec's output ends, or its socket times out
            if not chunk:
                return None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line

    def close(self) -> None:
        self.channel.close()  # the runner's stdin ends, and with it the runner


class ContainerWorkspace(ExecWorkspace):
    """An exec workspace whose harness files move as tar archives, one engine call each, and whose commands all
    go to one runner (`RunnerSession`), started by the first."""

    def __init__(
        self,
        container: Container,
        root: str,
        extra_env: Mapping[str, str],
        limits: ResourceLimits,
        task: TaskLayout | None = None,
        cut_network: bool = True,
    ) -> None:
        self.engine_exec = EngineExec(container)  # `pod`, typed as the engine's: the runner session needs it
        super().__init__(self.engine_exec, root, extra_env, limits, task, cut_network)
        self.container = container
        self._session: RunnerSession | None = None
        self._asking = threading.Lock()  # one request at a time on the session

    def _runner_answer(self, request: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        with self._asking:
            self._session = self._session or RunnerSession(self.engine_exec)
            try:
                return self._session.ask(request, timeout_s)
            except InfrastructureError:
                self.end_commands()  # the next command starts another runner
                raise

    def end_commands(self) -> None:
        if self._session:
            self._session.close()
            self._session = None

    def write_harness_file(self, name: str, content: str | bytes) -> str:
        """Root's file, readable (not writable) by the workspace's uid: the harness directory above it is
        root's and open to the uid's group only."""
        data = content.encode() if isinstance(content, str) else content
        path = self._writable_harness_path(name)
        at_harbor_path = bool(self.task and self.task.path(name))
        destination, relative = ("/", path.lstrip("/")) if at_harbor_path else (f"{self.root}/harness", name)
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            for parent in reversed(Path(relative).parents[:-1]):
                directory = tarfile.TarInfo(str(parent))
                directory.type, directory.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(directory)
            info = tarfile.TarInfo(relative)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        try:
            written = self.container.put_archive(destination, archive.getvalue())
        except _ENGINE_FAILURES as error:
            raise self.pod.failure(f"writing {name}: {error}") from error
        if not written:
            raise self.pod.failure(f"could not write {name}")
        return self.harness_path(name)

    @property
    def judged_in_place(self) -> bool:
        return self.task is not None  # a terminal task's own container; a pod's workspaces give their diff

    def snapshot(self, name: str) -> dict[str, str] | None:
        """A terminal task's container committed as an image (its filesystem, not its processes), tagged
        `name` and labelled as the harness's and its campaign's."""
        if not self.judged_in_place:
            return None
        campaign = self.container.labels.get(CAMPAIGN_LABEL, "")
        labels = [
            f"LABEL {MANAGED_LABEL}=true",
            "LABEL eval_pipeline.layer=snapshot",
            f"LABEL {CAMPAIGN_LABEL}={campaign}",
        ]
        try:  # the API's own call: the model's would also fetch the whole image record, unused
            image_id = self.container.client.api.commit(
                self.container.id, repository=SNAPSHOT_REPOSITORY, tag=name, changes=labels
            )["Id"]
        except _ENGINE_FAILURES as error:
            raise self.pod.failure(f"committing {self.container.name}: {error}") from error
        # Docker names the id with its digest's algorithm, Podman without: recorded as images' ids are
        image_id = image_id if image_id.startswith("sha256:") else f"sha256:{image_id}"
        return {"image": f"{SNAPSHOT_REPOSITORY}:{name}", "image_id": image_id}

    def image_changes(self) -> list[ImageChange] | None:
        """A terminal task's container against its image, as the engine records it (`GET /containers/{id}/changes`):
        outside the container, which nothing in it can alter. A re-grade's container is against its snapshot."""
        if not self.judged_in_place:
            return None
        try:
            changes = self.container.diff() or []
        except _ENGINE_FAILURES as error:
            raise self.pod.failure(f"reading the changes of {self.container.name}: {error}") from error
        return [ImageChange(change["Path"], _CHANGE_KINDS[change["Kind"]]) for change in changes]

    def real_path(self, path: str) -> str | None:
        """The engine's stat of `path` (`HEAD /containers/{id}/archive`), which names where a final link leads
        (Podman names every path's own): nothing inside the container answers it."""
        api = self.container.client.api
        try:
            response = api.head(api._url("/containers/{0}/archive", self.container.id), params={"path": path})
        except _ENGINE_FAILURES as error:
            raise self.pod.failure(f"looking up {path}: {error}") from error
        if response.status_code == 404:
            if isinstance(failure := self.pod.failure(f"looking up {path}"), SandboxLost):
                raise failure
            return None
        if not response.ok:
            raise self.pod.failure(f"looking up {path}: the engine answered {response.status_code}")
        stat = json.loads(base64.b64decode(response.headers["X-Docker-Container-Path-Stat"]))
        return stat.get("linkTarget") or path

    def read_harness_file(self, name: str) -> bytes | None:
        """Through the engine's archive, whose output an exec without the private channel can lose under load
        (files a command leaves come back with its answer instead, over that channel: `run_then_read`). The
        archive follows a final link, so one (planted by the uid in out/: it could name another trial's file) is
        read as no file; names under out/ are flat, so no directory on the way is the uid's."""
        path = self._readable_harness_path(name)
        try:
            chunks, stat = self.container.get_archive(path)
        except docker.errors.NotFound as error:
            failure = self.pod.failure(f"reading {name}: {error}")
            if isinstance(failure, SandboxLost):
                raise failure from error
            return None  # the container is fine; no command wrote the file
        except _ENGINE_FAILURES as error:
            raise self.pod.failure(f"reading {name}: {error}") from error
        if stat.get("linkTarget") not in ("", path):  # Docker names a link's target; Podman every path's own
            return None
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            member = tar.getmembers()[0]
            content = tar.extractfile(member) if member.isfile() else None
            return content.read() if content else None


# Per process and engine: the client, and whether the engine is Podman.
_clients: dict[tuple[int, str], tuple[docker.DockerClient, bool]] = {}
_clients_lock = threading.Lock()


def engine_client() -> docker.DockerClient:
    """This process's client of the engine at DOCKER_HOST, made once: a client per step cost a third of a pod
    campaign's wall (each one reads the environment, opens a connection pool and asks the engine its version).
    Keyed by pid too, so a forked worker does not share its parent's connections."""
    return _engine()[0]


def engine_is_podman() -> bool:
    """Whether this process's engine is Podman (its ping names Libpod's API version)."""
    return _engine()[1]


def _engine() -> tuple[docker.DockerClient, bool]:
    key = (os.getpid(), os.environ.get("DOCKER_HOST", ""))
    with _clients_lock:
        if key not in _clients:
            try:
                with engine_errors(
                    f"connecting to the container engine at {key[1] or 'the default socket'} (DOCKER_HOST)"
                ):
                    _clients[key] = _connect()
            except SandboxError as error:
                raise EngineUnreachable(str(error)) from error.__cause__
        return _clients[key]


def _filled_mark(volume: Volume) -> str | None:
    """The name of the empty volume that says `volume` was seen full: its name and its own id (None without
    one). Only the harness reaches the engine; no trial can make it."""
    volume_id = (volume.attrs.get("Labels") or {}).get(VOLUME_ID_LABEL, "")
    return f"{volume.name}.filled-{volume_id}" if volume_id else None


def _volume_exists(client: docker.DockerClient, name: str) -> bool:
    try:
        client.volumes.get(name)
    except docker.errors.NotFound:
        return False
    return True


def _fill_tools(filler: Container) -> None:
    """Put the runtime, then its marker, into the tool volume through `filler`. Podman copies into a container
    through a subprocess of its own, which under load has broken its pipe (a 500, "passing bulk input to
    subprocess"): a put only overwrites, so one that failed on the engine's side is made once more."""
    for attempt in range(2):
        try:
            filler.put_archive(TOOLS_ROOT, runtime_archive())
            filler.put_archive(TOOLS_ROOT, _marker_archive())
            return
        except docker.errors.APIError as error:
            if attempt or not error.is_server_error():
                raise


def _connect() -> tuple[docker.DockerClient, bool]:
    """A client speaking the engine's API version as its ping states it, and whether the engine is Podman.
    docker-py's own negotiation asks the engine's /version, which Podman answers by running its OCI runtime's and
    conmon's binaries: 0.45 s idle and a second under load, in every process of the command (twice, with the
    question which engine it is). The version is the engine's, as docker-py's negotiation takes it; an engine
    whose ping names none gets that negotiation."""
    client = docker.from_env(version=DEFAULT_DOCKER_API_VERSION, timeout=CLIENT_TIMEOUT_S)  # asks nothing yet
    ping = client.api._get(client.api._url("/_ping", versioned_api=False))  # with the client's headers, timeout
    ping.raise_for_status()
    podman = "Libpod-Api-Version" in ping.headers
    version = ping.headers.get("Api-Version") or "auto"
    client.close()
    return docker.from_env(version=version, timeout=CLIENT_TIMEOUT_S), podman


class ContainerSandbox(SandboxBackend):
    name = "container"

    @property
    def client(self) -> docker.DockerClient:
        return engine_client()

    def _labels(self, **extra: str) -> dict[str, str]:
        return {MANAGED_LABEL: "true", CAMPAIGN_LABEL: self.campaign, **extra}

    def _checkout_dir(self, instance: Task) -> Path:
        return self.root / "checkouts" / _slug(f"{instance.repo}@{instance.base_commit}")

    def _image_checkout_dir(self, instance: Task) -> Path:
        return self.root / "image-checkouts" / _slug(f"{instance.repo}@{instance.base_commit}")

    def _requirements_dir(self, instance: Task) -> Path:
        return self.root / "requirements" / _slug(f"{instance.repo}@{instance.environment_setup_commit}")

    def _layers(self, instance: Task, spec: EnvironmentSpec) -> ImageLayer:
        if (own_image := instance.own_image) is not None:
            return task_layers(own_image, self.settings.task_base_images, self._image_id)
        settings = self.settings
        python = PythonSource(settings.base_image, settings.python_source, settings.python_image)
        base, interpreter = base_layer(python, spec.python, settings.extra_ca_bundle, self._image_id)
        requirements = self._requirements_dir(instance) if spec.requirements else None
        env = env_layer(base, interpreter, instance, spec, requirements)
        return instance_layer(env, instance, spec, self._image_checkout_dir(instance))

    def environment_key(self, instance: Task, spec: EnvironmentSpec) -> str:
        return self._layers(instance, spec).tag

    def _image_id(self, name: str) -> str:
        """images.ImageId on this engine."""
        image = find_image(self.client, name)
        return image.id if image else ""

    def enforced_limits(self) -> dict[str, bool]:
        return {
            "memory_floor_mb": True,  # the cgroup's soft limit (reservation)
            "memory_ceiling_mb": self.limits.multiplier is not None,
            "cpu_floor": False,  # engines offer relative CPU shares, not a guarantee
            "cpu_ceiling": self.limits.multiplier is not None,
            "pids": True,
            "output_bytes": True,
        }

    def _container_limits(self, trials: int) -> dict[str, Any]:
        """Engine limits for a container that holds `trials` trials at once."""
        limits = self.limits
        memory_ceiling = limits.effective_memory_ceiling_mb
        reservation = limits.memory_floor_mb if memory_ceiling is None else min(limits.memory_floor_mb, memory_ceiling)
        kwargs: dict[str, Any] = {
            "mem_reservation": f"{reservation * trials}m",
            "pids_limit": limits.pids * trials,
            "cpu_shares": max(2, int(1024 * limits.cpu_floor * trials)),
        }
        if memory_ceiling is not None:
            kwargs["mem_limit"] = kwargs["memswap_limit"] = f"{memory_ceiling * trials}m"
        if limits.effective_cpu_ceiling is not None:
            cpus = min(limits.effective_cpu_ceiling * trials, os.cpu_count() or 1)
            kwargs["nano_cpus"] = int(cpus * 1e9)
        return kwargs

    def _checkout(self, instance: Task, source: RepoSource) -> Path:
        """The repository at the base commit with its full history (requirements are read at the environment's
        setup commit, which may be later), made once; it never goes into an image."""
        return _cloned_once(source.location(instance.repo), instance.base_commit, self._checkout_dir(instance))

    def _image_checkout(self, instance: Task, source: RepoSource) -> Path:
        """What the instance image copies: the base commit, its ancestors and the tags on them (an install may read
        them), and no object of a later commit (KEEP_ANCESTORS), made once from the full checkout."""
        full = self._checkout(instance, source)
        return _cloned_once(str(full), instance.base_commit, self._image_checkout_dir(instance), KEEP_ANCESTORS)

    def build(self, instance: Task, spec: EnvironmentSpec, source: RepoSource) -> dict[str, Any]:
        def prepare_context(layer: ImageLayer) -> None:
            if instance.own_image is not None:  # its context is the task's own environment/ directory
                return
            if layer.kind == "instance":
                self._image_checkout(instance, source)
            elif layer.kind == "env" and spec.requirements:
                text = instance.requirements(spec, self._checkout(instance, source))
                directory = self._requirements_dir(instance)
                directory.mkdir(parents=True, exist_ok=True)
                (directory / "requirements.txt").write_text(text)

        builder = ImageBuilder(self.client, self.root)
        with engine_errors(f"building the environment of {instance.instance_id}"):
            record = builder.ensure(self._layers(instance, spec), prepare_context=prepare_context)
        return {
            **record,
            "environment_key": record["tag"],
            "build_logs": [str(builder.log_path(t)) for t in record["built"]],
        }

    def _task_layout(self, task: TaskImage, image: str) -> dict[str, Any]:
        """The task's container layout: its WORKDIR and its image's own variables. The commit its working tree
        starts at is read in each trial's container before the agent's first command (ExecWorkspace.create):
        a container started here only to read it cost each environment a second under load."""
        with engine_errors(f"reading the image of {task.instance_id}"):
            found = find_image(self.client, image)
            if found is None:
                raise docker.errors.ImageNotFound(f"no image {image}")
            config = found.config
        env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
        return {"workdir": task.workdir, "env": {"HOME": "/root", **env}}

    def prepare(self, instance: Task, spec: EnvironmentSpec, source: RepoSource) -> EnvironmentHandle:
        record = self.build(instance, spec, source)
        if (own_image := instance.own_image) is not None:  # Harbor's way: a container per workspace, as root
            return EnvironmentHandle(
                backend=self.name,
                instance_id=instance.instance_id,
                key=record["environment_key"],
                location=record["tag"],
                details={
                    "image": record["tag"],
                    "image_id": record["image_id"],
                    "mode": "strict",
                    "task": self._task_layout(own_image, record["tag"]),
                    # The task's own allow_internet decides: the engine's default network, or none at all.
                    "network": ENGINE_NETWORK if own_image.allow_internet else NO_NETWORK,
                    "storage_mb": own_image.storage_mb,
                    "from_images": substitute_from(own_image.dockerfile, self.settings.task_base_images)[1],
                },
            )
        network = ENGINE_NETWORK if self.network else NO_NETWORK
        limits_id = stable_hash([self._container_limits(self.settings.pod_parallelism), network, runtime_identity()])[
            :8
        ]
        handle = EnvironmentHandle(
            backend=self.name,
            instance_id=instance.instance_id,
            key=record["environment_key"],
            # The pod's limits, network and tool runtime are part of its identity: a pod started with others
            # is never reused.
            location=f"eval-pod-{_slug(self.campaign)}-{_slug(instance.instance_id)}-{limits_id}",
            details={
                "image": record["tag"],
                "image_id": record["image_id"],
                "mode": self.settings.mode,
                "python": spec.python or "base image's",
                "trial_view": "mount namespace",
                # The pod's (or strict container's) network; a trial that did not opt in has none either way.
                "network": network,
            },
        )
        if self.settings.mode == "pod":
            self._pod(handle)
        return handle

    def snapshot_environment(self, environment: EnvironmentHandle, snapshot: Mapping[str, str]) -> EnvironmentHandle:
        """The task's environment with the snapshot as its image, found by its id (its tag names the generation,
        which another campaign on this engine may have committed since); SandboxLost when it is gone (a re-grade
        then cannot start from the agent's state)."""
        with engine_errors(f"the snapshot {snapshot['image']} ({snapshot['image_id']})"):
            self.client.images.get(snapshot["image_id"])
        details = {**environment.details, "image": snapshot["image_id"]}
        if task := details.get("task"):
            details["task"] = {**task, "from_snapshot": True}
        return replace(environment, details=details)

    def disks_shared_with(self, paths: Mapping[str, Path]) -> list[str]:
        """The engine's storage (its root directory, where containers' writable layers live) against each of
        `paths`, when the engine runs on this machine (its root exists here)."""
        with engine_errors("asking the engine where it stores containers"):
            root = Path(self.client.info().get("DockerRootDir") or "/nonexistent")
        if not root.exists():
            return []
        device = root.stat().st_dev
        return [
            f"the container engine's storage ({root}) is on the same file system as {name} ({path}): trials'"
            " writes (each within resources.storage_mb) and images fill the disk the harness stores on;"
            " put it on a disk of its own (README, 'Storage')"
            for name, path in paths.items()
            if _existing_parent(path).stat().st_dev == device
        ]

    def _security_options(self) -> list[str]:
        """Each trial command enters a user and mount namespace of its own (its view of /testbed). Podman's
        default seccomp profile allows that; Docker Engine's allows it only with CAP_SYS_ADMIN, a far larger
        grant than lifting the filter, so there the filter is lifted instead. No process may regain privileges
        (set-uid files), as the Kubernetes pod's security context says too."""
        return ["no-new-privileges", *([] if engine_is_podman() else ["seccomp=unconfined"])]

    def _tools_volume(self, image: str) -> str:
        """The volume holding the tool server's runtime (tool_runtime.py), filled once per engine through a
        container of `image` that is never started; a volume whose filling was cut short (no marker) is
        filled again. Once a volume is seen full, an empty volume named for its own id (a label it was created
        with) says so on the engine (`_filled_mark`): every later process, whatever its data directory, asks
        the engine for that name (milliseconds) instead of looking through a container (a second of the
        engine's under load, which the first trials of every command waited for). A volume made again under
        the same name has another id, and one made without an id is always looked into."""
        name = f"{TOOLS_VOLUME_PREFIX}{runtime_identity()}"
        engine = os.environ.get("DOCKER_HOST", "")
        if (engine, name) in _FILLED_VOLUMES:
            return name
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / name, "w") as lock, engine_errors(f"filling the volume {name}"):
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                volume = self.client.volumes.get(name)
            except docker.errors.NotFound:
                volume = self.client.volumes.create(
                    name, labels={MANAGED_LABEL: "true", VOLUME_ID_LABEL: uuid.uuid4().hex}
                )
            mark = _filled_mark(volume)
            if not (mark and _volume_exists(self.client, mark)):
                self._fill_if_empty(name, image)
                if mark:  # after the fill: a fill cut short leaves no mark
                    self.client.volumes.create(mark, labels={MANAGED_LABEL: "true"})
        _FILLED_VOLUMES.add((engine, name))
        return name

    def _fill_if_empty(self, name: str, image: str) -> None:
        # nocopy: the engine would otherwise copy what `image` holds at TOOLS_ROOT into the empty volume
        # (a task's own image could plant a sitecustomize.py there, run as root by every later server).
        filler = self.client.containers.create(
            image, ["true"], volumes={name: {"bind": TOOLS_ROOT, "mode": "rw,nocopy"}}, network_mode="none"
        )
        try:
            try:
                filler.get_archive(f"{TOOLS_ROOT}/{TOOLS_MARKER}")
            except docker.errors.NotFound:
                _fill_tools(filler)
        finally:
            filler.remove(force=True)

    def _start(
        self, image: str, name: str, labels: Mapping[str, str], trials: int, network: str, task: bool = False
    ) -> Container:
        """Start a container on `network` (ENGINE_NETWORK or NO_NETWORK), with the tool runtime mounted. A
        terminal task's lets any user bind ports below 1024, as Docker Engine's containers do by default: its
        agent is root in a user namespace of its own (limited_exec.py), which holds no capability over the
        container's network (an nginx on port 80 would otherwise fail)."""
        tools = self._tools_volume(image)
        with engine_errors(f"starting {name}"):
            try:
                return self.client.containers.run(
                    image,
                    HARNESS.runner("--reap"),
                    name=name,
                    detach=True,
                    labels=dict(labels),
                    volumes={tools: {"bind": TOOLS_ROOT, "mode": "ro,nocopy"}},
                    security_opt=self._security_options(),
                    **({"network_mode": "none"} if network != ENGINE_NETWORK else {}),
                    **({"sysctls": {"net.ipv4.ip_unprivileged_port_start": "0"}} if task else {}),
                    **self._container_limits(trials),
                )
            except docker.errors.APIError as error:
                if error.status_code != 409:
                    raise
                return self.client.containers.get(name)  # another process started it first

    def _pod(self, handle: EnvironmentHandle) -> Container:
        """The instance's running pod, started (or restarted, if it was lost) on demand."""
        with engine_errors(f"pod {handle.location}"):
            try:
                pod = self.client.containers.get(handle.location)
                if pod.status == "running":
                    return pod
                pod.remove(force=True)
            except docker.errors.NotFound:
                pass
        labels = self._labels(**{"eval_pipeline.instance": handle.instance_id, "eval_pipeline.role": "pod"})
        network = handle.details.get("network", NO_NETWORK)
        return self._start(handle.details["image"], handle.location, labels, self.settings.pod_parallelism, network)

    @contextmanager
    def pod_slot(self, handle: EnvironmentHandle) -> Iterator[int]:
        """One of the pod's `pod_parallelism` trial slots, held across processes; yields its index."""
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        while True:
            for slot in range(self.settings.pod_parallelism):
                with open(locks / f"{handle.location}.slot{slot}", "w") as lock:
                    try:
                        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue
                    yield slot
                    return
            with open(locks / f"{handle.location}.slot0", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # wait for the first slot rather than spin

    def extra_env(self) -> dict[str, str]:
        if not self.settings.extra_ca_bundle:
            return {}
        return {"SSL_CERT_FILE": CA_BUNDLE, "REQUESTS_CA_BUNDLE": CA_BUNDLE, "PIP_CERT": CA_BUNDLE}

    @contextmanager
    def workspace(
        self, environment: EnvironmentHandle, label: str, network: bool = False
    ) -> Iterator[ContainerWorkspace]:
        self.check_network(network)
        if self.settings.mode == "pod" and "task" not in environment.details:
            with (
                self.pod_slot(environment) as slot,
                self._used(
                    self._pod(environment), f"slot{slot}", cut_network=self.network and not network
                ) as workspace,
            ):
                yield workspace
            return
        labels = self._labels(
            **{
                "eval_pipeline.instance": environment.instance_id,
                "eval_pipeline.trial": label,
                "eval_pipeline.role": "trial",
            }
        )
        name = f"eval-trial-{_slug(self.campaign)}-{_slug(label)}-{uuid.uuid4().hex[:8]}"
        task = environment.details.get("task")
        if task:  # its own allow_internet decided at prepare
            engine_network = environment.details.get("network", NO_NETWORK)
        else:
            engine_network = ENGINE_NETWORK if network else NO_NETWORK
        container = self._start(environment.details["image"], name, labels, 1, engine_network, bool(task))
        try:
            with self._used(container, "trial", task, cut_network=False) as workspace:  # its own network, or none
                yield workspace
        finally:
            _remove_soon(container)

    @contextmanager
    def _used(
        self, container: Container, name: str, task: Mapping[str, Any] | None = None, cut_network: bool = True
    ) -> Iterator[ContainerWorkspace]:
        """A workspace made in `container` for the duration of the block, under a uid of its own; a terminal
        task's is its container's WORKDIR, worked on as root, as its author expects."""
        if task:
            layout = TaskLayout.from_details(task)
            workspace = ContainerWorkspace(container, f"{HARNESS_ROOT}/trial", {}, self.limits, layout)
        else:
            workspace = ContainerWorkspace(
                container, f"{WORKSPACES}/{name}", self.extra_env(), self.limits, cut_network=cut_network
            )
        with workspace.created():
            yield workspace

    def release(self) -> None:
        """Remove the campaign's containers, several at once: the engine stops each (its runner exits on
        SIGTERM), unmounts and deletes it, about half a second a pod, which one after the other made most of
        the seconds between a campaign's last trial and its report."""
        removals_done()
        with engine_errors(f"releasing campaign {self.campaign}'s containers"):
            containers = self.client.containers.list(
                all=True, filters={"label": [f"{MANAGED_LABEL}=true", f"{CAMPAIGN_LABEL}={self.campaign}"]}
            )
            with ThreadPoolExecutor(max_workers=RELEASE_PARALLELISM) as removing:
                list(removing.map(lambda container: container.remove(force=True), containers))


def _remove_soon(container: Container) -> None:
    """Remove a trial's container (stopping what runs in it) on a thread of this process, while the trial's
    records are stored: the engine takes 0.2-0.5 s a container, a tenth of a short trial's wall. `release`
    and `removals_done` wait for it; a process that dies first leaves it to `release` or the janitor. (On
    Podman with netavark before 1.9 a removal beside another container's start changed the default bridge's
    address and stalled that container's network for a minute: the engine set-up pins the bridge, docs/SANDBOXES.md.)"""
    global _removals
    with _removals_lock:
        _removals = _removals or ThreadPoolExecutor(max_workers=REMOVAL_THREADS, thread_name_prefix="remove")
        removal = _removals.submit(_remove, container)
        _pending_removals.add(removal)
    removal.add_done_callback(_forget)


def _remove(container: Container) -> None:
    try:
        container.remove(force=True)
    except _ENGINE_FAILURES as error:  # the janitor removes what the engine could not remove now
        logger.warning("could not remove %s: %s", container.name, error)


def _forget(removal: Future) -> None:
    with _removals_lock:
        _pending_removals.discard(removal)


def removals_done() -> None:
    """Wait until every trial container this process set out to remove is removed (or failed to be)."""
    with _removals_lock:
        pending = list(_pending_removals)
    wait(pending)


def _no_removals_in_a_child() -> None:
    """A forked child has none of its parent's threads: it starts its own, and waits only for its own removals."""
    global _removals, _removals_lock
    _removals, _removals_lock = None, threading.Lock()
    _pending_removals.clear()


os.register_at_fork(after_in_child=_no_removals_in_a_child)


def _cloned_once(location: str, commit: str, target: Path, then: str = "") -> Path:
    """`location` cloned at `commit` into `target` (then the shell command `then` run in it), unless it is there:
    made in a scratch directory beside it and moved into place, so a crash never leaves half a clone."""
    if not (target / ".git").exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            clone_at(location, commit, Path(scratch) / "repo")
            if then:
                subprocess.run(["sh", "-c", then], cwd=Path(scratch) / "repo", check=True, capture_output=True)
            os.replace(Path(scratch) / "repo", target)
    return target
