"""What SWE-bench's grading reads of a row: `GradedRow`, which an `Instance` (instance.py) is. The grading
(grading.py) and the test command's directives (specs.py) name it, below the instance that grades with them.
`CodeRowTask` is what the code rows' task classes (`Instance`, `SmithInstance`, `ProInstance`) share as tasks."""

from pathlib import Path
from typing import Any, ClassVar, Protocol

from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.sandbox import ExecResult, Workspace
from eval_pipeline.sandbox.patches import apply_patch
from eval_pipeline.tasks.data import TaskImage
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.swebench.canaries import TwinSettings

__all__ = ["CodeRowTask", "GradedRow"]


class GradedRow(Protocol):
    """A row as its grading reads it: its id and base commit, the test patch, the graded tests (FAIL_TO_PASS,
    PASS_TO_PASS) and the campaign's twins for them."""

    @property
    def instance_id(self) -> str: ...

    @property
    def base_commit(self) -> str: ...

    @property
    def test_patch(self) -> str: ...

    @property
    def FAIL_TO_PASS(self) -> tuple[str, ...]: ...

    @property
    def PASS_TO_PASS(self) -> tuple[str, ...]: ...

    @property
    def twins(self) -> TwinSettings: ...


class CodeRowTask:
    """A code row as a `Task` (tasks/task.py), the part every row kind shares: no image of its own to build and
    no resources or time limits of its own (the campaign's apply); its content hash that of its row (`to_row`);
    its reference a patch (its `patch`, the gold) applied to the workspace; no requirements file of its own
    (`Instance` reads SWE-bench's); its product, its patch, graded on a fresh workspace, never in place."""

    patch: str
    own_image: ClassVar[TaskImage | None] = None
    memory_mb: ClassVar[int | None] = None
    cpus: ClassVar[float | None] = None
    agent_timeout_s: ClassVar[float | None] = None
    verifier_timeout_s: ClassVar[float | None] = None

    def to_row(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def content_hash(self) -> str:
        return stable_hash(self.to_row())

    @property
    def reference_patch(self) -> str:
        return self.patch

    def apply_reference(self, workspace: Workspace, timeout_s: float | None) -> ExecResult:
        """Apply the reference patch (no time limit of its own: applying a patch is the harness's work)."""
        return apply_patch(workspace, self.reference_patch, "reference.patch")

    def requirements(self, spec: EnvironmentSpec, repo_dir: Path) -> str:
        """Nothing: the row's image holds its environment."""
        return ""

    def verify_in_place(self, workspace: Workspace, test_timeout_s: float) -> None:
        """None: a row's product is its patch, graded on a fresh workspace (`grade`), never in place."""
        return None
