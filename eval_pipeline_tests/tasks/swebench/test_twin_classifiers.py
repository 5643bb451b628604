"""Telling a graded test from its twins (tasks/swebench/canaries.py) as a forger who has read the code would try.

Groups are planted in real test files: the demo's, and SWE-bench Verified's (every Python file a test patch
adds; each file a graded row's patch changes, at its base commit; and the test files of the graded rows'
repositories, as a patch would change or add them: eval_pipeline_tests/support/real_data.py). Each classifier below looks
at a group as the planted file shows it, with the file at the base commit beside it (the workspace's git history
holds it), and picks the member it scores highest, or, its opposite, lowest. Over many groups neither may pick
the original more often than chance, the mean of 1/(k + 1) over the groups, by more than TOLERANCE_SD standard
errors. On ad50ec1's twins eleven beat chance by 5 to 38 standard errors (names, values, source against base;
roundness on its groups of numerals); position and spacing did not, its groups being already contiguous with the
original's rank uniform (docs/HOSTILE_AGENTS.md has the figures). What the code under test returns is no part of this: a forger that runs
the group is benchmarks/twin_forger.py's.
"""

import ast
import math
import random
import re
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eval_pipeline.common.git import git
from eval_pipeline.sandbox.patches import patch_paths
from eval_pipeline.tasks.dataset import Benchmark
from eval_pipeline.tasks.swebench.canaries import SourceFile, TwinSettings, plant_twins
from eval_pipeline.tasks.swebench.twin_values import expected_constants, number_value, words
from eval_pipeline_tests.support.real_data import (
    PY36_ROW,
    SWEBENCH_LOCAL_ROWS,
    repository,
    swebench_rows,
    verified_instance_ids,
)

GROUPS = 1200  # groups each classifier judges: its accuracy's standard error is about 1.3 points at k = 3
TOLERANCE_SD = 4  # standard errors above chance a classifier may reach before it counts as a tell
LONGEST = 60_000  # characters of a test file taken: the longest (sympy's) take most of the time


@dataclass(frozen=True)
class Case:
    """A real test file as a test patch leaves it, its version at the base commit, and its test functions."""

    path: str
    source: SourceFile
    functions: tuple[str, ...]


