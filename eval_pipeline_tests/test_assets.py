"""The Dagster layer on a test instance: partitions, lineage, code versions, no regeneration."""

import pytest
from dagster import AssetKey, DagsterInstance, instance_for_test

from eval_pipeline.common.settings import Paths
from eval_pipeline.config.campaign import parse_campaign
from eval_pipeline.defs import build_definitions, stage_job_name
from eval_pipeline.defs.partitions import trial_run_key
from eval_pipeline.grading.verdict import GRADING_VERSION
from eval_pipeline.trial.spec import GENERATION_VERSION

CAMPAIGN = parse_campaign(
    {
        "name": "small",
        "benchmark": {"kind": "demo"},
        "variants": [{"name": "oracle", "agent": "oracle"}, {"name": "none", "agent": "null"}],
        "seeds": 1,
    },
    "test",
)
INSTANCE_ID = "eval-pipeline-demo__textkit-1"
LINEAGE = {"harness_version", "dataset_version", "agent_config_hash", "seed", "sandbox_backend", "resources"}


@pytest.fixture
def dagster_instance():
    with instance_for_test() as instance:
        yield instance


@pytest.fixture
def defs(tmp_path):
    return build_definitions([CAMPAIGN], Paths(tmp_path / "data"))


def run(defs, instance: DagsterInstance, stage: str, campaign=CAMPAIGN, **kwargs):
    job = defs.resolve_job_def(stage_job_name(campaign, stage))
    return job.execute_in_process(instance=instance, raise_on_error=False, **kwargs)


def latest(instance: DagsterInstance, name: str, partition: str | None = None):
    records = instance.fetch_materializations(AssetKey(["small", name]), limit=100).records
    matching = [r for r in records if partition is None or r.partition_key == partition]
    return matching[0].asset_materialization if matching else None


def materializations(instance: DagsterInstance, name: str) -> int:
    return len(instance.fetch_materializations(AssetKey(["small", name]), limit=1000).records)


def test_prepare_registers_instances_and_trials_as_partitions(defs, dagster_instance):
    result = run(defs, dagster_instance, "prepare")
    assert result.success
    benchmark = result.asset_value(AssetKey(["small", "dataset_snapshot"]))
    assert sorted(dagster_instance.get_dynamic_partitions("small__instances")) == sorted(
        i.instance_id for i in benchmark.instances
    )
    assert dagster_instance.get_dynamic_partitions("small__trials") == ["oracle-s0", "none-s0"]
    snapshot = latest(dagster_instance, "dataset_snapshot")
    assert snapshot.tags["dagster/data_version"] == benchmark.version


def test_a_trial_materializes_with_lineage_and_evaluation_never_regenerates(defs, dagster_instance, tmp_path):
    assert run(defs, dagster_instance, "prepare").success
    assert run(defs, dagster_instance, "environments", partition_key=INSTANCE_ID).success
    key = trial_run_key(INSTANCE_ID, "oracle-s0")
    first = run(defs, dagster_instance, "trials", partition_key=key)
    assert first.success
    evaluation = latest(dagster_instance, "evaluation", str(key))
    generation = latest(dagster_instance, "generation", str(key))
    assert evaluation.metadata["outcome"].value == "resolved"
    assert list(evaluation.metadata)[0] == "outcome", "the verdict is the first thing a partition shows"
    assert (
        list(generation.metadata)[:1] == ["trial_outcome"] and generation.metadata["trial_outcome"].value == "resolved"
    )
    assert LINEAGE <= set(evaluation.metadata) and LINEAGE <= set(generation.metadata)
    assert (
        evaluation.metadata["resources"].value["requested"]["memory_ceiling_mb"] == CAMPAIGN.resources.memory_ceiling_mb
    )

    artifact = tmp_path / "data" / "artifacts" / generation.metadata["artifact"].value
    written = artifact.stat().st_mtime_ns
    assert run(defs, dagster_instance, "trials", partition_key=key).success
    assert latest(dagster_instance, "generation", str(key)).metadata["reused"].value is True, "it was regenerated"
    assert latest(dagster_instance, "evaluation", str(key)).metadata["reused"].value is True
    assert artifact.stat().st_mtime_ns == written


def test_an_unscored_outcome_fails_the_partition_and_keeps_the_attempt(tmp_path, dagster_instance):
    impatient = parse_campaign(
        {
            "name": "small",
            "benchmark": {"kind": "demo"},
            "variants": [{"name": "oracle", "agent": "oracle"}],
            "timeouts": {"tests_s": 0.05},
        },
        "test",
    )
    defs = build_definitions([impatient], Paths(tmp_path / "data"))
    assert run(defs, dagster_instance, "prepare", impatient).success
    assert run(defs, dagster_instance, "environments", impatient, partition_key=INSTANCE_ID).success
    result = run(defs, dagster_instance, "trials", impatient, partition_key=trial_run_key(INSTANCE_ID, "oracle-s0"))
    assert not result.success
    failure = result.get_step_failure_events()[0]
    assert "timeout" in failure.step_failure_data.user_failure_data.description
    assert list((tmp_path / "data" / "artifacts" / "attempts").rglob("*.json")), "the failed attempt is kept"
    assert not (tmp_path / "data" / "artifacts" / "evaluation").exists(), "and is not final"


def test_assets_carry_the_core_code_versions(defs):
    versions = {}
    for name in ("generation", "evaluation"):
        assets_def = defs.resolve_assets_def(AssetKey(["small", name]))
        versions[name] = assets_def.code_versions_by_key[AssetKey(["small", name])]
    assert versions == {"generation": GENERATION_VERSION, "evaluation": GRADING_VERSION}
