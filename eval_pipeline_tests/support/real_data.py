"""Real public benchmark data for the tests, cut from its public sources into a local cache.

Nothing of these sources is committed: they are other projects' code and data. Each fixture below names its
public repository and pinned commits, and is cut with plain git into $EVAL_PIPELINE_TEST_DATA (default
~/.cache/eval-pipeline/test-data), holding only what the tests read:

- a code repository becomes a bare repository with only the named commits (depth 1, or 2 where a test reads a
  parent), their real commit ids kept;
- SWE-bench Verified rows become one JSONL file, Terminal-Bench tasks their directories, byte for byte.

A test whose fixture is missing cuts it then, from the public source (https://github.com/<owner>/<name>.git, or
the URL template in $EVAL_PIPELINE_TEST_DATA_SOURCE); where that source cannot be reached it is skipped with one
line naming the fixture and how to provide it. `python -m eval_pipeline_tests.support.real_data` cuts every fixture at
once and prints their sizes; eval_pipeline_tests/support/fixtures.md lists them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from eval_pipeline.sandbox.base import parse_task_base_images

__all__ = [
    "PY36_ROW",
    "PYTEST_ROW",
    "SWEBENCH_LOCAL_ROWS",
    "SWEBENCH_ROWS",
    "FilesFixture",
    "GitFixture",
    "provide",
    "repository",
    "swebench_mirror",
    "swebench_rows",
    "task_base_images",
    "terminal_bench_tasks",
    "verified_instance_ids",
    "write_rows",
]

DEFAULT_SOURCE = "https://github.com/{owner}/{name}.git"
GIT_TIMEOUT_S = 900


@dataclass(frozen=True)
class GitFixture:
    """Commits of one public repository, cut into a bare repository that keeps exactly these (and `depth - 1`
    ancestors each) under their real ids.

    `releases` names the last release before a commit, for repositories that version themselves from git tags
    (setuptools_scm): the cut history holds no tag, so the mirror tags the commit with that name instead.
    """

    repo: str
    commits: tuple[str, ...]
    depth: int = 1
    releases: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return _key(self.repo, sorted(self.commits), self.depth, sorted(self.releases.items()))

    def cut(self, url: str, target: Path) -> None:
        _git("init", "-q", "--bare", str(target))
        _fetch(target, url, f"--depth={self.depth}", *self.commits)
        for commit in self.commits:
            _git("-C", str(target), "update-ref", f"refs/heads/fixture-{commit}", commit)
        _git("-C", str(target), "gc", "-q", "--prune=now")


@dataclass(frozen=True)
class FilesFixture:
    """Files of one commit of a public repository, byte for byte, modes kept: only those matching `paths`
    (git's sparse-checkout patterns) are fetched and kept, not the rest of the tree nor any history."""

    repo: str
    commit: str
    paths: tuple[str, ...]

    @property
    def key(self) -> str:
        return _key(self.repo, self.commit, sorted(self.paths))

    def cut(self, url: str, target: Path) -> None:
        _git("init", "-q", str(target))
        _fetch(target, url, "--filter=blob:none", "--depth=1", self.commit)
        _git("-C", str(target), "sparse-checkout", "set", "--no-cone", *self.paths)
        try:
            _git("-C", str(target), "checkout", "-q", self.commit)
        except subprocess.CalledProcessError as error:
            raise FixtureUnavailable(f"{url}: {_reason(error)}") from None
        shutil.rmtree(target / ".git")


def _key(*spec: object) -> str:
    """Changes whenever what a cut holds changes, so that an older cut in the cache is cut again."""
    return hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:16]


# SWE-bench Verified as published in rese1f/terminal-bench-datasets (datasets/swebench-verified/<id>/tests/
# config.json, a dump of the Verified record), at the commit the tests were written against.
ROWS_PATH = "datasets/swebench-verified"
ROWS = FilesFixture(
    "rese1f/terminal-bench-datasets", "17d2b9355d478159b44fa4afe212243acb7c9e21", (f"/{ROWS_PATH}/*/tests/config.json",)
)

# The rows the tests grade: a src-layout editable install (flask, Python 3.11), Python 3.9 with a plain install
# (requests), Python 3.9 with an editable install and requirements read at the setup commit (pylint), and, on the
# local backend only (to keep CI short), sympy's own test runner, read by SWE-bench's sympy parser, and pytest's
# own repository at 4.6, where the graded runner is the code under test (an editable install of its src/) and
# older than the launcher's newer paths (no Item.from_parent before 5.4, locations as py.path objects).
SWEBENCH_ROWS = ("pallets__flask-5014", "psf__requests-1142", "pylint-dev__pylint-4970")
PYTEST_ROW = "pytest-dev__pytest-5809"
# sphinx (local): its test command is `tox --current-env -epy39`, which re-executes the environment's Python
# through a link (an environment must be a whole installation), and its spec `sed -i`s the tracked tox.ini.
SPHINX_ROW = "sphinx-doc__sphinx-10466"
SWEBENCH_LOCAL_ROWS = (*SWEBENCH_ROWS, "sympy__sympy-24443", PYTEST_ROW, SPHINX_ROW)
# A Python 3.6 row (django 3.1, SWE-bench's spec): the harness's own processes must not run on the environment's
# 3.6, and its requirements compile C (pywatchman), as SWE-bench's base image allows. Its one test module runs fast.
PY36_ROW = "django__django-12193"

