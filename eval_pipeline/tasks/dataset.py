"""A dataset of tasks (Benchmark), why a row of one cannot be evaluated, and what its ids may be.

Each kind of task reads its own rows into a Benchmark: SWE-bench rows in
tasks/swebench/instance.py, Terminal-Bench task directories in
tasks/terminal/task.py, the demo in tasks/demo.py. Each checks, as it loads a
row, that the strings which become paths, partition keys and command arguments
are ids (`id_problem`), repositories (`repo_problem`) and commits
(`commit_problem`), so that no dataset can name a place outside the harness's.
The row kinds read their columns with the same checks: text that must be there
(`require_text`), patches (`require_diffs`) and lists of names (`list_column`).
"""

import ast
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource
from eval_pipeline.tasks.named_image import ImagePolicy, uses_named_image
from eval_pipeline.tasks.task import Task

__all__ = [
    "MAX_ID_CHARS",
    "Benchmark",
    "InvalidDatasetError",
    "InvalidInstanceError",
    "RowProblem",
    "commit_problem",
    "id_problem",
    "list_column",
    "repo_problem",
    "require_diffs",
    "require_text",
]

# What a dataset's ids may be. An instance id (a terminal task's directory name) names a directory of every
# export (`<dest>/<slice>/<instance id>/...`), a Dagster partition key (`|` joins the two dimensions of a trial's
# key, `,` and brackets are reserved in ranges, `...` is the UI's range, control characters are refused: the
# installed dagster's partitions/utils), a trial's id (`<instance id>|<trial>`), a run's batch name (`first..last`)
# and labels of images and pods. Real datasets use far less than any of these refuse: SWE-bench
# `django__django-11099`, SWE-bench Pro `instance_ansible__ansible-<sha>-v<sha>`, Multi-SWE-bench `org__repo-123`,
# SWE-smith `owner__repo.<hash>.<kind>__<id>`, Terminal-Bench `install-windows-3.11`. So an id is letters, digits,
# `.`, `_` and `-`, starts with a letter or digit (never `.`, `..`, an absolute path or an option's `-`), has no
# `..`, and is at most MAX_ID_CHARS long (a file name holds 255 bytes): one path component, one partition key, as
# it is.
MAX_ID_CHARS = 200
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# A repository is `owner/name` as GitHub spells them: each part letters, digits, `.`, `_`, `-`, and neither `.`
# nor `..` (it names a mirror's directory, `<mirror_dir>/<owner>/<name>`, and a clone URL).
_REPO_PART = re.compile(r"(?!\.\.?$)[A-Za-z0-9._][A-Za-z0-9._-]*")
# A commit is its object name in hex (an abbreviation too): it reaches git's command lines, where anything
# else could be read as an option (`--output=...`) or a ref the harness did not mean.
_COMMIT = re.compile(r"[0-9a-fA-F]{4,64}")


def id_problem(value: object) -> str:
    """Why `value` cannot be a dataset's id (an instance id, a task name), '' when it can; the message quotes it
    as Python writes it, so a control character or a lone surrogate in it is seen."""
    if not isinstance(value, str) or not value:
        return f"{value!r} is no id: an id is a non-empty string"
    if len(value) > MAX_ID_CHARS:
        return f"{value[:40]!r}... is {len(value)} characters long, over the limit of {MAX_ID_CHARS}"
    if not _ID.fullmatch(value) or ".." in value:
        return (
            f"{value!r} is not an id: letters, digits, '.', '_' and '-', starting with a letter or digit, without"
            " '..' (an id names a directory and a Dagster partition as it is)"
        )
    return ""


def repo_problem(value: object) -> str:
    """Why `value` cannot be a repository's name (`owner/name`), '' when it can."""
    parts = value.split("/") if isinstance(value, str) else []
    if len(parts) != 2 or not all(_REPO_PART.fullmatch(part) for part in parts):
        return f"{value!r} is not owner/name: each part letters, digits, '.', '_' and '-', and neither '.' nor '..'"
    return ""


def commit_problem(value: object) -> str:
    """Why `value` cannot be a commit (its object name in hex), '' when it can."""
    if isinstance(value, str) and _COMMIT.fullmatch(value):
        return ""
    return f"{value!r} is not a commit: 4 to 64 hex digits"


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


def require_text(row: Mapping[str, Any], names: Iterable[str], *, index: int, instance_id: str) -> None:
    """Raises InvalidInstanceError naming the first of `names` that `row` lacks, holds as no string, or holds
    blank."""
    for name in names:
        if not isinstance(row.get(name), str) or not row[name].strip():
            raise InvalidInstanceError(RowProblem(index, instance_id, name, "missing or empty"))


_UNIFIED_DIFF = re.compile(r"^(diff --git |--- )", re.MULTILINE)


def require_diffs(row: Mapping[str, Any], names: Iterable[str], *, index: int, instance_id: str) -> None:
    """Raises InvalidInstanceError naming the first of `names` whose text (checked by `require_text`) has no
    file header of a unified diff."""
    for name in names:
        if not _UNIFIED_DIFF.search(row[name]):
            raise InvalidInstanceError(RowProblem(index, instance_id, name, "not a unified diff"))


def list_column(
    row: Mapping[str, Any], name: str, problem: RowProblem, *, python_literal: bool = False
) -> tuple[str, ...]:
    """The column `name` of `row` as a tuple of strings: a list, or a string holding one as JSON (or, with
    `python_literal`, as Python writes it); InvalidInstanceError with `problem` where it is none of these."""
    value = row.get(name)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            if not python_literal:
                raise InvalidInstanceError(problem) from None
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError, RecursionError, MemoryError):
                raise InvalidInstanceError(problem) from None
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise InvalidInstanceError(problem)
    return tuple(value)


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
    # The environments rows specify themselves, by instance id (SWE-rebench's install_config: tasks/swebench/
    # rebench.py), for those that `environments` does not cover; they come before `builtin_environment`.
    row_environments: Mapping[str, EnvironmentSpec] = field(default_factory=dict)
    # The slice's `images:` policy: whether a task's named image is pulled in place of building its environment.
    images: ImagePolicy = "build"

    ON_INVALID = ("reject", "quarantine")

    def instance(self, instance_id: str) -> Task:
        for candidate in self.instances:
            if candidate.instance_id == instance_id:
                return candidate
        raise KeyError(f"instance {instance_id!r} is not in benchmark {self.name!r}")

    def environment_for(self, instance: Task) -> EnvironmentSpec:
        """The spec for the instance's (repo, version): the campaign's `repo@version` entry, else the one the row
        specifies itself (`row_environments`), else (for SWE-bench datasets) SWE-bench's own specification of that
        repository and version, else the default; with the instance's named image as its `image` where the slice's
        `images` policy pulls it."""
        spec = self._specified_environment(instance)
        if uses_named_image(self.images, image := instance.named_image):
            return replace(spec, image=image)
        return spec

    def _specified_environment(self, instance: Task) -> EnvironmentSpec:
        if configured := self.environments.get(f"{instance.repo}@{instance.version}"):
            return configured
        if own := self.row_environments.get(instance.instance_id):
            return own
        if self.builtin_environment:
            return self.builtin_environment(instance.repo, instance.version) or self.default_environment
        return self.default_environment
