"""A predictions file (SWE-bench's format) as a variant's agent: each prediction is its trial's generation."""

import json
import re
from pathlib import Path

import pytest

from eval_pipeline.agents import make_agent
from eval_pipeline.agents.builtin import CommandAgent
from eval_pipeline.agents.predictions import PredictionsAgent, read_predictions
from eval_pipeline.config.campaign import CampaignError, parse_campaign
from eval_pipeline.config.grade_campaign import ImageFlags, dataset_source, grading_campaign
from eval_pipeline_tests.support.cli import eval_pipeline_cli
from eval_pipeline_tests.support.trials import resolve_trial


def prediction(instance_id: str, patch: object) -> dict:
    return {"instance_id": instance_id, "model_name_or_path": "someone/model-1", "model_patch": patch}


@pytest.mark.parametrize("form", ["list", "jsonl", "by_id"])
def test_each_of_swebenchs_file_forms_is_read_and_its_content_hash_keys_the_agent(tmp_path, form):
    rows = [prediction("a", "diff --git a/x b/x\n"), prediction("b", None), prediction("c", 7)]
    text = {
        "list": json.dumps(rows),
        "jsonl": "\n".join(map(json.dumps, rows)) + "\n",
        "by_id": json.dumps({row["instance_id"]: {k: v for k, v in row.items() if k != "instance_id"} for row in rows}),
    }[form]
    path = tmp_path / f"preds.{form}"
    path.write_text(text)
    patches, problems, content = read_predictions(path)
    assert patches == {"a": "diff --git a/x b/x\n", "b": ""}
    where = "line 3" if form == "jsonl" else "prediction 3"
    assert problems == {"c": f"{where} ('c'): model_patch is not a string"}
    agent = make_agent("predictions", {"path": str(path)})
    moved = tmp_path / "moved.json"
    moved.write_text(text)
    assert agent.config == make_agent("predictions", {"path": str(moved)}).config, "the content keys it, not the path"
    moved.write_text(text.replace("x\\n", "y\\n"))
    assert agent.config != make_agent("predictions", {"path": str(moved)}).config
    assert not agent.trusted


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[{", "not JSON"),
        ('{"instance_id": "a"}\n{oops\n', "line 2 is not JSON"),
        ('[{"model_patch": ""}]', "prediction 1 has no instance_id"),
        ('[{"instance_id": "a"}, {"instance_id": "a"}]', "a second prediction for 'a'"),
    ],
)
def test_a_file_that_is_not_predictions_is_refused_at_load_naming_it(tmp_path, text, message):
    path = tmp_path / "preds.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        PredictionsAgent(str(path))
    campaign = {
        "name": "graded",
        "benchmark": {"kind": "demo"},
        "variants": [{"name": "theirs", "agent": "predictions", "params": {"path": "preds.json"}}],
        "sandbox": {"backend": "container"},
    }
    with pytest.raises(CampaignError, match=f"variants\\[0\\].params.*{message}"):
        parse_campaign(campaign, "graded.yaml", base_dir=tmp_path)


def test_a_relative_path_is_read_from_the_campaign_files_directory(tmp_path):
    (tmp_path / "preds.jsonl").write_text(json.dumps(prediction("a", "")) + "\n")
    campaign = {
        "name": "graded",
        "benchmark": {"kind": "demo"},
        "variants": [{"name": "theirs", "agent": "predictions", "params": {"path": "preds.jsonl"}}],
        "sandbox": {"backend": "container"},
    }
    loaded = parse_campaign(campaign, "graded.yaml", base_dir=tmp_path)
    assert loaded.variants[0].params["path"] == str(tmp_path / "preds.jsonl")
    with pytest.raises(CampaignError, match="untrusted"):
        parse_campaign({**campaign, "sandbox": {"backend": "local"}}, "graded.yaml", base_dir=tmp_path)


