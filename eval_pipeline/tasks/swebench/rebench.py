"""Rows that carry their own environment: SWE-rebench's `install_config`, and the image a row names.

SWE-rebench (nebius/SWE-rebench) ships rows in SWE-bench's schema plus an `install_config`, the same fields as a
SWE-bench spec but per row, and (in its later versions) a `docker_image`, the row's prebuilt instance image
(`swerebench/sweb.eval.x86_64.<instance with __ written _1776_>`). SWE-rebench's own harness
(github.com/SWE-rebench/SWE-bench-fork, swebench/harness/utils.py `_clean_install_config` and
test_spec/python.py) reads them so:

- `None` values are absent fields; a `python` below 3.6 is 3.6 (conda has no older one), and the environment is
  installed at the row's `base_commit` (its `environment_setup_commit` is the base commit);
- `packages` is `requirements.txt` (the files `reqs_path` names, read at that commit), `environment.yml` (the
  files `env_yml_path` names), or conda package names; `pip_packages` are installed after them;
- `pre_install` then `install` run in the repository; `test_cmd` runs with the test files appended, and
  `log_parser` names the SWE-bench parser of its output; `eval_commands` run before the tests (`env_vars`,
  which some rows carry, that harness does not read; here they are set for the tests, as a row that names them
  means).

`environment_spec` maps one onto an `EnvironmentSpec` as tasks/swebench/specs.py maps SWE-bench's: conda
package names installed with pip, system steps (`apt-get`) kept for an image build, `export NAME=value` eval
commands and `env_vars` as the test environment. What this harness cannot honour (an eval command other than an
export, an unknown field, a parser it does not have) is refused with the field named, so a row fails at load,
never at its build.

SWE-smith's rows also carry `image_name`; they are a task kind of their own (smith.py).
"""

import json
import shlex
from collections.abc import Mapping
from typing import Any

from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.swebench.specs import DJANGO, SYSTEM_STEP

__all__ = [
    "IMAGE_COLUMNS",
    "InstallConfigError",
    "canonical_install_config",
    "environment_spec",
    "row_image",
]

# The columns that hold a row's named image, first found wins: SWE-rebench's `docker_image` (it also repeats it
# as `image_name`), SWE-smith's `image_name`.
IMAGE_COLUMNS = ("docker_image", "image_name")
# The fields of an install_config this harness honours, and those it reads as conda-only and leaves out
# (`no_use_env` chooses between two conda commands; pip installs the same packages either way).
_FIELDS = {
    "python",
    "packages",
    "reqs_path",
    "env_yml_path",
    "pip_packages",
    "pre_install",
    "install",
    "test_cmd",
    "log_parser",
    "eval_commands",
    "env_vars",
    "no_use_env",
}
_OLDEST_PYTHON = (3, 6)
_EXPORT_PREFIX = "export "


class InstallConfigError(ValueError):
    """An install_config this harness cannot honour; `field` names the part (`install_config.test_cmd`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def canonical_install_config(value: object) -> str:
    """A row's install_config as canonical JSON ('' when the row has none); a JSON string (as a parquet file may
    hold it) is read first. Anything but a mapping is refused."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise InstallConfigError("install_config", f"not a JSON object ({error})") from None
    if not isinstance(value, Mapping):
        raise InstallConfigError("install_config", f"expected a mapping of install fields, got {value!r}")
    return json.dumps({name: value[name] for name in value if value[name] is not None}, sort_keys=True)


