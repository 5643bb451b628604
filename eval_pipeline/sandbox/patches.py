"""Applying and extracting patches inside a workspace, and checking a patch before it is applied.

A patch is untrusted input: it may name paths outside the repository, be
gigabytes long, or carry bytes that are not UTF-8. Checks here turn each into
a clear, typed failure rather than a crash or a write outside the workspace.
"""

import re
import shlex
from pathlib import PurePosixPath

from eval_pipeline.sandbox.base import ExecResult, HarnessFileTooLarge, Workspace

PATCH_TIMEOUT_S = 120.0
# Far above any real fix (SWE-bench gold patches are kilobytes), far below what hurts the harness.
MAX_PATCH_BYTES = 10 * 2**20
# Likewise for the files one patch touches (SWE-bench Verified's gold patches touch at most a few dozen): the
# harness restores each test file a patch touches, and a patch of tens of thousands of tiny files would make
# grading as long as the patch pleased. Past it, the patch is refused, scored as the patch's failure.
MAX_PATCH_FILES = 2000
_QUOTED_OR_PLAIN = r'("(?:[^"\\]|\\.)*"|\S+)'
_DIFF_HEADER = re.compile(rf"^diff --git {_QUOTED_OR_PLAIN} {_QUOTED_OR_PLAIN}$", re.MULTILINE)
# git's C-style quoting of a path with unusual characters: these escapes, and octal bytes (\164 is "t").
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_ESCAPE = re.compile(r'\\([0-7]{3}|[abtnvfr"\\])')
_PATH_LINE = re.compile(r"^(?:--- |\+\+\+ |rename from |rename to |copy from |copy to )(.+)$", re.MULTILINE)
_BINARY_ATTRIBUTES = "binary.gitattributes"
# Written by a command run as the workspace's uid: under the harness's `out/`, the one place it may write.
DIFF_NAME = "out/workspace.diff"


class WorkspaceDiffError(RuntimeError):
    """The workspace could not be turned into a patch (its repository is gone, or the patch is too large)."""


def _unquote(quoted: str) -> str:
    """The path git and GNU patch write for a C-quoted name (`"\\164ests/conf\\164est.py"` is
    tests/conftest.py): every check must see the name the tools will write, not its spelling."""
    body, raw, start = quoted[1:-1], bytearray(), 0
    for match in _ESCAPE.finditer(body):  # text between escapes is itself (UTF-8, or bytes git wrote raw)
        raw += body[start : match.start()].encode("utf-8", errors="surrogateescape")
        code = match[1]
        raw.append(int(code, 8) & 0xFF if code.isdigit() else _ESCAPES[code])  # GNU patch keeps the low byte
        start = match.end()
    raw += body[start:].encode("utf-8", errors="surrogateescape")
    return raw.decode("utf-8", errors="surrogateescape")


def _strip_path(raw: str) -> str | None:
    """A path as a patch line names it, unquoted, without timestamp and a/ b/ prefix; None for /dev/null."""
    path = raw.split("\t", 1)[0].strip()
    if len(path) >= 2 and path[0] == path[-1] == '"':
        path = _unquote(path)
    if path == "/dev/null":
        return None
    return path[2:] if path[:2] in ("a/", "b/") else path


def header_path(line: str) -> str | None:
    """The path a `diff --git` line names (its b/ side), unquoted; None for any other line."""
    match = _DIFF_HEADER.fullmatch(line)
    return _strip_path(match[2]) if match else None


def patch_paths(patch: str) -> list[str]:
    """Every path a patch names, in git or plain unified format (headers, ---/+++ lines, renames)."""
    raw = [path for pair in _DIFF_HEADER.findall(patch) for path in pair] + _PATH_LINE.findall(patch)
    return list(dict.fromkeys(path for path in map(_strip_path, raw) if path))


