"""A SWE-bench instance (a task in SWE-bench's row schema) and a dataset of such rows."""

import json
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
    repo_problem,
    require_diffs,
    require_text,
)
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.named_image import NamedImage, reference_problem
from eval_pipeline.tasks.swebench.canaries import DEFAULT_TWINS, TwinSettings
from eval_pipeline.tasks.swebench.grading import grade as swebench_grade
from eval_pipeline.tasks.swebench.rebench import (
    InstallConfigError,
    canonical_install_config,
    environment_spec,
    row_image,
)
from eval_pipeline.tasks.swebench.requirements import requirements_text
from eval_pipeline.tasks.swebench.row import CodeRowTask
from eval_pipeline.tasks.swebench.smith import SmithInstance, is_smith_row
from eval_pipeline.tasks.swebench.specs import UnsupportedSpecError, builtin_spec, specified_versions

__all__ = ["Instance", "benchmark_from_rows"]

# Where SWE-bench's instance images hold the task: the repository, and the conda environment its tests run in.
SWEBENCH_WORKDIR = "/testbed"
SWEBENCH_PYTHON_PREFIX = "/opt/miniconda3/envs/testbed"
SWEBENCH_ARCH = "x86_64"


def swebench_image_reference(instance_id: str, namespace: str, tag: str, arch: str = SWEBENCH_ARCH) -> str:
    """The instance image's name as SWE-bench's harness (4.x, `TestSpec.instance_image_key` with a namespace) forms
    it: `{namespace}/sweb.eval.{arch}.{instance id, lower-cased}:{tag}` with every `__` written `_1776_`."""
    return f"{namespace}/sweb.eval.{arch}.{instance_id.lower()}:{tag}".replace("__", "_1776_")


def _test_ids(row: Mapping[str, Any], *, index: int, instance_id: str, name: str) -> tuple[str, ...]:
    """A row's list of test ids. SWE-bench stores test lists as JSON strings in its parquet files; accept both
    forms. A missing list is refused, not read as empty: a row without FAIL_TO_PASS could never resolve, and
    its gold patch would then fail for no reason the row shows."""
    if name not in row or row[name] is None:
        raise InvalidInstanceError(RowProblem(index, instance_id, name, "missing"))
    value = row[name]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise InvalidInstanceError(RowProblem(index, instance_id, name, f"not a JSON list ({error})")) from None
    if not isinstance(value, list | tuple) or not all(isinstance(t, str) for t in value):
        raise InvalidInstanceError(RowProblem(index, instance_id, name, "expected a list of test ids"))
    if name == "FAIL_TO_PASS" and not value:
        raise InvalidInstanceError(RowProblem(index, instance_id, name, "empty: no test could show the fix"))
    return tuple(value)