def test_predictions_grade_as_the_same_patches_applied_by_a_command_agent(
    tmp_path, demo_benchmark, prepare, shared_sandbox, store
):
    """The gold patch resolves, an empty prediction does not, and each grades as the same patch applied by the
    `command` agent does; a missing and a malformed prediction, and one that does not apply, are the agent's
    error, named."""
    tasks = list(demo_benchmark.instances)[:3]
    gold, empty, broken = tasks
    rows = [
        prediction(gold.instance_id, gold.patch),
        prediction(empty.instance_id, ""),
        prediction(
            broken.instance_id, "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n"
        ),
        prediction(demo_benchmark.instances[4].instance_id, 5),
    ]
    path = tmp_path / "preds.jsonl"
    path.write_text("\n".join(map(json.dumps, rows)) + "\n")
    agent = PredictionsAgent(str(path))
    outcomes = {}
    for task in (gold, empty):
        environment = prepare(task)
        ours = resolve_trial(task, agent, 0, environment, shared_sandbox, store, demo_benchmark)[1].outcome
        patch = tmp_path / f"{task.instance_id}.patch"
        patch.write_text(dict((r["instance_id"], r["model_patch"]) for r in rows)[task.instance_id])
        applying = CommandAgent(command=f"test ! -s {patch} || git apply {patch}")
        theirs = resolve_trial(task, applying, 0, environment, shared_sandbox, store, demo_benchmark)[1].outcome
        outcomes[task.instance_id] = (ours, theirs)
    assert outcomes == {gold.instance_id: ("resolved", "resolved"), empty.instance_id: ("unresolved", "unresolved")}

    generation, evaluation = resolve_trial(broken, agent, 0, prepare(broken), shared_sandbox, store, demo_benchmark)
    assert evaluation.outcome == "agent_error" and "does not apply" in generation.error
    missing = demo_benchmark.instances[3]
    generation, evaluation = resolve_trial(missing, agent, 0, prepare(missing), shared_sandbox, store, demo_benchmark)
    assert evaluation.outcome == "agent_error"
    assert f"has no prediction for {missing.instance_id!r}" in generation.error and str(path) in generation.error
    malformed = demo_benchmark.instances[4]
    generation, evaluation = resolve_trial(
        malformed, agent, 0, prepare(malformed), shared_sandbox, store, demo_benchmark
    )
    assert evaluation.outcome == "agent_error" and "line 4" in generation.error
    assert "model_patch is not a string" in generation.error


def test_the_grading_campaign_is_one_variant_of_the_file_named_after_it(tmp_path):
    path = tmp_path / "my-preds.jsonl"
    path.write_text(json.dumps(prediction("a", "")) + "\n")
    campaign = grading_campaign(path, "demo", "container").campaign
    assert re.fullmatch(r"grade_my_preds_[0-9a-f]{12}", campaign["name"]) and campaign["seeds"] == [0]
    params = {"path": str(path), "sha256": read_predictions(path)[2]}
    assert campaign["variants"] == [{"name": "model_1", "agent": "predictions", "params": params}]
    loaded = parse_campaign(campaign, "grade", base_dir=tmp_path)
    assert loaded.variants[0].make_agent().params["predictions_sha256"]
    assert grading_campaign(path, "demo", "local").campaign["sandbox"]["allow_untrusted_agents_locally"] is True
    assert dataset_source("hf:princeton-nlp/SWE-bench_Verified@c104f840:test") == {
        "kind": "swebench",
        "hf_name": "princeton-nlp/SWE-bench_Verified",
        "revision": "c104f840",
        "split": "test",
    }
    assert dataset_source(str(path))["path"] == str(path)
    assert dataset_source(str(path), tmp_path / "mirrors")["mirror_dir"] == str(tmp_path / "mirrors")
    flags = ImageFlags("pull", "myorg", "v2")
    assert dataset_source(str(path), images=flags) == {
        "kind": "swebench",
        "path": str(path),
        "images": "pull",
        "image_namespace": "myorg",
        "image_tag": "v2",
    }
    assert dataset_source(str(path), images=ImageFlags()) == dataset_source(str(path)), "defaults add nothing"
    with pytest.raises(ValueError, match="--images.*the demo dataset's environments are built here"):
        dataset_source("demo", images=ImageFlags("auto"))
    with pytest.raises(ValueError, match="--mirror-dir: the demo dataset makes its own repositories"):
        dataset_source("demo", tmp_path)
    with pytest.raises(ValueError, match="pinned to a revision"):
        dataset_source("hf:princeton-nlp/SWE-bench_Verified")


