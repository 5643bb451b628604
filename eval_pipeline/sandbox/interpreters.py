"""Which Python interpreter an environment's `python: "3.9"` means, on this machine.

The local backend gives an environment a copy of that interpreter's whole
installation (`copy_installation`), and the container backend (with
`python_source: pyenv`) copies the installation into the image at the same path. Interpreters are looked for in pyenv's
versions (`$PYENV_ROOT`, default `~/.pyenv`), the newest patch release first,
then as `pythonX.Y` on PATH. An empty version means the harness's own.
"""

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from eval_pipeline.common.outcomes import ImageBuildFailed
from eval_pipeline.tasks.environment import EnvironmentSpec

_VERSION = re.compile(r"^\d+\.\d+$")
# Before an environment installs anything, its Python gets the pip and wheel SWE-bench's conda environments had:
# - the newest pip before 25.3: the pip an installation is born with can be too old for today's wheels (Python
#   3.6's pip 18.1 reads no manylinux2010/2014 tag, so it builds bcrypt from source, which needs Rust), and old
#   pip honours each release's Requires-Python, so it picks one that runs on that Python;
# - but before 25.3, and with wheel: then `pip install -e .` of a project with no pyproject.toml is `setup.py
#   develop`, which puts the repository itself on sys.path, as in SWE-bench's images. pip 25.3 made every
#   editable install a PEP 660 import hook that does not, and code that finds modules by path breaks
#   (pylint's plugin loading: "Unable to find module for .../pylint/reporters/..."; pylint-dev__pylint-6386).
UPGRADE_PIP = "python -m pip install --upgrade 'pip<25.3' wheel"


def installs_with_pip(spec: EnvironmentSpec) -> bool:
    """Whether the spec's installs go through pip, so that UPGRADE_PIP must come first (an install step that
    never calls pip, a `touch` or a `sed`, needs no index and works offline)."""
    return bool(spec.requirements or spec.packages or any("pip" in step for step in spec.install))


@dataclass(frozen=True)
class Interpreter:
    """An interpreter's executable, its full version (part of every environment key) and, for a pyenv build,
    the installation directory that holds it."""

    executable: Path
    version: str
    prefix: Path | None = None


def _pyenv_root() -> Path:
    return Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")


def _patch_level(path: Path) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in path.name.split("."))


def _full_version(executable: Path) -> str:
    completed = subprocess.run(
        [str(executable), "-c", "import sys; print('.'.join(map(str, sys.version_info[:3])))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return completed.stdout.strip()


@cache
def find_interpreter(version: str) -> Interpreter:
    """The interpreter for `version` ("3.9"), or ImageBuildFailed naming the version and where it looked."""
    if not version:
        return Interpreter(Path(sys.executable), ".".join(map(str, sys.version_info[:3])))
    if not _VERSION.match(version):
        raise ImageBuildFailed(f"python version {version!r} is not of the form X.Y")
    root = _pyenv_root() / "versions"
    builds = sorted(root.glob(f"{version}.*"), key=_patch_level, reverse=True) if root.is_dir() else []
    for build in builds:
        executable = build / "bin" / f"python{version}"
        if executable.is_file() and (full := _full_version(executable)).startswith(f"{version}."):
            return Interpreter(executable, full, build)
    on_path = shutil.which(f"python{version}")
    if on_path and (full := _full_version(Path(on_path))):
        return Interpreter(Path(on_path), full)
    raise ImageBuildFailed(
        f"this environment needs Python {version}, and this machine has none: not in {root} and no "
        f"python{version} on PATH (install it, e.g. `pyenv install {version}`, or use the container backend)"
    )


_INTERPRETER_COMMANDS = ("python", "pydoc", "idle", "2to3")  # bin/'s own; the rest came with installed packages


def installation_excludes(interpreter: Interpreter) -> tuple[str, ...]:
    """What a copy of a pyenv build leaves out, as paths relative to it: the build's installed packages and
    the commands they put in bin/ (an environment has only what its spec installs), the standard library's
    own test suite and static libraries, which nothing an environment runs needs."""
    if interpreter.prefix is None:
        raise ValueError(f"{interpreter.executable} is not a pyenv build: there is no installation to copy")
    prefix, lib = interpreter.prefix, f"lib/python{'.'.join(interpreter.version.split('.')[:2])}"
    commands = (
        f"bin/{path.name}" for path in (prefix / "bin").iterdir() if not path.name.startswith(_INTERPRETER_COMMANDS)
    )
    static = (str(path.relative_to(prefix)) for path in (prefix / lib).glob("config-*/*.a"))
    return (f"{lib}/site-packages", f"{lib}/test", *sorted(commands), *sorted(static))


def copy_installation(interpreter: Interpreter, target: Path) -> None:
    """A Python installation of the environment's own at `target`, copied from a pyenv build.

    An environment must be a whole Python prefix, as SWE-bench's conda environment is, not a virtualenv
    whose interpreter lives elsewhere: tools that re-execute `sys.executable` through a link (tox-current-env
    makes `.tox/py39/bin/python` one) start a virtualenv's interpreter outside the virtualenv, without its
    packages. The copy finds its own prefix from where it lies; `installation_excludes` says what it leaves
    out. Its site-packages starts empty.
    """
    excluded = {interpreter.prefix / path for path in installation_excludes(interpreter)}  # type: ignore[operator]

    def left_out(directory: str, names: list[str]) -> set[str]:
        return {name for name in names if Path(directory, name) in excluded}

    shutil.copytree(interpreter.prefix, target, symlinks=True, ignore=left_out)  # type: ignore[arg-type]
    site_packages = installation_excludes(interpreter)[0]
    (target / site_packages).mkdir()
