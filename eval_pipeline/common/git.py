"""Running git with no dependence on the user's configuration."""

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

# Global and system config (hooks, signing, autocrlf) would make results differ by machine.
_ISOLATED_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}


# The harness's git commands in a workspace, whose repository an agent may have had in hand: its .git/config
# may name hooks or a filesystem monitor, each a command git would run for the harness (external diff drivers
# are off by --no-ext-diff). Settings given through the environment (git 2.31+) override the repository's.
HARNESS_GIT_ENV = {
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "core.hooksPath",
    "GIT_CONFIG_VALUE_0": os.devnull,
    "GIT_CONFIG_KEY_1": "core.fsmonitor",
    "GIT_CONFIG_VALUE_1": "false",
}


class GitError(RuntimeError):
    pass


def git(args: Sequence[str], cwd: Path | str, env: Mapping[str, str] | None = None) -> str:
    """Run git in `cwd` and return its stdout; raise GitError naming the command on failure."""
    completed = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **_ISOLATED_ENV, **(env or {})},
        capture_output=True,
        text=True,
    )
    if completed.returncode != 0:
        raise GitError(f"git {' '.join(args)} in {cwd} failed: {completed.stderr.strip()}")
    return completed.stdout


def clone_at(location: str, commit: str, target: Path) -> None:
    """Clone `location` into `target` checked out at `commit`, with no remote.

    Without the remote an agent cannot fetch the upstream fix.
    """
    git(["clone", "-q", "--no-checkout", location, str(target)], target.parent)
    git(["checkout", "-q", "--detach", commit], target)
    git(["remote", "remove", "origin"], target)


# The environment's state after its install steps, committed on top of the base commit when they changed anything
# (build output such as a non-editable install's build/, a pre-install `sed -i` of a tracked file): that state is
# the baseline every trial starts from and every patch is taken against, so it is never part of an agent's patch
# and no patch tool can undo it. Ignored files stay out, as they do of every diff. The commit's identity and dates
# are fixed, so that the same state gives the same commit.
COMMIT_BASELINE = (
    "git add -A && { git diff --cached --quiet || GIT_AUTHOR_DATE='2000-01-01T00:00:00Z'"
    " GIT_COMMITTER_DATE='2000-01-01T00:00:00Z' git -c user.name=eval-pipeline -c user.email=eval-pipeline@localhost"
    " commit -q --no-verify -m 'eval-pipeline: the environment after its install steps'; }"
)

# Leaves only the checked-out commit and its ancestors: no branch, tag, remote, stash or reflog, and no object of a
# later commit (the fix). Run after the environment is installed: setuptools_scm and the like read tags then.
STRIP_HISTORY = (
    "git for-each-ref --format='delete %(refname)' | git update-ref --stdin"
    " && git reflog expire --expire=now --all"
    " && git -c gc.auto=0 gc -q --prune=now"
    " && rm -f .git/ORIG_HEAD .git/FETCH_HEAD"
)


# Leaves a checkout with the checked-out commit, its ancestors and the refs on them (tags an install may read), and
# no object of a later commit: run on the repository copied into an image, so that no image layer ever holds the fix.
KEEP_ANCESTORS = (
    "git for-each-ref --no-merged=HEAD --format='delete %(refname)' | git update-ref --stdin"
    " && git reflog expire --expire=now --all"
    " && git -c gc.auto=0 gc -q --prune=now"
)

# Refreshes the index's stat data, comparing contents without writing them. Run before COMMIT_BASELINE in an image: a
# repository copied in no longer matches its index, so `git add` would write every file again as an object, and
# writing an object a pack holds touches the pack's mtime, which copies the whole pack into the step's layer.
REFRESH_INDEX = "{ git update-index -q --refresh >/dev/null || true; }"

# STRIP_HISTORY for a repository KEEP_ANCESTORS has already pruned, inside an image: the same refs and reflogs go,
# and the objects made since (the baseline commit) are packed on their own, without rewriting the copied pack,
# which in a layer above it would store the whole history a second time.
STRIP_REFS = (
    "git for-each-ref --format='delete %(refname)' | git update-ref --stdin"
    " && git reflog expire --expire=now --all"
    " && git -c gc.auto=0 repack -d -q && git prune --expire=now"
    " && rm -f .git/ORIG_HEAD .git/FETCH_HEAD"
)


# Who committed a terminal task's working tree, and when: fixed, so that its commit (and every key made from it)
# is the same on every machine.
COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "eval_pipeline",
    "GIT_AUTHOR_EMAIL": "tasks@eval-pipeline.invalid",
    "GIT_COMMITTER_NAME": "eval_pipeline",
    "GIT_COMMITTER_EMAIL": "tasks@eval-pipeline.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00",
}
