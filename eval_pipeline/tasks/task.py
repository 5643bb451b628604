"""What every kind of task is to the harness: its data (`TaskData`, tasks/data.py) and what it does.

The agents, evaluation and validation work on a `Task`, never on a concrete
kind. Beyond its data, a kind does three things:

- its reference solution, which validation grades and the oracle agent
  applies: `apply_reference`, which works on a workspace (`reference_patch`,
  in the data, is the same solution where the kind has it as a patch);
- how it is graded: `grade`. Each kind owns its grading, as Inspect AI's tasks
  own their scorers; grading/verdict.py holds what they share and GRADING_VERSION;
- a kind whose product is its container's state (a terminal task) is also judged in
  place, right after its agent (`verify_in_place`); a SWE-bench row is not.

The sandboxes and grading sit below this protocol and name only `TaskData`; this module, the datasets of tasks
(tasks/dataset.py) and the kinds sit above them (eval_pipeline_tests/test_structure.py).
"""

from typing import Protocol, runtime_checkable

from eval_pipeline.grading.verdict import Verdict, VerifierRun
from eval_pipeline.sandbox import ExecResult, Workspace
from eval_pipeline.tasks.data import TaskData
from eval_pipeline.tasks.environment import EnvironmentSpec

__all__ = ["Task"]


@runtime_checkable
class Task(TaskData, Protocol):
    """One task of any kind: its data (`TaskData`) and what it does; see the module's docstring."""

    def apply_reference(self, workspace: Workspace, timeout_s: float | None) -> ExecResult:
        """Put the reference solution into the workspace (the oracle agent's work)."""
        ...

    def grade(self, spec: EnvironmentSpec, model_patch: str, workspace: Workspace, test_timeout_s: float) -> Verdict:
        """Judge `model_patch` on a pristine workspace of the task."""
        ...

    def verify_in_place(self, workspace: Workspace, test_timeout_s: float) -> VerifierRun | None:
        """Run the task's verifier on the agent's own workspace as the agent left it and return its raw run
        (a terminal task's is scored by tasks/terminal/verifier.score_verifier); None for a kind graded only by
        replaying its patch."""
        ...
