"""The CLI's driver in process: a cycle requests each run once, resumes from Dagster's record and the store's."""

import shutil

import pytest
from dagster import AssetKey, instance_for_test

from eval_pipeline.campaign import parse_campaign
from eval_pipeline.defs.progress import REQUEST_TAG
from eval_pipeline.defs.stages import CYCLE_TAG, STAGE_TAG
from eval_pipeline.orchestration.campaign_run import run_campaign
from eval_pipeline.orchestration.driver import new_cycle
from eval_pipeline.orchestration.launchers import WorkerPoolLauncher
from eval_pipeline.settings import Paths

KEPT = ["eval-pipeline-demo__calclib-1", "eval-pipeline-demo__textkit-1"]


@pytest.fixture
def campaign(demo_benchmark):
    others = [task.instance_id for task in demo_benchmark.instances if task.instance_id not in KEPT]
    return parse_campaign(
        {
            "name": "driven",
            "benchmark": {"kind": "demo"},
            "variants": [{"name": "oracle", "agent": "oracle"}, {"name": "null", "agent": "null"}],
            "exclude": {"instances": others},
        },
        "test",
    )


def drive_once(campaign, instance, paths: Paths):
    cycle = new_cycle(campaign)
    run = run_campaign(campaign, instance, WorkerPoolLauncher(campaign, paths, instance, 1), cycle, paths)
    runs = cycle.runs(instance)
    assert len({r.tags[REQUEST_TAG] for r in runs}) == len(runs), "each request launched once"
    assert {r.tags[CYCLE_TAG] for r in runs} == {cycle.id}
    return run, sorted(r.tags[STAGE_TAG] for r in runs)


def test_a_cycle_runs_what_is_missing_and_the_next_only_what_the_store_lost(campaign, tmp_path, monkeypatch):
    monkeypatch.delenv("EVAL_PIPELINE_ARTIFACTS", raising=False)
    paths = Paths(tmp_path / "data")
    with instance_for_test() as instance:
        first, stages = drive_once(campaign, instance, paths)
        assert stages == ["environments"] * 2 + ["prepare", "results"] + ["trials"] * 4
        assert first.report.variants["oracle"].resolved_rate == 1.0 and first.report.scored == 4
        assert (first.generation.computed, first.evaluation.computed) == (4, 4)

        again, stages = drive_once(campaign, instance, paths)
        assert stages == ["prepare", "results"], "Dagster's record and the store agree: nothing to run"

        shutil.rmtree(paths.artifacts / "evaluation")  # the store lost every final evaluation
        shutil.rmtree(paths.artifacts / "scored")
        regraded, stages = drive_once(campaign, instance, paths)
        assert stages == ["prepare", "results"] + ["trials"] * 4, "Dagster's record alone is not trusted"
        assert (regraded.generation.reused, regraded.evaluation.computed) == (4, 4), "patches are never lost"
        rates = [{name: (v.resolved_rate, v.n) for name, v in run.report.variants.items()} for run in (first, regraded)]
        assert rates[0] == rates[1]
        assert len(instance.get_materialized_partitions(AssetKey(["driven", "evaluation"]))) == 4
