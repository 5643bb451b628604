"""Instance validation: rows broken on purpose, made from the demo's own, validated, excluded, then run."""

import json
import re
from pathlib import Path

import duckdb
import pytest
import yaml
from dagster import AssetCheckKey, AssetKey, DagsterInstance

from eval_pipeline.cli import main
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.config.campaign import load_campaign
from eval_pipeline.grading.verdict import Verdict
from eval_pipeline.tasks.dataset import Benchmark
from eval_pipeline.trial.validation import GOLD, Status, _first_failure, classify
from eval_pipeline_tests.support.terminal_tasks import write_terminal_task

R, U, F = Outcome.RESOLVED, Outcome.UNRESOLVED, Outcome.PATCH_APPLY_FAILED


@pytest.mark.parametrize(
    ("gold", "empty", "status"),
    [
        ([R, R, R], [U, U, U], Status.VALID),
        ([F, F, F], [U, U, U], Status.GOLD_FAILS),
        ([U, U, U], [R, R, R], Status.GOLD_FAILS),  # a reference that never resolves is the first thing to fix
        ([R, R, R], [R, R, R], Status.EMPTY_PASSES),
        ([R, U, R], [U, U, U], Status.FLAKY),
        ([F, F, F], [U, R, U], Status.FLAKY),  # a result that changes is unreliable whatever else is wrong
        ([R, Outcome.TEST_TIMEOUT], [], Status.ENVIRONMENT_FAILED),  # validation stops at an unjudged run
        ([R, R, R], [U, U, Outcome.GRADING_ERROR], Status.ENVIRONMENT_FAILED),
        ([], [], Status.ENVIRONMENT_FAILED),  # the environment could not be prepared: nothing ran
    ],
)
def test_classification(gold, empty, status):
    assert classify(gold, empty) is status


FLAKY_TEST = """from pathlib import Path

from calclib.arith import clamp


def test_fails_every_other_fixed_run():
    # Counts only runs with the fix in, so the reference alternates whatever the order of the runs.
    assert clamp(5, 0, 10) == 5
    counter = Path({counter!r})
    runs = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(runs + 1))
    assert runs % 2 == 0
"""


def new_file_patch(path: str, text: str) -> str:
    lines = text.splitlines()
    added = "".join(f"+{line}\n" for line in lines)
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{added}"


def broken_rows(demo: Benchmark, counter: Path) -> list[dict]:
    """A good demo row, and four made from the demo's rows that validation must catch."""
    rows = {i.instance_id.removeprefix("eval-pipeline-demo__"): i.to_row() for i in demo.instances}
    wrong_gold = {
        **rows["calclib-2"],
        "instance_id": "calclib-2-gold-does-not-apply",
        "patch": rows["calclib-3"]["patch"],
    }
    passing = rows["textkit-2"]["PASS_TO_PASS"]
    passes_unfixed = {
        **rows["textkit-2"],
        "instance_id": "textkit-2-passes-unfixed",
        "FAIL_TO_PASS": passing[:1],
        "PASS_TO_PASS": passing[1:],
    }
    flaky = {
        **rows["calclib-1"],
        "instance_id": "calclib-1-flaky-test",
        "test_patch": rows["calclib-1"]["test_patch"]
        + new_file_patch("tests/test_flaky.py", FLAKY_TEST.format(counter=str(counter))),
        "FAIL_TO_PASS": [*rows["calclib-1"]["FAIL_TO_PASS"], "tests/test_flaky.py::test_fails_every_other_fixed_run"],
    }
    no_environment = {**rows["textkit-3"], "instance_id": "textkit-3-no-repository", "repo": "eval-pipeline-demo/gone"}
    return [rows["calclib-1"], wrong_gold, passes_unfixed, flaky, no_environment]


EXPECTED = {
    "eval-pipeline-demo__calclib-1": Status.VALID,
    "make-greeting": Status.VALID,
    "calclib-2-gold-does-not-apply": Status.GOLD_FAILS,
    "textkit-2-passes-unfixed": Status.EMPTY_PASSES,
    "calclib-1-flaky-test": Status.FLAKY,
    "textkit-3-no-repository": Status.ENVIRONMENT_FAILED,
}
QUARANTINE = sorted(i for i, status in EXPECTED.items() if status is not Status.VALID)