@pytest.mark.slow
def test_grade_runs_a_predictions_file_with_one_command(campaign_env, tmp_path, demo_benchmark):
    """`eval-pipeline grade --predictions FILE --dataset demo`: each prediction graded, reported like any
    variant's; an instance the file has no prediction for is its agent's error, named, and counted."""
    gold, empty, missing = list(demo_benchmark.instances)[:3]
    path = tmp_path / "preds.json"
    path.write_text(json.dumps([prediction(gold.instance_id, gold.patch), prediction(empty.instance_id, "")]))
    picked = [flag for task in (gold, empty, missing) for flag in ("--instance", task.instance_id)]
    args = ["grade", "--predictions", str(path), "--dataset", "demo", "--backend", "local", "--json", *picked]
    graded = eval_pipeline_cli(campaign_env, *args)
    assert graded.returncode == 0, graded.stderr[-3000:]
    summary = json.loads(graded.stdout)
    assert summary["campaign"].startswith("grade_preds_") and summary["scored"] == 3
    outcomes = summary["variants"]["model_1"]["outcomes"]
    assert outcomes == {"resolved": 1, "unresolved": 1, "agent_error": 1, "missing": summary["planned"] - 3}
    told = [line for line in graded.stderr.splitlines() if f"has no prediction for {missing.instance_id!r}" in line]
    assert [line.split(": ")[:2] for line in told] == [["eval-pipeline grade", "agent_error"]], graded.stderr[-2000:]
    again = eval_pipeline_cli(campaign_env, *args)
    assert json.loads(again.stdout)["generation"]["computed"] == 0, "the same file is graded once"


@pytest.mark.parametrize(
    ("hostile", "message"),
    [
        ("../../x", "prediction 2: field instance_id: '../../x' is not an id"),
        ("/abs", "prediction 2: field instance_id: '/abs' is not an id"),
        ("a|b", "prediction 2: field instance_id: 'a|b' is not an id"),
        ("a,b", "prediction 2: field instance_id: 'a,b' is not an id"),
        ("a\nb", "prediction 2: field instance_id: 'a\\nb' is not an id"),
        ("", "prediction 2 has no instance_id"),
    ],
)
def test_a_prediction_whose_instance_id_is_no_id_is_refused_at_load_naming_it(tmp_path, hostile, message):
    """An instance id reaches paths and partition keys (tasks/dataset.py): one that is no id refuses the file."""
    path = tmp_path / "preds.json"
    path.write_text(json.dumps([prediction("fine__repo-1", ""), prediction(hostile, "")]))
    with pytest.raises(ValueError) as refused:
        PredictionsAgent(str(path))
    assert f"predictions file {path}: {message}" in str(refused.value)


def test_grade_refuses_hostile_prediction_ids_before_anything_runs(campaign_env, tmp_path):
    """A file naming ids that are no ids is refused before any trial runs (its ids would match no instance, and
    every trial would run as one without a prediction)."""
    path = tmp_path / "preds.jsonl"
    path.write_text("".join(json.dumps(prediction(i, "")) + "\n" for i in ("fine__repo-1", "a|b", "../../x")))
    graded = eval_pipeline_cli(
        campaign_env, "grade", "--predictions", str(path), "--dataset", "demo", "--backend", "local"
    )
    assert graded.returncode == 2 and "Traceback" not in graded.stderr, graded.stderr[-3000:]
    assert f"predictions file {path}: line 2: field instance_id: 'a|b' is not an id" in graded.stderr
    assert not list((Path(campaign_env["DAGSTER_HOME"]) / "eval_pipeline").glob("artifacts/generation/*"))


def test_a_patch_holding_a_lone_surrogate_is_its_predictions_problem(tmp_path):
    """JSON may escape a lone surrogate (`\\ud800`), which no file's bytes can be: the prediction's own failure,
    named, never a crash of the agent writing it."""
    path = tmp_path / "preds.json"
    path.write_text(json.dumps([prediction("fine__repo-1", "diff --git a/x b/x\n+\ud800\n")]))
    patches, problems, _ = read_predictions(path)
    assert patches == {} and "model_patch holds a lone surrogate" in problems["fine__repo-1"]
