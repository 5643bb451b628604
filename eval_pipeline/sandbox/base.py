"""The sandbox interface: one prepared environment per instance, one workspace per trial.

A backend prepares an environment once per instance (the repository at its base
commit with its dependencies installed) and forks an isolated workspace from it
for every agent run and every grading. Backends differ in how they isolate
(processes, containers, Kubernetes pods); callers see only this interface.
"""

import os
import typing
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, StrictBool, StrictStr, StringConstraints, TypeAdapter

from eval_pipeline.common.fields import Count, Number, PositiveCount
from eval_pipeline.common.git import HARNESS_GIT_ENV
from eval_pipeline.common.outcomes import InfrastructureError
from eval_pipeline.tasks.data import TaskData
from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource


def parse_multiplier(value: Any) -> float | None:
    """`1`, `3`, `"3x"` or `"uncapped"` (None: no ceiling at all)."""
    if value in (None, "uncapped"):
        return None
    number = float(str(value).removesuffix("x"))
    if number <= 0:
        raise ValueError(f"multiplier must be positive or 'uncapped', got {value!r}")
    return number


@dataclass(frozen=True)
class ResourceLimits:
    """A task's guaranteed allocation (floor) and its hard limit (ceiling), recorded per trial.

    The multiplier scales the ceilings (1x, 3x, or None for uncapped) so that
    resources can be varied as an experimental variable; floors stay as given.
    `storage_mb` is not scaled: it is how much disk a code trial may fill beyond
    its workspace's own copy of the repository, a wall that keeps one trial from
    filling the disk every other trial (and the harness's own storage) needs.
    """

    __pydantic_config__ = ConfigDict(
        extra="forbid"
    )  # a campaign's `resources:` is read into this (config/campaign_file.py)

    memory_floor_mb: Count = 512
    memory_ceiling_mb: Count = 2048
    cpu_floor: Number = 1.0
    cpu_ceiling: Number = 2.0
    pids: Count = 512
    output_bytes: Count = 1_000_000
    storage_mb: Count = 4096
    multiplier: Annotated[float | None, BeforeValidator(parse_multiplier)] = 1.0

    def with_multiplier(self, multiplier: float | None) -> "ResourceLimits":
        return replace(self, multiplier=multiplier)

    def for_task(self, memory_mb: int | None, cpus: float | None) -> "ResourceLimits":
        """A task's own ceilings (a terminal task's memory_mb and cpus) in place of the campaign's.

        Floors stay the campaign's, lowered where they would stand above the task's ceiling.
        """
        memory_ceiling = memory_mb or self.memory_ceiling_mb
        cpu_ceiling = cpus or self.cpu_ceiling
        return replace(
            self,
            memory_ceiling_mb=memory_ceiling,
            memory_floor_mb=min(self.memory_floor_mb, memory_ceiling),
            cpu_ceiling=cpu_ceiling,
            cpu_floor=min(self.cpu_floor, cpu_ceiling),
        )

    @property
    def effective_memory_ceiling_mb(self) -> int | None:
        return None if self.multiplier is None else int(self.memory_ceiling_mb * self.multiplier)

    @property
    def effective_cpu_ceiling(self) -> float | None:
        return None if self.multiplier is None else self.cpu_ceiling * self.multiplier

    def as_record(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "effective_memory_ceiling_mb": self.effective_memory_ceiling_mb,
            "effective_cpu_ceiling": self.effective_cpu_ceiling,
        }


class SandboxError(InfrastructureError):
    """The sandbox failed (engine, container, file system), not the command run in it: an infrastructure failure.

    Raise `SandboxLost` (an `InfrastructureError` too) when the environment itself is gone.
    """


class EngineUnreachable(SandboxError):
    """No container engine answers where the harness looks (DOCKER_HOST): not started, or another socket. The
    user's to fix, so the command says it in one line; any other infrastructure failure keeps its traceback."""


class SnapshotUnusable(SandboxError):
    """A re-grade's container, started from the agent's snapshot and running, in which the harness could not set
    the verifier up: what the agent left (root in its container) may be the cause, so grading judges it by
    intention to treat (trial/evaluation.py), as it does a test run that ended abnormally."""


class RunnerEnded(SandboxError):
    """The harness's command runner in a container that still runs ended with an exit of its own and no result:
    killed by a process of the trial, most likely (the engine answered, and the container serves on). Generation
    scores it against the agent where a fresh workspace still runs a command (trial/generation.py)."""


