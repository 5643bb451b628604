"""The requirements SWE-bench installs for a spec that names requirements files: read at the environment setup
commit, as SWE-bench reads them, and an `environment.yml` (conda) as pip requirements."""

import posixpath
import re
from pathlib import Path

import yaml

from eval_pipeline.common.git import GitError, git
from eval_pipeline.tasks.swebench.specs import UnsupportedSpecError

__all__ = ["CONDA_TO_PIP", "conda_requirements", "requirements_text"]

# conda packages that PyPI carries under another name, or not at all (None: a library, a tool or the interpreter,
# which the environment's image or Python already brings, or nothing on PyPI, as cdms2).
CONDA_TO_PIP: dict[str, str | None] = {
    **dict.fromkeys(
        ("python", "pip", "hdf5", "libnetcdf", "cdms2", "ghostscript", "graphviz", "inkscape", "ffmpeg", "tk"),
    ),
    **dict.fromkeys(("c-compiler", "cxx-compiler", "compilers", "pkg-config", "make", "cmake", "ninja")),
    **dict.fromkeys(("pygobject", "wxpython", "gtk3", "cairo", "freetype", "libpng", "qhull", "gdal", "proj")),
    "matplotlib-base": "matplotlib",
    "dask-core": "dask",
    "iris": "scitools-iris",
    "pytables": "tables",
    "pyqt": "PyQt5",
    "python-graphviz": "graphviz",
}


_CONDA_SPEC = re.compile(r"^(?:[\w.-]+::)?([A-Za-z0-9_.-]+)\s*(.*)$")


def _pip_requirement(conda_spec: str) -> str | None:
    """One conda match spec (`numpy`, `numpy>=1.2`, `numpy=1.2`, `numpy 1.2.*`, `numpy=1.2=py310_0`) as a pip
    requirement under its PyPI name, or None when PyPI has no such package."""
    match = _CONDA_SPEC.match(conda_spec.split("#", 1)[0].strip())
    if not match:
        return None
    name, version = match[1], match[2].replace(" ", "")
    pip_name = CONDA_TO_PIP.get(name.lower(), name)
    if pip_name is None:
        return None
    if version.startswith("=") and not version.startswith("=="):  # conda's `=1.2` is 1.2.*; a build string follows
        release = version[1:].split("=", 1)[0]
        version = f"=={release}" if release.endswith("*") or release.count(".") >= 2 else f"=={release}.*"
    elif version[:1].isdigit():
        version = f"=={version}"
    return pip_name + version


def conda_requirements(environment_yml: str, pins: tuple[str, ...]) -> str:
    """An environment.yml's dependencies as pip requirements (conda's under PyPI names, then its `pip:` list),
    followed by `pins`, so that one resolution satisfies them all."""
    dependencies = (yaml.safe_load(environment_yml) or {}).get("dependencies") or []
    conda = [_pip_requirement(entry) for entry in dependencies if isinstance(entry, str)]
    pip = [line for entry in dependencies if isinstance(entry, dict) for line in entry.get("pip") or ()]
    wanted = [requirement for requirement in (*conda, *pip) if requirement]
    pinned = {re.split(r"[<>=!~\[ ]", pin, maxsplit=1)[0].lower() for pin in pins}
    unpinned = [r for r in wanted if re.split(r"[<>=!~\[ ]", r, maxsplit=1)[0].lower() not in pinned]
    return "\n".join([*unpinned, *pins]) + "\n"


def requirements_text(repo_dir: Path, commit: str, paths: tuple[str, ...], pins: tuple[str, ...] = ()) -> str:
    """The requirements SWE-bench installs for a `requirements.txt` spec: the first of `paths` that exists at
    `commit` (the environment setup commit), its `-r` includes inlined, editable and extra lines dropped, and
    SWE-bench's replacements of yanked packages applied. For an `environment.yml` spec, `conda_requirements`
    of it with the spec's `pins`."""
    from swebench.harness.test_spec.python import clean_requirements

    def read(path: str) -> str | None:
        try:
            return git(["show", f"{commit}:{path}"], repo_dir)
        except GitError:
            return None

    def kept(line: str) -> bool:
        return not line.strip().startswith(("-e .", "#", ".[test"))

    try:
        git(["cat-file", "-e", f"{commit}^{{commit}}"], repo_dir)
    except GitError:
        raise UnsupportedSpecError(
            f"the environment_setup_commit {commit} is not in the repository at {repo_dir} (an incomplete mirror?)"
        ) from None
    for path in paths:
        if (text := read(path)) is None:
            continue
        if path.endswith((".yml", ".yaml")):
            return conda_requirements(text, pins)
        included, own = [], []
        for line in text.splitlines():
            if line.strip().startswith("-r"):
                nested = read(posixpath.join(posixpath.dirname(path), line.strip()[2:].strip())) or ""
                included += [extra for extra in nested.splitlines() if kept(extra)]
            elif kept(line):
                own.append(line)
        return clean_requirements("\n".join([*included, "\n".join(own)]))
    raise UnsupportedSpecError(f"none of the requirements files {list(paths)} exists at commit {commit}")
