"""What SWE-bench's grading reads of a row: `GradedRow`, which an `Instance` (instance.py) is. The grading
(grading.py) and the test command's directives (specs.py) name it, below the instance that grades with them."""

from typing import Protocol

from eval_pipeline.tasks.swebench.canaries import TwinSettings

__all__ = ["GradedRow"]


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
