"""SWE-smith rows for the tests, cut from public sources at test time (nothing committed).

- `published_smith_row()`: the one public SWE-smith row reachable here, `pandas-dev__pandas.95280573.pr_53652`, as
  SWE-smith's own tests hold it (tests/test_logs/). Its repository cannot be built here: the library's snapshot of
  pandas-dev/pandas (1.5 GB) is over what it brings, and GitHub is out of reach.
- `pr_mirror_row(...)`: a row made as SWE-smith's PR mirroring makes one (swesmith/bug_gen/mirror/), from SWE-bench
  Verified's flask row: the repository's tree with the fix merged (the row's base commit, its gold patch and its
  test patch) is the mirror's one commit, the bug is the gold patch undone (written by git, as SWE-smith's rows
  are), its base commit the bug committed over that tree, and its graded tests Verified's.
- `smith_shaped_image(...)`: an environment built here re-shaped as SWE-smith's images are: the Python at
  /opt/miniconda3/envs/testbed, the mirror cloned at /testbed (its one commit, `origin` the mirror's URL).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from eval_pipeline.sandbox.pods.images import TESTBED
from eval_pipeline.tasks.swebench.smith import SMITH_PYTHON_PREFIX, smith_image_reference
from eval_pipeline_tests.support.real_data import FilesFixture, provide
from eval_pipeline_tests.support.shaped_images import reshaped_image

__all__ = ["PUBLISHED_ROW", "PrMirror", "pr_mirror_row", "published_smith_row", "smith_shaped_image"]

PUBLISHED_ROW = FilesFixture(
    "SWE-bench/SWE-smith",
    "cf2e649d1eb41cd467421210da7ab8d67e47161e",
    ("/tests/test_logs/pandas-dev__pandas.95280573.pr_53652.json",),
)
# Fixed identity and dates, so that the mirror's commit (and the name made of it) is the same on every machine.
_COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "swesmith",
    "GIT_AUTHOR_EMAIL": "swesmith@anon.com",
    "GIT_COMMITTER_NAME": "swesmith",
    "GIT_COMMITTER_EMAIL": "swesmith@anon.com",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+00:00",
}


def published_smith_row() -> dict[str, Any]:
    """SWE-smith's pandas row as its tests hold it."""
    (path,) = PUBLISHED_ROW.paths
    return json.loads((provide(PUBLISHED_ROW) / path.lstrip("/")).read_text())


def _git(directory: Path, *args: str, stdin: str | None = None) -> str:
    completed = subprocess.run(
        ["git", "-C", str(directory), *args],
        check=True,
        capture_output=True,
        text=True,
        input=stdin,
        env={**os.environ, **_COMMIT_ENV},
    )
    return completed.stdout


class PrMirror:
    """The mirror of a Verified row's repository with its fix merged, made in `directory` from the row's
    repository (`upstream`, holding the row's base commit)."""

    def __init__(self, row: dict[str, Any], upstream: Path, directory: Path) -> None:
        self.row = row
        self.tree = directory / "mirror"
        subprocess.run(["git", "clone", "-q", str(upstream), str(self.tree)], check=True, capture_output=True)
        _git(self.tree, "checkout", "-q", "--detach", row["base_commit"])
        for patch in (row["patch"], row["test_patch"]):
            _git(self.tree, "apply", "-", stdin=patch)
        # The mirror as SWE-smith's create_mirror makes it: the tree alone, one commit on main.
        shutil.rmtree(self.tree / ".git")
        _git(self.tree, "init", "-q", "-b", "main")
        _git(self.tree, "add", "-A")
        _git(self.tree, "commit", "-q", "-m", "Initial commit")
        self.commit = _git(self.tree, "rev-parse", "HEAD").strip()
        owner, name = row["repo"].split("/")
        self.name = f"{owner}__{name}.{self.commit[:8]}"

    def fixed_blob(self, path: str) -> str:
        """The object id of `path` in the mirror's tree (the unbroken code)."""
        return _git(self.tree, "rev-parse", f"{self.commit}:{path}").strip()


def pr_mirror_row(mirror: PrMirror) -> dict[str, Any]:
    """The SWE-smith row of the mirror's bug: the gold patch undone, committed on the instance's branch."""
    row = mirror.row
    _git(mirror.tree, "apply", "-R", "-", stdin=row["patch"])
    bug = _git(mirror.tree, "diff")
    instance_id = f"{mirror.name}.pr_{row['instance_id'].rsplit('-', 1)[1]}"
    _git(mirror.tree, "checkout", "-q", "-b", instance_id)
    _git(mirror.tree, "commit", "-q", "-a", "-m", "Bug Patch")
    bug_commit = _git(mirror.tree, "rev-parse", "HEAD").strip()
    _git(mirror.tree, "checkout", "-q", "main")
    return {
        "instance_id": instance_id,
        "repo": f"swesmith/{mirror.name}",
        "patch": bug,
        "FAIL_TO_PASS": row["FAIL_TO_PASS"],
        "PASS_TO_PASS": row["PASS_TO_PASS"],
        "created_at": row["created_at"],
        "image_name": smith_image_reference(mirror.name),
        "base_commit": bug_commit,
        "problem_statement": row["problem_statement"],
    }


def smith_shaped_image(engine, built_tag: str, mirror: PrMirror, context: Path) -> str:
    """The pipeline's environment image `built_tag` re-shaped as SWE-smith's image of the mirror: its Python at
    SMITH_PYTHON_PREFIX (no /opt/env), and /testbed a clone of the mirror (its main branch only: the bug's
    branch is pushed after the image is built), `origin` the mirror's URL."""
    context.mkdir(parents=True)
    subprocess.run(
        ["git", "clone", "-q", "--single-branch", "-b", "main", str(mirror.tree), str(context / "testbed")],
        check=True,
        capture_output=True,
    )
    _git(context / "testbed", "remote", "set-url", "origin", f"https://github.com/swesmith/{mirror.name}")
    steps = [
        f"RUN rm -rf {TESTBED}/.git",
        f"COPY testbed/.git {TESTBED}/.git",
        f"RUN cd {TESTBED} && git checkout -q -- . && git status --short | head -5",
    ]
    return reshaped_image(
        engine, context, built_tag, SMITH_PYTHON_PREFIX, steps, f"localhost/swesmith-shaped:{mirror.name.lower()}"
    )
