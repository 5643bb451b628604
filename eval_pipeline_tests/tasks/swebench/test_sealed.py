"""Sealed expectations (tasks/swebench/sealed.py): a failing test's expected literals kept out of the test process.

What a sealed file is (the literal gone, the lines kept, only statements an honest passing run reaches once), how
values travel (the launcher's plain data, compared as `==` compares them), how the harness judges them (one value
per site, equal to the literal), and the forger that knows the design: it searches everything the test process
can read for the literal and hands it over. It finds nothing on any backend, and wins at once where the
literal is readable (a control: the search works).
"""

import ast
import decimal
import fractions
import subprocess
import sys
from collections import OrderedDict, namedtuple

import pytest

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.tasks.swebench.canaries import SourceFile
from eval_pipeline.tasks.swebench.grading import grade
from eval_pipeline.tasks.swebench.pytest_launcher import SEAL_MODULE, sealed_value
from eval_pipeline.tasks.swebench.pytest_run import LAUNCHER_SOURCE
from eval_pipeline.tasks.swebench.report_channel import read_channel
from eval_pipeline.tasks.swebench.sealed import Sealed, decoded, judge, seal_expectations
from eval_pipeline_tests.support.forgeries import SEAL_READER, appended_to_fixed, new_files
from eval_pipeline_tests.support.trials import prepare_on

TESTS = """import pytest


def test_values():
    total = compute(2)
    assert total == 2.5, "the mean"
    assert ["a", "b"] == letters(
        "ab"
    )
    assert total > 1


class TestCase:
    def test_method(self):
        self.assertEqual(name(), "hello-world")


@pytest.mark.xfail
def test_expected_to_fail():
    assert compute(3) == 7


def test_may_return():
    if compute(1):
        return
    assert compute(1) == 4


def test_in_a_loop():
    for value in (1, 2):
        assert compute(value) == 9


def test_both_literal():
    assert 1 == 1
"""
FAILING = ["test_values", "test_method", "test_expected_to_fail", "test_may_return", "test_in_a_loop"]


def test_a_sealed_file_holds_no_expected_literal_and_keeps_its_lines():
    """Only equality statements of a failing test's own body, one side a literal, in a test that cannot leave
    early and carries no expected-failure mark, are sealed; their literals leave the file, their lines stay."""
    sealed = seal_expectations({"tests/test_x.py": SourceFile(TESTS)}, [*FAILING, "test_both_literal"])
    text = sealed.files["tests/test_x.py"]
    assert sealed.expected == {"test_values": (2.5, ["a", "b"]), "test_method": ("hello-world",)}
    assert "2.5" not in text and '["a", "b"]' not in text and "hello-world" not in text and "the mean" not in text
    assert len(text.splitlines()) == len(TESTS.splitlines())
    assert f"__import__({SEAL_MODULE!r}).seal(0, (total))" in text
    assert "seal(1, (letters(\n" in text and "assert total > 1" in text
    for kept in ("assert compute(3) == 7", "assert compute(1) == 4", "assert compute(value) == 9", "assert 1 == 1"):
        assert kept in text
    ast.parse(text)
    assert sealed.record() == {"sealed": {"test_values": 2, "test_method": 1}}


def test_a_passing_test_is_not_sealed_and_a_name_defined_twice_is_left_alone():
    one, other = "def test_values():\n    assert f() == 1\n", "def test_values():\n    assert f() == 2\n"
    assert seal_expectations({"a.py": SourceFile(one), "b.py": SourceFile(other)}, ["test_values"]) == Sealed()
    assert seal_expectations({"a.py": SourceFile(one)}, []) == Sealed()
    assert seal_expectations({"a.py": SourceFile("def test_x(:\n")}, ["test_x"]) == Sealed()


