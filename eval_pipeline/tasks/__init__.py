"""What a task is to the harness (the Task protocol), what its environment is made of, and a dataset of
tasks. The kinds of task are subpackages: swebench/, terminal/, and the demo (demo.py); they build on the
sandboxes and grading, which build on this package's own modules."""

from eval_pipeline.tasks.dataset import Benchmark, InvalidDatasetError, InvalidInstanceError, RowProblem
from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource
from eval_pipeline.tasks.task import Task, TaskImage

__all__ = [
    "Benchmark",
    "EnvironmentSpec",
    "InvalidDatasetError",
    "InvalidInstanceError",
    "RepoSource",
    "RowProblem",
    "Task",
    "TaskImage",
]
