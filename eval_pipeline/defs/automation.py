"""A campaign's automation: the nightly schedule, the sensor that carries a night's pass through, and the
sensor that retries infrastructure failures. Dagster launches every run; nothing here executes runs itself.

- `<campaign>__nightly` (a campaign with a `nightly:` section) requests the
  campaign's prepare run, which starts a cycle named after the night.
- `<campaign>__nightly_progress` then requests, tick by tick, what that cycle
  still needs (`progress.next_step`: missing environments, trial partitions not
  yet evaluated, then results and report, then the release decision), each
  partition at most once per cycle. Finished trials are never run again.
- `<campaign>__infrastructure_retries` watches failed trial runs. When a run
  failed because a step ended in an infrastructure outcome after its in-run
  retries (a long engine outage, say), it requests the partition again, at most
  `retries.max_rerequests` times per partition; agent outcomes and grading
  errors are never re-requested.
"""

from dagster import (
    AssetKey,
    DagsterRunStatus,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    JobDefinition,
    RunFailureSensorContext,
    RunRequest,
    RunsFilter,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    run_failure_sensor,
    schedule,
    sensor,
)

from eval_pipeline.campaign import Campaign
from eval_pipeline.defs.failures import failure_outcomes
from eval_pipeline.defs.partitions import INSTANCE, TRIAL, trial_run_key
from eval_pipeline.defs.progress import Cycle, next_step
from eval_pipeline.defs.stages import CYCLE_TAG, TRIGGER_TAG

REREQUEST_TAG = "eval_pipeline/rerequest"
NIGHTLY = "nightly"
# How often the sensors look: a re-request waits up to this long past the in-run backoff, a night's next stage too.
SENSOR_INTERVAL_S = 30


def nightly_schedule(campaign: Campaign, prepare_job: JobDefinition) -> ScheduleDefinition | None:
    nightly = campaign.nightly
    if nightly is None:
        return None

    @schedule(
        name=f"{campaign.name}__nightly",
        cron_schedule=nightly.cron,
        execution_timezone=nightly.timezone,
        job=prepare_job,
        default_status=DefaultScheduleStatus.RUNNING,
        description=f"Bring the campaign {campaign.name} up to date every night ({nightly.cron}, {nightly.timezone}).",
    )
    def start_nightly_cycle(context: ScheduleEvaluationContext) -> RunRequest:
        night = context.scheduled_execution_time.isoformat()
        return RunRequest(run_key=night, tags={TRIGGER_TAG: NIGHTLY, CYCLE_TAG: f"{NIGHTLY}-{night}"})

    return start_nightly_cycle


def campaign_sensor(campaign: Campaign, jobs: dict[str, JobDefinition]) -> SensorDefinition:
    """Carries the latest night's cycle through its stages once its prepare run has succeeded."""
    prepare_job = jobs["prepare"]

    @sensor(
        name=f"{campaign.name}__nightly_progress",
        jobs=list(jobs.values()),
        minimum_interval_seconds=SENSOR_INTERVAL_S,
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Request what the latest nightly pass over {campaign.name} still needs, stage by stage.",
    )
    def advance_nightly_cycle(context: SensorEvaluationContext) -> SensorResult | SkipReason:
        started = context.instance.get_runs(RunsFilter(job_name=prepare_job.name, tags={TRIGGER_TAG: NIGHTLY}), limit=1)
        if not started or started[0].status != DagsterRunStatus.SUCCESS:
            return SkipReason("no nightly cycle has prepared its dataset yet")
        cycle = Cycle(campaign, started[0].tags[CYCLE_TAG], NIGHTLY)
        step = next_step(context.instance, cycle)
        if step.done:
            return SkipReason(f"cycle {cycle.id} is done")
        if not step.requests:
            return SkipReason(f"cycle {cycle.id}: waiting for its runs in flight")
        return SensorResult(run_requests=step.requests)

    return advance_nightly_cycle


def infrastructure_retry_sensor(campaign: Campaign, trials_job: JobDefinition) -> SensorDefinition:
    trial_assets = {AssetKey([campaign.name, "generation"]), AssetKey([campaign.name, "evaluation"])}

    @run_failure_sensor(
        name=f"{campaign.name}__infrastructure_retries",
        request_job=trials_job,
        minimum_interval_seconds=SENSOR_INTERVAL_S,
        default_status=DefaultSensorStatus.RUNNING,
        description="Request a trial partition again when its run failed on an infrastructure outcome.",
    )
    def retry_infrastructure_failures(context: RunFailureSensorContext) -> RunRequest | SkipReason:
        run = context.dagster_run
        tags = run.tags
        partition = (tags.get(f"dagster/partition/{INSTANCE}"), tags.get(f"dagster/partition/{TRIAL}"))
        ours = run.job_name == trials_job.name or bool((run.asset_selection or set()) & trial_assets)
        if not ours or None in partition:
            return SkipReason(f"run {run.run_id} is not a trial run of {campaign.name}")
        outcomes = failure_outcomes(context.get_step_failure_events())
        if not outcomes or not all(outcome.is_retried for outcome in outcomes):
            return SkipReason(f"run {run.run_id} failed on {[o.value for o in outcomes]}: not infrastructure")
        previous = int(tags.get(REREQUEST_TAG, 0))
        if previous >= campaign.retries.max_rerequests:
            return SkipReason(f"{partition}: requested again {previous} times already, the most allowed")
        return RunRequest(
            run_key=f"{run.run_id}-rerequest",
            partition_key=trial_run_key(*partition),
            tags={REREQUEST_TAG: str(previous + 1), TRIGGER_TAG: "infrastructure_retry"},
        )

    return retry_infrastructure_failures