@pytest.fixture
def campaign_file(tmp_path: Path, demo_benchmark: Benchmark) -> Path:
    """A campaign of the broken code rows and one terminal task whose solve.sh is its reference."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(row) + "\n" for row in broken_rows(demo_benchmark, tmp_path / "counter")))
    verifier = (
        '[ "$(cat greeting.txt 2>/dev/null)" = hi ] && echo 1 > "$EVAL_REWARD_FILE" || echo 0 > "$EVAL_REWARD_FILE"\n'
    )
    write_terminal_task(tmp_path / "tasks", "make-greeting", verifier, "echo hi > greeting.txt\n")
    campaign = {
        "name": "checked",
        "slices": {
            "code": {
                "kind": "swebench",
                "path": str(rows),
                "mirror_dir": demo_benchmark.source.mirror_dir,
            },
            "terminal": {"kind": "terminal", "path": str(tmp_path / "tasks" / "make-greeting")},
        },
        "variants": [{"name": "oracle", "agent": "oracle"}],
        "timeouts": {"tests_s": 60},
    }
    path = tmp_path / "checked.yaml"
    path.write_text(yaml.safe_dump(campaign))
    return path


def validate(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(["validate", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.slow
def test_validate_a_selection_validates_those_instances_and_leaves_the_report(campaign_env, campaign_file, capsys):
    selected = ("--instance", "calclib-2-gold-does-not-apply", "--slice", "code", "--repeats", "1")
    code, out, err = validate(capsys, "--campaign", str(campaign_file), *selected)
    assert code == 1, err[-3000:]
    assert re.findall(r"^\[(\d)/(\d)\] (\S+): ", err, re.M) == [("1", "1", "calclib-2-gold-does-not-apply")]
    assert "| calclib-2-gold-does-not-apply | code | gold_fails | 0/1 | 0/1 |" in out
    assert "1 selected instance(s) validated. The validation report (validation.json)" in out
    reports = Path(campaign_env["DAGSTER_HOME"]) / "eval_pipeline" / "reports" / "checked"
    assert not (reports / "validation.json").exists(), "a quarantine is decided from every instance only"
    code, out, _ = validate(capsys, "--campaign", str(campaign_file), "--slice", "terminal", "--repeats", "1", "--json")
    assert code == 0 and json.loads(out)["selected"]["make-greeting"]["status"] == "valid"
    code, _, err = validate(capsys, "--campaign", str(campaign_file), "--variant", "oracle")
    assert code == 2 and "--variant and --seed select trials, not instances" in err


@pytest.mark.slow
def test_validate_quarantines_broken_instances_and_a_campaign_excludes_them(campaign_env, campaign_file, capsys):
    code, out, err = validate(capsys, "--campaign", str(campaign_file), "--json")
    assert code == 1, err[-3000:]
    validation = json.loads(out)
    records = {record["instance_id"]: record for record in validation["instances"]}
    assert {i: record["status"] for i, record in records.items()} == EXPECTED
    assert validation["quarantine"] == QUARANTINE and validation["excluded"] == {}
    assert validation["statuses"] == {status: list(EXPECTED.values()).count(status) for status in Status}
    assert records["calclib-1-flaky-test"]["gold"] == {"resolved": 2, "unresolved": 1}, "fixed runs 1 and 3 pass"
    assert records["calclib-1-flaky-test"]["detail"].startswith("gold patch, run 2 of 3: unresolved")
    assert "test_fails_every_other_fixed_run (failed)" in records["calclib-1-flaky-test"]["detail"].lower()
    assert records["calclib-2-gold-does-not-apply"]["gold"] == {"patch_apply_failed": 3}
    assert records["textkit-2-passes-unfixed"]["empty"] == {"resolved": 3}
    assert "passed without a fix" in records["textkit-2-passes-unfixed"]["detail"]
    failed_environment = records["textkit-3-no-repository"]
    assert (failed_environment["gold_runs"], failed_environment["empty_runs"]) == (0, 0)
    assert failed_environment["detail"].startswith("the environment could not be prepared")
    assert "eval-pipeline-demo/gone" in failed_environment["detail"]
    assert records["make-greeting"]["gold"] == {"resolved": 3}, "solve.sh's diff, made anew for each repeat"
    assert re.search(r"^\[\d/6\] textkit-3-no-repository: environment_failed \(gold 0/0, empty 0/0\)$", err, re.M)

    reports = Path(campaign_env["DAGSTER_HOME"]) / "eval_pipeline" / "reports" / "checked"
    assert json.loads((reports / "validation.json").read_text()) == validation
    with DagsterInstance.get() as instance:  # the UI shows each instance's check
        check = AssetCheckKey(AssetKey(["checked", "validation"]), "valid")
        history = instance.event_log_storage.get_asset_check_execution_history(check, limit=100)
        assert {record.partition: record.status.value for record in history} == {
            instance_id: "SUCCEEDED" if status is Status.VALID else "FAILED" for instance_id, status in EXPECTED.items()
        }

    # The campaign leaves the quarantine out (here it reads the live report) and runs without it.
    campaign = yaml.safe_load(campaign_file.read_text())
    campaign["exclude"] = {"validation": str(reports / "validation.json")}
    campaign_file.write_text(yaml.safe_dump(campaign))
    assert main(["run", "--campaign", str(campaign_file), "--workers", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["planned"] == 2, "two valid instances, one oracle trial each"
    warehouse = Path(campaign_env["DAGSTER_HOME"]) / "eval_pipeline" / "results" / "checked.duckdb"
    with duckdb.connect(str(warehouse), read_only=True) as db:
        trials = db.execute("SELECT instance_id, outcome FROM trials ORDER BY ALL").fetchall()
        rows = db.execute(
            "SELECT instance_id, slice, status, gold_resolved, gold_runs, empty_resolved, empty_runs, current"
            " FROM validation ORDER BY instance_id"
        ).fetchall()
        quarantined = db.execute("SELECT quarantined_rows FROM lineage").fetchone()[0]
    assert trials == [(i, "resolved") for i in sorted(EXPECTED) if EXPECTED[i] is Status.VALID]
    assert quarantined == len(QUARANTINE), "excluded instances count as quarantined rows"
    assert [(i, status) for i, _, status, *_ in rows] == sorted(EXPECTED.items())
    assert ("calclib-1-flaky-test", "code", "flaky", 2, 3, 0, 3, False) in rows, "excluded: not evaluated here"
    assert ("eval-pipeline-demo__calclib-1", "code", "valid", 3, 3, 0, 3, True) in rows

    report = json.loads((reports / "report.json").read_text())["validation"]
    assert report["statuses"] == validation["statuses"] and report["unvalidated"] == []
    assert sorted(row["instance_id"] for row in report["not_valid"]) == QUARANTINE
    assert not any(row["evaluated"] for row in report["not_valid"])
    markdown = (reports / "report.md").read_text()
    assert "## Instance validation" in markdown
    assert "Every instance evaluated here has a current validation." in markdown
    assert "| textkit-2-passes-unfixed | code | empty_passes | 3/3 | 3/3 | no |" in markdown

    # Validating again judges what the campaign evaluates now: all valid. The excluded instances stay
    # quarantined (not validated, not forgotten), so the campaign may read the very report it rewrites.
    code, out, err = validate(capsys, "--campaign", str(campaign_file), "--repeats", "1")
    assert code == 0, err[-3000:]
    assert "| make-greeting | terminal | valid | 1/1 | 0/1 |" in out
    again = json.loads((reports / "validation.json").read_text())
    assert [record["instance_id"] for record in again["instances"]] == [
        "eval-pipeline-demo__calclib-1",
        "make-greeting",
    ]
    assert again["quarantine"] == QUARANTINE
    assert again["excluded"]["calclib-1-flaky-test"].startswith(f"flaky in {reports / 'validation.json'}")
    assert load_campaign(str(campaign_file)).exclude == again["excluded"], "reading it back excludes the same"


def test_bad_input_exits_2(campaign_env, campaign_file, tmp_path, capsys):
    code, _, err = validate(capsys, "--campaign", str(campaign_file), "--repeats", "0")
    assert code == 2 and "--repeats must be at least 1" in err
    code, _, err = validate(capsys, "--campaign", str(tmp_path / "nowhere.yaml"))
    assert code == 2 and "no such file, and not a built-in campaign" in err
    campaign = yaml.safe_load(campaign_file.read_text())
    campaign["slices"]["code"]["path"] = str(tmp_path / "missing.jsonl")
    campaign_file.write_text(yaml.safe_dump(campaign))
    code, _, err = validate(capsys, "--campaign", str(campaign_file))
    assert code == 2 and "missing.jsonl" in err and "does not exist" in err
    campaign["exclude"] = {"validation": "absent.json"}
    campaign_file.write_text(yaml.safe_dump(campaign))
    code, _, err = validate(capsys, "--campaign", str(campaign_file))
    assert code == 2 and f"field exclude.validation: {tmp_path / 'absent.json'} does not exist" in err


def test_gold_fails_says_which_graded_tests_failed_or_went_missing_and_how_the_log_ends():
    log = "collected 3 items\n\ntests/test_a.py F\n\nE   ImportError: cannot import name 'roman'\n= 1 failed, 1 passed =\n"
    verdict = Verdict(
        Outcome.UNRESOLVED,
        tests={
            "tests/test_a.py::test_x": "FAILED",
            "tests/test_a.py::test_y": "MISSING",
            "tests/test_a.py::ok": "PASSED",
        },
        steps=[{"step": "run_tests", "log_tail": log}],
    )
    detail = _first_failure([(GOLD, verdict)], repeats=1)
    assert detail.startswith("gold patch, run 1 of 1: unresolved; tests not passing: ")
    assert "tests/test_a.py::test_x (FAILED), tests/test_a.py::test_y (MISSING)" in detail
    assert "ok (PASSED)" not in detail
    assert detail.endswith(
        "the test log ends: collected 3 items | tests/test_a.py F | E   ImportError: cannot import name 'roman' | = 1 failed, 1 passed ="
    )
