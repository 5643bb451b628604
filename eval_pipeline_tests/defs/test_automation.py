"""The nightly schedule and the infrastructure-retry sensor, through Dagster's own test contexts."""

import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from dagster import (
    AssetKey,
    DagsterEventType,
    SkipReason,
    build_run_status_sensor_context,
    build_schedule_context,
    build_sensor_context,
    instance_for_test,
)

# Test set-up only: Dagster exports no way to record a backfill but through its GraphQL API.
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemotePartitionSetOrigin, RemoteRepositoryOrigin

from eval_pipeline.common.settings import Paths
from eval_pipeline.config.campaign import parse_campaign
from eval_pipeline.defs import build_definitions, stage_job_name
from eval_pipeline.defs.automation import REREQUEST_TAG
from eval_pipeline.defs.partitions import trial_run_key
from eval_pipeline.defs.stages import STAGE_TAG, TRIGGER_TAG
from eval_pipeline.orchestration.run_workers import execute_request
from eval_pipeline_tests.support.terminal_tasks import write_terminal_task

INSTANCE_ID = "eval-pipeline-demo__textkit-1"


@pytest.fixture
def dagster_instance():
    with instance_for_test() as instance:
        yield instance


def campaign_of(**fields):
    return parse_campaign(
        {"name": "small", "benchmark": {"kind": "demo"}, "variants": [{"name": "oracle", "agent": "oracle"}], **fields},
        "test",
    )


def test_only_a_campaign_with_nightly_gets_a_schedule(tmp_path):
    assert build_definitions([campaign_of()], Paths(tmp_path)).schedules == []


@pytest.mark.slow
def test_the_nightly_schedule_starts_a_cycle_that_the_sensor_carries_through_and_resumes_the_next_night(
    tmp_path, dagster_instance
):
    policy = tmp_path / "staging.yaml"
    policy.write_text("environment: staging\ncandidate: oracle\nfloors: {'*': 0.9}\n")
    campaign = campaign_of(nightly={"cron": "30 3 * * *", "timezone": "Europe/Berlin"}, gates=[str(policy)])
    defs = build_definitions([campaign], Paths(tmp_path / "data"))
    schedule = defs.resolve_schedule_def("small__nightly")
    sensor = defs.resolve_sensor_def("small__nightly_progress")
    assert (schedule.cron_schedule, schedule.execution_timezone) == ("30 3 * * *", "Europe/Berlin")

    def night(day: int) -> list[str]:
        """The night's runs as the daemon would launch them: the schedule's, then the sensor's until it skips."""
        tick = datetime(2026, 11, day, 3, 30, tzinfo=ZoneInfo("Europe/Berlin"))
        [request] = schedule.evaluate_tick(
            build_schedule_context(instance=dagster_instance, scheduled_execution_time=tick)
        ).run_requests
        assert request.tags[TRIGGER_TAG] == "nightly"
        request = request.with_replaced_attrs(job_name=schedule.job_name)
        stages = [
            dagster_instance.get_run_by_id(execute_request(defs, dagster_instance, request, None)).tags[STAGE_TAG]
        ]
        while not isinstance(result := sensor(build_sensor_context(instance=dagster_instance)), SkipReason):
            for request in result.run_requests:
                run = dagster_instance.get_run_by_id(execute_request(defs, dagster_instance, request, None))
                stages.append(run.tags[STAGE_TAG])
        assert "is done" in result.skip_message
        return stages

    first = night(22)
    assert first == ["prepare", *["environments"] * 8, *["trials"] * 8, "results", "release"]
    evaluated = dagster_instance.get_materialized_partitions(AssetKey(["small", "evaluation"]))
    assert len(evaluated) == 8, "each trial is its own partition run, recorded in the instance"
    decision = dagster_instance.get_latest_materialization_event(AssetKey(["small", "release_decision"]))
    assert decision.asset_materialization.metadata["promote"].value is True, "every gate passed: a release"

    assert night(23) == ["prepare", "results", "release"], "the next night only resumes: nothing is run again"


def sensor_context(instance, run_id: str, sensor_name: str):
    failure = instance.get_records_for_run(run_id, of_type=DagsterEventType.RUN_FAILURE).records[0]
    return build_run_status_sensor_context(
        sensor_name=sensor_name,
        dagster_event=failure.event_log_entry.dagster_event,
        dagster_instance=instance,
        dagster_run=instance.get_run_by_id(run_id),
    ).for_run_failure()


def run_trial(defs, campaign, instance, instance_id: str, tags=None):
    for stage, partition in (("prepare", None), ("environments", instance_id)):
        job = defs.resolve_job_def(stage_job_name(campaign, stage))
        assert job.execute_in_process(instance=instance, partition_key=partition).success
    job = defs.resolve_job_def(stage_job_name(campaign, "trials"))
    return job.execute_in_process(
        instance=instance, partition_key=trial_run_key(instance_id, "oracle-s0"), tags=tags, raise_on_error=False
    )


def evaluation_attempts(tmp_path) -> int:
    return sum(
        1 for path in (tmp_path / "data" / "artifacts" / "attempts").rglob("*.json") if "evaluation" in path.read_text()
    )


