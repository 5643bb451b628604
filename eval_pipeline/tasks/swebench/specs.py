"""SWE-bench's own specifications of its repositories, and its log parsers, from the `swebench` package.

A SWE-bench row needs no `environments:` entry: its (repository, version)
selects the specification the SWE-bench project publishes in
`swebench.harness.constants` (Python version, packages, install steps, test
command), translated here into an `EnvironmentSpec`, and the repository's log
parser from `swebench.harness.log_parsers`, so test ids are exactly those the
dataset's lists were made with (cut at the first space, classes, django's and
sympy's own formats). The package is pinned in pyproject.toml and its specs
are part of every environment key, so a new release of it shows as a new
environment, never as a silent change.

Where SWE-bench uses conda (no conda here), its conda package names are
installed with pip. An `environment.yml` spec (xarray, matplotlib) becomes
pip requirements: its conda packages under their PyPI names (`CONDA_TO_PIP`;
libraries and tools that PyPI does not carry are left out), its `pip:` list,
and the spec's pinned `pip_packages`, resolved together in one install, so that
the unpinned packages come at versions that work with the pins (SWE-bench's
conda solved them in 2024, before its pip installed the pins over them).

A spec that no longer builds the environment SWE-bench validated, because a
dependency it leaves unbounded has since dropped what the repository imports,
gets the pin in `AMENDMENTS`: the package as it was when SWE-bench built its
images. The pin is one of the spec's packages, so it is in the environment key
and its lineage.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from functools import cache
from typing import Any

from eval_pipeline.common.outcomes import ImageBuildFailed
from eval_pipeline.sandbox.patches import patch_paths
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.swebench.row import GradedRow

# Steps that change the system rather than the repository: only an image build runs them.
SYSTEM_STEP = re.compile(r"(^|[;&|(]\s*)(apt-get|apt|locale-gen|sed -i .*/etc/)\b")
_EXPORT = re.compile(r"^export (\w+)=(.*)$")
DJANGO = "django/django"

# (repository, version prefix) -> pins installed before the repository, each with the reason it is needed.
AMENDMENTS: dict[tuple[str, str], tuple[str, ...]] = {
    # sphinx 3.x, and 4.x at commits merged from 3.x, ask `docutils>=0.12` (or 0.14) with no upper bound and
    # import `docutils.utils.roman`, which docutils 0.22 (July 2025) removed: every test then fails on `No module
    # named 'roman'`. SWE-bench's images had 0.21 or older. (5.x bounds docutils below 0.19 itself.)
    ("sphinx-doc/sphinx", "3."): ("docutils<0.22",),
    ("sphinx-doc/sphinx", "4."): ("docutils<0.22",),
    # Pygments 2.19 (January 2025) marks whitespace with tokens of its own, so sphinx's tests that compare the
    # highlighted HTML fail on any fix (sphinx-doc__sphinx-10323's test_linenothreshold: 2.18 passes, 2.19 not).
    # Every sphinx SWE-bench specifies predates it; its images had 2.18 or older.
    ("sphinx-doc/sphinx", ""): ("pygments<2.19",),
}


class UnsupportedSpecError(ImageBuildFailed):
    """A SWE-bench specification this harness cannot reproduce; the message names repository and version.

    Datasets refuse such rows when they load; one found only while building (no requirements file at the
    setup commit) fails that environment, typed, as any build does."""


@cache
def _swebench() -> dict[str, Any]:
    """The swebench package's tables, imported once (the package takes about a second to import)."""
    from swebench.harness.constants import NON_TEST_EXTS
    from swebench.harness.constants.python import (
        MAP_REPO_TO_ENV_YML_PATHS,
        MAP_REPO_TO_REQS_PATHS,
        MAP_REPO_VERSION_TO_SPECS_PY,
    )
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

    return {
        "specs": MAP_REPO_VERSION_TO_SPECS_PY,
        "requirements": MAP_REPO_TO_REQS_PATHS,
        "environment_files": MAP_REPO_TO_ENV_YML_PATHS,
        "parsers": MAP_REPO_TO_PARSER,
        "non_test_exts": tuple(NON_TEST_EXTS),
    }


def _steps(value: Any) -> tuple[str, ...]:
    if not value:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def specified_versions(repo: str) -> tuple[str, ...]:
    """The versions of `repo` SWE-bench specifies an environment for (none for a repository it does not know)."""
    return tuple(_swebench()["specs"].get(repo, {}))


def builtin_spec(repo: str, version: str) -> EnvironmentSpec | None:
    """SWE-bench's specification of `repo` at `version` as an EnvironmentSpec, or None when it has none."""
    tables = _swebench()
    raw = tables["specs"].get(repo, {}).get(version)
    if raw is None or repo not in tables["parsers"]:
        return None
    packages, requirements = raw.get("packages", ""), ()
    if packages == "environment.yml":
        packages, requirements = "", tuple(tables["environment_files"][repo])
    if packages == "requirements.txt":
        packages, requirements = "", tuple(tables["requirements"][repo])
    steps = _steps(raw.get("pre_install"))
    evals = _steps(raw.get("eval_commands"))
    test_cmd = raw["test_cmd"][-1] if isinstance(raw["test_cmd"], list) else raw["test_cmd"]
    pins = tuple(
        pin
        for (name, prefix), pins in AMENDMENTS.items()
        if name == repo and version.startswith(prefix)
        for pin in pins
    )
    return EnvironmentSpec(
        python=str(raw["python"]),
        packages=tuple(packages.split()) + tuple(raw.get("pip_packages", ())) + pins,
        requirements=requirements,
        pre_install=tuple(step for step in steps if not SYSTEM_STEP.search(step)),
        install=_steps(raw.get("install")),
        image_install=tuple(step for step in (*steps, *evals) if SYSTEM_STEP.search(step)),
        test_cmd=test_cmd,
        test_env={match[1]: shlex.split(match[2])[0] for step in evals if (match := _EXPORT.match(step))},
        log_parser=tables["parsers"][repo].__name__,
        test_labels="django" if repo == DJANGO else "files",
    )


def log_parser(name: str) -> Callable[[str], dict[str, str]]:
    """SWE-bench's parser `name`: log text -> {test id: PASSED | FAILED | SKIPPED | ERROR | XFAIL}."""
    parsers = {parser.__name__: parser for parser in _swebench()["parsers"].values()}
    if name not in parsers:
        raise ValueError(f"unknown SWE-bench log parser {name!r} (known: {', '.join(sorted(parsers))})")
    parser = parsers[name]
    return lambda log: parser(log, None)  # SWE-bench's Python parsers never read their test_spec


def graded_files(row: GradedRow) -> list[str]:
    """The files of the test side, which the grading restores, reads for its twins and runs: the test patch's
    (SWE-bench's rows), else, for a row whose tests are in its repository already (SWE-smith's), the files of its
    FAIL_TO_PASS tests, which its harness runs."""
    if row.test_patch:
        return patch_paths(row.test_patch)
    return list(dict.fromkeys(test_id.split("::", 1)[0] for test_id in row.FAIL_TO_PASS))


def test_directives(instance: GradedRow, spec: EnvironmentSpec) -> list[str]:
    """What the test command is given, as SWE-bench derives it: the test side's files (the test patch's:
    graded_files), not data files, as dotted labels for django's runner."""
    non_test = _swebench()["non_test_exts"] if spec.log_parser else (".json", ".png", ".csv", ".txt", ".md")
    files = [path for path in graded_files(instance) if not path.endswith(non_test)]
    if spec.test_labels != "django":
        return files
    return [path.removesuffix(".py").removeprefix("tests/").replace("/", ".") for path in files]
