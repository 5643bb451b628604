"""A SWE-smith row (SWE-bench/SWE-smith) as a task: its bug in its repository's image, graded by its profile's tests.

SWE-smith makes tasks by breaking working code. Its rows hold `instance_id` (`<owner>__<repo>.<commit[:8]>.<how the
bug was made>`, e.g. `pandas-dev__pandas.95280573.pr_53652`), `repo` (`swesmith/<owner>__<repo>.<commit[:8]>`, the
mirror of the repository at that commit, one commit of its tree), `patch` (the bug: a diff against that tree),
`FAIL_TO_PASS`, `PASS_TO_PASS`, `image_name`, `base_commit` (the mirror's commit on the branch named by the
instance id, the bug committed over the tree) and `problem_statement`. Its code (swesmith/profiles/, harness/):

- a repository profile per (owner, repo, commit) gives the test command and log parser; its image is
  `{org}/swesmith.x86_64.{owner}_1776_{repo}.{commit[:8]}` (lower-cased), the mirror cloned at /testbed and a conda
  environment `testbed` at /opt/miniconda3/envs/testbed;
- its harness checks out the instance's branch in that image, applies the candidate patch (the gold is the bug
  patch reversed: `git apply --reverse`), runs the profile's test command with the FAIL_TO_PASS tests' files
  appended, parses its output with the profile's parser and calls the row resolved when every FAIL_TO_PASS and
  PASS_TO_PASS test among those files passes.

Here: the row runs in that image (the row's `image_name` where it names a namespace, else the name the profile
forms), its starting state the image's tree with the bug applied, committed as the repository's only commit
(common/start_patch.py: the branch's parent, the unbroken tree, is nowhere in the workspace), its reference the
bug patch reversed; it is graded by SWE-bench's grading (tasks/swebench/grading.py) with the profile's command on
the FAIL_TO_PASS tests' files (specs.graded_files), their PASS_TO_PASS tests graded beside them, launcher,
canary, twins and seals as for any pytest row. One rule is stricter than SWE-smith's: a graded test missing from
the results is missing (`tests_missing`), where SWE-smith's grading counts it passed.

A profile's command that the grading cannot run as the profile means (its own runner and parser, a command made
of the test names, pytest under another launcher) is refused at load naming the row and why; so is a row of
another language (its bug patch's files), and a row under `images: build` (SWE-smith ships no spec to build its
environment from).
"""

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath
from typing import Any, ClassVar

from eval_pipeline.sandbox.patches import patch_paths
from eval_pipeline.tasks.dataset import (
    InvalidInstanceError,
    RowProblem,
    commit_problem,
    id_problem,
    list_column,
    repo_problem,
    require_text,
)
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.named_image import ImagePolicy, NamedImage
from eval_pipeline.tasks.swebench.canaries import DEFAULT_TWINS, TwinSettings
from eval_pipeline.tasks.swebench.grading import grade as swebench_grade
from eval_pipeline.tasks.swebench.row import CodeRowTask

__all__ = ["SMITH_ORGANISATION", "SmithInstance", "is_smith_row", "reverse_patch", "smith_image_reference"]

SMITH_ORGANISATION = "swesmith"  # the GitHub organisation of SWE-smith's mirrors: its rows' `repo` is under it
SMITH_IMAGE_NAMESPACE = "swebench"  # where SWE-smith's profiles name their images (swesmith/constants.py)
SMITH_WORKDIR = "/testbed"
SMITH_PYTHON_PREFIX = "/opt/miniconda3/envs/testbed"
REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch")
_MIRROR = re.compile(r"(?P<owner>[A-Za-z0-9-]+)__(?P<name>[A-Za-z0-9._-]+)\.(?P<commit>[0-9a-f]{8})")
_DIFF_START = re.compile(r"^diff --git ", re.MULTILINE)
_HUNK = re.compile(r"^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$")