# Real pytest commits replayed as tool calls (test_scripted_model.py): deletions and 22 hunks (nose support
# removed), new files (helpers moved out), a rename with edits, a last line losing and gaining its newline, and a
# hunk whose three lines of context occur twice. Depth 2: the tests read each commit's parent.
PYTEST_COMMITS = (
    "0f18a7fe5e8911fe4b329931dcf8f23cb30130bd",
    "58d8b55beb7b341fb7d8a90a0a0bce1e701fb280",
    "03da9f0ccb88c27630146cfc296d51be4ad9d389",
    "7c24a0ba1919c43e0f4ac8c48bd2126c8a4d64b2",
    "3de3d0d79ed2efe23a6e73d386a54b75a712fcf1",
    "8d40684d1f997e62758785aebb3132c2f5b712e1",
)

# Each row's base and environment-setup commits (from the row itself).
REPOSITORIES = {
    fixture.repo: fixture
    for fixture in (
        GitFixture(
            "pallets/flask", ("7ee9ceb71e868944a46e1ff00b506772a53a4f1d", "182ce3dd15dfa3537391c3efaf9c3ff407d134d4")
        ),
        GitFixture(
            "psf/requests", ("22623bd8c265b78b161542663ee980738441c307", "ba25184ed5f0bf9b876dea3cf4312fa35b539a7c")
        ),
        GitFixture(
            "pylint-dev/pylint",
            ("40cc2ffd7887959157aaf469e09585ec2be7f528", "bc95cd34071ec2e71de5bca8ff95cc9b88e23814"),
        ),
        GitFixture(
            "sympy/sympy", ("809c53c077485ca48a206cee78340389cb83b7f1", "c6cb7c5602fa48034ab1bd43c2347a7e8488f12e")
        ),
        GitFixture(
            "sphinx-doc/sphinx",
            ("cab2d93076d0cca7c53fac885f927dde3e2a5fec", "60775ec4c4ea08509eee4b564cbf90f316021aff"),
        ),
        GitFixture(
            "django/django", ("3fb7c12158a2402f0f80824f6778112071235803", "0668164b4ac93a5be79f5b87fae83c657124d9ab")
        ),
        GitFixture(
            "pytest-dev/pytest",
            ("8aba863a634f40560e25055d179220f0eefabe9a", "d5843f89d3c008ddcb431adbc335b080a79e617e", *PYTEST_COMMITS),
            depth=2,
            releases={"8aba863a634f40560e25055d179220f0eefabe9a": "4.6.5"},
        ),
    )
}

# Terminal-Bench 2.0 tasks in Harbor's format, as vendored unchanged in yujianll/skill-usage (terminal-bench-2/):
# their WORKDIR is /app, log-summary-date-ranges makes its input with RUN steps, both verifiers fetch pytest with
# uvx and write /logs/verifier/reward.txt. kv-store-grpc's product is its container's state: its solution
# pip-installs grpcio system-wide and leaves a gRPC server running in the background, and its verifier (pip, then
# pytest) imports grpc and calls that server on port 5328.
TASKS_PATH = "terminal-bench-2"
TERMINAL_BENCH_TASKS = ("regex-log", "log-summary-date-ranges", "kv-store-grpc")
TASKS = FilesFixture(
    "yujianll/skill-usage",
    "f9f89fadc42150d0b3de9dfa8ff31da31607ca89",
    tuple(f"/{TASKS_PATH}/{name}/" for name in TERMINAL_BENCH_TASKS),
)


def data_root() -> Path:
    """Where cut fixtures live; kept across runs, so each is cut once per machine."""
    default = Path.home() / ".cache" / "eval-pipeline" / "test-data"
    return Path(os.environ.get("EVAL_PIPELINE_TEST_DATA", default))


def source_url(repo: str) -> str:
    owner, name = repo.split("/")
    return os.environ.get("EVAL_PIPELINE_TEST_DATA_SOURCE", DEFAULT_SOURCE).format(owner=owner, name=name)


class FixtureUnavailable(Exception):
    """A fixture is not in the cache and its public source could not be reached."""


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, timeout=GIT_TIMEOUT_S)
    if done.returncode:
        raise subprocess.CalledProcessError(done.returncode, ["git", *args], done.stdout, done.stderr)
    return done.stdout.decode()


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One cut at a time across the suite's workers (pytest-xdist) and concurrent runs."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _fetch(target: Path, url: str, *args: str) -> None:
    """Fetch from `url` as the remote `origin`, which a partial fetch's later checkout reads its blobs from.

    `--upload-pack` reaches only a local source's server side (a `file://` copy of a repository, whose git
    refuses filters and commits by id unless told, as GitHub does not): without them a partial fetch
    falls back to a full one, which fails on a copy that lacks some of the repository's large blobs."""
    _git("-C", str(target), "remote", "add", "origin", url)
    serve_as_github = (
        "--upload-pack=git -c uploadpack.allowFilter=true -c uploadpack.allowAnySHA1InWant=true upload-pack"
    )
    try:
        _git("-C", str(target), "fetch", "-q", serve_as_github, "origin", *args)
    except subprocess.CalledProcessError as error:
        raise FixtureUnavailable(f"{url}: {_reason(error)}") from None


