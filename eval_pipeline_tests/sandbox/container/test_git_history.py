"""The repository an instance image copies: no later commit in it, and its pack not written twice in the image.

A container image stores each layer's files whole: a `git gc` in the image's last step rewrote the copied pack,
so every instance stored its history twice (a sympy instance 760 MB). The checkout copied in is pruned to the base
commit's ancestors on the host (KEEP_ANCESTORS), and the image's last step (STRIP_REFS) removes the refs without
rewriting that pack.
"""

import os
import subprocess
import time
from pathlib import Path

from eval_pipeline.common.git import (
    COMMIT_BASELINE,
    COMMIT_ENV,
    KEEP_ANCESTORS,
    REFRESH_INDEX,
    STRIP_REFS,
    clone_at,
    git,
)
from eval_pipeline.sandbox.pods.images import readable_by_all


def sh(command: str, repo: Path) -> str:
    return subprocess.run(["sh", "-c", command], cwd=repo, check=True, capture_output=True, text=True).stdout


def commit(repo: Path, name: str, text: str) -> str:
    (repo / name).write_text(text)
    git(["add", "-A"], repo)
    git(["commit", "-q", "-m", f"{name}: {text}"], repo, env=COMMIT_ENV)
    return git(["rev-parse", "HEAD"], repo).strip()


def objects(repo: Path) -> set[str]:
    """Every object the repository holds, reachable or not, loose or packed."""
    return set(sh("git cat-file --batch-all-objects --batch-check='%(objectname)'", repo).split())


def packs(repo: Path) -> set[str]:
    return {path.name for path in (repo / ".git" / "objects" / "pack").glob("*.pack")}


def test_a_checkout_for_an_image_keeps_its_ancestors_and_their_tags_and_nothing_later(tmp_path):
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git(["init", "-q"], upstream)
    first = commit(upstream, "calc.py", "return a - b")
    git(["tag", "-a", "v1", "-m", "first release"], upstream, env=COMMIT_ENV)
    base = commit(upstream, "calc.py", "return a - b  # still wrong")
    fix = commit(upstream, "calc.py", "return a + b  # THE FIX")
    git(["tag", "v2"], upstream)
    git(["branch", "feature", fix], upstream)
    fix_blob = git(["rev-parse", f"{fix}:calc.py"], upstream).strip()

    checkout = tmp_path / "checkout"
    clone_at(str(upstream), base, checkout)
    sh(KEEP_ANCESTORS, checkout)
    held = objects(checkout)
    assert first in held and base in held
    assert fix not in held and fix_blob not in held, "no object of a later commit"
    assert sh("git tag", checkout).split() == ["v1"], "the tag an install may read stays, until the image strips it"
    assert sh("git describe --tags", checkout).strip().startswith("v1-1-"), "as setuptools_scm reads it"

    # The image's last step: the install's changes committed, then the refs gone, the copied pack left as it was.
    # Copied into an image, every file's stat data differs from the index's (here: a new mtime).
    (checkout / "build.txt").write_text("installed\n")
    for path in checkout.iterdir():
        if path.is_file():
            os.utime(path, (1_000_000_000, 1_000_000_000))
    before = {name: (checkout / ".git" / "objects" / "pack" / name).stat().st_mtime_ns for name in packs(checkout)}
    sh(f"{REFRESH_INDEX} && {COMMIT_BASELINE} && {STRIP_REFS}", checkout)
    after = {name: (checkout / ".git" / "objects" / "pack" / name).stat().st_mtime_ns for name in before}
    assert after == before, "the copied pack is neither rewritten nor touched (its layer would store it again)"
    assert sh("git for-each-ref", checkout) == "" and sh("git reflog", checkout) == ""
    assert fix not in objects(checkout)
    assert sh("git status --porcelain", checkout) == "", "the install's changes are the baseline"
    assert not list((checkout / ".git" / "objects").glob("[0-9a-f][0-9a-f]/*")), "nothing left loose"


def test_only_entries_lacking_read_or_search_bits_are_changed(tmp_path):
    """The image's last step makes the repository readable by every trial's uid, touching nothing that already is
    (a chmod of an unchanged mode still copies the file into the layer)."""
    tree = tmp_path / "testbed"
    (tree / "private").mkdir(parents=True)
    files = {"readable.py": 0o644, "tool": 0o755, "secret.txt": 0o600, "private/run": 0o700, "half": 0o744}
    for name, mode in files.items():
        (tree / name).write_text("x")
        (tree / name).chmod(mode)
    (tree / "private").chmod(0o700)
    untouched = {name: (tree / name).stat().st_ctime_ns for name in ("readable.py", "tool")}
    time.sleep(0.01)
    subprocess.run(["sh", "-c", readable_by_all(str(tree))], check=True)
    modes = {name: (tree / name).stat().st_mode & 0o777 for name in [*files, "private"]}
    assert modes == {
        "readable.py": 0o644,
        "tool": 0o755,
        "secret.txt": 0o644,
        "private/run": 0o755,
        "half": 0o755,
        "private": 0o755,
    }
    assert {name: (tree / name).stat().st_ctime_ns for name in untouched} == untouched, "no chmod where none is due"
