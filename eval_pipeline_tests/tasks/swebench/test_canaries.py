"""Groups of twins of the graded tests (tasks/swebench/canaries.py): what they are, and the forger that runs them.

A graded test becomes a group: itself and k twins, all renamed, one token apart, in a random order at its place.
What a forger could read from the group's source is test_twin_classifiers.py's; here, what a group is, which tests
get none, how the original's results reach its graded id, and the forger that runs the group's code
(forgeries.TWIN_RUNNER): graded over fixed seeds on every demo code issue, it wins more often than the bound
1/(k + 1) per twinned failing test where the code it runs returns a value near the right one
(benchmarks/twin_forger.py measures it).
"""

import ast
import random
import re
from collections import Counter
from dataclasses import dataclass, replace

import pytest

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.common.settings import Paths
from eval_pipeline.datasets.sources import load_benchmark
from eval_pipeline.tasks.swebench import grading
from eval_pipeline.tasks.swebench.canaries import (
    DEFAULT_TWINS,
    TWINS_PER_TEST,
    SourceFile,
    TwinSettings,
    original_ids,
    plant_twins,
    twin_statuses,
)
from eval_pipeline.tasks.swebench.grading import grade, reported_both_ways
from eval_pipeline_tests.support.forgeries import TWIN_RUNNER, appended_to_fixed

PYTEST_FILE = """import pytest


def helper():
    return 4


def test_area_of_square():
    side = helper()
    assert side * side == 16


@pytest.mark.xfail
def test_not_yet():
    assert helper() == 5


def test_in_a_loop():
    for value in (1, 2):
        assert value == 1


def test_only_here():
    if helper() == 4:
        return
    assert helper() == 4
"""
UNITTEST_FILE = """import unittest


class ParserTests(unittest.TestCase):
    def test_parse_header(self):
        header = "Name: value"
        self.assertEqual(header.split(":")[1].strip().upper(), "VALUE")
"""
# Tests whose name matters to what they do: renaming them could break them, so they get no group.
NAMED_FILE = """import unittest

from elsewhere import SharedTests


def test_reads_its_name():
    assert test_reads_its_name.__name__.upper() == "TEST_READS_ITS_NAME"


def test_with_request(request):
    assert len(request.node.name) == 17


class Base(unittest.TestCase):
    def test_overridden(self):
        assert 2 * 3 == 6


class Derived(Base):
    def test_overridden(self):
        assert 2 * 4 == 8


class Imported(SharedTests):
    def test_from_elsewhere(self):
        assert 3 * 3 == 9


class ByItsId(unittest.TestCase):
    def test_by_id(self):
        self.assertEqual(len(self.id()), 40)
"""


def planted(text: str, graded: list[str], seed: int, base: str | None = None, k: int = TWINS_PER_TEST):
    return plant_twins({"t.py": SourceFile(text, base)}, graded, [], random.Random(seed), TwinSettings(k, 10))


def outcomes_of(text: str) -> dict[str, bool]:
    """Each module-level test function of `text`: whether it passes."""
    namespace: dict = {}
    exec(compile(text, "t.py", "exec"), namespace)
    results = {}
    for name, function in namespace.items():
        if name.startswith("test_") and callable(function):
            try:
                function()
                results[name] = True
            except AssertionError:
                results[name] = False
    return results


def functions_of(text: str) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(text)
    members = [node for item in tree.body for node in (item.body if isinstance(item, ast.ClassDef) else [item])]
    return {node.name: node for node in members if isinstance(node, ast.FunctionDef)}


def test_a_group_is_its_original_and_twins_one_token_apart_all_renamed_and_only_the_original_passes():
    for seed in range(20):
        result = planted(PYTEST_FILE, ["test_area_of_square"], seed)
        (group,) = result.groups
        assert group.original == "test_area_of_square" and len(group.twins) == TWINS_PER_TEST
        text = result.files["t.py"]
        assert "test_area_of_square" not in text, "the original runs under a name of the group's generator"
        outcomes = outcomes_of(text.replace("@pytest.mark.xfail\n", ""))
        assert outcomes[group.renamed] is True
        assert [outcomes[twin] for twin in group.twins] == [False] * TWINS_PER_TEST
        functions = functions_of(text)
        original = functions[group.renamed]
        for twin in (functions[name] for name in group.twins):
            assert ast.dump(twin.body[0]) == ast.dump(original.body[0]), "the same test but for one token"
            assert twin.body[1].test.comparators[0].value != 16


