"""Real public benchmark data for the tests, taken at test time from fetched GitHub snapshots.

Nothing of these repositories is committed here: the tests read bare git
snapshots that the project's `fetch` tool brought onto this machine (by default
under /work/.mirror, `owner+name/repo`; EVAL_PIPELINE_FETCHED_REPOS moves it),
and build from them what a user would have: SWE-bench Verified rows as a JSONL
file, a mirror directory holding only the commits those rows need, and
Terminal-Bench task directories exactly as published. Without the snapshots the
tests are skipped, except under CI=true, where they fail.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

FETCHED = Path(os.environ.get("EVAL_PIPELINE_FETCHED_REPOS", "/work/.mirror"))
# SWE-bench Verified rows, as published in rese1f/terminal-bench-datasets (datasets/swebench-verified/<id>/tests/
# config.json, a dump of the Verified record): a src-layout editable install (flask, Python 3.11), Python 3.9 with
# a plain install (requests), Python 3.9 with an editable install and requirements read at the setup commit (pylint),
# and, on the local backend only (to keep CI short), sympy's own test runner, read by SWE-bench's sympy parser, and
# pytest's own repository at 4.6, where the graded runner is the code under test (an editable install of its src/)
# and older than the launcher's newer paths (no Item.from_parent before 5.4, locations as py.path objects).
SWEBENCH_ROWS_REPO = "rese1f/terminal-bench-datasets"
SWEBENCH_ROWS = ("pallets__flask-5014", "psf__requests-1142", "pylint-dev__pylint-4970")
PYTEST_ROW = "pytest-dev__pytest-5809"
SWEBENCH_LOCAL_ROWS = (*SWEBENCH_ROWS, "sympy__sympy-24443", PYTEST_ROW)


def fetched(repo: str) -> Path:
    """The bare git snapshot of GitHub's `owner/name`."""
    path = FETCHED / repo.replace("/", "+") / "repo"
    if not path.is_dir():
        message = f"no fetched snapshot of {repo} at {path} (bring it with the fetch tool)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def verified_instance_ids() -> tuple[str, ...]:
    """Every SWE-bench Verified row the snapshot publishes (all 500)."""
    listing = _git(
        "--git-dir", str(fetched(SWEBENCH_ROWS_REPO)), "ls-tree", "--name-only", "HEAD:datasets/swebench-verified/"
    )
    return tuple(listing.split())


def swebench_rows(instance_ids: tuple[str, ...] = SWEBENCH_ROWS) -> list[dict]:
    snapshot = fetched(SWEBENCH_ROWS_REPO)
    return [
        json.loads(_git("--git-dir", str(snapshot), "show", f"HEAD:datasets/swebench-verified/{i}/tests/config.json"))
        for i in instance_ids
    ]


def swebench_mirror(rows: list[dict], mirror_dir: Path) -> Path:
    """`mirror_dir/owner/name`: bare repositories with only the rows' base and setup commits (depth 1 each),
    each base commit tagged with its last release (see `_last_release`)."""
    for row in rows:
        target = mirror_dir / row["repo"]
        if not target.exists():
            _git("init", "-q", "--bare", str(target))
        for commit in {row["base_commit"], row["environment_setup_commit"]}:
            _git("-C", str(target), "fetch", "-q", "--depth=1", f"file://{fetched(row['repo'])}", commit)
            _git("-C", str(target), "update-ref", f"refs/heads/swebench-{commit}", commit)
        if release := _last_release(fetched(row["repo"]), row["base_commit"]):
            _git("-C", str(target), "tag", "-f", f"swebench-{row['base_commit'][:12]}-{release}", row["base_commit"])
    return mirror_dir


def _last_release(snapshot: Path, commit: str) -> str | None:
    """The last release tag before `commit` in the full snapshot, or None if it has none.

    A repository versioned by setuptools_scm (pytest) reads its version from the tags when the environment
    installs it; with depth 1 and no tag it would be 0.1.dev1, which pytest's own `minversion` refuses. The
    mirror tags the base commit itself, as the cut history holds nothing older, named for the commit (rows of
    one release share it) with the release last, which setuptools_scm's tag pattern reads as the version.
    """
    described = subprocess.run(
        ["git", "--git-dir", str(snapshot), "describe", "--tags", "--abbrev=0", commit], capture_output=True, text=True
    )
    return described.stdout.strip() or None


def write_rows(rows: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# Terminal-Bench 2.0 tasks in Harbor's format, as vendored unchanged in yujianll/skill-usage (terminal-bench-2/):
# their WORKDIR is /app, log-summary-date-ranges makes its input with RUN steps, both verifiers fetch pytest with
# uvx and write /logs/verifier/reward.txt.
TERMINAL_BENCH_REPO = "yujianll/skill-usage"
TERMINAL_BENCH_TASKS = ("regex-log", "log-summary-date-ranges")


def terminal_bench_tasks(directory: Path, names: tuple[str, ...] = TERMINAL_BENCH_TASKS) -> Path:
    """The tasks' directories, byte for byte as published, under `directory`."""
    snapshot = fetched(TERMINAL_BENCH_REPO)
    for name in names:
        target = directory / name
        target.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "--git-dir", str(snapshot), "archive", f"HEAD:terminal-bench-2/{name}"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return directory


def task_base_image() -> str:
    """The image standing in for the tasks' FROM (scripts/build_task_base.sh); required in CI."""
    image = os.environ.get("EVAL_PIPELINE_TASK_BASE_IMAGE")
    if not image:
        if os.environ.get("CI"):
            pytest.fail("CI must set EVAL_PIPELINE_TASK_BASE_IMAGE (see scripts/build_task_base.sh)")
        pytest.skip("EVAL_PIPELINE_TASK_BASE_IMAGE is not set; build it with scripts/build_task_base.sh")
    return image
