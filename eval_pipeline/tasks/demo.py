"""The built-in demo benchmark: real bugs in two small git repositories, made offline.

Each repository is built commit by commit with fixed authors and dates, so its
commit hashes, and therefore the dataset's content hash, are the same on every
machine. Every instance is a real bug present at its base commit; its gold
patch and test patch are produced by git from the fixed source and new test.
"""

import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from eval_pipeline.common.git import git
from eval_pipeline.tasks.dataset import Benchmark
from eval_pipeline.tasks.environment import RepoSource
from eval_pipeline.tasks.swebench.canaries import DEFAULT_TWINS, TwinSettings
from eval_pipeline.tasks.swebench.instance import benchmark_from_rows

DEMO_OWNER = "eval-pipeline-demo"


@dataclass(frozen=True)
class DemoBug:
    """A bug at a stage's commit: the buggy snippet, its fix, and a test that shows it."""

    number: int
    path: str
    buggy: str
    fixed: str
    test_path: str
    test_name: str
    test_code: str
    problem_statement: str


@dataclass(frozen=True)
class DemoStage:
    """One commit: files written on top of the previous stage, and the bugs it carries."""

    message: str
    version: str
    files: dict[str, str]
    bugs: tuple[DemoBug, ...]


@dataclass(frozen=True)
class DemoRepo:
    name: str
    stages: tuple[DemoStage, ...]
    owner: str = DEMO_OWNER

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


CALCLIB = DemoRepo(
    name="calclib",
    stages=(
        DemoStage(
            message="Add arithmetic helpers",
            version="0.1",
            files={
                "README.md": "# calclib\n\nSmall numeric helpers.\n",
                "calclib/__init__.py": '"""Small numeric helpers."""\n',
                "calclib/arith.py": '''"""Integer and interval arithmetic."""


def clamp(value, low, high):
    """Limit value to the closed interval [low, high]."""
    if value < low:
        return low
    if value > low:
        return high
    return value


def gcd(a, b):
    """Greatest common divisor, never negative."""
    while b:
        a, b = b, a % b
    return a
''',
                "tests/test_arith.py": """from calclib.arith import clamp, gcd


def test_clamp_below():
    assert clamp(-1, 0, 10) == 0


def test_clamp_at_low_edge():
    assert clamp(0, 0, 10) == 0


def test_gcd_positive():
    assert gcd(12, 18) == 6
""",
            },
            bugs=(
                DemoBug(
                    number=1,
                    path="calclib/arith.py",
                    buggy="    if value > low:\n",
                    fixed="    if value > high:\n",
                    test_path="tests/test_arith.py",
                    test_name="test_clamp_inside_interval",
                    test_code="\n\ndef test_clamp_inside_interval():\n    assert clamp(5, 0, 10) == 5\n",
                    problem_statement="clamp(5, 0, 10) returns 10 instead of 5: values inside the interval are moved to its upper bound.",
                ),
                DemoBug(
                    number=2,
                    path="calclib/arith.py",
                    buggy="    return a\n",
                    fixed="    return abs(a)\n",
                    test_path="tests/test_arith.py",
                    test_name="test_gcd_negative_operand",
                    test_code="\n\ndef test_gcd_negative_operand():\n    assert gcd(4, -6) == 2\n",
                    problem_statement="gcd(4, -6) returns -2, but the docstring promises a result that is never negative.",
                ),
            ),
        ),
        DemoStage(
            message="Add descriptive statistics",
            version="0.2",
            files={
                "calclib/stats.py": '''"""Descriptive statistics."""


def mean(values):
    """Arithmetic mean; raises ValueError for empty input."""
    return sum(values) / len(values)


def median(values):
    """Middle value; the mean of the two middle values for even lengths."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
''',
                "tests/test_stats.py": """import pytest

from calclib.stats import mean, median


def test_mean_of_integers():
    assert mean([1, 2, 3, 4]) == 2.5


def test_median_odd_length():
    assert median([3, 1, 2]) == 2
""",
            },
            bugs=(
                DemoBug(
                    number=3,
                    path="calclib/stats.py",
                    buggy="    return sum(values) / len(values)\n",
                    fixed='    if not values:\n        raise ValueError("mean of empty data")\n    return sum(values) / len(values)\n',
                    test_path="tests/test_stats.py",
                    test_name="test_mean_of_empty_data_raises_value_error",
                    test_code="\n\ndef test_mean_of_empty_data_raises_value_error():\n    with pytest.raises(ValueError):\n        mean([])\n",
                    problem_statement="mean([]) raises ZeroDivisionError; the docstring says it raises ValueError for empty input.",
                ),
                DemoBug(
                    number=4,
                    path="calclib/stats.py",
                    buggy="    return ordered[len(ordered) // 2]\n",
                    fixed="    middle = len(ordered) // 2\n    if len(ordered) % 2:\n        return ordered[middle]\n    return (ordered[middle - 1] + ordered[middle]) / 2\n",
                    test_path="tests/test_stats.py",
                    test_name="test_median_even_length",
                    test_code="\n\ndef test_median_even_length():\n    assert median([4, 1, 3, 2]) == 2.5\n",
                    problem_statement="median([4, 1, 3, 2]) returns 3; for an even number of values it should return the mean of the two middle values, 2.5.",
                ),
            ),
        ),
    ),
)

