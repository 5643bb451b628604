"""What a task's environment is made of: how to install and test a (repository, version), and where
repositories come from. Sandboxes build environments from these; tasks name them."""

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eval_pipeline.tasks.named_image import NamedImage

__all__ = ["EnvironmentSpec", "RepoSource"]


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

    `image` is the prebuilt image the environment is pulled as, in place of one built from the install fields
    (a task's named image under its slice's `images:` policy: Benchmark.environment_for); None: built. It is no
    campaign's `environments:` field, and `as_record` holds it only when set.
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
    image: NamedImage | None = None

    LIST_FIELDS = ("packages", "requirements", "pre_install", "install", "image_install")
    TEST_LABELS = ("files", "django")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "EnvironmentSpec":
        """A spec from a campaign's `environments:` entry; a wrong field raises ValueError naming it."""
        known = [name for name in cls.__dataclass_fields__ if name != "image"]
        if unknown := set(data) - set(known):
            raise ValueError(f"unknown field(s) {sorted(unknown)} (known: {', '.join(known)})")
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
        record = {**asdict(self), "test_env": dict(sorted(self.test_env.items()))}
        if self.image is None:
            del record["image"]
        return record

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
