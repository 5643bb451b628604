"""`eval-pipeline grade` loses nothing and overwrites nothing: a predictions file that names instances the dataset
does not have, holds nothing, or cannot be read as predictions is refused (exit 2, the file and the line or ids
named) before anything is written; each file's grading is a campaign of its own (its run id), which `view`,
`export` and `report` open by the name `grade` prints; and the report lists the instance ids by verdict, as
SWE-bench's report does."""

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from eval_pipeline.config.grade_campaign import campaign_file, grading_campaign, grading_conflict
from eval_pipeline.results import report
from eval_pipeline.trial.records import MISSING
from eval_pipeline_tests.support.cli import eval_pipeline_cli
from eval_pipeline_tests.support.result_rows import trial

KNOWN = "eval-pipeline-demo__calclib-1"  # a demo instance


def prediction(instance_id: str, patch: str = "") -> dict:
    return {"instance_id": instance_id, "model_name_or_path": "someone/model-1", "model_patch": patch}


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def data_dir(env: dict[str, str]) -> Path:
    return Path(env["DAGSTER_HOME"]) / "eval_pipeline"


def written(env: dict[str, str]) -> dict[str, bytes]:
    """Every campaign file and report file under the data directory, by path."""
    root = data_dir(env)
    files = [*root.glob("campaigns/**/*"), *root.glob("reports/**/*")]
    return {str(path.relative_to(root)): path.read_bytes() for path in files if path.is_file()}


def grade(env: dict[str, str], predictions: Path, *flags: str) -> subprocess.CompletedProcess:
    return eval_pipeline_cli(
        env, "grade", "--predictions", str(predictions), "--dataset", "demo", "--backend", "local", *flags
    )


def refused(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-3000:]
    return run.stderr


def test_predictions_for_ids_not_in_the_dataset_refuse_the_file_naming_them(campaign_env, tmp_path):
    """12 of 13 predictions name no demo instance: the file and the first ten ids are named, the rest counted, and
    nothing is graded or written (`--instance` keeps the code before the check quick to fail)."""
    unknown = [f"someone-else__repo-{n}" for n in range(12)]
    path = jsonl(tmp_path / "preds.jsonl", [prediction(KNOWN), *map(prediction, unknown)])
    stderr = refused(grade(campaign_env, path, "--instance", KNOWN))
    assert f"predictions file {path}: 12 prediction(s) for instance ids not in the dataset:" in stderr
    assert ", ".join(map(repr, unknown[:10])) + " and 2 more" in stderr and repr(unknown[10]) not in stderr
    assert "--ignore-unknown-ids" in stderr
    assert written(campaign_env) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "holds no predictions"),
        ("\n \n", "holds no predictions"),
        ("[]", "holds no predictions"),
        (f'{{"instance_id": "{KNOWN}", "model_patch": ""}}\n\n{{oops\n', "line 3 is not JSON"),
        ('{"instance_id": "a", "model_patch": ""}\n7\n', "line 2 is not an object with instance_id and model_patch"),
        (
            '{"instance_id": "a", "model_patch": ""}\n\n{"instance_id": "b"}\n{"instance_id": "a", "model_patch": "x"}\n',
            "line 4: a second prediction for 'a' (the first is line 1)",
        ),
        ('[{"instance_id": "a"}, {"instance_id": "a"}]', "prediction 2: a second prediction for 'a' (the first is"),
        # An object by instance id naming one twice: `json` keeps the last one, silently, unless told not to.
        (
            f'{{"{KNOWN}": {{"model_patch": "x"}}, "{KNOWN}": {{"model_patch": ""}}}}',
            f"the key '{KNOWN}' appears twice",
        ),
        (
            '{"instance_id": "a", "model_patch": "x", "model_patch": ""}\n',
            "the key 'model_patch' appears twice in one object",
        ),
        (
            '{"instance_id": "b", "model_patch": ""}\n{"instance_id": "a", "model_patch": "x", "model_patch": ""}\n',
            "line 2: the key 'model_patch' appears twice",
        ),
    ],
)
def test_a_file_that_is_not_predictions_is_refused_naming_it_and_the_line(tmp_path, text, message):
    path = tmp_path / "preds.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError) as refusal:
        grading_campaign(path, "demo", "local")
    assert f"predictions file {path}: {message}" in str(refusal.value)


@pytest.mark.parametrize("run_id", ["../x", "a/b", "", "-x", "a b"])
def test_a_run_id_that_is_no_id_is_refused(tmp_path, run_id):
    path = jsonl(tmp_path / "preds.jsonl", [prediction(KNOWN)])
    with pytest.raises(ValueError, match="^--run-id: "):
        grading_campaign(path, "demo", "local", run_id=run_id)


