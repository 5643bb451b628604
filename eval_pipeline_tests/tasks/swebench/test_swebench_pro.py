"""SWE-bench Pro rows without the engine: loading a row with its scripts (and refusing a row that lacks them, by
name), and the checks on what its parser reports and what the run's log says (tasks/swebench/pro/). The row graded
in its image, and forgeries that know the design, are eval_pipeline_tests/end_to_end/test_swebench_pro.py."""

import json
from pathlib import Path

import pytest

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.common.settings import Paths
from eval_pipeline.datasets.sources import DatasetSourceError, load_benchmark
from eval_pipeline.tasks.dataset import InvalidDatasetError
from eval_pipeline.tasks.swebench.pro.grading import checked_out_files, decide
from eval_pipeline.tasks.swebench.pro.report import MAX_REPORT_BYTES, read_report, reported_both_ways

ID = "instance_acme__widget-0123abcd-v4567"
TEST = "tests/test_widget.py::test_fix"
KEPT = "tests/test_widget.py::test_kept"
PATCH = "diff --git a/widget.py b/widget.py\n--- a/widget.py\n+++ b/widget.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


def _row(**overrides) -> dict:
    row = {
        "instance_id": ID,
        "repo": "acme/widget",
        "base_commit": "0123abcd",
        "patch": PATCH,
        "test_patch": PATCH.replace("widget.py", "tests/test_widget.py"),
        "problem_statement": "The widget is wrong.",
        "requirements": "- `widget.x` is 2.",
        "interface": "No new interfaces are introduced.",
        "repo_language": "python",
        "fail_to_pass": json.dumps([TEST]),
        "pass_to_pass": repr([KEPT]),  # the public rows hold both JSON and Python's repr
        "before_repo_set_cmd": "git reset --hard 0123abcd\ngit checkout 89abcdef -- tests/test_widget.py",
        "selected_test_files_to_run": '["tests/test_widget.py"]',
        "dockerhub_tag": "acme.widget-acme__widget-0123abcd-v4567",
    }
    return row | overrides


ALL_FILES = ("run_script.sh", "parser.py", "base_dockerfile", "instance_dockerfile")
DOCKERFILES = {
    "base_dockerfile": "FROM python:3.11-slim\nENV LANG=C.UTF-8\nRUN echo ENV is not a line of its own\n",
    "instance_dockerfile": 'FROM base\n  ENV PYTEST_ADDOPTS="-v --reruns=3"\n',
}


