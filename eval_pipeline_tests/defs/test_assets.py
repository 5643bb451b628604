"""The Dagster layer on a test instance: partitions, lineage, code versions, no regeneration."""

import pytest
from dagster import AssetCheckKey, AssetCheckSeverity, AssetKey, DagsterEventType, DagsterInstance, instance_for_test

from eval_pipeline.common.settings import Paths
from eval_pipeline.config.campaign import parse_campaign
from eval_pipeline.defs import build_definitions, stage_job_name
from eval_pipeline.defs.partitions import PartitionBatch, trial_run_key
from eval_pipeline.defs.verdicts import RESOLVED_CHECK
from eval_pipeline.grading.verdict import GRADING_VERSION
from eval_pipeline.trial.spec import GENERATION_VERSION
from eval_pipeline_tests.support.terminal_tasks import write_terminal_task

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
    assert failure.step_failure_data.user_failure_data.description.startswith("test_timeout: ")
    assert first_line_shown(failure.step_failure_data.error).startswith("test_timeout: "), "the outcome comes first"
    assert list((tmp_path / "data" / "artifacts" / "attempts").rglob("*.json")), "the failed attempt is kept"
    assert not (tmp_path / "data" / "artifacts" / "evaluation").exists(), "and is not final"


def test_assets_carry_the_core_code_versions(defs):
    versions = {}
    for name in ("generation", "evaluation"):
        assets_def = defs.resolve_assets_def(AssetKey(["small", name]))
        versions[name] = assets_def.code_versions_by_key[AssetKey(["small", name])]
    assert versions == {"generation": GENERATION_VERSION, "evaluation": GRADING_VERSION}


def first_line_shown(error) -> str:
    """What the UI shows first of a failed step or run: its error's first line, less the exception's class."""
    return error.message.splitlines()[0].partition(": ")[2]


def test_each_trial_partition_shows_its_verdict_and_a_failed_one_says_why_first(tmp_path, dagster_instance):
    """One batch (a partition range) of a resolved and an unresolved trial, and a trial whose grading fails:
    the check `resolved` passes, fails as a warning, and is left to Dagster's Execution Failed, partition by
    partition; the failed run's first line is the outcome and its detail."""
    write_terminal_task(
        tmp_path / "tasks",
        "answer",
        'if [ -f done ]; then echo 1; else echo 0; fi > "$EVAL_REWARD_FILE"\n',
        "touch done\n",
    )
    write_terminal_task(tmp_path / "tasks", "bad-reward", 'echo "not a number" > "$EVAL_REWARD_FILE"\n')
    campaign = parse_campaign(
        {
            "name": "small",
            "benchmark": {"kind": "terminal", "path": str(tmp_path / "tasks")},
            "variants": [{"name": "oracle", "agent": "oracle"}, {"name": "none", "agent": "null"}],
            "retries": {"max_retries": 0},
        },
        "test",
    )
    defs = build_definitions([campaign], Paths(tmp_path / "data"))
    assert run(defs, dagster_instance, "prepare", campaign).success
    for instance_id in ("answer", "bad-reward"):
        assert run(defs, dagster_instance, "environments", campaign, partition_key=instance_id).success
    batch = PartitionBatch("answer", ("oracle-s0", "none-s0"))
    assert run(defs, dagster_instance, "trials", campaign, tags=batch.range_tags()).success
    failed = run(defs, dagster_instance, "trials", campaign, partition_key=trial_run_key("bad-reward", "oracle-s0"))
    assert not failed.success

    check = AssetCheckKey(AssetKey(["small", "evaluation"]), RESOLVED_CHECK)
    records = {r.partition: r for r in dagster_instance.event_log_storage.get_asset_check_execution_history(check, 10)}
    assert {key: record.status.value for key, record in records.items()} == {
        "answer|oracle-s0": "SUCCEEDED",
        "answer|none-s0": "FAILED",
        "bad-reward|oracle-s0": "PLANNED",  # in a failed run: what Dagster shows as Execution Failed
    }
    unresolved = records["answer|none-s0"].evaluation
    assert unresolved.severity == AssetCheckSeverity.WARN and unresolved.description.startswith("unresolved")
    assert dagster_instance.get_run_by_id(records["bad-reward|oracle-s0"].run_id).status.value == "FAILURE"
    current = {
        info.partition_key: info.is_current
        for info in dagster_instance.event_log_storage.get_asset_check_partition_info([check])
    }
    assert current["answer|oracle-s0"] and current["answer|none-s0"], "each verdict is about its partition's evaluation"

    [step_failure] = dagster_instance.all_logs(failed.run_id, of_type=DagsterEventType.STEP_FAILURE)
    [run_failure] = dagster_instance.all_logs(failed.run_id, of_type=DagsterEventType.RUN_FAILURE)
    shown = first_line_shown(step_failure.dagster_event.step_failure_data.error)
    assert shown.startswith("grading_error: ") and len(shown) > len("grading_error: "), shown
    assert first_line_shown(run_failure.dagster_event.event_specific_data.error) == shown
