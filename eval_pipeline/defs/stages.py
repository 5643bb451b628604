"""A campaign's stages: the jobs that materialize its assets, in the order a campaign runs them.

Kept apart from the definitions so that what only needs the names (the instance
settings, the run drivers) does not import the asset graph.
"""

from eval_pipeline.config.campaign import Campaign

# Each stage is a job of the campaign's assets, run in this order.
STAGES = {
    "prepare": ["dataset_snapshot", "trial_plan"],
    "environments": ["environment_image", "environment"],
    "trials": ["generation", "evaluation"],
    "results": ["results", "report"],
}
ENVIRONMENTS = "environments"  # the stage that prepares each instance's environment (its image, its pod)
TRIALS = "trials"  # the stage that runs trials: each generation and its evaluation
RELEASE_STAGE = "release"  # the report's gate checks and the release decision, for a campaign with gates
# `eval-pipeline validate`: each instance's validation and its check (by partition), then the validation report;
# each stage is the one asset it is named after.
VALIDATION_STAGE, VALIDATION_REPORT_STAGE = "validation", "validation_report"
STAGE_TAG = "eval_pipeline/stage"  # dagster.yaml limits how many runs of each stage run at once
# Every run a driver (the CLI, the nightly automation) requests for one pass over a campaign carries the pass's id.
CYCLE_TAG = "eval_pipeline/cycle"
TRIGGER_TAG = "eval_pipeline/trigger"  # what requested a run: cli, nightly, infrastructure_retry


def stage_job_name(campaign: Campaign, stage: str) -> str:
    return f"{campaign.name}__{stage}_job"
