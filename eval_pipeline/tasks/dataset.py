"""A dataset of tasks (Benchmark), and why a row of one cannot be evaluated.

Each kind of task reads its own rows into a Benchmark: SWE-bench rows in
tasks/swebench/instance.py, Terminal-Bench task directories in
tasks/terminal/task.py, the demo in tasks/demo.py.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource
from eval_pipeline.tasks.task import Task

__all__ = ["Benchmark", "InvalidDatasetError", "InvalidInstanceError", "RowProblem"]


@dataclass(frozen=True)
class RowProblem:
    """Why one dataset row (or task directory) cannot be evaluated: where it is, its id, the field, why."""

    row: int | str
    instance_id: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"row {self.row}" if isinstance(self.row, int) else self.row
        return f"{where} ({self.instance_id!r}): field {self.field}: {self.message}"


class InvalidInstanceError(ValueError):
    """A dataset row that cannot become an Instance; the message names row, id and field."""

    def __init__(self, problem: RowProblem) -> None:
        super().__init__(str(problem))
        self.problem = problem


class InvalidDatasetError(ValueError):
    """A dataset rejected whole because some rows are invalid; lists them all."""

    def __init__(self, name: str, problems: list[RowProblem]) -> None:
        listed = "\n".join(f"  {problem}" for problem in problems[:50])
        more = f"\n  ... and {len(problems) - 50} more" if len(problems) > 50 else ""
        super().__init__(f"dataset {name!r}: {len(problems)} invalid row(s):\n{listed}{more}")
        self.problems = problems


@dataclass(frozen=True)
class Benchmark:
    """A dataset of instances plus what it takes to run them.

    `version` is the hash of every row as loaded, extra fields included: it
    changes when and only when the dataset's content changes. `quarantined`
    lists the rows left out as invalid.
    """

    name: str
    instances: tuple[Task, ...]  # a kind's tasks: tasks/swebench/instance.py, tasks/terminal/task.py
    version: str
    source: RepoSource = RepoSource()
    environments: Mapping[str, EnvironmentSpec] = field(default_factory=dict)
    default_environment: EnvironmentSpec = EnvironmentSpec()
    quarantined: tuple[RowProblem, ...] = ()
    # The environments a kind of task specifies itself, by (repository, version), for those that `environments`
    # does not cover: SWE-bench's own specs for its rows (tasks/swebench/specs.py), None when it has none.
    builtin_environment: Callable[[str, str], EnvironmentSpec | None] | None = field(default=None, compare=False)

    ON_INVALID = ("reject", "quarantine")

    def instance(self, instance_id: str) -> Task:
        for candidate in self.instances:
            if candidate.instance_id == instance_id:
                return candidate
        raise KeyError(f"instance {instance_id!r} is not in benchmark {self.name!r}")

    def environment_for(self, instance: Task) -> EnvironmentSpec:
        """The spec for the instance's (repo, version): the campaign's `repo@version` entry, else (for SWE-bench
        datasets) SWE-bench's own specification of that repository and version, else the default."""
        if configured := self.environments.get(f"{instance.repo}@{instance.version}"):
            return configured
        if self.builtin_environment:
            return self.builtin_environment(instance.repo, instance.version) or self.default_environment
        return self.default_environment