def patched(path: str, base: str | None, patch: str) -> str | None:
    """The file at `path` once `patch` is applied to `base` (None: the patch adds it); None if it does not apply."""
    with tempfile.TemporaryDirectory() as scratch:
        target = Path(scratch, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if base is not None:
            target.write_text(base)
        applied = subprocess.run(["git", "apply", f"--include={path}", "-"], input=patch, cwd=scratch, text=True)
        return target.read_text() if applied.returncode == 0 and target.exists() else None


def _case(path: str, base: str | None, text: str | None) -> Case | None:
    """The case of a file's two versions; None if it is longer than LONGEST, does not parse, or has no test
    function with an expected value twins could change."""
    if not text or len(text) > LONGEST:
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    names = [node.name for node in _test_functions(tree) if node.name.startswith("test") and expected_constants(node)]
    return Case(path, SourceFile(text, base), tuple(names)) if names else None


def _test_functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Functions at module level and in classes at module level: where runners find tests."""
    members = [member for node in tree.body for member in (node.body if isinstance(node, ast.ClassDef) else [node])]
    return [member for member in members if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _git_show(repo: Path, commit: str, path: str) -> str | None:
    shown = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True)
    return shown.stdout.decode() if shown.returncode == 0 else None


def demo_cases(benchmark: Benchmark) -> list[Case]:
    """Each demo code issue's test file, after its test patch."""
    cases = []
    for instance in benchmark.instances:
        if instance.own_image is not None:
            continue
        repo = Path(benchmark.source.location(instance.repo))
        for path in patch_paths(instance.test_patch):
            base = git(["show", f"{instance.base_commit}:{path}"], repo)
            if case := _case(path, base, patched(path, base, instance.test_patch)):
                cases.append(case)
    return cases


def swebench_cases() -> list[Case]:
    """Every Python file a SWE-bench Verified test patch adds, each one the graded rows' patches change, and the
    test files of the graded rows' repositories: each that changed between the row's environment-setup commit and
    its base commit (as a patch would change it), every fifth other as a patch would add it."""
    cases = []
    for row in swebench_rows(verified_instance_ids()):
        added = re.findall(r"^diff --git a/\S+ b/(\S+\.py)\nnew file mode", row["test_patch"], re.MULTILINE)
        cases += [case for path in added if (case := _case(path, None, patched(path, None, row["test_patch"])))]
    for row in swebench_rows((*SWEBENCH_LOCAL_ROWS, PY36_ROW)):
        try:
            repo = repository(row["repo"])
        except pytest.skip.Exception:
            continue  # that repository is out of reach here: the other rows' files still count
        for path in [path for path in patch_paths(row["test_patch"]) if path.endswith(".py")]:
            base = _git_show(repo, row["base_commit"], path)
            if case := _case(path, base, patched(path, base, row["test_patch"])):
                cases.append(case)
        cases += _repository_cases(repo, row["environment_setup_commit"], row["base_commit"])
    return cases


def _repository_cases(repo: Path, older: str, newer: str) -> list[Case]:
    listed = git(["ls-tree", "-r", "--name-only", newer], repo).split()
    tests = [path for path in listed if re.search(r"(^|/)test_\w+\.py$|_test\.py$", path)]
    changed = set(git(["diff", "--name-only", older, newer, "--", *tests], repo).split()) if tests else set()
    cases = []
    for index, path in enumerate(tests):
        if path in changed or index % 5 == 0:
            base = _git_show(repo, older, path) if path in changed else None
            if case := _case(path, base, _git_show(repo, newer, path)):
                cases.append(case)
    return cases


@pytest.fixture(scope="module")
def corpus(demo_benchmark: Benchmark) -> list[Case]:
    return demo_cases(demo_benchmark) + swebench_cases()


@dataclass(frozen=True)
class Member:
    name: str
    start: int  # its first line in the planted file (its first decorator's), 0-based
    end: int  # one past its last
    text: str  # its source
    token: str  # the token it holds where the group's members differ
    line: str  # the line it holds there (its name left out)


def _numbers(text: str) -> list[float]:
    found = (_number(numeral) for numeral in re.findall(r"\d[\d.]*", text))
    return [number for number in found if number is not None]


@dataclass(frozen=True)
class Reading:
    """A planted file as its reader takes it in: its lines, its numbers and words, its version at the base commit
    ('' where the patch adds it)."""

    lines: tuple[str, ...]
    base: str

    @cached_property
    def numbers(self) -> Counter[float]:
        return Counter(_numbers("".join(self.lines)))

    @cached_property
    def words(self) -> Counter[str]:
        return Counter(words("".join(self.lines)))

    @cached_property
    def base_lines(self) -> frozenset[str]:
        return frozenset(line.strip() for line in self.base.splitlines())


@dataclass(frozen=True)
class Group:
    """A group as a reader of the planted file sees it, in file order, and which member is the original."""

    members: tuple[Member, ...]
    original: int
    file: Reading

    def body(self, member: Member) -> str:
        """The member's source but its name and its token: what all members share."""
        return re.sub(rf"\b{re.escape(member.name)}\b", "", member.text).replace(member.token, " ", 1)

    @cached_property
    def _inside(self) -> str:
        return "".join(self.file.lines[self.members[0].start : self.members[-1].end])

    @cached_property
    def outside_numbers(self) -> frozenset[float]:
        inside = Counter(_numbers(self._inside))
        return frozenset(number for number, count in self.file.numbers.items() if count > inside[number])

    @cached_property
    def outside_words(self) -> str:
        inside = Counter(words(self._inside))
        return " ".join(word for word, count in self.file.words.items() if count > inside[word])


def _tokens(texts: list[str]) -> list[str]:
    """Where the texts differ (they share all but one stretch), widened to the whole word or numeral."""
    prefix = len(_common(texts))
    suffix = len(_common([text[::-1] for text in texts]))
    while prefix and re.match(r"[\w.]", texts[0][prefix - 1]):
        prefix -= 1
    found = []
    for text in texts:
        end = len(text) - suffix
        while end < len(text) and re.match(r"[\w.]", text[end]):
            end += 1
        found.append(text[prefix:end])
    return found


def _common(texts: list[str]) -> str:
    shortest = min(texts, key=len)
    for index, character in enumerate(shortest):
        if any(text[index] != character for text in texts):
            return shortest[:index]
    return shortest


def groups_of(planted_text: str, groups: list[tuple[str, list[str]]], base: str | None) -> list[Group]:
    """Each (original's name in the run, all its members' names) as a Group of the planted file."""
    tree = ast.parse(planted_text)
    lines = planted_text.splitlines(keepends=True)
    spans = {}
    for node in _test_functions(tree):
        first = (node.decorator_list[0] if node.decorator_list else node).lineno - 1
        spans[node.name] = (first, node.end_lineno)
    reading = Reading(tuple(lines), base or "")
    found = []
    for original, names in groups:
        ordered = sorted(names, key=lambda name: spans[name][0])
        texts = ["".join(lines[slice(*spans[name])]) for name in ordered]
        shared = [re.sub(rf"\b{re.escape(name)}\b", "", text) for name, text in zip(ordered, texts, strict=True)]
        tokens = _tokens(shared)
        rows = [text.splitlines() for text in shared]
        differing = next((i for i, row in enumerate(zip(*rows, strict=False)) if len(set(row)) > 1), 0)
        members = tuple(
            Member(name, *spans[name], text, token, row[differing] if differing < len(row) else "")
            for name, text, token, row in zip(ordered, texts, tokens, rows, strict=True)
        )
        found.append(Group(members, ordered.index(original), reading))
    return found


def planted_groups(case: Case, rng: random.Random, k: int) -> list[Group]:
    """Groups of every test function of the case, in a random order of preference, at k twins each; not those a
    reader of git's history can read (`TwinGroup.readable`), which bound nothing."""
    order = list(case.functions)
    rng.shuffle(order)
    planted = plant_twins({case.path: case.source}, order, [], rng, TwinSettings(per_test=k, per_run=10_000))
    if not planted.groups:
        return []
    pairs = [(group.renamed, [group.renamed, *group.twins]) for group in planted.groups if not group.readable]
    return groups_of(planted.files[case.path], pairs, case.source.base)


# The classifiers: each returns the members' scores, and picks the highest (ties drawn at random).
def position(group: Group) -> list[float]:
    """The first in the file."""
    return [-index for index in range(len(group.members))]


def order(group: Group) -> list[float]:
    """The first by name: the order unittest runs a class's tests in."""
    ranked = sorted(member.name for member in group.members)
    return [-ranked.index(member.name) for member in group.members]


def _rarest(values: list[object]) -> list[float]:
    return [-values.count(value) for value in values]


def spacing(group: Group) -> list[float]:
    """The member whose blank lines before and after are unlike the others'."""

    def blank_run(index: int, step: int) -> int:
        count = 0
        while 0 <= index < len(group.file.lines) and not group.file.lines[index].strip():
            count, index = count + 1, index + step
        return count

    return _rarest([(blank_run(m.start - 1, -1), blank_run(m.end, 1)) for m in group.members])


def name_words(group: Group) -> list[float]:
    """The name with the most words that its body's identifiers lack: a person names a test for what it means."""
    used = set(words(group.body(group.members[0])))
    return [sum(word not in used for word in member.name.lower().split("_")[1:]) for member in group.members]


def name_length(group: Group) -> list[float]:
    return [len(member.name) for member in group.members]


def name_at_base(group: Group) -> list[float]:
    """A name the file held at the base commit: a test the patch changed keeps its name."""
    return [bool(re.search(rf"\b{re.escape(member.name)}\b", group.file.base)) for member in group.members]


def value_format(group: Group) -> list[float]:
    """The changed line punctuated unlike the others': its quotes, signs, points, brackets and spaces."""
    return _rarest([re.sub(r"\w", "", member.line) for member in group.members])


def _number(token: str) -> float | None:
    value = number_value(token)
    return None if value is None or isinstance(value, bool) or not math.isfinite(value) else float(value)


def roundness(group: Group) -> list[float]:
    """The roundest numeral: most trailing zeros, fewest significant digits."""

    def round_(token: str) -> float:
        digits = re.sub(r"\D", "", token.split("e")[0].split("E")[0]).strip("0")
        return -len(digits) if _number(token) is not None else 0

    return [round_(member.token) for member in group.members]


def _distance(a: str, b: str) -> float:
    numbers = _number(a), _number(b)
    if None not in numbers:
        return abs(numbers[0] - numbers[1])
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def medoid(group: Group) -> list[float]:
    """The member nearest all others: by value where the tokens are numerals, else by the edit distance of the
    changed lines."""
    texts = [m.token if _number(m.token) is not None else m.line.replace("'", '"') for m in group.members]
    return [-sum(_distance(text, other) for other in texts) for text in texts]


def diff_to_base(group: Group) -> list[float]:
    """The member with the most lines the base version holds: the original's lines are the patch's or base's."""
    held = group.file.base_lines
    return [sum(line.strip() in held for line in member.text.splitlines()) for member in group.members]


def length(group: Group) -> list[float]:
    """The longest member."""
    return [len(member.text) for member in group.members]


def _held(token: str, numbers: Iterable[float], text: str) -> bool:
    """Whether the token's value is among `numbers` (a numeral), or its letters in a word of `text`."""
    value = _number(token)
    return value in numbers if value is not None else token.lower() in text


def in_its_test(group: Group) -> list[float]:
    """A token the rest of its test holds (an input the expected value repeats)."""
    held = []
    for member in group.members:
        body = group.body(member)
        held.append(_held(member.token, _numbers(body), " ".join(words(body))))
    return held


def in_the_file(group: Group) -> list[float]:
    """A token the rest of the file holds."""
    return [_held(member.token, group.outside_numbers, group.outside_words) for member in group.members]


CLASSIFIERS: dict[str, Callable[[Group], list[float]]] = {
    "position": position,
    "order": order,
    "spacing": spacing,
    "name_words": name_words,
    "name_length": name_length,
    "name_at_base": name_at_base,
    "value_format": value_format,
    "roundness": roundness,
    "medoid": medoid,
    "diff_to_base": diff_to_base,
    "length": length,
    "in_its_test": in_its_test,
    "in_the_file": in_the_file,
}


def pick(scores: list[float], rng: random.Random) -> int:
    best = max(scores)
    return rng.choice([index for index, score in enumerate(scores) if score == best])


def judged(groups: list[Group], seed: int = 0) -> dict[str, tuple[float, float, float]]:
    """Each classifier's (accuracy, chance, standard error of chance) over `groups`, and its opposite's (the
    member it scores lowest: `name-`), for a tell may point either way."""
    rng = random.Random(seed)
    chances = [1 / len(group.members) for group in groups]
    chance = sum(chances) / len(groups)
    error = math.sqrt(sum(p * (1 - p) for p in chances)) / len(groups)
    found = {}
    for name, classify in CLASSIFIERS.items():
        scores = [classify(group) for group in groups]
        for label, sign in ((name, 1), (f"{name}-", -1)):
            hits = sum(
                pick([sign * s for s in score], rng) == g.original for score, g in zip(scores, groups, strict=True)
            )
            found[label] = (hits / len(groups), chance, error)
    return found


def test_no_classifier_tells_the_original_from_its_twins(corpus):
    groups: list[Group] = []

    @settings(max_examples=800, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(corpus), st.integers(0, 2**32))
    def plant(case: Case, seed: int) -> None:
        if len(groups) < GROUPS:
            groups.extend(planted_groups(case, random.Random(seed), k=3))

    plant()
    assert len(groups) >= GROUPS // 2, f"only {len(groups)} groups from {len(corpus)} files"
    results = judged(groups)
    tells = {
        name: f"{accuracy:.1%} (chance {chance:.1%})"
        for name, (accuracy, chance, error) in results.items()
        if accuracy > chance + TOLERANCE_SD * error
    }
    assert not tells, tells


def corpus_figures(corpus: list[Case], groups: int, k: int, seed: int = 0) -> dict[str, tuple[float, float, float]]:
    """The classifiers' figures over `groups` groups at k twins (benchmarks/twin_forger.py prints them)."""
    rng = random.Random(seed)
    found: list[Group] = []
    while len(found) < groups:
        found += planted_groups(rng.choice(corpus), rng, k)
    return judged(found, seed)