def test_grade_refuses_bad_input_with_exit_2_and_writes_nothing(campaign_env, tmp_path):
    """An empty file, a line that is not JSON, a second prediction for an instance, a run id that is no id: one
    line naming the file and line (or the flag), exit 2 as for the command's other usage errors, no traceback,
    and no campaign file or report (`--instance` keeps the code before these checks quick to fail)."""
    cases = {
        "": "holds no predictions",
        f'{{"instance_id": "{KNOWN}", "model_patch": ""}}\n{{oops\n': "line 2 is not JSON",
        f'{{"instance_id": "{KNOWN}"}}\n\n{{"instance_id": "{KNOWN}"}}\n': f"line 3: a second prediction for '{KNOWN}'",
    }
    for number, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"preds-{number}.jsonl"
        path.write_text(text)
        assert f"predictions file {path}: {message}" in refused(grade(campaign_env, path, "--instance", KNOWN))
    path = jsonl(tmp_path / "preds.jsonl", [prediction(KNOWN)])
    assert "--run-id: '../x' is not an id" in refused(grade(campaign_env, path, "--run-id", "../x"))
    assert written(campaign_env) == {}


def test_the_default_run_id_is_the_files_content_and_the_dataset(tmp_path):
    """Two files of one base name are two campaigns; one content is one campaign wherever the file is, per
    dataset; `--run-id` names it; the campaign pins the content it grades."""
    first = jsonl(tmp_path / "a" / "preds.jsonl", [prediction(KNOWN)])
    other = jsonl(tmp_path / "b" / "preds.jsonl", [prediction(KNOWN, "diff --git a/x b/x\n")])
    moved = jsonl(tmp_path / "c" / "preds.jsonl", [prediction(KNOWN)])
    names = {path: grading_campaign(path, "demo", "local").name for path in (first, other, moved)}
    assert names[first] != names[other] and names[first] == names[moved]
    assert names[first].startswith("grade_preds_")
    assert grading_campaign(first, str(tmp_path / "rows.jsonl"), "local").name != names[first]
    named = grading_campaign(first, "demo", "local", run_id="gold-v1.2")
    assert (named.run_id, named.name) == ("gold-v1.2", "grade_gold_v1_2")
    assert named.campaign["variants"][0]["params"]["sha256"]


def test_a_grading_on_another_backend_is_refused_and_the_campaign_kept(tmp_path):
    """One content on one dataset is one campaign: grading it on another backend would rewrite the campaign's
    sandbox before the grading could fail (no container engine), stranding its stored trials; it is refused."""
    path = jsonl(tmp_path / "preds.jsonl", [prediction(KNOWN)])
    local = grading_campaign(path, "demo", "local")
    written = campaign_file(tmp_path / "data", local.name)
    written.parent.mkdir(parents=True)
    written.write_text(yaml.safe_dump(local.campaign, sort_keys=False))
    assert grading_conflict(written, grading_campaign(path, "demo", "local")) == ""
    conflict = grading_conflict(written, grading_campaign(path, "demo", "container"))
    assert "on the local backend" in conflict and "--backend local" in conflict


def test_the_report_lists_instance_ids_by_verdict_from_the_typed_outcomes():
    """SWE-bench's lists from our outcomes: an unscored outcome (infrastructure, harness) is an error; a graded
    unresolved trial that changed nothing is an empty patch; any other scored failure is unresolved; a planned
    trial not run is incomplete."""
    rows = {
        "resolved": trial("r", "v", 0, "resolved", patch_sha256="p"),
        "failed": trial("f", "v", 0, "unresolved", patch_sha256="p"),
        "empty": trial("e", "v", 0, "unresolved", patch_sha256=report.EMPTY_PATCH_SHA256),
        "no-prediction": trial("n", "v", 0, "agent_error", patch_sha256=report.EMPTY_PATCH_SHA256),
        "broke-tests": trial("b", "v", 0, "patch_broke_test_run", patch_sha256="p"),
        "oom": trial("o", "v", 0, "oom_killed", patch_sha256="p"),
        "grading": trial("g", "v", 0, "grading_error", patch_sha256="p"),
        "not-run": replace(trial("m", "v", 0, "unresolved"), outcome=MISSING, outcome_kind=None, scored=False),
    }
    assert {name: report.id_list(row) for name, row in rows.items()} == {
        "resolved": "resolved_ids",
        "failed": "unresolved_ids",
        "empty": "empty_patch_ids",
        "no-prediction": "unresolved_ids",
        "broke-tests": "unresolved_ids",
        "oom": "error_ids",
        "grading": "error_ids",
        "not-run": "incomplete_ids",
    }
    summary = report.build_report("c", "d" * 64, "p" * 64, list(rows.values())).summary()["variants"]["v"]
    assert (summary["resolved_ids"], summary["unresolved_ids"], summary["empty_patch_ids"]) == (["r"], [*"bfn"], ["e"])
    assert (summary["error_ids"], summary["incomplete_ids"]) == (["g", "o"], ["m"])


