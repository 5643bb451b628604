"""What a task is as data (the TaskData and TaskImage protocols, data.py) and what its environment is made of
(environment.py): what the sandboxes and grading build on. Above them sit the Task protocol (task.py, a task's data
and what it does), a dataset of tasks (dataset.py) and the kinds of task: swebench/, terminal/, and the demo
(demo.py); import those from their modules."""

from eval_pipeline.tasks.data import TaskData, TaskImage
from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource

__all__ = ["EnvironmentSpec", "RepoSource", "TaskData", "TaskImage"]