def test_a_group_stands_at_its_originals_place_members_alike_spaced_in_a_random_order():
    places = Counter()
    for seed in range(400):
        result = planted(PYTEST_FILE, ["test_area_of_square"], seed)
        (group,) = result.groups
        lines = result.files["t.py"].splitlines()
        starts = [index for index, line in enumerate(lines) if line.startswith("def test_")]
        names = [lines[index][4:].split("(")[0] for index in starts]
        members = [group.renamed, *group.twins]
        assert names[: len(members)] and set(names[: len(members)]) == set(members), "contiguous, at its place"
        assert {starts[i + 1] - starts[i] for i in range(len(members) - 1)} == {5}, "two blank lines apart each"
        places[names.index(group.renamed)] += 1
    assert set(places) == set(range(TWINS_PER_TEST + 1))
    assert all(70 <= count <= 130 for count in places.values()), places


def test_expected_failures_skips_early_returns_and_assertions_in_branches_get_no_group():
    result = planted(PYTEST_FILE, ["test_not_yet", "test_in_a_loop", "test_only_here"], seed=2)
    assert result.groups == () and result.files == {}


def test_a_test_whose_name_matters_to_what_it_does_gets_no_group():
    """Its name read in its body, a `request` fixture, a subclass's override, an imported base class (which could
    define the same name), its id."""
    names = ["test_reads_its_name", "test_with_request", "test_overridden", "test_from_elsewhere", "test_by_id"]
    for seed in range(20):
        assert planted(NAMED_FILE, names, seed).groups == ()


def test_a_unittest_methods_group_stays_in_its_class_and_keeps_its_case():
    result = planted(UNITTEST_FILE, ["test_parse_header"], seed=3)
    (cls,) = [node for node in ast.parse(result.files["t.py"]).body if isinstance(node, ast.ClassDef)]
    (group,) = result.groups
    assert {node.name for node in cls.body} == {group.renamed, *group.twins}
    expected = [node.body[1].value.args[1].value for node in cls.body]
    assert expected.count("VALUE") == 1 and all(value.isupper() and len(value) == 5 for value in expected)


def values_held(text: str) -> dict[str, str]:
    """Each test function's expected value, as written."""
    return {
        name: ast.get_source_segment(text, node.body[0].test.comparators[0])
        for name, node in functions_of(text).items()
    }


@pytest.mark.parametrize(
    ("literal", "shape"),
    [("300", r"[1-9]00"), ("0x1F", r"0x[1-9a-fA-F]{2}"), ("1_250", r"[1-9]_[0-9][1-9]0"), ("2.50", r"[1-9]\.[1-9]0")],
)
def test_a_numerals_group_is_written_alike_and_as_likely_whichever_member_is_the_original(literal, shape):
    """The same base, digits, leading and trailing zeros, letters' case; and a set of values drawn as often with any
    of its members as the original, so that neither the roundest, the middle nor the smallest one tells it."""
    seeds = range(240)

    def sets_around(value: str) -> Counter:
        text = f"def test_value():\n    assert compute() == {value}\n"
        found = Counter()
        for seed in seeds:
            written = values_held(planted(text, ["test_value"], seed).files["t.py"])
            assert all(re.fullmatch(shape, held) for held in written.values()), written
            assert len({c.isupper() for held in written.values() for c in held[2:] if c.isalpha()}) <= 1, written
            found[frozenset(written.values())] += 1
        return found

    drawn = sets_around(literal)
    assert len(drawn) == TWINS_PER_TEST + 1, drawn
    common = drawn.most_common(1)[0][0]
    likely = [sets_around(member)[common] for member in sorted(common)]
    assert all(35 <= count <= 85 for count in likely), (common, likely)