TEXTKIT = DemoRepo(
    name="textkit",
    stages=(
        DemoStage(
            message="Add word helpers",
            version="0.1",
            files={
                "README.md": "# textkit\n\nSmall text helpers.\n",
                "textkit/__init__.py": '"""Small text helpers."""\n',
                "textkit/words.py": '''"""Splitting and normalising words."""

import re


def slugify(text):
    """Lower-case text with each run of other characters turned into one dash."""
    return re.sub(r"[^a-z0-9]", "-", text.lower()).strip("-")


def count_words(text):
    """The number of whitespace-separated words."""
    return len(text.split(" "))
''',
                "tests/test_words.py": """from textkit.words import count_words, slugify


def test_slugify_simple():
    assert slugify("Hello World") == "hello-world"


def test_count_words_simple():
    assert count_words("one two three") == 3
""",
            },
            bugs=(
                DemoBug(
                    number=1,
                    path="textkit/words.py",
                    buggy='r"[^a-z0-9]"',
                    fixed='r"[^a-z0-9]+"',
                    test_path="tests/test_words.py",
                    test_name="test_slugify_collapses_runs",
                    test_code='\n\ndef test_slugify_collapses_runs():\n    assert slugify("Hello,  World!") == "hello-world"\n',
                    problem_statement='slugify("Hello,  World!") gives "hello---world"; runs of punctuation and spaces should become a single dash.',
                ),
                DemoBug(
                    number=2,
                    path="textkit/words.py",
                    buggy='    return len(text.split(" "))\n',
                    fixed="    return len(text.split())\n",
                    test_path="tests/test_words.py",
                    test_name="test_count_words_empty_and_extra_spaces",
                    test_code='\n\ndef test_count_words_empty_and_extra_spaces():\n    assert count_words("") == 0\n    assert count_words("  a  b ") == 2\n',
                    problem_statement='count_words("") returns 1 and count_words("  a  b ") returns 6; both should count words only.',
                ),
            ),
        ),
        DemoStage(
            message="Add formatting helpers",
            version="0.2",
            files={
                "textkit/format.py": '''"""Formatting text for display."""

SMALL_WORDS = {"a", "an", "and", "of", "the"}


def truncate(text, width, suffix="..."):
    """Shorten text to at most width characters, ending in suffix when cut."""
    if len(text) <= width:
        return text
    return text[:width] + suffix


def title_case(text):
    """Capitalise words, keeping small words lower case except the first."""
    words = text.lower().split()
    return " ".join(w if w in SMALL_WORDS else w.capitalize() for w in words)
''',
                "tests/test_format.py": """from textkit.format import title_case, truncate


def test_truncate_short_text_unchanged():
    assert truncate("short", 10) == "short"


def test_title_case_keeps_small_words():
    assert title_case("war and peace") == "War and Peace"
""",
            },
            bugs=(
                DemoBug(
                    number=3,
                    path="textkit/format.py",
                    buggy="    return text[:width] + suffix\n",
                    fixed="    return text[: max(width - len(suffix), 0)] + suffix\n",
                    test_path="tests/test_format.py",
                    test_name="test_truncate_respects_width",
                    test_code='\n\ndef test_truncate_respects_width():\n    assert truncate("abcdefghij", 8) == "abcde..."\n',
                    problem_statement='truncate("abcdefghij", 8) returns "abcdefgh...", 11 characters; the result must fit in width.',
                ),
                DemoBug(
                    number=4,
                    path="textkit/format.py",
                    buggy='    return " ".join(w if w in SMALL_WORDS else w.capitalize() for w in words)\n',
                    fixed='    return " ".join(\n        w if i and w in SMALL_WORDS else w.capitalize() for i, w in enumerate(words)\n    )\n',
                    test_path="tests/test_format.py",
                    test_name="test_title_case_capitalises_first_small_word",
                    test_code='\n\ndef test_title_case_capitalises_first_small_word():\n    assert title_case("the lord of the rings") == "The Lord of the Rings"\n',
                    problem_statement='title_case("the lord of the rings") returns "the Lord of the Rings"; the first word must always be capitalised.',
                ),
            ),
        ),
    ),
)

