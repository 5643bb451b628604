"""A campaign's automation: the nightly schedule, and the sensor that retries infrastructure failures.

- `<campaign>__campaign_job` runs the whole campaign the way `eval-pipeline run`
  does: prepare, build missing environments, run every trial partition not
  yet done (one Dagster run each, in worker processes), then results and
  report. It resumes: finished trials cost a lookup. A campaign with a
  `nightly:` section gets `<campaign>__nightly`, a schedule of that job.
- `<campaign>__infrastructure_retries` watches failed trial runs. When a run
  failed because a step ended in an infrastructure outcome after its in-run
  retries (a long engine outage, say), it requests the partition again, at most
  `retries.max_rerequests` times per partition; agent outcomes and grading
  errors are never re-requested.
"""

from typing import Any

from dagster import (
    AssetKey,
    Config,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    JobDefinition,
    OpExecutionContext,
    RunFailureSensorContext,
    RunRequest,
    ScheduleDefinition,
    SensorDefinition,
    SkipReason,
    job,
    op,
    run_failure_sensor,
)

from eval_pipeline.campaign import Campaign
from eval_pipeline.defs.assets import failure_outcomes
from eval_pipeline.defs.partitions import INSTANCE, TRIAL, trial_run_key
from eval_pipeline.defs.resources import EvalPipelineResource

REREQUEST_TAG = "eval_pipeline/rerequest"
TRIGGER_TAG = "eval_pipeline/trigger"
# How often the retry sensor looks at failed runs: a re-request waits up to this long, past the in-run backoff.
RETRY_SENSOR_INTERVAL_S = 30


class CampaignRunConfig(Config):
    workers: int = 2


def campaign_job(campaign: Campaign) -> JobDefinition:
    @op(name=f"{campaign.name}__run_campaign")
    def run_whole_campaign(
        context: OpExecutionContext, config: CampaignRunConfig, eval_pipeline: EvalPipelineResource
    ) -> dict[str, Any]:
        """Bring every trial of the campaign up to date, then write its results and report."""
        from eval_pipeline.defs import build_definitions  # this module is part of what it builds
        from eval_pipeline.runner import run_campaign

        defs = build_definitions([campaign], eval_pipeline.paths)
        run = run_campaign(campaign, defs, context.instance, progress=context.log.info, workers=config.workers)
        summary = run.as_json()
        context.add_output_metadata({"planned": summary["planned"], "scored": summary["scored"]})
        return summary

    @job(name=f"{campaign.name}__campaign_job", description=f"Run or resume the whole campaign {campaign.name}.")
    def whole_campaign() -> None:
        run_whole_campaign()

    return whole_campaign


def nightly_schedule(campaign: Campaign, job_def: JobDefinition) -> ScheduleDefinition | None:
    nightly = campaign.nightly
    if nightly is None:
        return None
    return ScheduleDefinition(
        name=f"{campaign.name}__nightly",
        cron_schedule=nightly.cron,
        execution_timezone=nightly.timezone,
        job=job_def,
        run_config={"ops": {f"{campaign.name}__run_campaign": {"config": {"workers": nightly.workers}}}},
        tags={TRIGGER_TAG: "nightly"},
        default_status=DefaultScheduleStatus.RUNNING,
        description=f"Bring the campaign {campaign.name} up to date every night ({nightly.cron}, {nightly.timezone}).",
    )


def infrastructure_retry_sensor(campaign: Campaign, trials_job: JobDefinition) -> SensorDefinition:
    trial_assets = {AssetKey([campaign.name, "generation"]), AssetKey([campaign.name, "evaluation"])}

    @run_failure_sensor(
        name=f"{campaign.name}__infrastructure_retries",
        request_job=trials_job,
        minimum_interval_seconds=RETRY_SENSOR_INTERVAL_S,
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