def test_tokens_follow_the_originals_relation_to_its_test_and_file():
    """A value the test holds elsewhere draws from the test's values; a word from the test's words; a word found
    nowhere else from words found nowhere either."""
    related = planted("def test_clamp():\n    assert clamp(5, 0, 10) == 5\n", ["test_clamp"], seed=4)
    assert {line.split("== ")[1] for line in related.files["t.py"].splitlines() if "==" in line} == {"0", "5", "10"}
    words = planted('def test_slug():\n    assert slugify("Hello World") == "hello-world"\n', ["test_slug"], seed=5)
    held = set(values_held(words.files["t.py"]).values())
    assert held == {'"hello-world"', '"hello-hello"'} or held == {'"hello-world"', '"world-world"'}
    fresh = planted('def test_name():\n    assert name() == "quixotic"\n', ["test_name"], seed=6)
    held = {line.split("== ")[1].strip('"') for line in fresh.files["t.py"].splitlines() if "==" in line}
    assert len(held) == TWINS_PER_TEST + 1 and all(
        sum(a != b for a, b in zip(w, "quixotic", strict=True)) <= 1 for w in held
    )


def test_no_token_makes_a_line_the_base_version_holds():
    """A line the file held at the base commit is its original's (or a twin's) to a reader of git's history: no
    twin takes the value the patch changed, and a test the patch left as it was gets one readable twin, which
    catches a forger that passes every test and bounds nothing."""
    base = "def test_count():\n    assert count() == 3\n"
    (group,) = planted(base, ["test_count"], seed=7, base=base).groups
    assert group.readable and len(group.twins) == 1
    assert planted(base, ["test_count"], seed=7, base=base).bound(["test_count"]) == 1.0
    changed = base.replace("== 3", "== 4")
    for seed in range(50):
        result = planted(changed, ["test_count"], seed, base=base)
        assert "== 3\n" not in result.files["t.py"] and "== 4\n" in result.files["t.py"]
        assert not result.groups[0].readable and result.bound(["test_count"]) == 1 / (TWINS_PER_TEST + 1)


def test_the_budget_goes_to_failing_tests_first_and_the_bound_is_the_product():
    text = "".join(f"def test_{i}():\n    assert compute({i}) == {i + 20}\n\n\n" for i in range(4))
    result = plant_twins(
        {"t.py": SourceFile(text)}, ["test_2", "test_3"], ["test_0", "test_1"], random.Random(8), TwinSettings(3, 7)
    )
    twins = {group.original: len(group.twins) for group in result.groups}
    assert twins == {"test_2": 3, "test_3": 3, "test_0": 1}
    assert result.bound(["test_2", "test_3"]) == pytest.approx(1 / 16)
    assert result.bound(["test_1"]) == 1.0


def test_the_originals_results_reach_its_graded_id_in_every_runners_ids():
    renamed = {"test_run_name": "test_area_of_square"}
    statuses = {
        "tests/test_a.py::Cls::test_run_name[1-2]": "PASSED",
        "test_run_name (tests.ParserTests)": "FAILED",
        "test_run_name (tests.ParserTests.test_run_name)": "FAILED",
        "sympy/core/tests/test_basic.py:test_run_name": "FAILED",
        "test_run_name": "PASSED",
        "tests/test_a.py::test_other": "PASSED",
    }
    assert list(original_ids(statuses, renamed)) == [
        "tests/test_a.py::Cls::test_area_of_square[1-2]",
        "test_area_of_square (tests.ParserTests)",
        "test_area_of_square (tests.ParserTests.test_area_of_square)",
        "sympy/core/tests/test_basic.py:test_area_of_square",
        "test_area_of_square",
        "tests/test_a.py::test_other",
    ]


def test_twins_are_found_in_every_runners_ids():
    statuses = {
        "tests/test_a.py::test_area_square": "FAILED",
        "test_area_square (tests.ParserTests.test_area_square)": "FAILED",
        "sympy/core/tests/test_basic.py:test_area_square": "FAILED",
        "test_area_of_square": "PASSED",
    }
    reported = twin_statuses(statuses, {"test_area_square": "test_area_of_square"})
    assert len(reported) == 3 and statuses == {"test_area_of_square": "PASSED"}


@pytest.mark.parametrize(
    ("parser", "log"),
    [
        ("django", "test_parse (tests.ParserTests) ... FAIL\n...\ntest_parse (tests.ParserTests) ... ok\n"),
        ("sympy", "test_parse F\n...\ntest_parse ok\n"),
    ],
)
def test_a_log_that_reports_a_test_both_ways_is_forged(parser, log):
    name = {"django": "parse_log_django", "sympy": "parse_log_sympy"}[parser]
    assert reported_both_ways(name, log, {"test_parse"}) != []
    assert reported_both_ways(name, log.split("...")[0], {"test_parse"}) == []