PythonSource = Literal["image", "pyenv"]
ImageDigest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]  # a registry's content digest


@dataclass(frozen=True)
class SandboxSettings:
    """The `sandbox:` section of a campaign.

    `mode` (container backend): `pod` runs one long-lived container per
    instance that serves many trials, each in its own workspace and uid;
    `strict` starts a fresh container per workspace. `pod_parallelism` is how
    many trials share a pod at once (its limits are that many times a trial's);
    `build_parallelism` how many environments (images) are built at once.
    The base image and an extra CA bundle (for TLS-inspecting proxies) are
    machine settings as much as campaign settings, so EVAL_PIPELINE_BASE_IMAGE
    and EVAL_PIPELINE_EXTRA_CA_BUNDLE override them. So are the Kubernetes
    backend's `namespace` for environment pods and the `image_registry` its
    images are pushed to (EVAL_PIPELINE_K8S_NAMESPACE, EVAL_PIPELINE_IMAGE_REGISTRY),
    and where an environment's Python version comes from in images
    (EVAL_PIPELINE_PYTHON_SOURCE: `image`, the `python_image` with the version
    filled in; or `pyenv`, the machine's pyenv build copied into the base image).
    `task_base_images` (EVAL_PIPELINE_TASK_BASE_IMAGES) name stand-ins for the
    `FROM` images of terminal tasks' Dockerfiles, for machines that cannot pull
    them: each key a task's `FROM` reference (`ubuntu:24.04`), its value the
    image built in its place (scripts/build_task_base.sh), `*` for any other.
    The variable holds `from=image` entries separated by spaces (a bare image
    is `*`'s). Nothing else of a task's Dockerfile is ever changed.

    `image_digests` pins tasks' named images (tasks/named_image.py), pulled where a slice's `images:` says: each
    key an image's reference as the task names it (`swebench/sweb.eval.x86_64.psf_1776_requests-1142:latest`,
    or as Docker qualifies it, `docker.io/swebench/...:latest`), its value the digest (`sha256:<64 hex>`) the
    image must have. A pinned image is pulled by that digest, and a registry that holds another fails the
    environment as `image_digest_mismatch`; an image not pinned is pulled by its tag and its digest recorded.

    `allow_untrusted_agents_locally` is the explicit opt-in to run untrusted
    agents (agents.Agent.trusted) on the `local` backend, which has no walls:
    their commands, and their patches' code at grading, run on the host as
    the harness's own user, within reach of the data directory and the Dagster
    instance (what they are walled from: sandbox/local.py). Without it such a campaign is refused
    at load; with it every trial's resources record says so. Only the local
    backend takes it (the others contain every agent).
    """

    __pydantic_config__ = ConfigDict(
        extra="forbid"
    )  # a campaign's `sandbox:` is read into this (config/campaign_file.py)

    backend: StrictStr = "local"
    mode: Literal["pod", "strict"] = "pod"
    base_image: StrictStr = "python:3.11-slim"
    extra_ca_bundle: StrictStr | None = None
    pod_parallelism: PositiveCount = 1
    build_parallelism: PositiveCount = 2
    namespace: StrictStr = "eval-environments"
    image_registry: StrictStr | None = None
    python_source: PythonSource = "image"
    python_image: StrictStr = "python:{version}-slim"
    task_base_images: dict[StrictStr, StrictStr] = field(default_factory=dict)
    image_digests: dict[StrictStr, ImageDigest] = field(default_factory=dict)
    allow_untrusted_agents_locally: StrictBool = False

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "SandboxSettings":
        """Settings from a mapping with this machine's overrides; pydantic's ValidationError (a ValueError) names
        a wrong field."""
        return TypeAdapter(cls).validate_python(data).with_machine_overrides()

    def with_machine_overrides(self) -> "SandboxSettings":
        """These settings with the machine's environment variables in place of the campaign's."""
        python_source = os.environ.get("EVAL_PIPELINE_PYTHON_SOURCE") or self.python_source
        if python_source not in typing.get_args(PythonSource):
            raise ValueError(f"EVAL_PIPELINE_PYTHON_SOURCE must be image or pyenv, got {python_source!r}")
        return replace(
            self,
            python_source=typing.cast(PythonSource, python_source),  # one of its values: checked above
            base_image=os.environ.get("EVAL_PIPELINE_BASE_IMAGE") or self.base_image,
            extra_ca_bundle=os.environ.get("EVAL_PIPELINE_EXTRA_CA_BUNDLE") or self.extra_ca_bundle,
            namespace=os.environ.get("EVAL_PIPELINE_K8S_NAMESPACE") or self.namespace,
            image_registry=os.environ.get("EVAL_PIPELINE_IMAGE_REGISTRY") or self.image_registry,
            task_base_images=parse_task_base_images(os.environ.get("EVAL_PIPELINE_TASK_BASE_IMAGES", ""))
            or self.task_base_images,
        )


