"""What every kind of task is to the harness: SWE-bench rows, terminal tasks, and any kind to come.

The sandboxes, agents, grading, evaluation and validation work on a `Task`,
never on a concrete kind. A kind states everything they would otherwise have
to find out by asking which kind it is:

- what the agent sees: `instance_id` and `instruction`, in a workspace that
  starts at `repo@base_commit`;
- what its environment is built from: `repo`, `version` (which select its
  `EnvironmentSpec`), `environment_setup_commit` and `requirements` (where and
  how requirements files are read), and `own_image` when the task brings its own image (a Dockerfile of
  its author's) instead of one the harness builds from the spec;
- whether a backend can run it: `own_image` (the container backend runs it as
  its author wrote it; the Kubernetes backend runs no such task) and
  `local_problem` (why the local backend cannot run it faithfully, '' when it
  can);
- its own resources and time limits, `None` where the kind has none and the
  campaign's apply: `memory_mb`, `cpus`, `agent_timeout_s`, `verifier_timeout_s`;
- its reference solution, which validation grades and the oracle agent
  applies: `reference_patch` when the kind has it as a patch, and
  `apply_reference`, which works on a workspace;
- how it is graded: `grade`. Each kind owns its grading, as Inspect AI's tasks
  own their scorers; grading/verdict.py holds what they share and GRADING_VERSION. A kind
  whose product is its container's state (a terminal task) is also judged in
  place, right after its agent (`verify_in_place`); a SWE-bench row is not.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # grading and the sandboxes build on the task kinds, which implement this protocol
    from eval_pipeline.grading.verdict import Verdict, VerifierRun
    from eval_pipeline.sandbox import ExecResult, Workspace
    from eval_pipeline.tasks.environment import EnvironmentSpec


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


@runtime_checkable
class Task(Protocol):
    """One task of any kind; see the module's docstring for what each member is for."""

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

    def apply_reference(self, workspace: "Workspace", timeout_s: float | None) -> "ExecResult":
        """Put the reference solution into the workspace (the oracle agent's work)."""
        ...

    def grade(
        self, spec: "EnvironmentSpec", model_patch: str, workspace: "Workspace", test_timeout_s: float
    ) -> "Verdict":
        """Judge `model_patch` on a pristine workspace of the task."""
        ...

    def requirements(self, spec: "EnvironmentSpec", repo_dir: Path) -> str:
        """The text of the requirements file `spec.requirements` names, as this kind of task reads it from its
        repository (`repo_dir`, a clone) at its environment setup commit; sandboxes install it."""
        ...

    def verify_in_place(self, workspace: "Workspace", test_timeout_s: float) -> "VerifierRun | None":
        """Run the task's verifier on the agent's own workspace as the agent left it and return its raw run
        (scored by grading.score_verifier); None for a kind graded only by replaying its patch."""
        ...