def _reason(error: subprocess.CalledProcessError) -> str:
    """Git's first fatal line (it says which host or object failed), else its last line."""
    lines = error.stderr.decode(errors="replace").strip().splitlines() or ["no message"]
    return next((line for line in lines if line.startswith("fatal:")), lines[-1])


Fixture = GitFixture | FilesFixture


def repository(repo: str) -> Path:
    """The cut bare repository of a code repository named as on GitHub (`owner/name`)."""
    return provide(REPOSITORIES[repo])


def provide(fixture: Fixture) -> Path:
    """The fixture's cut in the cache, cut now if missing.

    Skips the calling test, with one line naming the fixture and how to provide it, when its public source
    is out of reach.
    """
    try:
        return _provide(fixture)
    except FixtureUnavailable as error:
        pytest.skip(
            f"real-data fixture {fixture.repo} is not cut and its source is out of reach ({error}); "
            "cut it with `python -m eval_pipeline_tests.support.real_data` (eval_pipeline_tests/support/fixtures.md)"
        )


def _provide(fixture: Fixture) -> Path:
    root = data_root()
    path = root / f"{fixture.repo.replace('/', '+')}-{fixture.key}"
    if path.is_dir():
        return path
    with _locked(root):
        if not path.is_dir():
            with tempfile.TemporaryDirectory(dir=root) as scratch:
                fixture.cut(source_url(fixture.repo), Path(scratch) / "cut")
                os.rename(Path(scratch) / "cut", path)
    return path


def verified_instance_ids() -> tuple[str, ...]:
    """Every SWE-bench Verified row the rows fixture publishes (all 500)."""
    return tuple(sorted(row.name for row in (provide(ROWS) / ROWS_PATH).iterdir()))


def swebench_rows(instance_ids: tuple[str, ...] = SWEBENCH_ROWS) -> list[dict]:
    rows = provide(ROWS) / ROWS_PATH
    return [json.loads((rows / i / "tests" / "config.json").read_text()) for i in instance_ids]


def swebench_mirror(rows: list[dict], mirror_dir: Path) -> Path:
    """`mirror_dir/owner/name`: bare repositories with only the rows' base and setup commits (depth 1 each),
    each base commit of a repository versioned from its tags tagged with its last release, which
    setuptools_scm's tag pattern reads as the version (the cut history holds nothing older; with no tag pytest
    would be 0.1.dev1, which its own `minversion` refuses)."""
    for row in rows:
        fixture = REPOSITORIES[row["repo"]]
        source = provide(fixture)
        target = mirror_dir / row["repo"]
        if not target.exists():
            _git("init", "-q", "--bare", str(target))
        for commit in {row["base_commit"], row["environment_setup_commit"]}:
            _git("-C", str(target), "fetch", "-q", "--depth=1", f"file://{source}", commit)
            _git("-C", str(target), "update-ref", f"refs/heads/swebench-{commit}", commit)
        if release := fixture.releases.get(row["base_commit"]):
            _git("-C", str(target), "tag", "-f", f"swebench-{row['base_commit'][:12]}-{release}", row["base_commit"])
    return mirror_dir


def write_rows(rows: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def terminal_bench_tasks(directory: Path, names: tuple[str, ...] = TERMINAL_BENCH_TASKS) -> Path:
    """The tasks' directories, byte for byte as published, under `directory`."""
    published = provide(TASKS) / TASKS_PATH
    for name in names:
        shutil.copytree(published / name, directory / name)
    return directory


def task_base_images() -> dict[str, str]:
    """The images standing in for the tasks' FROM images (scripts/build_task_base.sh); required in CI."""
    stand_ins = parse_task_base_images(os.environ.get("EVAL_PIPELINE_TASK_BASE_IMAGES", ""))
    if not stand_ins:
        if os.environ.get("CI"):
            pytest.fail("CI must set EVAL_PIPELINE_TASK_BASE_IMAGES (see scripts/build_task_base.sh)")
        pytest.skip("EVAL_PIPELINE_TASK_BASE_IMAGES is not set; build them with scripts/build_task_base.sh")
    return stand_ins


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> int:
    """Cut every fixture now (the tests would cut each when first needed) and print what each takes on disk."""
    failed = 0
    for fixture in (ROWS, TASKS, *REPOSITORIES.values()):
        try:
            path = _provide(fixture)
        except FixtureUnavailable as error:
            print(f"{fixture.repo}: not cut: {error}", file=sys.stderr)
            failed += 1
            continue
        print(f"{fixture.repo}: {_size(path) / 2**10:,.0f} KiB at {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
