"""Applying and extracting patches inside a workspace."""

import re
import shlex

from eval_pipeline.sandbox import ExecResult, Workspace

PATCH_TIMEOUT_S = 120.0
_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.MULTILINE)


def patch_files(patch: str) -> list[str]:
    """The files a git-style patch touches, in order."""
    return list(dict.fromkeys(target for _, target in _DIFF_HEADER.findall(patch)))


def apply_patch(workspace: Workspace, patch: str, name: str) -> ExecResult:
    """Apply `patch` to the workspace's repository: `git apply`, then GNU patch with fuzz.

    The fallback follows the SWE-bench harness, which accepts patches whose
    context drifted slightly. The patch file lives in the harness directory.
    """
    path = shlex.quote(workspace.write_harness_file(name, patch))
    applied = workspace.run(f"git apply --verbose {path}", timeout_s=PATCH_TIMEOUT_S)
    if applied.ok:
        return applied
    return workspace.run(f"patch --batch --fuzz=5 -p1 -i {path}", timeout_s=PATCH_TIMEOUT_S)


def workspace_diff(workspace: Workspace, base_commit: str) -> str:
    """Everything changed in the workspace since `base_commit`, new files included, as one patch."""
    output = workspace.harness_path("workspace.diff")
    result = workspace.run(
        "git add -A && git -c core.quotepath=false diff --cached --no-color --no-ext-diff --binary "
        f"{shlex.quote(base_commit)} --output={shlex.quote(output)}",
        timeout_s=PATCH_TIMEOUT_S,
    )
    if not result.ok:
        raise RuntimeError(f"could not diff the workspace: {result.stderr[-500:]}")
    return (workspace.read_harness_file("workspace.diff") or b"").decode("utf-8", errors="replace")