DEMO_REPOS = (CALCLIB, TEXTKIT)


def _commit_env(stage_number: int) -> dict[str, str]:
    date = f"2024-01-{stage_number:02d}T12:00:00+00:00"
    return {
        "GIT_AUTHOR_NAME": "eval_pipeline demo",
        "GIT_AUTHOR_EMAIL": "demo@eval-pipeline.invalid",
        "GIT_COMMITTER_NAME": "eval_pipeline demo",
        "GIT_COMMITTER_EMAIL": "demo@eval-pipeline.invalid",
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
    }


def _diff_after_edit(worktree: Path, path: str, new_text: str) -> str:
    """The git diff of one file rewritten to `new_text`, leaving the tree clean again."""
    target = worktree / path
    target.write_text(new_text)
    diff = git(["diff", "--", path], worktree)
    git(["checkout", "--", path], worktree)
    return diff


def _test_names(source: str) -> list[str]:
    return re.findall(r"^def (test_\w+)\(", source, flags=re.MULTILINE)


def _instance_rows(repo: DemoRepo, worktree: Path, stage_index: int, commit: str) -> list[dict]:
    stage = repo.stages[stage_index]
    rows = []
    for bug in stage.bugs:
        source = (worktree / bug.path).read_text()
        if source.count(bug.buggy) != 1:
            raise AssertionError(f"demo bug {repo.name}-{bug.number}: buggy snippet must occur once")
        test_source = (worktree / bug.test_path).read_text()
        rows.append(
            {
                "instance_id": f"{repo.owner}__{repo.name}-{bug.number}",
                "repo": repo.full_name,
                "base_commit": commit,
                "environment_setup_commit": commit,
                "version": stage.version,
                "created_at": f"2024-02-{stage_index + 1:02d}T09:{bug.number:02d}:00Z",
                "problem_statement": bug.problem_statement,
                "hints_text": "",
                "patch": _diff_after_edit(worktree, bug.path, source.replace(bug.buggy, bug.fixed)),
                "test_patch": _diff_after_edit(worktree, bug.test_path, test_source + bug.test_code),
                "FAIL_TO_PASS": [f"{bug.test_path}::{bug.test_name}"],
                "PASS_TO_PASS": [f"{bug.test_path}::{name}" for name in _test_names(test_source)],
            }
        )
    return rows


def _build_repo(repo: DemoRepo, worktree: Path) -> list[dict]:
    """Commit the repo's stages into `worktree` and return its instance rows."""
    git(["init", "-q", "-b", "main", str(worktree)], worktree.parent)
    rows: list[dict] = []
    for index, stage in enumerate(repo.stages):
        for path, text in stage.files.items():
            (worktree / path).parent.mkdir(parents=True, exist_ok=True)
            (worktree / path).write_text(text)
        git(["add", "-A"], worktree)
        git(["commit", "-q", "--no-gpg-sign", "-m", stage.message], worktree, env=_commit_env(index + 1))
        commit = git(["rev-parse", "HEAD"], worktree).strip()
        rows.extend(_instance_rows(repo, worktree, index, commit))
    return rows


def build_repos_benchmark(
    name: str, repos: Iterable[DemoRepo], mirror_dir: Path, twins: TwinSettings = DEFAULT_TWINS
) -> Benchmark:
    """Build `repos` into `mirror_dir` (once) and return their bugs as a benchmark.

    The repositories are rebuilt in a temporary directory on every call, which is
    cheap and yields the same commits; they are moved into the mirror only when
    missing, so concurrent callers never see a half-written repository.
    """
    rows: list[dict] = []
    for repo in repos:
        target = mirror_dir / repo.full_name
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{repo.name}-") as scratch:
            worktree = Path(scratch) / repo.name
            worktree.mkdir()
            rows.extend(_build_repo(repo, worktree))
            if not target.exists():
                try:
                    worktree.rename(target)
                except OSError:  # another process installed it first; theirs is identical
                    shutil.rmtree(worktree, ignore_errors=True)
    return benchmark_from_rows(name, rows, twins=twins, source=RepoSource(mirror_dir=str(mirror_dir)))


def build_demo_benchmark(mirror_dir: Path, twins: TwinSettings = DEFAULT_TWINS) -> Benchmark:
    return build_repos_benchmark("demo", DEMO_REPOS, mirror_dir, twins)