def patch_problem(patch: str) -> str | None:
    """Why a patch must not be applied (too large, too many files, a path outside the repository, inside a
    git directory, or compiled bytecode), or None."""
    size = len(patch.encode("utf-8", errors="surrogateescape"))
    if size > MAX_PATCH_BYTES:
        return f"the patch is {size} bytes, over the limit of {MAX_PATCH_BYTES}"
    if (files := len(set(patch_paths(patch)))) > MAX_PATCH_FILES:
        return f"the patch touches {files} files, over the limit of {MAX_PATCH_FILES}"
    escaping = [path for path in patch_paths(patch) if path.startswith("/") or ".." in PurePosixPath(path).parts]
    if escaping:
        return f"the patch names paths outside the repository: {', '.join(escaping[:5])}"
    # git apply refuses these; GNU patch, the fallback, would write a hook the harness's next git command runs.
    in_git = [path for path in patch_paths(patch) if ".git" in PurePosixPath(path).parts]
    if in_git:
        return f"the patch writes inside a git directory: {', '.join(in_git[:5])}"
    # Python loads a stale or unchecked .pyc without its source: code no diff of the source shows.
    compiled = [path for path in patch_paths(patch) if _is_bytecode(PurePosixPath(path))]
    if compiled:
        return f"the patch writes compiled bytecode: {', '.join(compiled[:5])}"
    return None


def compiled_extensions(patch: str) -> list[str]:
    """The compiled extension modules a patch writes (`.so`, `.pyd`, `.dylib`): Python imports one in place of
    a module's source, and no diff shows what it does. A code task's patch may not bring one (tasks/swebench/grading.py); a
    terminal task's product may be one."""
    return [path for path in patch_paths(patch) if PurePosixPath(path).suffix in (".so", ".pyd", ".dylib")]


def _is_bytecode(path: PurePosixPath) -> bool:
    return "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo")


def apply_patch(workspace: Workspace, patch: str, name: str) -> ExecResult:
    """Apply `patch` to the workspace's repository: `git apply`, then GNU patch with fuzz.

    The fallback follows the SWE-bench harness, which accepts patches whose
    context drifted slightly, except that a hunk which looks already applied
    is refused (`--forward`), never reversed: reversing it would undo part of
    the environment. The patch file lives in the harness directory.
    Callers check `patch_problem` first: neither tool is trusted to refuse
    every path outside the repository on its own.
    """
    path = shlex.quote(workspace.write_harness_file(name, patch))
    applied = workspace.run(f"git apply --verbose {path}", timeout_s=PATCH_TIMEOUT_S, env=workspace.harness_git_env)
    if applied.ok:
        return applied
    return workspace.run(f"patch --batch --forward --fuzz=5 -p1 -i {path}", timeout_s=PATCH_TIMEOUT_S)


def _diff(workspace: Workspace, base_commit: str, binary_only: bool) -> bytes:
    """The workspace's diff against `base_commit`, written to DIFF_NAME by the workspace's own git and read back
    with the command's answer."""
    attributes = "-c core.quotepath=false "  # names as they are, where the diff is UTF-8 text
    if binary_only:  # every file as a binary patch and every name C-quoted: exact bytes, in ASCII
        attributes_file = workspace.write_harness_file(_BINARY_ATTRIBUTES, "* binary\n")
        attributes = f"-c core.attributesFile={shlex.quote(attributes_file)} -c core.quotepath=true "
    output = shlex.quote(workspace.harness_path(DIFF_NAME))
    try:
        result, files = workspace.run_then_read(
            f"git add -A && git {attributes}diff --cached --no-color --no-ext-diff --binary "
            f"{shlex.quote(base_commit)} --output={output} && wc -c < {output}",
            (DIFF_NAME,),
            timeout_s=PATCH_TIMEOUT_S,
            env=workspace.harness_git_env,
        )
    except HarnessFileTooLarge as error:
        raise WorkspaceDiffError(
            f"the workspace's changes make a patch over the limit of {MAX_PATCH_BYTES}: {error}"
        ) from None
    if not result.ok:
        raise WorkspaceDiffError(f"could not diff the workspace: {result.stderr[-500:]}")
    if int(result.stdout.strip() or 0) > MAX_PATCH_BYTES:
        raise WorkspaceDiffError(
            f"the workspace's changes make a {int(result.stdout)} byte patch, over the limit of {MAX_PATCH_BYTES}"
        )
    return files[DIFF_NAME] or b""


def workspace_diff(workspace: Workspace, base_commit: str) -> str:
    """Everything changed in the workspace since `base_commit`, new files included, as one patch.

    A change that is not valid UTF-8 text (a Latin-1 source file, or a file
    name that is no UTF-8) is diffed again with every file as a binary patch
    and every name C-quoted, so the stored patch reproduces its bytes exactly
    instead of losing them to replacement characters.
    """
    base_commit = workspace.base_revision or base_commit
    try:
        return _diff(workspace, base_commit, binary_only=False).decode("utf-8")
    except UnicodeDecodeError:
        return _diff(workspace, base_commit, binary_only=True).decode("ascii")
