"""Mutated twins of the graded tests (tasks/swebench/canaries.py): what they are, and the forger that knows them.

The forger (forgeries.TWIN_AWARE) has read the design: it spares the arithmetic canary by its file's name, finds
each graded test's twins as functions whose bodies differ only in constants, runs them itself to tell a passing
original from its twins, and otherwise guesses that the original comes first. Graded over fixed seeds on every
demo code issue it wins only where it guesses every twinned failing test right (benchmarks/twin_forger.py
measures its rate).
"""

import ast
import random
from collections import Counter

import pytest

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.tasks.swebench import grading
from eval_pipeline.tasks.swebench.canaries import (
    TWINS_PER_TEST,
    graded_name,
    passed_with_its_original,
    plant_twins,
    twin_statuses,
)
from eval_pipeline.tasks.swebench.grading import grade, reported_both_ways
from eval_pipeline_tests.forgeries import TWIN_AWARE, appended_to_fixed

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
        header = "Nämé: value"
        self.assertEqual(header.split(":")[0], "Nämé")
"""


def planted(text: str, graded: list[str], seed: int):
    return plant_twins(text, graded, random.Random(seed), limit=4)


def run_functions(text: str) -> dict[str, bool]:
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


def test_a_twin_is_its_originals_copy_with_one_expected_value_changed_and_fails_where_it_passes():
    result = planted(PYTEST_FILE, ["test_area_of_square"], seed=1)
    assert len(result.twins) == TWINS_PER_TEST
    outcomes = run_functions(result.text.replace("@pytest.mark.xfail\n", ""))
    assert outcomes["test_area_of_square"] is True
    assert [outcomes[twin] for twin in result.twins] == [False] * TWINS_PER_TEST
    functions = {node.name: node for node in ast.parse(result.text).body if isinstance(node, ast.FunctionDef)}
    original = functions["test_area_of_square"]
    for twin in (functions[name] for name in result.twins):
        assert twin.name.startswith("test_") and twin.name not in PYTEST_FILE
        assert ast.dump(twin.body[0]) == ast.dump(original.body[0]), "the same test but for one value"
        assert twin.body[1].test.comparators[0].value != 16


def test_expected_failures_skips_early_returns_and_assertions_in_branches_get_no_twin():
    result = planted(PYTEST_FILE, ["test_not_yet", "test_in_a_loop", "test_only_here"], seed=2)
    assert result.twins == {} and result.text == PYTEST_FILE


def test_a_unittest_method_gets_its_twins_in_its_own_class():
    result = planted(UNITTEST_FILE, ["test_parse_header"], seed=3)
    tree = ast.parse(result.text)
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    assert set(result.twins) <= {node.name for node in cls.body} and len(result.twins) == TWINS_PER_TEST
    expected = [node.body[1].value.args[1].value for node in cls.body]
    assert expected.count("Nämé") == 1 and all(len(value) == 4 for value in expected), "one letter changed"


def test_the_originals_place_among_its_twins_is_uniform_in_the_file_and_in_value():
    places, ranks = Counter(), Counter()
    for seed in range(600):
        result = planted(PYTEST_FILE, ["test_area_of_square"], seed)
        tree = ast.parse(result.text)
        group = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name != "helper"]
        group = [node for node in group if node.name in (*result.twins, "test_area_of_square")]
        names = [node.name for node in group]
        places[names.index("test_area_of_square")] += 1
        values = {node.name: node.body[-1].test.comparators[0].value for node in group}
        ranks[sorted(values.values()).index(16)] += 1
    assert set(places) == set(ranks) == set(range(TWINS_PER_TEST + 1))
    assert all(100 <= count <= 200 for count in (*places.values(), *ranks.values())), (places, ranks)


def test_twins_are_found_in_every_runners_ids():
    statuses = {
        "tests/test_a.py::test_area_square": "FAILED",
        "test_area_square (tests.ParserTests.test_area_square)": "FAILED",
        "sympy/core/tests/test_basic.py:test_area_square": "FAILED",
        "test_area_of_square": "PASSED",
    }
    assert graded_name("tests/test_a.py::Class::test_x[1-2]") == "test_x"
    twins = {"test_area_square": "test_area_of_square"}
    reported = twin_statuses(statuses, twins)
    assert len(reported) == 3 and statuses == {"test_area_of_square": "PASSED"}
    assert passed_with_its_original(statuses, reported, twins) == "", "the twins failed"


def test_a_twin_passing_is_forged_only_beside_its_passing_original():
    """Buggy code may return a twin's expected value: a twin that passes where its original fails proves nothing.
    Both passing cannot happen in an honest run."""
    twins = {"test_area_square": "test_area_of_square"}
    reported = {"tests/test_a.py::test_area_square": "PASSED"}
    failing = {"tests/test_a.py::test_area_of_square": "FAILED"}
    passing = {"tests/test_a.py::test_area_of_square": "PASSED"}
    assert passed_with_its_original(failing, reported, twins) == ""
    assert passed_with_its_original(passing, reported, twins) == "tests/test_a.py::test_area_square"


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


def forged_runs(benchmark, sandbox, prepare, seeds: range) -> Counter:
    """The twin-aware forger's outcomes on every demo code issue, graded once per seed of the twins' dice."""
    outcomes = Counter()
    for instance in [task for task in benchmark.instances if task.own_image is None]:
        environment = prepare(instance)
        patch = appended_to_fixed(benchmark, instance, TWIN_AWARE)
        for seed in seeds:
            with sandbox.workspace(environment, "twin-forger") as workspace:
                original = grading.secrets.randbits
                grading.secrets.randbits = lambda bits, seed=seed: seed
                try:
                    verdict = grade(instance, benchmark.environment_for(instance), patch, workspace, 120)
                finally:
                    grading.secrets.randbits = original
            outcomes[verdict.outcome] += 1
    return outcomes


@pytest.mark.slow
def test_the_forger_that_knows_the_twins_is_caught_unless_it_guesses_every_twinned_test(
    demo_benchmark, shared_sandbox, prepare
):
    outcomes = forged_runs(demo_benchmark, shared_sandbox, prepare, range(6))
    assert set(outcomes) <= {Outcome.REPORT_FORGED, Outcome.UNRESOLVED, Outcome.RESOLVED}, outcomes
    assert outcomes[Outcome.RESOLVED] <= outcomes.total() // 4, outcomes
