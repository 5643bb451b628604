"""A SWE-bench Pro row as a task: the row, its own run script and parser, and its image.

SWE-bench Pro (ScaleAI/SWE-bench_Pro on the Hub; scaleapi/SWE-bench_Pro-os on GitHub) ships rows with
instance_id, repo, base_commit, patch, test_patch, problem_statement, requirements, interface, repo_language,
fail_to_pass and pass_to_pass (lists, JSON- or Python-encoded strings), before_repo_set_cmd,
selected_test_files_to_run and dockerhub_tag, and per instance `run_scripts/<instance_id>/run_script.sh` and
`parser.py`, and the Dockerfiles its images were built from
(`dockerfiles/{base,instance}_dockerfile/<instance_id>/`), whose `ENV` lines its harness exports before the run
script. Each row runs in its image, `docker.io/jefzda/sweap-images:<dockerhub_tag>`, the repository at /app and the
image's Python under /usr/local: a Pro task names that image (`named_image`) and is never built from a spec, so its
slice pulls it and no backend without images (the local one) runs it.

The agent is told what Pro's own harness tells it (helper_code/create_problem_statement.py): the problem
statement, its requirements and the new interfaces.
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.tasks.dataset import (
    Benchmark,
    InvalidDatasetError,
    InvalidInstanceError,
    RowProblem,
    commit_problem,
    id_problem,
    list_column,
    repo_problem,
    require_diffs,
    require_text,
)
from eval_pipeline.tasks.named_image import NamedImage
from eval_pipeline.tasks.swebench.canaries import TwinSettings
from eval_pipeline.tasks.swebench.pro.grading import grade as pro_grade
from eval_pipeline.tasks.swebench.row import CodeRowTask

__all__ = ["PRO_IMAGE_REPOSITORY", "ProInstance", "benchmark_from_pro_rows"]

PRO_IMAGE_REPOSITORY = "docker.io/jefzda/sweap-images"
PRO_WORKDIR = "/app"
PRO_PYTHON_PREFIX = "/usr/local"  # python:3.x-slim's, which every Python row's image is built FROM
RUN_SCRIPT, PARSER = "run_script.sh", "parser.py"
DOCKERFILES = ("base_dockerfile", "instance_dockerfile")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # a Docker tag
REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "dockerhub_tag")


def _listed(row: Mapping[str, Any], name: str, problem: RowProblem) -> tuple[str, ...]:
    """A list column of non-empty names: a list, or a string holding one as JSON or as Python writes it (the rows
    hold both)."""
    value = list_column(row, name, problem, python_literal=True)
    if not all(value):
        raise InvalidInstanceError(problem)
    return value


def _read(path: Path, instance_id: str, field: str, index: int) -> str:
    """The text of the instance's own file at `path`; InvalidInstanceError naming `field` where it has none."""
    if not path.is_file():
        why = f"no {path} (each row needs run_scripts/<instance_id>/{{{RUN_SCRIPT},{PARSER}}} and its Dockerfiles)"
        raise InvalidInstanceError(RowProblem(index, instance_id, field, why))
    return path.read_text(encoding="utf-8", errors="surrogateescape")


def _exports(checkout: Path, instance_id: str, index: int) -> str:
    """The `ENV` lines of the instance's Dockerfiles as `export` lines, as Pro's harness (`create_entryscript`)
    writes them before its run script."""
    lines = []
    for kind in DOCKERFILES:
        text = _read(checkout / "dockerfiles" / kind / instance_id / "Dockerfile", instance_id, kind, index)
        lines += [
            line.strip().replace("ENV", "export", 1) for line in text.split("\n") if line.strip().startswith("ENV")
        ]
    return "\n".join(lines)