def test_the_sensor_requests_an_infrastructure_failure_again_up_to_its_bound(tmp_path, dagster_instance):
    campaign = campaign_of(timeouts={"tests_s": 0.05}, retries={"max_retries": 1, "delay_s": 0, "max_rerequests": 1})
    defs = build_definitions([campaign], Paths(tmp_path / "data"))
    sensor = defs.resolve_sensor_def("small__infrastructure_retries")

    failed = run_trial(defs, campaign, dagster_instance, INSTANCE_ID)
    assert not failed.success
    assert evaluation_attempts(tmp_path) == 2, "the trial was tried once more within the run, and both are kept"
    requests = list(sensor(sensor_context(dagster_instance, failed.run_id, sensor.name)))
    assert [request.partition_key for request in requests] == [trial_run_key(INSTANCE_ID, "oracle-s0")]
    assert requests[0].tags[REREQUEST_TAG] == "1"

    again = run_trial(defs, campaign, dagster_instance, INSTANCE_ID, tags=requests[0].tags)
    assert not again.success
    (verdict,) = sensor(sensor_context(dagster_instance, again.run_id, sensor.name))
    assert isinstance(verdict, SkipReason) and "the most allowed" in verdict.skip_message


def test_the_sensor_never_requests_a_grading_error_again(tmp_path, dagster_instance):
    write_terminal_task(tmp_path / "tasks", "bad-reward", 'echo "not a number" > "$EVAL_REWARD_FILE"\n')
    campaign = parse_campaign(
        {
            "name": "small",
            "benchmark": {"kind": "terminal", "path": str(tmp_path / "tasks")},
            "variants": [{"name": "oracle", "agent": "oracle"}],
            "retries": {"max_retries": 2, "delay_s": 0},
        },
        "test",
    )
    defs = build_definitions([campaign], Paths(tmp_path / "data"))
    failed = run_trial(defs, campaign, dagster_instance, "bad-reward")
    assert not failed.success
    assert evaluation_attempts(tmp_path) == 1, "a grading error is not retried within the run"
    sensor = defs.resolve_sensor_def("small__infrastructure_retries")
    (verdict,) = sensor(sensor_context(dagster_instance, failed.run_id, sensor.name))
    assert isinstance(verdict, SkipReason) and "grading_error" in verdict.skip_message


def backfill_of(defs, instance, backfill_id: str, partitions: list[str]) -> PartitionBackfill:
    """An asset backfill of the trial assets over `partitions`, as the UI's "Launch backfill" records one."""
    return PartitionBackfill.from_asset_partitions(
        backfill_id=backfill_id,
        asset_graph=defs.resolve_asset_graph(),
        partition_names=partitions,
        asset_selection=[AssetKey(["small", "generation"]), AssetKey(["small", "evaluation"])],
        backfill_timestamp=time.time(),
        tags={},
        dynamic_partitions_store=instance,
        all_partitions=False,
        title=None,
        description=None,
        run_config=None,
    )


def job_backfill_of(backfill_id: str, job_name: str, partitions: list[str]) -> PartitionBackfill:
    """A backfill of a partitioned job over `partitions` (as `dagster job backfill` records one)."""
    location = RegisteredCodeLocationOrigin(location_name="eval_pipeline")
    repository = RemoteRepositoryOrigin(code_location_origin=location, repository_name="__repository__")
    return PartitionBackfill(
        backfill_id=backfill_id,
        status=BulkActionStatus.REQUESTED,
        from_failure=False,
        tags={},
        backfill_timestamp=time.time(),
        partition_set_origin=RemotePartitionSetOrigin(
            repository_origin=repository, partition_set_name=f"{job_name}_partition_set"
        ),
        partition_names=partitions,
    )


def test_the_sensor_leaves_a_partition_to_a_backfill_in_progress_but_not_to_the_failed_runs_own(
    tmp_path, dagster_instance
):
    campaign = campaign_of(timeouts={"tests_s": 0.05}, retries={"max_retries": 0, "delay_s": 0, "max_rerequests": 3})
    defs = build_definitions([campaign], Paths(tmp_path / "data"))
    sensor = defs.resolve_sensor_def("small__infrastructure_retries")
    key = str(trial_run_key(INSTANCE_ID, "oracle-s0"))
    failed = run_trial(defs, campaign, dagster_instance, INSTANCE_ID)
    assert not failed.success

    users = backfill_of(defs, dagster_instance, "users", [key])
    dagster_instance.add_backfill(users)
    (verdict,) = sensor(sensor_context(dagster_instance, failed.run_id, sensor.name))
    assert isinstance(verdict, SkipReason) and "a backfill in progress runs them" in verdict.skip_message

    own = run_trial(defs, campaign, dagster_instance, INSTANCE_ID, tags={"dagster/backfill": "users"})
    assert not own.success
    requests = list(sensor(sensor_context(dagster_instance, own.run_id, sensor.name)))
    assert [r.partition_key for r in requests] == [key], "its own backfill has tried it already"

    dagster_instance.update_backfill(users.with_status(BulkActionStatus.COMPLETED_FAILED))
    requests = list(sensor(sensor_context(dagster_instance, failed.run_id, sensor.name)))
    assert [r.partition_key for r in requests] == [key], "a finished backfill covers nothing"

    dagster_instance.add_backfill(job_backfill_of("of-the-job", stage_job_name(campaign, "trials"), [key]))
    (verdict,) = sensor(sensor_context(dagster_instance, failed.run_id, sensor.name))
    assert isinstance(verdict, SkipReason), "a backfill of the trials job covers its partitions too"
