"""The sandbox interface: one prepared environment per instance, one workspace per trial.

A backend prepares an environment once per instance (the repository at its base
commit with its dependencies installed) and forks an isolated workspace from it
for every agent run and every grading. Backends differ in how they isolate
(processes, containers, Kubernetes pods); callers see only this interface.
"""

from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from typing import Any

from eval_pipeline.benchmark import EnvironmentSpec, Instance, RepoSource


@dataclass(frozen=True)
class ResourceLimits:
    """A task's guaranteed allocation (floor) and its hard limit (ceiling), recorded per trial."""

    memory_floor_mb: int = 512
    memory_ceiling_mb: int = 2048
    cpu_floor: float = 1.0
    cpu_ceiling: float = 2.0
    pids: int = 512
    output_bytes: int = 1_000_000

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "ResourceLimits":
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"resources: unknown field(s) {sorted(unknown)}")
        limits = cls(**data)
        if limits.memory_floor_mb > limits.memory_ceiling_mb or limits.cpu_floor > limits.cpu_ceiling:
            raise ValueError("resources: a floor is above its ceiling")
        return limits

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


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
            "stdout_tail": self.stdout[-tail:],
            "stderr_tail": self.stderr[-tail:],
        }


@dataclass(frozen=True)
class EnvironmentHandle:
    """A prepared environment, as stored by Dagster and passed to later steps."""

    backend: str
    instance_id: str
    key: str
    location: str
    details: Mapping[str, Any] = field(default_factory=dict)


class Workspace(ABC):
    """An isolated copy of an environment's repository, for one agent run or one grading.

    Commands run with the repository as working directory. The harness directory
    lies outside the repository, so a patch applied to the repository cannot
    reach what the harness writes or reads there (patches, test reports).
    """

    @abstractmethod
    def run(self, command: str, *, timeout_s: float, env: Mapping[str, str] | None = None) -> ExecResult:
        """Run a shell command under the backend's resource limits."""

    @abstractmethod
    def harness_path(self, name: str) -> str:
        """The path, as commands in the workspace see it, of a harness file."""

    @abstractmethod
    def write_harness_file(self, name: str, content: str) -> str:
        """Write a harness file and return its path as commands see it."""

    @abstractmethod
    def read_harness_file(self, name: str) -> bytes | None:
        """A harness file's content, or None when no command wrote it."""


class SandboxBackend(ABC):
    """Prepares environments and forks workspaces from them under resource limits."""

    name: str

    def __init__(self, limits: ResourceLimits) -> None:
        self.limits = limits

    @abstractmethod
    def environment_key(self, instance: Instance, spec: EnvironmentSpec) -> str:
        """The content hash of the environment `prepare` makes, computable without making it."""

    @abstractmethod
    def prepare(self, instance: Instance, spec: EnvironmentSpec, source: RepoSource) -> EnvironmentHandle:
        """Make the instance's environment ready, once; later calls return the same one."""

    @abstractmethod
    def workspace(self, environment: EnvironmentHandle, label: str) -> AbstractContextManager[Workspace]:
        """A fresh workspace forked from the environment, removed on exit."""

    @abstractmethod
    def enforced_limits(self) -> dict[str, bool]:
        """Which of the limits this backend actually enforces, by field name."""

    def resources_record(self) -> dict[str, Any]:
        """Requested and enforced resources, as recorded in every trial's lineage."""
        return {"backend": self.name, "requested": self.limits.as_record(), "enforced": self.enforced_limits()}
