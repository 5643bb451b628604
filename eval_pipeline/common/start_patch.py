"""A task whose starting state is a repository plus a patch: the patched tree as the repository's only commit.

SWE-smith's tasks start from its repository image's tree with the row's bug patch applied (its harness checks out
the bug's branch, whose parent commit is the unbroken tree: the fix is one `git diff HEAD~1` away). Here the
patched tree is committed as a root commit and every other commit, ref, reflog, remote and unreachable object is
removed, so the working tree holds the bug and git holds nothing of the tree before it.
"""

import shlex

from eval_pipeline.common.git import COMMIT_BASELINE, STRIP_HISTORY

__all__ = ["START_PATCH_FILE", "start_from_patch"]

# Where an image build puts the start patch before `start_from_patch` applies and removes it.
START_PATCH_FILE = "/tmp/eval-pipeline-start.patch"
_START_BRANCH = "eval-pipeline-start"
# The bytecode caches of the Python files the patch changed or removed (`__pycache__/<name>.*.pyc`, a `.pyc` beside
# the file): compiled from the tree before the patch (an image that imported its package at build holds them) and
# ignored by git, they would keep the code the patch replaced readable in the working tree.
_DROP_STALE_BYTECODE = (
    "{ git diff --name-only -z HEAD -- '*.py' | xargs -0 -r sh -c"
    """ 'for f; do rm -f -- "$(dirname -- "$f")/__pycache__/$(basename -- "$f" .py)".*.pyc "${f}c" "${f}o"; done' sh; }"""
)


def start_from_patch(patch_file: str, what: str) -> str:
    """Shell, run in a repository, that applies the patch at `patch_file` to its working tree (failing with a
    message naming `what` where it does not apply), removes the file and the bytecode caches of the Python files
    it changed, and leaves the resulting tree (ignored files aside) as the repository's one commit, checked out
    detached: no parent, no ref, remote, reflog or object of any other commit."""
    patch, name = shlex.quote(patch_file), shlex.quote(what)
    return (
        f"{{ git apply --whitespace=nowarn {patch} || {{ echo {name}': the start patch does not apply to the"
        f" repository' >&2; exit 1; }}; }}"
        f" && rm -f {patch} && {_DROP_STALE_BYTECODE}"
        ' && { for remote in $(git remote); do git remote remove "$remote"; done; }'
        f" && git checkout -q --orphan {_START_BRANCH} && {COMMIT_BASELINE} && git checkout -q --detach"
        f" && {STRIP_HISTORY}"
    )