@pytest.mark.slow
def test_each_file_is_graded_as_its_own_campaign_and_none_overwrites_another(campaign_env, tmp_path, demo_benchmark):
    """The issue's day: `a/preds.jsonl` graded, then `b/preds.jsonl` (same base name, other content, one id the
    dataset lacks) graded on a dataset that is missing, then on the demo with --ignore-unknown-ids: `a`'s
    campaign and report are untouched throughout, each grading opens by the name `grade` printed, the report
    lists ids by verdict, and `a` graded again resumes its own campaign."""
    gold, empty, absent = (task for task in demo_benchmark.instances[:3])
    picked = [flag for task in (gold, empty, absent) for flag in ("--instance", task.instance_id)]
    first = jsonl(
        tmp_path / "a" / "preds.jsonl", [prediction(gold.instance_id, gold.patch), prediction(empty.instance_id)]
    )
    graded = grade(campaign_env, first, "--json", *picked)
    assert graded.returncode == 0, graded.stderr[-3000:]
    summary = json.loads(graded.stdout)
    name = summary["campaign"]
    before = written(campaign_env)

    second = jsonl(tmp_path / "b" / "preds.jsonl", [prediction(empty.instance_id), prediction("someone-else__x-1")])
    missing = eval_pipeline_cli(
        campaign_env, "grade", "--predictions", str(second), "--dataset", str(tmp_path / "nowhere.jsonl"), *picked
    )
    assert str(tmp_path / "nowhere.jsonl") in refused(missing)
    assert written(campaign_env) == before, "a failed grade writes nothing"
    assert "someone-else__x-1" in refused(grade(campaign_env, second, "--instance", empty.instance_id))
    assert written(campaign_env) == before

    assert f"campaign {name} (`--campaign {name}`" in graded.stderr
    lists = {key: value for key, value in summary["variants"]["model_1"].items() if key.endswith("_ids")}
    expected = {
        "resolved_ids": [gold.instance_id],
        "empty_patch_ids": [empty.instance_id],
        "unresolved_ids": [absent.instance_id],  # no prediction: the agent's error, counted against it
        "error_ids": [],
        "incomplete_ids": sorted(t.instance_id for t in demo_benchmark.instances[3:]),
    }
    assert lists == expected
    stored = json.loads(Path(summary["report"]["json"]).read_text())["variants"]["model_1"]
    assert {key: stored[key] for key in lists} == lists
    assert f"- empty patch (1): `{empty.instance_id}`" in Path(summary["report"]["markdown"]).read_text()

    ignoring = grade(campaign_env, second, "--json", "--ignore-unknown-ids", "--instance", empty.instance_id)
    assert ignoring.returncode == 0, ignoring.stderr[-3000:]
    assert "warning: " in ignoring.stderr and "1 prediction(s) for instance ids not in the dataset" in ignoring.stderr
    other = json.loads(ignoring.stdout)
    assert other["campaign"] != name and other["variants"]["model_1"]["empty_patch_ids"] == [empty.instance_id]
    record = json.loads((Path(other["report"]["json"]).parent / "grading.json").read_text())
    assert (record["unknown_ids_ignored"], record["unknown_ids"]) == (1, ["someone-else__x-1"])
    after = written(campaign_env)
    assert {path: after[path] for path in before} == before, "grading b left a's campaign and report as they were"

    run_id = name.removeprefix("grade_").replace("_", "-")  # the printed run id, as --run-id
    taken = grade(campaign_env, second, "--run-id", run_id, "--ignore-unknown-ids", "--instance", empty.instance_id)
    assert f"campaign {name} exists for other predictions" in refused(taken)
    assert written(campaign_env) == after

    for campaign in (name, other["campaign"]):
        exported = eval_pipeline_cli(campaign_env, "export", "--campaign", campaign, "--to", str(tmp_path / campaign))
        assert exported.returncode == 0 and "trial folder(s) under" in exported.stdout, exported.stderr[-3000:]
        rewritten = eval_pipeline_cli(campaign_env, "report", "--campaign", campaign)
        assert rewritten.returncode == 0 and "HTML report:" in rewritten.stdout, rewritten.stderr[-3000:]
    with subprocess.Popen(
        ["eval-pipeline", "view", "--campaign", name, "--port", "0"],
        env=campaign_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as view:
        try:
            assert view.stdout.readline().startswith(f"Trials of campaign {name}: http://")
        finally:
            view.terminate()

    again = grade(campaign_env, first, "--json", *picked)
    assert json.loads(again.stdout)["campaign"] == name and json.loads(again.stdout)["generation"]["computed"] == 0
    assert (data_dir(campaign_env) / "campaigns" / f"{name}.yaml").read_bytes() == before[f"campaigns/{name}.yaml"]

    first.write_text(first.read_text().replace(gold.instance_id, absent.instance_id, 1))
    edited = eval_pipeline_cli(campaign_env, "export", "--campaign", name, "--to", str(tmp_path / "edited"))
    assert "the file changed after it was graded" in refused(edited)