# SWE-smith's Python profiles (swesmith/profiles/python.py): `PythonProfile`'s test command, which every profile
# keeps but those below; its parser reads pytest's verbose lines, whose ids are pytest's node ids, as the launcher
# reports them (the autograd and paramiko profiles' own parsers read the same ids from other lines).
PYTEST_COMMAND = "pytest --disable-warnings --color=no --tb=no --verbose"
PROFILE_COMMANDS = {
    "tkrajina/gpxpy": "pytest test.py --verbose --color=no --tb=no --disable-warnings",
    "mido/mido": "pytest --disable-warnings --color=no --tb=no --verbose -rs -c /dev/null",
    "paramiko/paramiko": "pytest -rA --color=no --disable-warnings",
}
# Profiles whose tests this grading cannot run as the profile runs them, and why.
UNHONOURED_PROFILES = {
    "tornadoweb/tornado": "its tests run under tornado's own runner (`python -m tornado.test`), read by its own parser",
    "un33k/python-slugify": "its tests run as a script (`python test.py`), not under pytest",
    "python/mypy": "its test command is made of the FAIL_TO_PASS tests' names (`pytest -k ...`), not their files",
    "pydantic/pydantic": "its tests run under `uv run pytest`, which the grading's launcher does not start",
    "jax-ml/jax": "its tests run in pytest-xdist's workers (`-n auto`), outside the grading's launcher",
}
# The languages of SWE-smith's other profiles, by their source files' suffixes: issue 53 covers them.
LANGUAGES = {
    ".go": "Go",
    ".rs": "Rust",
    ".js": "JavaScript",
    ".jsx": "JavaScript",
    ".mjs": "JavaScript",
    ".cjs": "JavaScript",
    ".ts": "TypeScript",
    ".tsx": "TypeScript",
    ".java": "Java",
    ".c": "C",
    ".h": "C",
    ".cc": "C++",
    ".cpp": "C++",
    ".cxx": "C++",
    ".hpp": "C++",
    ".hh": "C++",
    ".cs": "C#",
    ".rb": "Ruby",
    ".php": "PHP",
}
PYTHON_SUFFIXES = (".py", ".pyx", ".pxd", ".pyi")


def is_smith_row(row: Mapping[str, Any]) -> bool:
    """Whether `row` is SWE-smith's: its repository is one of SWE-smith's mirrors."""
    repo = row.get("repo")
    return isinstance(repo, str) and repo.startswith(f"{SMITH_ORGANISATION}/")


def smith_image_reference(mirror: str) -> str:
    """The image SWE-smith's profile names for the mirror `<owner>__<repo>.<commit[:8]>` (RepoProfile.image_name)."""
    found = _MIRROR.fullmatch(mirror)
    if found is None:
        raise ValueError(f"{mirror!r} is not a SWE-smith mirror's name (<owner>__<repo>.<commit[:8]>)")
    return f"{SMITH_IMAGE_NAMESPACE}/swesmith.x86_64.{found['owner']}_1776_{found['name']}.{found['commit']}".lower()


def _swapped_diff_header(line: str) -> str:
    """`diff --git a/X b/Y` as `diff --git a/Y b/X` (X and Y the same path but for a rename)."""
    rest = line.removeprefix("diff --git ")
    half = (len(rest) - 1) // 2
    if rest[:half].removeprefix("a/") == rest[half + 1 :].removeprefix("b/"):
        return line
    old, _, new = rest.rpartition(" b/")
    return f"diff --git a/{new} b/{old.removeprefix('a/')}"


_SWAPPED_PREFIXES = (
    ("new file mode ", "deleted file mode "),
    ("deleted file mode ", "new file mode "),
    ("rename from ", "rename to "),
    ("rename to ", "rename from "),
)


def _reversed_header(lines: list[str]) -> list[str]:
    """A file's header lines (from `diff --git` to its first hunk), reversed: git reads each line on its own."""
    out: list[str] = []
    minus = old_mode = ""
    for line in lines:
        if line.startswith("diff --git "):
            out.append(_swapped_diff_header(line))
        elif line.startswith("index "):
            hashes, _, mode = line.removeprefix("index ").partition(" ")
            before, _, after = hashes.partition("..")
            out.append(f"index {after}..{before}{' ' + mode if mode else ''}")
        elif line.startswith(("copy from ", "copy to ", "GIT binary patch")):
            raise ValueError(f"a patch with {line.split(' ', 2)[0]} {line.split(' ', 2)[1]} cannot be reversed")
        elif line.startswith("old mode "):
            old_mode = line.removeprefix("old mode ")
        elif line.startswith("new mode "):
            out += [f"old mode {line.removeprefix('new mode ')}", f"new mode {old_mode}"]
        elif line.startswith("--- "):
            minus = line.removeprefix("--- ")
        elif line.startswith("+++ "):
            plus = line.removeprefix("+++ ")
            out.append(f"--- {plus if plus == '/dev/null' else 'a/' + plus.removeprefix('b/')}")
            out.append(f"+++ {minus if minus == '/dev/null' else 'b/' + minus.removeprefix('a/')}")
        else:
            swapped = (swap + line[len(prefix) :] for prefix, swap in _SWAPPED_PREFIXES if line.startswith(prefix))
            out.append(next(swapped, line))
    return out