def parse_task_base_images(text: str) -> dict[str, str]:
    """`from=image` entries separated by white space, a bare `image` standing for `*=image`
    (EVAL_PIPELINE_TASK_BASE_IMAGES): an image reference never holds `=`."""
    stand_ins = {}
    for entry in text.split():
        base, _, image = entry.rpartition("=")
        if not image:
            raise ValueError(f"EVAL_PIPELINE_TASK_BASE_IMAGES: {entry!r} names no image (from=image)")
        stand_ins[base or "*"] = image
    return stand_ins


@dataclass(frozen=True)
class ExecResult:
    """What one command did: its exit, output (capped), time and peak memory."""

    command: str
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    output_truncated: bool = False
    peak_memory_mb: float | None = None
    oom_killed: bool = False
    storage_exceeded: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def summary(self, tail: int = 2000) -> dict[str, Any]:
        """A JSON-friendly record that keeps only the end of each stream."""
        return {
            "command": self.command,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "duration_s": round(self.duration_s, 3),
            "output_truncated": self.output_truncated,
            "peak_memory_mb": self.peak_memory_mb,
            "oom_killed": self.oom_killed,
            **({"storage_exceeded": True} if self.storage_exceeded else {}),
            "stdout_tail": self.stdout[-tail:],
            "stderr_tail": self.stderr[-tail:],
        }


@dataclass(frozen=True)
class ImageChange:
    """A path a container's processes changed against its image, as the engine reports it (`Workspace.image_changes`):
    `kind` is CHANGED (a directory is, when anything below it changed), ADDED or DELETED."""

    CHANGED: typing.ClassVar[str] = "changed"
    ADDED: typing.ClassVar[str] = "added"
    DELETED: typing.ClassVar[str] = "deleted"

    path: str
    kind: str


@dataclass(frozen=True)
class EnvironmentHandle:
    """A prepared environment, as stored by Dagster and passed to later steps."""

    backend: str
    instance_id: str
    key: str
    location: str
    details: Mapping[str, Any] = field(default_factory=dict)


class ToolChannel(ABC):
    """A byte stream to and from one tool server process (its stdin and its stdout), however the worker
    reaches the environment: a local pipe, an engine's exec, a Kubernetes exec."""

    DIAGNOSTICS_CHARS = 4000  # the tail of the server's stderr that `diagnostics` keeps

    @abstractmethod
    def send(self, data: bytes) -> None:
        """Write to the server's stdin; SandboxLost when the server is gone."""

    @abstractmethod
    def receive(self) -> bytes:
        """The next bytes the server wrote to stdout, b"" once it has closed it."""

    @abstractmethod
    def close(self) -> None:
        """End the session: close the server's stdin (it exits) and release the stream."""

    @abstractmethod
    def diagnostics(self) -> str:
        """The end of what the server wrote to stderr, to say why a session broke."""

    @abstractmethod
    def failure(self, message: str) -> InfrastructureError:
        """Why the session broke, as far as the environment tells: SandboxLost when it is gone."""


# The harness directory's one part that the workspace's commands may write (`out/junit.xml`, a log, a diff):
# everything else there is the harness's, which commands may read but not change.
OUTPUT_DIR = "out"
# The most of one harness file the harness reads (a report, a log, a reward, a diff): far above any real one, far
# below what a command may leave there (a file up to the disk quota, or a sparse one, which takes no disk at all).
HARNESS_FILE_CAP_BYTES = 64 * 2**20


class HarnessFileTooLarge(RuntimeError):
    """A harness file a command left holds more than HARNESS_FILE_CAP_BYTES: the command's doing, read no further.
    Raised in grading, it goes through intention to treat like anything grading raises (trial/evaluation.py)."""


