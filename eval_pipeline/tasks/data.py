"""What a task of any kind is, as data: SWE-bench rows, terminal tasks, and any kind to come.

The sandboxes build a task's environment and workspaces from a `TaskData`, never from a concrete kind, and the
rest of the pipeline reads these members of a `Task` (tasks/task.py, which adds what a task does). A kind states
everything they would otherwise have to find out by asking which kind it is:

- what the agent sees: `instance_id` and `instruction`, in a workspace that
  starts at `repo@base_commit`;
- what its environment is built from: `repo`, `version` (which select its
  `EnvironmentSpec`), `environment_setup_commit` and `requirements` (where and
  how requirements files are read), and `own_image` when the task brings its own image (a Dockerfile of
  its author's) instead of one the harness builds from the spec, and `named_image` when the task names a
  prebuilt image in a registry (tasks/named_image.py: a slice's `images:` policy decides whether it is pulled);
- whether a backend can run it: `own_image` (the container backend runs it as
  its author wrote it; the Kubernetes backend runs no such task) and
  `local_problem` (why the local backend cannot run it faithfully, '' when it
  can);
- its own resources and time limits, `None` where the kind has none and the
  campaign's apply: `memory_mb`, `cpus`, `agent_timeout_s`, `verifier_timeout_s`;
- its reference solution as a patch, `reference_patch`, when the kind has it so;
- its content: `to_row`, hashed as `content_hash`.
"""

from pathlib import Path
from typing import Any, Protocol

from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.named_image import NamedImage

__all__ = ["TaskData", "TaskImage"]


class TaskImage(Protocol):
    """A task's own environment image, as its author wrote it (Harbor's format): its Dockerfile, the build
    context (`environment_dir` on this machine; `environment_hash` over every file, so a changed context is a
    changed image), the WORKDIR that is the task's working tree, and how its containers may use the network and
    disk. A kind that brings its own image is usually its own description of it (`own_image` returns itself)."""

    @property
    def instance_id(self) -> str: ...

    @property
    def dockerfile(self) -> str: ...

    @property
    def environment_dir(self) -> str: ...

    @property
    def environment_hash(self) -> str: ...

    @property
    def workdir(self) -> str: ...

    @property
    def allow_internet(self) -> bool: ...

    @property
    def storage_mb(self) -> int | None: ...


class TaskData(Protocol):
    """One task of any kind, as data; see the module's docstring for what each member is for."""

    @property
    def instance_id(self) -> str: ...

    @property
    def instruction(self) -> str: ...

    @property
    def repo(self) -> str: ...

    @property
    def base_commit(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def environment_setup_commit(self) -> str: ...

    @property
    def content_hash(self) -> str: ...

    @property
    def own_image(self) -> TaskImage | None: ...

    @property
    def named_image(self) -> NamedImage | None: ...

    @property
    def local_problem(self) -> str: ...

    @property
    def memory_mb(self) -> int | None: ...

    @property
    def cpus(self) -> float | None: ...

    @property
    def agent_timeout_s(self) -> float | None: ...

    @property
    def verifier_timeout_s(self) -> float | None: ...

    @property
    def reference_patch(self) -> str | None: ...

    def to_row(self) -> dict[str, Any]:
        """A flat row of the task's content, for the dataset snapshot; its hash is `content_hash`."""
        ...

    def requirements(self, spec: EnvironmentSpec, repo_dir: Path) -> str:
        """The text of the requirements file `spec.requirements` names, as this kind of task reads it from its
        repository (`repo_dir`, a clone) at its environment setup commit; sandboxes install it."""
        ...
