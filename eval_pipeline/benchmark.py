"""The benchmark model: SWE-bench's instance schema, environment specs and repo sources."""

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from eval_pipeline.hashing import stable_hash
from eval_pipeline.tasks import Task, TaskImage

if TYPE_CHECKING:  # grading and the sandboxes build on this module; a task reaches them when it is graded
    from eval_pipeline.grading import Verdict
    from eval_pipeline.sandbox import ExecResult, Workspace


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


_DIFF_START = re.compile(r"^(diff --git |--- )", re.MULTILINE)


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
class Instance:
    """One task in SWE-bench's schema: fix `repo` at `base_commit` so that the tests pass.

    A `Task` (tasks.py) whose environment the harness builds from its spec, on any backend, with the
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
    include_hints: bool = False

    REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch")
    own_image: ClassVar[TaskImage | None] = None
    local_problem: ClassVar[str] = ""
    memory_mb: ClassVar[int | None] = None
    cpus: ClassVar[float | None] = None
    agent_timeout_s: ClassVar[float | None] = None
    verifier_timeout_s: ClassVar[float | None] = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], *, index: int = 0, include_hints: bool = False) -> "Instance":
        instance_id = str(row.get("instance_id") or "")
        for name in cls.REQUIRED:
            if not isinstance(row.get(name), str) or not row[name].strip():
                raise InvalidInstanceError(RowProblem(index, instance_id, name, "missing or empty"))
        for name in ("patch", "test_patch"):
            if not _DIFF_START.search(row[name]):
                raise InvalidInstanceError(RowProblem(index, instance_id, name, "not a unified diff"))
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
            environment_setup_commit=str(row.get("environment_setup_commit") or row["base_commit"]),
            created_at=str(row.get("created_at") or ""),
            hints_text=str(row.get("hints_text") or ""),
            include_hints=include_hints,
        )

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["FAIL_TO_PASS"] = list(self.FAIL_TO_PASS)
        row["PASS_TO_PASS"] = list(self.PASS_TO_PASS)
        return row

    @property
    def content_hash(self) -> str:
        return stable_hash(self.to_row())

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

    @property
    def reference_patch(self) -> str:
        return self.patch

    def apply_reference(self, workspace: "Workspace", timeout_s: float | None) -> "ExecResult":
        """Apply the gold patch (no time limit of its own: applying a patch is the harness's work)."""
        from eval_pipeline.patches import apply_patch  # patches works on the sandboxes, which build on this module

        return apply_patch(workspace, self.patch, "reference.patch")

    def grade(
        self, spec: "EnvironmentSpec", model_patch: str, workspace: "Workspace", test_timeout_s: float
    ) -> "Verdict":
        """SWE-bench's grading: the test patch's tests, FAIL_TO_PASS and PASS_TO_PASS (grading.grade)."""
        from eval_pipeline.grading import grade  # grading builds on this module

        return grade(self, spec, model_patch, workspace, test_timeout_s)

    def verify_in_place(self, workspace: "Workspace", test_timeout_s: float) -> None:
        """None: a SWE-bench row's product is its patch, graded on a fresh workspace (`grade`), never in place."""
        return None


@dataclass(frozen=True)
class EnvironmentSpec:
    """How to install and test one (repository, version), as SWE-bench's specs do.

    `python` is the interpreter's version ("3.9"; empty: the harness's own).
    Installing runs, in this order and once per environment: `image_install`
    (system steps, a Dockerfile's RUN lines: only when an image is built, never
    on the host), `pre_install` (shell commands in the repository), the
    `requirements` (the first of these repository paths that exists at the
    instance's environment_setup_commit, as SWE-bench reads them), the pip
    `packages` (each one argument: `numpy<2` is never seen by a shell), and
    `install` (shell commands in the repository, e.g. `pip install -e .`).
    The environment has only what these install, plus the harness's pytest when
    nothing else brought one. `test_cmd` runs per grading with `test_env` set
    and the test directives appended; `log_parser` names the SWE-bench parser
    that turns its output into test statuses (empty: pytest's JUnit report
    alone), and `test_labels` how test files become arguments (`files`, or
    `django`: dotted labels).
    """

    python: str = ""
    packages: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()
    pre_install: tuple[str, ...] = ()
    install: tuple[str, ...] = ()
    image_install: tuple[str, ...] = ()
    test_cmd: str = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -rA -p no:cacheprovider"
    test_env: Mapping[str, str] = field(default_factory=dict)
    log_parser: str = ""
    test_labels: str = "files"

    LIST_FIELDS = ("packages", "requirements", "pre_install", "install", "image_install")
    TEST_LABELS = ("files", "django")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "EnvironmentSpec":
        """A spec from a campaign's `environments:` entry; a wrong field raises ValueError naming it."""
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown field(s) {sorted(unknown)} (known: {', '.join(cls.__dataclass_fields__)})")
        values: dict[str, Any] = dict(data)
        for name in cls.LIST_FIELDS:
            value = values.get(name, ())
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
                raise ValueError(f"field {name}: expected a list of strings, got {value!r}")
            values[name] = tuple(value)
        for name in ("python", "test_cmd", "log_parser", "test_labels"):
            if name in values and not isinstance(values[name], str | int | float):
                raise ValueError(f"field {name}: expected a string, got {values[name]!r}")
            if name in values:
                values[name] = str(values[name])
        if values.get("test_labels", "files") not in cls.TEST_LABELS:
            raise ValueError(f"field test_labels: expected one of {cls.TEST_LABELS}, got {values['test_labels']!r}")
        test_env = values.get("test_env", {})
        if not isinstance(test_env, Mapping):
            raise ValueError(f"field test_env: expected a mapping of variables, got {test_env!r}")
        values["test_env"] = {str(name): str(value) for name, value in test_env.items()}
        return cls(**values)

    def as_record(self) -> dict[str, Any]:
        """Every field, JSON-ready: what environment keys hash and lineage records."""
        return {**asdict(self), "test_env": dict(sorted(self.test_env.items()))}

    @property
    def uses_pytest(self) -> bool:
        return not self.log_parser or "pytest" in self.log_parser


@dataclass(frozen=True)
class RepoSource:
    """Where repositories are cloned from: a URL template, or a local mirror directory.

    A mirror holds `<mirror_dir>/<owner>/<name>` as git repositories, for offline
    machines and internal forks; it wins over the URL template when set.
    """

    url_template: str = "https://github.com/{repo}.git"
    mirror_dir: str | None = None

    def location(self, repo: str) -> str:
        if self.mirror_dir:
            return str(Path(self.mirror_dir) / repo)
        return self.url_template.format(repo=repo)


def _unsupported_spec(instance: Instance, environments: Mapping[str, EnvironmentSpec]) -> str:
    """Why SWE-bench's own spec of the instance's environment cannot be installed ('' when it can, or when the
    campaign gives the environment itself). A version SWE-bench does not specify for a repository it knows is
    refused: the default environment would not be that repository's, and every trial would fail at its build
    or its tests for a reason the row never shows. A repository SWE-bench does not know takes the default."""
    if f"{instance.repo}@{instance.version}" in environments:
        return ""
    from eval_pipeline.swebench_specs import (  # imported for SWE-bench data only
        UnsupportedSpecError,
        builtin_spec,
        specified_versions,
    )

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


@dataclass(frozen=True)
class Benchmark:
    """A dataset of instances plus what it takes to run them.

    `version` is the hash of every row as loaded, extra fields included: it
    changes when and only when the dataset's content changes. `quarantined`
    lists the rows left out as invalid.
    """

    name: str
    instances: tuple[Task, ...]  # Instance, or TerminalTask (terminal_tasks.py)
    version: str
    source: RepoSource = RepoSource()
    environments: Mapping[str, EnvironmentSpec] = field(default_factory=dict)
    default_environment: EnvironmentSpec = EnvironmentSpec()
    quarantined: tuple[RowProblem, ...] = ()
    swebench_specs: bool = False  # SWE-bench's own specs serve rows that `environments` does not cover

    ON_INVALID = ("reject", "quarantine")

    @classmethod
    def from_rows(
        cls,
        name: str,
        rows: Iterable[Mapping[str, Any]],
        *,
        on_invalid: str = "reject",
        include_hints: bool = False,
        swebench_specs: bool = False,
        **kwargs: Any,
    ) -> "Benchmark":
        """Validate every row; invalid ones reject the whole dataset, or are quarantined, per `on_invalid`.

        With `swebench_specs`, a row whose environment SWE-bench specifies in a form this harness cannot
        install (and the campaign does not give) is invalid too, so it fails here, named, not at its build.
        """
        if on_invalid not in cls.ON_INVALID:
            raise ValueError(f"on_invalid must be one of {cls.ON_INVALID}, got {on_invalid!r}")
        rows = list(rows)
        instances: list[Instance] = []
        problems: list[RowProblem] = []
        seen: set[str] = set()
        for index, row in enumerate(rows):
            try:
                instance = Instance.from_row(row, index=index, include_hints=include_hints)
            except InvalidInstanceError as error:
                problems.append(error.problem)
                continue
            if instance.instance_id in seen:
                problems.append(RowProblem(index, instance.instance_id, "instance_id", "duplicate id"))
                continue
            if swebench_specs and (problem := _unsupported_spec(instance, kwargs.get("environments", {}))):
                problems.append(RowProblem(index, instance.instance_id, "version", problem))
                continue
            seen.add(instance.instance_id)
            instances.append(instance)
        if problems and on_invalid == "reject":
            raise InvalidDatasetError(name, problems)
        version = stable_hash(sorted(stable_hash(dict(row)) for row in rows))
        return cls(
            name=name,
            instances=tuple(instances),
            version=version,
            quarantined=tuple(problems),
            swebench_specs=swebench_specs,
            **kwargs,
        )

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
        if self.swebench_specs:
            from eval_pipeline.swebench_specs import builtin_spec  # the swebench package takes a second to import

            return builtin_spec(instance.repo, instance.version) or self.default_environment
        return self.default_environment