class Workspace(ABC):
    """An isolated copy of an environment's repository, for one agent run or one grading.

    Commands run with the repository as working directory. The harness directory
    lies outside the repository, so a patch applied to the repository cannot
    reach what the harness writes or reads there (patches, test reports).
    Commands write their outputs for the harness under OUTPUT_DIR; where a
    backend isolates trials (pods), nothing else of the harness directory is
    theirs to write, and the harness never writes under OUTPUT_DIR.

    `git_env` tells the harness's own git commands where the repository's git
    directory is when it is kept outside the working tree (a terminal task's
    WORKDIR, which its author made without one), and `base_revision` names the
    commit the working tree started from when that is not the task's own: a
    terminal task's WORKDIR commit, or a repository's state after its install
    steps (common/git.py: COMMIT_BASELINE), which every patch is taken against.
    """

    git_env: Mapping[str, str] = {}
    base_revision: str | None = None

    @property
    def harness_git_env(self) -> dict[str, str]:
        """What the harness's own git commands run with: `git_env`, with no hook, monitor or external diff
        that the repository's configuration may name (common/git.py: HARNESS_GIT_ENV)."""
        return {**HARNESS_GIT_ENV, **self.git_env}

    @abstractmethod
    def run(self, command: str, *, timeout_s: float, env: Mapping[str, str] | None = None) -> ExecResult:
        """Run a shell command under the backend's resource limits."""

    def verify(self, command: str, *, timeout_s: float, env: Mapping[str, str] | None = None) -> ExecResult:
        """Run a task's verifier: as `run`, except where the agent's commands are kept from the verifier's
        paths (a terminal task's container), which the verifier sees."""
        return self.run(command, timeout_s=timeout_s, env=env)

    def run_then_read(
        self,
        command: str,
        names: Sequence[str],
        *,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        verifier: bool = False,
    ) -> tuple[ExecResult, dict[str, bytes | None]]:
        """`run` (`verify` for a `verifier`), then the harness files `names` as the command left them (None for
        one it did not write). A backend that can reads them with the command's own answer (an exec's runner,
        ExecWorkspace), where each read was an engine call of its own."""
        result = (self.verify if verifier else self.run)(command, timeout_s=timeout_s, env=env)
        return result, {name: self.read_harness_file(name) for name in names}

    @property
    def judged_in_place(self) -> bool:
        """Whether a task's verifier judges this workspace as its agent left it, processes and all (a terminal
        task's own container, as in Harbor), rather than the agent's patch replayed on a fresh workspace."""
        return False

    def snapshot(self, name: str) -> dict[str, str] | None:
        """Keep the workspace's whole filesystem as it is now under `name`, for a later re-grade; None where it
        is not judged in place (its product is its patch)."""
        return None

    def image_changes(self) -> list[ImageChange] | None:
        """What the workspace's processes changed against the image it started from, as the engine (nothing inside
        the workspace) records it; None where the workspace is no image's container (its product is its patch)."""
        return None

    def real_path(self, path: str) -> str | None:
        """Where `path` leads in the workspace, a final link followed, as the engine sees it; None where nothing is.
        Asked only where `image_changes` is not None."""
        raise NotImplementedError(f"{type(self).__name__} keeps no image to look into")

    def processes_left(self) -> int:
        """How many processes the agent's commands left running in the workspace (none where a command's end
        ends them all)."""
        return 0

    @abstractmethod
    def command_placement(self) -> dict[str, Any]:
        """Where, as whom and under which limits this workspace's commands run: the fields of the runner's
        `RunRequest` (runner/request.py) but the command and its timeout. `run` runs with it, and so does the
        trial's tool server (tool_server.py), so a tool call is held to exactly what a command is."""

    @abstractmethod
    def tool_server_command(self) -> tuple[list[str], dict[str, str]]:
        """How a process inside this workspace starts a tool server: its argv and environment."""

    @abstractmethod
    def open_tool_channel(self, session: Mapping[str, Any]) -> ToolChannel:
        """Start a tool server (tool_server.py) for this workspace and return the stream to it; `session`
        (its placement, limits and git settings) is its first line of input."""

    @abstractmethod
    def harness_path(self, name: str) -> str:
        """The path, as commands in the workspace see it, of a harness file."""

    @abstractmethod
    def write_harness_file(self, name: str, content: str | bytes) -> str:
        """Write a harness file (text as UTF-8, or bytes as they are) and return its path as commands see it."""

    @abstractmethod
    def read_harness_file(self, name: str) -> bytes | None:
        """A harness file's content, or None when no command wrote it: a link, a FIFO (whose opening would wait for
        a writer) or anything but a regular file is none. HarnessFileTooLarge past HARNESS_FILE_CAP_BYTES."""

    def write_harness_tree(self, directory: str, files: Mapping[str, str | bytes]) -> str:
        """Write `files` (relative path -> text or bytes) under the harness directory `directory`; return its
        path."""
        for path, content in files.items():
            self.write_harness_file(f"{directory}/{path}", content)
        return self.harness_path(directory)