@dataclass(frozen=True)
class ProInstance(CodeRowTask):
    """One SWE-bench Pro row with its run script and parser; a `Task` (tasks/task.py) graded as Pro's authors
    grade it (grading.py)."""

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    requirements_text: str  # the row's `requirements`: what the solution must do, told to the agent
    interface: str
    patch: str
    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    before_repo_set_cmd: str
    selected_test_files_to_run: tuple[str, ...]
    dockerhub_tag: str
    repo_language: str
    run_script: str
    parser: str
    env_exports: str  # its Dockerfiles' ENV lines as `export` lines, run before the run script

    version: ClassVar[str] = ""
    local_problem: ClassVar[str] = "a SWE-bench Pro row runs in its own image, which the local backend cannot run"
    twins: ClassVar[TwinSettings] = TwinSettings(0, 0)  # none: Pro's runs are its run scripts', not the launcher's

    @classmethod
    def from_row(cls, row: Mapping[str, Any], checkout: Path, index: int = 0) -> "ProInstance":
        """The row at `index`, with its scripts and Dockerfiles from `checkout` (SWE-bench_Pro-os: `run_scripts/`,
        `dockerfiles/`); InvalidInstanceError names the field."""
        instance_id = str(row.get("instance_id") or "")
        require_text(row, REQUIRED, index=index, instance_id=instance_id)
        for name, problem in (("instance_id", id_problem), ("repo", repo_problem), ("base_commit", commit_problem)):
            if why := problem(row[name]):
                raise InvalidInstanceError(RowProblem(index, instance_id, name, why))
        require_diffs(row, ("patch", "test_patch"), index=index, instance_id=instance_id)
        if not _TAG.fullmatch(row["dockerhub_tag"]):
            raise InvalidInstanceError(RowProblem(index, instance_id, "dockerhub_tag", "not a Docker tag"))
        lists = {
            name: _listed(row, name, RowProblem(index, instance_id, name, "not a list of test names"))
            for name in ("fail_to_pass", "pass_to_pass", "selected_test_files_to_run")
        }
        for name in ("fail_to_pass", "selected_test_files_to_run"):
            if not lists[name]:
                raise InvalidInstanceError(RowProblem(index, instance_id, name, "empty: no test could show the fix"))
        return cls(
            instance_id=instance_id,
            repo=row["repo"],
            base_commit=row["base_commit"],
            problem_statement=row["problem_statement"],
            requirements_text=str(row.get("requirements") or ""),
            interface=str(row.get("interface") or ""),
            patch=row["patch"],
            test_patch=row["test_patch"],
            before_repo_set_cmd=str(row.get("before_repo_set_cmd") or ""),
            dockerhub_tag=row["dockerhub_tag"],
            repo_language=str(row.get("repo_language") or ""),
            run_script=_read(checkout / "run_scripts" / instance_id / RUN_SCRIPT, instance_id, RUN_SCRIPT, index),
            parser=_read(checkout / "run_scripts" / instance_id / PARSER, instance_id, PARSER, index),
            env_exports=_exports(checkout, instance_id, index),
            **lists,
        )

    def to_row(self) -> dict[str, Any]:
        """The row in Pro's columns, with its scripts: what the snapshot holds and `content_hash` hashes."""
        row = asdict(self)
        row["requirements"] = row.pop("requirements_text")
        return {name: list(value) if isinstance(value, tuple) else value for name, value in row.items()}

    @property
    def environment_setup_commit(self) -> str:
        return self.base_commit

    @property
    def named_image(self) -> NamedImage:
        return NamedImage(f"{PRO_IMAGE_REPOSITORY}:{self.dockerhub_tag}", PRO_WORKDIR, PRO_PYTHON_PREFIX)

    @property
    def instruction(self) -> str:
        return (
            f"{self.problem_statement}\n\nRequirements:\n{self.requirements_text}\n\n"
            f"New interfaces introduced:\n{self.interface}\n"
        )

    # What the shared code-task grading helpers read of a row (tasks/swebench/row.py: GradedRow).
    @property
    def FAIL_TO_PASS(self) -> tuple[str, ...]:  # noqa: N802 - SWE-bench's name, read by GradedRow
        return self.fail_to_pass

    @property
    def PASS_TO_PASS(self) -> tuple[str, ...]:  # noqa: N802 - SWE-bench's name, read by GradedRow
        return self.pass_to_pass

    grade = pro_grade


def benchmark_from_pro_rows(
    name: str, rows: Iterable[Mapping[str, Any]], checkout: Path, *, on_invalid: str = "reject"
) -> Benchmark:
    """A Benchmark of Pro rows, each with its scripts and Dockerfiles from `checkout` (SWE-bench_Pro-os); invalid
    rows reject the dataset, or are quarantined, per `on_invalid`. Its slice pulls every row's image."""
    if on_invalid not in Benchmark.ON_INVALID:
        raise ValueError(f"on_invalid must be one of {Benchmark.ON_INVALID}, got {on_invalid!r}")
    rows = list(rows)
    instances: list[ProInstance] = []
    problems: list[RowProblem] = []
    for index, row in enumerate(rows):
        try:
            instance = ProInstance.from_row(row, checkout, index)
        except InvalidInstanceError as error:
            problems.append(error.problem)
            continue
        if any(seen.instance_id == instance.instance_id for seen in instances):
            problems.append(RowProblem(index, instance.instance_id, "instance_id", "duplicate id"))
            continue
        instances.append(instance)
    if problems and on_invalid == "reject":
        raise InvalidDatasetError(name, problems)
    return Benchmark(
        name=name,
        instances=tuple(instances),
        version=stable_hash(sorted(instance.content_hash for instance in instances) + [str(p) for p in problems]),
        quarantined=tuple(problems),
        images="pull",
    )
