"""A campaign's automation: the nightly schedule, the sensor that carries a night's pass through, and the
sensor that retries infrastructure failures. Dagster launches every run; nothing here executes runs itself.

- `<campaign>__nightly` (a campaign with a `nightly:` section) requests the
  campaign's prepare run, which starts a cycle named after the night.
- `<campaign>__nightly_progress` then requests, tick by tick, what that cycle
  still needs (`progress.next_step`: missing environments, trial partitions not
  yet evaluated, then results and report, then the release decision), each
  partition at most once per cycle. Finished trials are never run again.
- `<campaign>__infrastructure_retries` watches failed trial runs. When a run
  left trial partitions failed on an infrastructure outcome after their in-run
  retries (a long engine outage, say), it requests each of them again, at most
  `retries.max_rerequests` times per partition; agent outcomes and grading
  errors are never re-requested, nor a partition that a backfill still in
  progress targets (a user's "backfill failed partitions", say): that
  backfill runs it, and a run of the sensor's would race it.
"""

from collections.abc import Iterator, Set
from typing import TYPE_CHECKING

from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRunStatus,
    DefaultScheduleStatus,
    DefaultSensorStatus,
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

from eval_pipeline.config.campaign import Campaign
from eval_pipeline.defs.failures import failure_outcomes
from eval_pipeline.defs.progress import Cycle, next_step
from eval_pipeline.defs.stages import CYCLE_TAG, TRIGGER_TAG

if TYPE_CHECKING:  # what define_asset_job returns, a type Dagster does not export
    from eval_pipeline.defs.dagster_internals import UnresolvedAssetJobDefinition

REREQUEST_TAG = "eval_pipeline/rerequest"
BACKFILL_TAG = "dagster/backfill"  # the backfill a run belongs to
# The status of a backfill whose runs are still being requested or run (BulkActionStatus.REQUESTED, which Dagster
# does not export); any other status is over or being cancelled.
BACKFILL_IN_PROGRESS = "REQUESTED"
NIGHTLY = "nightly"
# How often the sensors look: a re-request waits up to this long past the in-run backoff, a night's next stage too.
SENSOR_INTERVAL_S = 30


def nightly_schedule(campaign: Campaign, prepare_job: "UnresolvedAssetJobDefinition") -> ScheduleDefinition | None:
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


def campaign_sensor(campaign: Campaign, jobs: dict[str, "UnresolvedAssetJobDefinition"]) -> SensorDefinition:
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


def backfilled_partitions(
    instance: DagsterInstance, asset_keys: Set[AssetKey], job_name: str, but: str | None = None
) -> set[str]:
    """The partitions of `asset_keys` (an asset backfill) or of the job `job_name` (a job backfill) that
    backfills in progress target, but those of the backfill `but` (a failed run's own, which does not try a
    partition twice)."""
    targeted: set[str] = set()
    for backfill in instance.get_backfills():
        if backfill.status.value != BACKFILL_IN_PROGRESS or backfill.backfill_id == but:
            continue
        if backfill.asset_backfill_data is not None:
            subsets = backfill.asset_backfill_data.target_subset.partitions_subsets_by_asset_key
            targeted |= {
                str(key) for asset_key in asset_keys & subsets.keys() for key in subsets[asset_key].get_partition_keys()
            }
        elif backfill.job_name == job_name:
            targeted |= set(backfill.partition_names or ())
    return targeted


def infrastructure_retry_sensor(campaign: Campaign, trials_job: "UnresolvedAssetJobDefinition") -> SensorDefinition:
    trial_assets = {AssetKey([campaign.name, "generation"]), AssetKey([campaign.name, "evaluation"])}

    @run_failure_sensor(
        name=f"{campaign.name}__infrastructure_retries",
        request_job=trials_job,
        minimum_interval_seconds=SENSOR_INTERVAL_S,
        default_status=DefaultSensorStatus.RUNNING,
        description="Request a trial partition again when its run left it failed on an infrastructure outcome.",
    )
    def retry_infrastructure_failures(context: RunFailureSensorContext) -> Iterator[RunRequest | SkipReason]:
        run = context.dagster_run
        if run.job_name != trials_job.name and not (run.asset_selection or set()) & trial_assets:
            yield SkipReason(f"run {run.run_id} is not a trial run of {campaign.name}")
            return
        outcomes = failure_outcomes(context.get_step_failure_events())
        retried = [key for key, outcome in outcomes.items() if outcome.is_retried]
        previous = int(run.tags.get(REREQUEST_TAG, 0))
        if not retried:
            yield SkipReason(
                f"run {run.run_id} failed on {sorted({o.value for o in outcomes.values()})}: not infrastructure"
            )
        elif previous >= campaign.retries.max_rerequests:
            yield SkipReason(f"{retried}: requested again {previous} times already, the most allowed")
        else:
            own_backfill = run.tags.get(BACKFILL_TAG)
            covered = backfilled_partitions(context.instance, trial_assets, trials_job.name, own_backfill)
            requested = [key for key in retried if key not in covered]
            if not requested:
                yield SkipReason(f"{retried}: a backfill in progress runs them")
            for key in requested:
                yield RunRequest(
                    run_key=f"{run.run_id}-rerequest-{key}",
                    partition_key=key,
                    tags={REREQUEST_TAG: str(previous + 1), TRIGGER_TAG: "infrastructure_retry"},
                )

    return retry_infrastructure_failures