class SandboxBackend(ABC):
    """Prepares environments and forks workspaces from them under resource limits.

    `network` says whether any variant of the campaign opted into network: only then may a workspace be
    opened with `network=True`, and only then do backends give their environments one at all. Grading and
    every variant that did not opt in run without network either way.
    """

    name: str

    def __init__(
        self, root: Path, limits: ResourceLimits, settings: SandboxSettings, campaign: str, network: bool = False
    ) -> None:
        self.root = root
        self.limits = limits
        self.settings = settings
        self.campaign = campaign
        self.network = network

    def check_network(self, network: bool) -> None:
        """Refuse a workspace with network on a backend whose campaign opted no variant in."""
        if network and not self.network:
            raise ValueError(f"campaign {self.campaign}: a workspace asked for network, but no variant opted in")

    @abstractmethod
    def environment_key(self, instance: TaskData, spec: EnvironmentSpec) -> str:
        """The content hash of the environment `prepare` makes, computable without making it."""

    @abstractmethod
    def prepare(self, instance: TaskData, spec: EnvironmentSpec, source: RepoSource) -> EnvironmentHandle:
        """Make the instance's environment ready, once; later calls return the same one."""

    @abstractmethod
    def workspace(
        self, environment: EnvironmentHandle, label: str, network: bool = False
    ) -> AbstractContextManager[Workspace]:
        """A fresh workspace forked from the environment, removed on exit; its commands reach no network unless
        `network` (a variant that opted in, see `check_network`)."""

    @abstractmethod
    def enforced_limits(self) -> dict[str, bool]:
        """Which of the limits this backend actually enforces, by field name."""

    @abstractmethod
    def build(self, instance: TaskData, spec: EnvironmentSpec, source: RepoSource) -> dict[str, Any]:
        """Build what `prepare` starts from (an image, a directory), once.

        Returns a JSON-ready record with at least `environment_key` and `built`
        (what this call built: empty when everything existed).
        """

    def snapshot_environment(self, environment: EnvironmentHandle, snapshot: Mapping[str, str]) -> EnvironmentHandle:
        """The environment a re-grade starts from: `environment` with a workspace's snapshot in place of its
        image. Only backends whose workspaces make snapshots (`Workspace.snapshot`) are asked."""
        raise NotImplementedError(f"the {self.name} backend keeps no snapshots")

    def disks_shared_with(self, paths: Mapping[str, Path]) -> list[str]:
        """Where this backend's trials write to the same file system as any of `paths` (the harness's own
        storage, by name), one line each: a trial's quota bounds what it writes, but a disk shared with the
        Dagster instance and the data directory is still one that many trials fill together. Local trials
        write under the data directory itself; backends that cannot tell say nothing."""
        return []

    def release(self) -> None:  # noqa: B027 - a no-op for backends that keep nothing running
        """Stop what this backend keeps running between trials; `prepare` or `workspace` restart it."""

    @property
    def isolation(self) -> str:
        """The walls an agent works within (backend and mode), part of its generation's key: an agent may act
        otherwise in a pod than alone in a container, so a patch made within one is not reused within another.
        The local backend has none to name ('': keys made there stay as they were)."""
        return f"{self.name}/{self.settings.mode}"

    def resources_record(self) -> dict[str, Any]:
        """Requested and enforced resources, as recorded in every trial's lineage (and keyed into its
        evaluation); the opt-in to untrusted agents on the local backend appears only when taken, so a result
        obtained with it is marked, and one obtained without keeps its key."""
        record: dict[str, Any] = {
            "backend": self.name,
            "mode": self.settings.mode,
            "requested": self.limits.as_record(),
            "enforced": self.enforced_limits(),
        }
        if self.settings.allow_untrusted_agents_locally:
            record["allow_untrusted_agents_locally"] = True
        return record