def test_a_campaigns_twins_reach_its_gradings_and_its_verdicts_keep_their_bound(shared_sandbox, prepare, tmp_path):
    """`twins:` in a code task's source reaches its instances' gradings (not their rows: the content hash stays
    SWE-bench's), and each verdict records its groups, the bound they give a forger and its sealed tests; the
    budget a sealed failing test does not take goes to the passing tests."""
    source = {"kind": "demo", "twins": {"per_test": 1, "per_run": 1}}
    benchmark = load_benchmark(source, Paths(tmp_path))
    instance = next(task for task in benchmark.instances if task.instance_id.endswith("calclib-2"))
    assert instance.twins == TwinSettings(1, 1) and "twins" not in instance.to_row()
    with shared_sandbox.workspace(prepare(instance), "twins") as workspace:
        verdict = instance.grade(benchmark.environment_for(instance), instance.patch, workspace, 120)
    assert verdict.outcome == Outcome.RESOLVED, verdict.detail
    (step,) = [step for step in verdict.steps if step["step"] == "run_tests"]
    (group,) = step["twins"]
    passing = {test_id.split("::")[-1] for test_id in instance.PASS_TO_PASS}
    assert group["original"] in passing and len(group["twins"]) == 1, "the failing test is sealed: no twin for it"
    assert step["sealed"] == {"test_gcd_negative_operand": 1} and step["forger_bound"] == 1.0
    assert verdict.tests["tests/test_arith.py::test_gcd_negative_operand"] == "PASSED"


@dataclass(frozen=True)
class Forged:
    """One grading of a forger's patch: its outcome, the bound on its chance the grading's groups give, the sealed
    tests (name -> sites) and those failed on a sealed value."""

    instance_id: str
    seed: int
    outcome: Outcome
    bound: float
    sealed: dict[str, int]
    sealed_failed: dict[str, str]


def forged_runs(benchmark, sandbox, prepare, seeds: range, forgery: str = TWIN_RUNNER, twins=DEFAULT_TWINS):
    """A forger's gradings on every demo code issue, once per seed of the twins' dice."""
    found = []
    for instance in [task for task in benchmark.instances if task.own_image is None]:
        environment = prepare(instance)
        patch = appended_to_fixed(benchmark, instance, forgery)
        for seed in seeds:
            with sandbox.workspace(environment, "twin-forger") as workspace:
                original = grading.secrets.randbits
                grading.secrets.randbits = lambda bits, seed=seed: seed
                try:
                    verdict = grade(
                        replace(instance, twins=twins), benchmark.environment_for(instance), patch, workspace, 120
                    )
                finally:
                    grading.secrets.randbits = original
            step = next((step for step in verdict.steps if step.get("step") == "run_tests"), {})
            found.append(
                Forged(
                    instance.instance_id,
                    seed,
                    verdict.outcome,
                    step.get("forger_bound", 1.0),
                    step.get("sealed", {}),
                    step.get("sealed_failed", {}),
                )
            )
    return found


@pytest.mark.slow
def test_the_forger_that_runs_the_groups_wins_only_where_neither_a_seal_nor_a_group_guards_the_failing_test(
    demo_benchmark, shared_sandbox, prepare
):
    """Every demo failing test with an expected value is sealed (tasks/swebench/sealed.py): the forger finds no
    group to run there, swallows the failures in the process, and hands over what the buggy code returns, which
    the harness compares with values the process never held. It wins only the issue whose failing test expects
    an exception, which nothing guards (bound 1); against twins without seals (a5a01da) it won 63 of 80 such
    gradings (benchmarks/twin_forger.py)."""
    runs = forged_runs(demo_benchmark, shared_sandbox, prepare, range(2))
    assert {run.outcome for run in runs} <= {Outcome.UNRESOLVED, Outcome.RESOLVED}, runs
    guarded = [run for run in runs if run.sealed]
    assert len(guarded) == 14 and all(run.outcome == Outcome.UNRESOLVED and run.sealed_failed for run in guarded), runs
    unguarded = [run for run in runs if not run.sealed]
    assert all(run.bound == 1.0 and run.outcome == Outcome.RESOLVED for run in unguarded), runs