def _count(span: str) -> int:
    return int(span.split(",")[1]) if "," in span else 1


def reverse_patch(patch: str) -> str:
    """A git diff reversed, as `git apply --reverse` reads it: what it adds it removes, and the other way round.
    A copy or a binary patch, which SWE-smith's bugs never are, raises ValueError."""
    lines = patch.split("\n")
    out: list[str] = []
    header: list[str] = []
    old_left = new_left = 0
    for line in lines:
        if old_left > 0 or new_left > 0:
            sign = line[:1] or " "  # a blank context line whose space an editor dropped
            if sign == "\\":
                out.append(line)
                continue
            old_left -= sign in ("-", " ")
            new_left -= sign in ("+", " ")
            out.append({"-": "+", "+": "-"}.get(sign, line[:1]) + line[1:])
            continue
        if hunk := _HUNK.match(line):
            out += _reversed_header(header)
            header = []
            old_span, new_span, context = hunk.groups()
            old_left, new_left = _count(old_span), _count(new_span)
            out.append(f"@@ -{new_span} +{old_span} @@{context}")
        elif line.startswith("diff --git ") or header:
            if line.startswith("diff --git ") and header:
                out += _reversed_header(header)
                header = []
            header.append(line)
        else:
            out.append(line)
    out += _reversed_header(header)
    return "\n".join(out)


def _profile_problem(mirror: str, owner_repo: str, patch: str, fail_to_pass: tuple[str, ...]) -> str:
    """Why the row's profile cannot be graded here ('' when it can): a bug in another language's source, a
    profile whose tests this grading does not run as it does, or graded tests that are not pytest's node ids."""
    suffixes = {PurePosixPath(path).suffix for path in patch_paths(patch)}
    if languages := sorted({LANGUAGES[suffix] for suffix in suffixes if suffix in LANGUAGES}):
        return (
            f"a SWE-smith row of {' and '.join(languages)} (its bug patch changes {', '.join(sorted(suffixes))} "
            f"files): SWE-smith's {languages[0]} profiles are not run here (issue 53)"
        )
    if not suffixes <= set(PYTHON_SUFFIXES):
        return f"its bug patch changes {', '.join(sorted(suffixes))} files, which no SWE-smith Python profile holds"
    if why := UNHONOURED_PROFILES.get(owner_repo):
        return f"SWE-smith's profile of {mirror}: {why}"
    if not all(re.fullmatch(r"[^:\s]+\.py::\S.*", test_id) for test_id in fail_to_pass):
        return "its FAIL_TO_PASS tests are not pytest's node ids (`<file>.py::<test>`), which its profile's run reports"
    return ""