@dataclass(frozen=True)
class Instance(CodeRowTask):
    """One task in SWE-bench's schema: fix `repo` at `base_commit` so that the tests pass.

    A `Task` (tasks/task.py) whose environment the harness builds from its spec, on any backend, with the
    campaign's resources and timeouts: it brings none of its own (class constants, not fields, so that rows
    and content hashes stay SWE-bench's).
    """

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str
    test_patch: str
    FAIL_TO_PASS: tuple[str, ...]
    PASS_TO_PASS: tuple[str, ...]
    version: str = ""
    environment_setup_commit: str = ""
    created_at: str = ""
    hints_text: str = ""
    # What a row carries of its own environment (tasks/swebench/rebench.py): SWE-rebench's install_config, as
    # canonical JSON, and its named image (`docker_image`, SWE-smith's `image_name`); '' when none.
    install_config: str = ""
    docker_image: str = ""
    include_hints: bool = False
    twins: TwinSettings = DEFAULT_TWINS  # the campaign's, for its gradings: no part of the row
    # The slice's `image_namespace` and `image_tag` (SWE-bench's --namespace, --instance_image_tag), which name
    # the row's instance image; no part of the row. '' (the demo's rows): the row names no image.
    image_namespace: str = ""
    image_tag: str = "latest"

    REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch")
    local_problem: ClassVar[str] = ""

    @classmethod
    def from_row(
        cls,
        row: Mapping[str, Any],
        *,
        index: int = 0,
        include_hints: bool = False,
        twins: TwinSettings = DEFAULT_TWINS,
        image_namespace: str = "",
        image_tag: str = "latest",
    ) -> "Instance":
        instance_id = str(row.get("instance_id") or "")
        require_text(row, cls.REQUIRED, index=index, instance_id=instance_id)
        require_diffs(row, ("patch", "test_patch"), index=index, instance_id=instance_id)
        try:
            install_config = canonical_install_config(row.get("install_config"))
            if install_config:
                environment_spec(install_config, row["repo"])
        except InstallConfigError as error:
            raise InvalidInstanceError(RowProblem(index, instance_id, error.field, str(error))) from None
        docker_image = row_image(row)
        if docker_image and (why := reference_problem(docker_image)):
            raise InvalidInstanceError(RowProblem(index, instance_id, "docker_image", why))
        # A row with its own install_config is installed at its base commit, as SWE-rebench's harness does it.
        setup_commit = (
            row["base_commit"] if install_config else row.get("environment_setup_commit") or row["base_commit"]
        )
        for name, value, problem in (
            ("instance_id", instance_id, id_problem),
            ("repo", row["repo"], repo_problem),
            ("base_commit", row["base_commit"], commit_problem),
            ("environment_setup_commit", setup_commit, commit_problem),
        ):
            if why := problem(value):
                raise InvalidInstanceError(RowProblem(index, instance_id, name, why))
        return cls(
            instance_id=instance_id,
            repo=row["repo"],
            base_commit=row["base_commit"],
            problem_statement=row["problem_statement"],
            patch=row["patch"],
            test_patch=row["test_patch"],
            FAIL_TO_PASS=_test_ids(row, index=index, instance_id=instance_id, name="FAIL_TO_PASS"),
            PASS_TO_PASS=_test_ids(row, index=index, instance_id=instance_id, name="PASS_TO_PASS"),
            version=str(row.get("version") or ""),
            environment_setup_commit=setup_commit,
            created_at=str(row.get("created_at") or ""),
            hints_text=str(row.get("hints_text") or ""),
            install_config=install_config,
            docker_image=docker_image,
            include_hints=include_hints,
            twins=twins,
            image_namespace=image_namespace,
            image_tag=image_tag,
        )

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        for setting in ("twins", "image_namespace", "image_tag"):
            del row[setting]
        for own in ("install_config", "docker_image"):  # a row's own columns, kept only where it has them
            if not row[own]:
                del row[own]
        row["FAIL_TO_PASS"] = list(self.FAIL_TO_PASS)
        row["PASS_TO_PASS"] = list(self.PASS_TO_PASS)
        return row

    @property
    def own_environment(self) -> EnvironmentSpec | None:
        """The environment the row's install_config specifies (checked when the row was read), None without one."""
        return environment_spec(self.install_config, self.repo) if self.install_config else None

    @property
    def named_image(self) -> NamedImage | None:
        """The image the row names (`docker_image`: SWE-rebench's images hold the task as SWE-bench's do), else
        SWE-bench's instance image of the row under the slice's namespace and tag; None without either."""
        if self.docker_image:
            return NamedImage(self.docker_image, SWEBENCH_WORKDIR, SWEBENCH_PYTHON_PREFIX)
        if not self.image_namespace:
            return None
        reference = swebench_image_reference(self.instance_id, self.image_namespace, self.image_tag)
        return NamedImage(reference, SWEBENCH_WORKDIR, SWEBENCH_PYTHON_PREFIX)

    @property
    def instruction(self) -> str:
        """What the agent is told: the issue; the hints only where the campaign asks for them.

        SWE-bench's rules keep hints from the agent (they can hold the fix verbatim), so they are off by default.
        """
        hints = f"\n\nHints:\n{self.hints_text}" if self.include_hints and self.hints_text else ""
        return f"{self.problem_statement}{hints}\n"

    @property
    def test_files(self) -> tuple[str, ...]:
        """The test files that hold the graded tests, in first-seen order."""
        files = (test_id.split("::", 1)[0] for test_id in self.FAIL_TO_PASS + self.PASS_TO_PASS)
        return tuple(dict.fromkeys(files))

    # SWE-bench's grading, `instance.grade(spec, model_patch, workspace, test_timeout_s)`: the test patch's tests,
    # FAIL_TO_PASS and PASS_TO_PASS, guarded by the campaign's twins (grading.py, which reads a `GradedRow`).
    grade = swebench_grade

    def requirements(self, spec: EnvironmentSpec, repo_dir: Path) -> str:
        """The requirements file SWE-bench installs for the spec, read at the environment setup commit."""
        return requirements_text(repo_dir, self.environment_setup_commit, spec.requirements, spec.packages)