def _source(tmp_path: Path, rows: list[dict], files: tuple[str, ...] = ALL_FILES, **extra):
    """The rows through a `kind: swebench_pro` source, with a checkout of SWE-bench_Pro-os holding `files`."""
    rows_file = tmp_path / "rows.jsonl"
    rows_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    checkout = tmp_path / "pro-os"
    for name in files:
        path = (
            checkout / "dockerfiles" / name / ID / "Dockerfile"
            if name in DOCKERFILES
            else checkout / "run_scripts" / ID / name
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(DOCKERFILES.get(name, f"# {name} of {ID}\n"))
    (checkout / "dockerfiles").mkdir(parents=True, exist_ok=True)
    source = {"kind": "swebench_pro", "path": str(rows_file), "scripts": str(tmp_path / "pro-os"), **extra}
    return load_benchmark(source, Paths(tmp_path / "data"))


def test_a_pro_row_loads_with_its_scripts_and_runs_in_the_image_it_names(tmp_path):
    benchmark = _source(tmp_path, [_row()])
    (instance,) = benchmark.instances
    assert instance.fail_to_pass == (TEST,) and instance.pass_to_pass == (KEPT,)
    assert instance.run_script == f"# run_script.sh of {ID}\n" and instance.parser == f"# parser.py of {ID}\n"
    assert instance.env_exports == 'export LANG=C.UTF-8\nexport PYTEST_ADDOPTS="-v --reruns=3"'  # as Pro's harness
    image = benchmark.environment_for(instance).image
    assert (
        image == instance.named_image and image.qualified == f"docker.io/jefzda/sweap-images:{_row()['dockerhub_tag']}"
    )
    assert (image.workdir, image.python_prefix) == ("/app", "/usr/local")
    assert (
        "Requirements:\n- `widget.x` is 2." in instance.instruction
        and "New interfaces introduced:" in instance.instruction
    )
    assert instance.to_row()["requirements"] == _row()["requirements"]  # the snapshot keeps Pro's columns
    assert instance.local_problem  # no image, no run: the local backend refuses it


@pytest.mark.parametrize(
    "row, missing, field",
    [
        (_row(), "run_script.sh", "run_script.sh"),
        (_row(), "parser.py", "parser.py"),
        (_row(), "instance_dockerfile", "instance_dockerfile"),
        (_row(fail_to_pass="[tests/test_widget.py::test_fix"), "", "fail_to_pass"),
        (_row(pass_to_pass=json.dumps([KEPT, 3])), "", "pass_to_pass"),
        (_row(selected_test_files_to_run="[]"), "", "selected_test_files_to_run"),
        (_row(dockerhub_tag="a b"), "", "dockerhub_tag"),
        (_row(instance_id="../x"), "", "instance_id"),
    ],
)
def test_a_row_without_its_scripts_or_with_a_malformed_column_is_refused_by_name(tmp_path, row, missing, field):
    files = tuple(name for name in ALL_FILES if name != missing)
    with pytest.raises(InvalidDatasetError) as refused:
        _source(tmp_path, [row], files)
    assert f"row 0 ({row['instance_id']!r}): field {field}:" in str(refused.value)
    quarantined = _source(tmp_path, [row], files, on_invalid="quarantine")
    assert not quarantined.instances and [problem.field for problem in quarantined.quarantined] == [field]


def test_a_source_without_its_scripts_directory_is_refused_naming_the_field(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(_row()) + "\n")
    source = {"kind": "swebench_pro", "path": str(rows), "scripts": str(tmp_path)}
    with pytest.raises(DatasetSourceError, match="benchmark.scripts"):
        load_benchmark(source, Paths(tmp_path / "data"))
    with pytest.raises(DatasetSourceError, match="benchmark.images"):
        load_benchmark({**source, "images": "build"}, Paths(tmp_path / "data"))


def _report(*tests: tuple[str, str]) -> bytes:
    return json.dumps({"tests": [{"name": name, "status": status} for name, status in tests]}).encode()


def test_the_parsers_report_is_believed_only_in_the_parsers_form():
    judged = {TEST, KEPT}
    honest = read_report(_report((TEST, "PASSED"), (KEPT, "PASSED"), ("other", "SKIPPED")), judged)
    assert honest.statuses == {TEST: "PASSED", KEPT: "PASSED", "other": "SKIPPED"} and not honest.malformed
    for data in (
        None,
        b"[]",
        b'{"tests": {}}',
        b"not json",
        b"[" * 100_000,
        _report((TEST, "XPASSED")),
        _report(("", "PASSED")),
        json.dumps({"tests": [[TEST, "PASSED"]]}).encode(),
        b" " * (MAX_REPORT_BYTES + 1),
    ):
        assert read_report(data, judged).malformed and not read_report(data, judged).statuses
    twice = read_report(_report((TEST, "FAILED"), (TEST, "PASSED")), judged)
    assert twice.forged and TEST in twice.forged and not twice.statuses
    other = read_report(_report(("other", "FAILED"), ("other", "PASSED"), (TEST, "PASSED")), judged)
    assert other.statuses["other"] == "FAILED" and not other.forged  # not judged: its worst status kept


def test_a_log_that_reports_a_graded_test_both_ways_is_seen_and_reruns_are_not():
    judged = {TEST, KEPT}
    pytest_run = f"{TEST} RERUN\n{TEST} FAILED [ 50%]\n{KEPT} PASSED [100%]\nFAILED {TEST} - assert 1 == 2\n"
    assert reported_both_ways(pytest_run, judged) == ""
    assert reported_both_ways(f"{pytest_run}{TEST} PASSED\n", judged) == TEST  # printed after pytest's own
    assert reported_both_ways(f"{TEST} PASSED\n{pytest_run}", judged) == TEST  # or before it
    assert reported_both_ways(f"{pytest_run}PASSED {KEPT}\nERROR {KEPT}\n", judged) == KEPT
    assert reported_both_ways(f"{pytest_run}tests/other.py::t PASSED\ntests/other.py::t FAILED\n", judged) == ""


def test_pros_rule_and_the_files_its_harness_takes_from_the_fix_commit():
    assert decide({TEST: "PASSED", KEPT: "PASSED"}) is Outcome.RESOLVED
    assert decide({TEST: "PASSED", KEPT: "SKIPPED"}) is Outcome.UNRESOLVED  # Pro counts only PASSED
    assert decide({TEST: "PASSED", KEPT: "MISSING"}) is Outcome.TESTS_MISSING
    assert checked_out_files(_row()["before_repo_set_cmd"]) == ["tests/test_widget.py"]
    assert checked_out_files("git reset --hard 0123abcd\n") == []