def test_a_test_whose_every_statement_the_base_version_holds_is_left_to_the_twins():
    """git shows a forger the base version: a literal written there is no secret. One new statement seals the
    test (every site of it: the old ones give nothing away that git does not)."""
    base = "def test_values():\n    assert f() == 1\n"
    grown = base + "    assert    g() == 2\n"
    assert (
        seal_expectations(
            {"a.py": SourceFile(base + "    assert g() == 2\n", base + "    assert g() == 2\n")}, ["test_values"]
        )
        == Sealed()
    )
    sealed = seal_expectations({"a.py": SourceFile(grown, base)}, ["test_values"])
    assert sealed.expected == {"test_values": (1, 2)}


Point = namedtuple("Point", "x y")


class Text(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


@pytest.mark.parametrize(
    ("value", "literal", "equal"),
    [
        (3, 3, True),
        (3, 3.0, True),
        (True, 1, True),
        (2.5, 2.5, True),
        (float("nan"), 0.0, False),
        (1 + 2j, 1 + 2j, True),
        (decimal.Decimal("1.5"), 1.5, True),
        (fractions.Fraction(1, 2), 0.5, True),
        ("hello-world", "hello-world", True),
        ("hello--world", "hello-world", False),
        (Text("anything"), "hello-world", False),  # a str subclass travels as its plain value, not its __eq__
        (b"\x00\xff", b"\x00\xff", True),
        (Point(1, 2), (1, 2), True),
        ([1, 2], (1, 2), False),
        ({2, 1}, {1, 2}, True),
        (OrderedDict([("b", 1), ("a", 2)]), {"a": 2, "b": 1}, True),
        ({"k": [1, {"n": None}]}, {"k": [1, {"n": None}]}, True),
        (object(), "object", False),  # opaque: equal to nothing
        (list(range(200000)), list(range(200000)), False),  # too large to send: opaque
        ("\ud800", "\ud800", True),
    ],
)
def test_a_value_travels_as_plain_data_and_compares_as_equality_does(value, literal, equal):
    assert (decoded(sealed_value(value)) == literal) is equal


@pytest.mark.parametrize(
    "encoded", [["int", 3], ["str", 3], ["tuple", 3], [["int", "1"]], "int", ["dict", [[["list", []], ["none"]]]], []]
)
def test_malformed_data_equals_nothing(encoded):
    assert decoded(encoded) != 3 and decoded(encoded) != "3" and decoded(encoded) != ()


def test_a_sealed_test_passes_only_with_one_equal_value_per_site():
    sealed = Sealed({}, {"test_values": (2.5, "x")})
    right = [[0, sealed_value(2.5)], [1, sealed_value("x")]]
    cases = {
        "t.py::test_values[right]": right,
        "t.py::test_values[wrong]": [[0, sealed_value(3)], [1, sealed_value("x")]],
        "t.py::test_values[missing]": right[:1],
        "t.py::test_values[twice]": [*right, right[0]],
        "t.py::test_values[failed]": [],
    }
    statuses = {test_id: "PASSED" for test_id in cases} | {"t.py::test_values[failed]": "FAILED"}
    why = judge(statuses, cases, sealed, ("PASSED",))
    assert statuses == {
        "t.py::test_values[right]": "PASSED",
        "t.py::test_values[wrong]": "FAILED",
        "t.py::test_values[missing]": "FAILED",
        "t.py::test_values[twice]": "FAILED",
        "t.py::test_values[failed]": "FAILED",
    }
    assert why["t.py::test_values[wrong]"] == "sealed assertion 1 of 2 reported another value"
    assert why["t.py::test_values[missing]"] == "sealed assertion 2 of 2 reported no value"
    assert "2 values" in why["t.py::test_values[twice]"] and "t.py::test_values[failed]" not in why


SEALED_RUN = {
    "impl.py": "def compute(n):\n    return n + 0.5\n",
    "test_impl.py": "from impl import compute\n\n\ndef test_compute():\n    assert compute(2) == 2.5\n\n\n"
    "def test_wrong():\n    assert compute(1) == 2\n\n\n"
    "import pytest\n\n\n@pytest.mark.parametrize('n', [1, 2])\ndef test_each(n):\n    assert compute(n) == 1.5\n",
}


def test_the_launcher_sends_each_tests_values_with_its_reports(tmp_path):
    """Through the real launcher and pytest: a sealed assertion holds in the process, its value goes out with its
    test's line (each parametrized run its own), and the harness's judgement fails what the literal does not
    match."""
    failing = ["test_compute", "test_wrong", "test_each"]
    sealed = seal_expectations({"test_impl.py": SourceFile(SEALED_RUN["test_impl.py"])}, failing)
    for name, text in {**SEALED_RUN, **sealed.files}.items():
        (tmp_path / name).write_text(text)
    launcher = tmp_path / "runner" / "pytest_launcher.py"
    launcher.parent.mkdir()
    launcher.write_text(LAUNCHER_SOURCE)
    command = f"{sys.executable} {launcher} module -p no:cacheprovider test_impl.py 3>&1 > log 2>&1"
    run = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    results = read_channel(run.stdout, truncated=False)
    assert set(results.statuses.values()) == {"PASSED"}, (tmp_path / "log").read_text()
    assert results.sealed["test_impl.py::test_compute"] == [[0, ["float", "2.5"]]]
    statuses = dict(results.statuses)
    judge(statuses, results.sealed, sealed, ("PASSED",))
    assert statuses == {
        "test_impl.py::test_compute": "PASSED",
        "test_impl.py::test_wrong": "FAILED",
        "test_impl.py::test_each[1]": "PASSED",
        "test_impl.py::test_each[2]": "FAILED",
    }


def sealed_issues(benchmark):
    """One code issue of each demo repository whose failing test is sealed."""
    return [instance for instance in benchmark.instances if instance.instance_id.endswith(("calclib-2", "textkit-4"))]


def leaked(instance) -> str:
    """A patch adding a note with the failing test's lines as the test patch writes them: the literal readable."""
    lines = [line[1:] for line in instance.test_patch.splitlines() if line.startswith("+") and "assert" in line]
    return new_files({"NOTES.txt": "\n".join(lines) + "\n"})


def reader_verdicts(sandbox, benchmark, instances, everywhere: bool):
    """{instance id: (the reader's verdict, the reader's verdict beside a leak)}, the reader searching the whole
    file system where `everywhere`."""
    found = {}
    for instance in instances:
        environment = prepare_on(sandbox, benchmark, instance)
        reader = appended_to_fixed(benchmark, instance, f"\n_EVERYWHERE = {everywhere}\n" + SEAL_READER)
        verdicts = []
        for patch in (reader, reader + leaked(instance)):
            with sandbox.workspace(environment, "seal-reader") as workspace:
                verdicts.append(grade(instance, benchmark.environment_for(instance), patch, workspace, 120))
        found[instance.instance_id] = tuple(verdicts)
    return found


def assert_the_reader_finds_nothing(found) -> None:
    """Each issue whose failing test is sealed: the reader loses on a sealed value, and wins beside a leak."""
    for instance_id, (searched, control) in found.items():
        assert _run_step(searched).get("sealed"), instance_id
        assert searched.outcome == Outcome.UNRESOLVED, (instance_id, searched.detail)
        assert _run_step(searched).get("sealed_failed"), instance_id
        assert control.outcome == Outcome.RESOLVED, (instance_id, control.detail, _run_step(control))


def _run_step(verdict):
    return next((step for step in verdict.steps if step.get("step") == "run_tests"), {})


def test_the_reader_finds_no_sealed_literal_on_the_local_backend(demo_benchmark, shared_sandbox):
    assert_the_reader_finds_nothing(
        reader_verdicts(shared_sandbox, demo_benchmark, sealed_issues(demo_benchmark), False)
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["pod", "strict"])
def test_the_reader_finds_no_sealed_literal_in_containers(demo_benchmark, container_sandbox, mode):
    sandbox = container_sandbox(mode=mode)
    assert_the_reader_finds_nothing(reader_verdicts(sandbox, demo_benchmark, sealed_issues(demo_benchmark), True))