def _steps(config: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """A field that is one command or a list of them."""
    value = config.get(name)
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value.strip() else ()
    if isinstance(value, list | tuple) and all(isinstance(step, str) for step in value):
        return tuple(step for step in value if step.strip())
    raise InstallConfigError(f"install_config.{name}", f"expected a command or a list of commands, got {value!r}")


def _python(config: Mapping[str, Any]) -> str:
    value = config.get("python")
    if not isinstance(value, str | int | float) or not str(value).strip():
        raise InstallConfigError("install_config.python", f"expected a Python version such as '3.9', got {value!r}")
    version = str(value).strip()
    try:
        parts = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        raise InstallConfigError("install_config.python", f"{version!r} is not a Python version") from None
    return "3.6" if parts < _OLDEST_PYTHON else version


def _files(config: Mapping[str, Any], name: str, packages: str) -> tuple[str, ...]:
    paths = config.get(name)
    if not isinstance(paths, list | tuple) or not paths or not all(isinstance(path, str) for path in paths):
        raise InstallConfigError(
            f"install_config.{name}", f"packages is {packages!r}, which needs the files to read: got {paths!r}"
        )
    return tuple(paths)


def _packages(config: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(pip packages, requirements files): `packages` as SWE-rebench's harness reads it, then `pip_packages`."""
    packages = config.get("packages") or ""
    if not isinstance(packages, str):
        raise InstallConfigError("install_config.packages", f"expected a string, got {packages!r}")
    pip = config.get("pip_packages") or ()
    if isinstance(pip, str):
        pip = tuple(pip.split())
    if not isinstance(pip, list | tuple) or not all(isinstance(package, str) for package in pip):
        raise InstallConfigError("install_config.pip_packages", f"expected a list of packages, got {pip!r}")
    if packages == "requirements.txt":
        return tuple(pip), _files(config, "reqs_path", packages)
    if packages == "environment.yml":
        return tuple(pip), _files(config, "env_yml_path", packages)
    return (*packages.split(), *pip), ()


def _test_env(config: Mapping[str, Any]) -> dict[str, str]:
    """`env_vars`, then each `export NAME=value` of `eval_commands` (system steps among them are the image's,
    `_system_steps`); any other eval command is refused: it would run before every grading's tests, which this
    harness does not do."""
    env_vars = config.get("env_vars") or {}
    if not isinstance(env_vars, Mapping) or not all(isinstance(name, str) and name.isidentifier() for name in env_vars):
        raise InstallConfigError("install_config.env_vars", f"expected a mapping of variables, got {env_vars!r}")
    test_env = {str(name): str(value) for name, value in env_vars.items()}
    for command in _steps(config, "eval_commands"):
        if SYSTEM_STEP.search(command):
            continue
        name, equals, value = command.removeprefix(_EXPORT_PREFIX).partition("=")
        if not command.startswith(_EXPORT_PREFIX) or not equals or not name.isidentifier():
            raise InstallConfigError(
                "install_config.eval_commands",
                f"{command!r}: only `export NAME=value` and system steps (apt-get, locale-gen) are honoured",
            )
        test_env[name] = shlex.split(value)[0] if value.strip() else ""
    return test_env


def _test_cmd(config: Mapping[str, Any]) -> str:
    value = config.get("test_cmd")
    if isinstance(value, list) and value and all(isinstance(step, str) for step in value):
        value = value[-1]  # as SWE-bench's specs: the last command is the one graded
    if not isinstance(value, str) or not value.strip():
        raise InstallConfigError("install_config.test_cmd", f"missing or not a command: {value!r}")
    return value


def _log_parser(config: Mapping[str, Any]) -> str:
    """The name of one of SWE-bench's Python log parsers: those of other languages (SWE-rebench V2's rows) read
    logs of test runners this harness does not run."""
    from swebench.harness.log_parsers.python import MAP_REPO_TO_PARSER_PY  # as specs.py: slow, imported once

    name = config.get("log_parser") or ""
    if not isinstance(name, str):
        raise InstallConfigError("install_config.log_parser", f"expected a parser's name, got {name!r}")
    python_parsers = sorted({parser.__name__ for parser in MAP_REPO_TO_PARSER_PY.values()})
    if name and name not in python_parsers:
        raise InstallConfigError(
            "install_config.log_parser",
            f"{name!r} is not one of SWE-bench's Python log parsers ({', '.join(python_parsers)})",
        )
    return name


def environment_spec(install_config: str, repo: str) -> EnvironmentSpec:
    """The EnvironmentSpec of a row's canonical install_config (`canonical_install_config`) for a row of `repo`
    (django's tests are named by dotted labels, as SWE-rebench's harness names them); InstallConfigError names the
    field this harness cannot honour."""
    config = json.loads(install_config)
    if unknown := sorted(set(config) - _FIELDS):
        raise InstallConfigError(
            f"install_config.{unknown[0]}", f"unknown field(s) {unknown} (known: {', '.join(sorted(_FIELDS))})"
        )
    steps = _steps(config, "pre_install")
    packages, requirements = _packages(config)
    return EnvironmentSpec(
        python=_python(config),
        packages=packages,
        requirements=requirements,
        pre_install=tuple(step for step in steps if not SYSTEM_STEP.search(step)),
        install=_steps(config, "install"),
        image_install=tuple(step for step in (*steps, *_steps(config, "eval_commands")) if SYSTEM_STEP.search(step)),
        test_cmd=_test_cmd(config),
        test_env=_test_env(config),
        log_parser=_log_parser(config),
        test_labels="django" if repo == DJANGO else "files",
    )


def row_image(row: Mapping[str, Any]) -> str:
    """The named image a row gives ('' when none): the first of IMAGE_COLUMNS that holds a string."""
    for column in IMAGE_COLUMNS:
        if isinstance(value := row.get(column), str) and value.strip():
            return value.strip()
    return ""