@dataclass(frozen=True)
class SmithInstance(CodeRowTask):
    """One SWE-smith row; a `Task` (tasks/task.py) graded as tasks/swebench/grading.py grades a row whose tests are in
    its repository. `FAIL_TO_PASS` and `listed_pass_to_pass` are the row's lists; `PASS_TO_PASS`, what the grading
    reads, those of the latter in the FAIL_TO_PASS tests' files, the ones SWE-smith's harness runs and grades."""

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str
    FAIL_TO_PASS: tuple[str, ...]
    listed_pass_to_pass: tuple[str, ...]
    image_name: str
    created_at: str = ""
    twins: TwinSettings = DEFAULT_TWINS  # the campaign's, for its gradings: no part of the row

    version: ClassVar[str] = ""
    test_patch: ClassVar[str] = ""  # none: the tests are in the repository (specs.graded_files)
    local_problem: ClassVar[str] = "a SWE-smith row runs in its repository's image, which the local backend cannot run"

    @classmethod
    def from_row(
        cls, row: Mapping[str, Any], *, index: int = 0, twins: TwinSettings = DEFAULT_TWINS, images: ImagePolicy
    ) -> "SmithInstance":
        """The row at `index` under its slice's `images` policy; InvalidInstanceError names the field and why."""
        instance_id = str(row.get("instance_id") or "")
        require_text(row, REQUIRED, index=index, instance_id=instance_id)
        mirror = row["repo"].split("/", 1)[1]
        found = _MIRROR.fullmatch(mirror)
        for name, why in (
            ("instance_id", id_problem(instance_id)),
            ("repo", repo_problem(row["repo"]) or ("" if found else f"{mirror!r} is not <owner>__<repo>.<commit[:8]>")),
            ("instance_id", "" if instance_id.startswith(f"{mirror}.") else f"not an instance of the mirror {mirror}"),
            ("base_commit", commit_problem(row["base_commit"])),
            ("patch", "" if _DIFF_START.search(row["patch"]) else "not a git diff"),
        ):
            if why:
                raise InvalidInstanceError(RowProblem(index, instance_id, name, why))
        assert found is not None  # checked with the repo
        fail_to_pass = list_column(
            row, "FAIL_TO_PASS", RowProblem(index, instance_id, "FAIL_TO_PASS", "not a list of ids")
        )
        if not fail_to_pass:
            raise InvalidInstanceError(RowProblem(index, instance_id, "FAIL_TO_PASS", "empty: no test shows the fix"))
        if why := _profile_problem(mirror, f"{found['owner']}/{found['name']}", row["patch"], fail_to_pass):
            raise InvalidInstanceError(RowProblem(index, instance_id, "repo", why))
        if images == "build":
            why = "SWE-smith ships no spec to build its environment from: the row runs in its image (images: pull)"
            raise InvalidInstanceError(RowProblem(index, instance_id, "images", why))
        try:
            reverse_patch(row["patch"])
        except ValueError as error:
            raise InvalidInstanceError(RowProblem(index, instance_id, "patch", str(error))) from None
        named = row.get("image_name")
        return cls(
            instance_id=instance_id,
            repo=row["repo"],
            base_commit=row["base_commit"],
            problem_statement=row["problem_statement"],
            patch=row["patch"],
            FAIL_TO_PASS=fail_to_pass,
            listed_pass_to_pass=list_column(
                row, "PASS_TO_PASS", RowProblem(index, instance_id, "PASS_TO_PASS", "not a list of ids")
            ),
            image_name=named if isinstance(named, str) else "",
            created_at=str(row.get("created_at") or ""),
            twins=twins,
        )

    def to_row(self) -> dict[str, Any]:
        """The row in SWE-smith's columns: what the snapshot holds and `content_hash` hashes."""
        row = asdict(self)
        del row["twins"]
        row["FAIL_TO_PASS"] = list(self.FAIL_TO_PASS)
        row["PASS_TO_PASS"] = list(row.pop("listed_pass_to_pass"))
        return row

    @property
    def PASS_TO_PASS(self) -> tuple[str, ...]:  # noqa: N802 - SWE-bench's name, read by GradedRow
        files = tuple(dict.fromkeys(test_id.split("::", 1)[0] for test_id in self.FAIL_TO_PASS))
        return tuple(test_id for test_id in self.listed_pass_to_pass if test_id.startswith(files))

    @property
    def environment_setup_commit(self) -> str:
        return self.base_commit

    @property
    def mirror(self) -> str:
        """SWE-smith's mirror of the repository, `<owner>__<repo>.<commit[:8]>`."""
        return self.repo.split("/", 1)[1]

    @property
    def named_image(self) -> NamedImage:
        """The row's image (its `image_name` where that names a namespace, else the profile's name), holding the
        mirror's tree at /testbed; the task starts from that tree with the bug applied."""
        reference = self.image_name if "/" in self.image_name else smith_image_reference(self.mirror)
        return NamedImage(reference, SMITH_WORKDIR, SMITH_PYTHON_PREFIX, start_patch=self.patch)

    @property
    def own_environment(self) -> EnvironmentSpec:
        """The profile's test command and parser; the image holds everything else."""
        found = _MIRROR.fullmatch(self.mirror)
        assert found is not None  # checked when the row was read
        command = PROFILE_COMMANDS.get(f"{found['owner']}/{found['name']}", PYTEST_COMMAND)
        return EnvironmentSpec(test_cmd=command, log_parser="parse_log_pytest")

    @property
    def instruction(self) -> str:
        return f"{self.problem_statement}\n"

    @property
    def reference_patch(self) -> str:
        """The fix: the bug patch reversed."""
        return reverse_patch(self.patch)

    # SWE-bench's grading, on the FAIL_TO_PASS tests' files (specs.graded_files).
    grade = swebench_grade