def _unsupported_spec(instance: Instance | SmithInstance, environments: Mapping[str, EnvironmentSpec]) -> str:
    """Why SWE-bench's own spec of the instance's environment cannot be installed ('' when it can, or when the
    campaign gives the environment itself). A version SWE-bench does not specify for a repository it knows is
    refused: the default environment would not be that repository's, and every trial would fail at its build
    or its tests for a reason the row never shows. A repository SWE-bench does not know takes the default."""
    if f"{instance.repo}@{instance.version}" in environments:
        return ""
    versions = specified_versions(instance.repo)
    if versions and instance.version not in versions:
        return (
            f"SWE-bench specifies no environment for {instance.repo} at version {instance.version!r} (it does for "
            f"{', '.join(sorted(versions)[:12])}{', ...' if len(versions) > 12 else ''}); give "
            f'`environments: {{"{instance.repo}@{instance.version}": {{python, packages, install, test_cmd}}}}`'
        )
    try:
        builtin_spec(instance.repo, instance.version)
    except UnsupportedSpecError as error:
        return str(error)
    return ""


def benchmark_from_rows(
    name: str,
    rows: Iterable[Mapping[str, Any]],
    *,
    on_invalid: str = "reject",
    include_hints: bool = False,
    swebench_specs: bool = False,
    twins: TwinSettings = DEFAULT_TWINS,
    image_namespace: str = "",
    image_tag: str = "latest",
    **kwargs: Any,
) -> Benchmark:
    """A Benchmark of SWE-bench rows. Every row is validated; invalid ones reject the whole dataset, or are
    quarantined, per `on_invalid`.

    `image_namespace` and `image_tag` name each row's SWE-bench instance image (`Instance.named_image`; no
    namespace: the rows name none). A SWE-smith row (smith.py) is a `SmithInstance`, under the slice's `images`
    policy (in `kwargs`, as the Benchmark takes it).

    With `swebench_specs`, a row whose environment SWE-bench specifies in a form this harness cannot
    install (and the campaign does not give) is invalid too, so it fails here, named, not at its build.
    """
    if on_invalid not in Benchmark.ON_INVALID:
        raise ValueError(f"on_invalid must be one of {Benchmark.ON_INVALID}, got {on_invalid!r}")
    rows = list(rows)
    instances: list[Instance | SmithInstance] = []
    problems: list[RowProblem] = []
    seen: set[str] = set()
    for index, row in enumerate(rows):
        try:
            instance: Instance | SmithInstance = (
                SmithInstance.from_row(row, index=index, twins=twins, images=kwargs.get("images", "build"))
                if is_smith_row(row)
                else Instance.from_row(
                    row,
                    index=index,
                    include_hints=include_hints,
                    twins=twins,
                    image_namespace=image_namespace,
                    image_tag=image_tag,
                )
            )
        except InvalidInstanceError as error:
            problems.append(error.problem)
            continue
        if instance.instance_id in seen:
            problems.append(RowProblem(index, instance.instance_id, "instance_id", "duplicate id"))
            continue
        own = instance.own_environment is not None  # a row with its own environment needs no SWE-bench spec
        if swebench_specs and not own and (problem := _unsupported_spec(instance, kwargs.get("environments", {}))):
            problems.append(RowProblem(index, instance.instance_id, "version", problem))
            continue
        seen.add(instance.instance_id)
        instances.append(instance)
    if problems and on_invalid == "reject":
        raise InvalidDatasetError(name, problems)
    version = stable_hash(sorted(stable_hash(dict(row)) for row in rows))
    return Benchmark(
        name=name,
        instances=tuple(instances),
        version=version,
        quarantined=tuple(problems),
        builtin_environment=builtin_spec if swebench_specs else None,
        row_environments={i.instance_id: spec for i in instances if (spec := i.own_environment) is not None},
        **kwargs,
    )
