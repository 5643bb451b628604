"""A campaign's assets. Each function is short: the work is in the plain core modules.

dataset_snapshot -> environment[instance] -> generation[instance x trial]
                                          -> evaluation[instance x trial] -> results -> report
trial_plan registers the trial partitions from the campaign file. Instance
validation (validation[instance], validation_report) is in defs/validation.py.
"""

from pathlib import Path
from typing import Any, Literal

from dagster import (
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetsDefinition,
    Backoff,
    DataVersion,
    Jitter,
    MetadataValue,
    MultiToSingleDimensionPartitionMapping,
    Output,
    RetryPolicy,
    asset,
)

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.artifacts import ArtifactStore
from eval_pipeline.campaign import Campaign, Trial
from eval_pipeline.dataset_sources import load_portfolio, write_snapshot
from eval_pipeline.defs.failures import outcome_failure
from eval_pipeline.defs.partitions import INSTANCE, TRIAL, CampaignPartitions, sync_partitions
from eval_pipeline.defs.resources import EvalPipelineResource
from eval_pipeline.environments import environment_attempt
from eval_pipeline.evaluation import Evaluation, evaluate
from eval_pipeline.generation import GENERATION_VERSION, Generation, generate
from eval_pipeline.grading import GRADING_VERSION
from eval_pipeline.hashing import stable_hash
from eval_pipeline.html_report import write_html_report
from eval_pipeline.markdown_report import render_markdown
from eval_pipeline.outcomes import InfrastructureError
from eval_pipeline.portfolio import Portfolio
from eval_pipeline.report import build_report, write_report
from eval_pipeline.report_model import REPORT_SCHEMA_VERSION, Report
from eval_pipeline.results import collect_warehouse, read_results_table, read_validation_table, write_warehouse
from eval_pipeline.sandbox import EnvironmentHandle, ResourceLimits, SandboxBackend
from eval_pipeline.sandbox.local import ENVIRONMENT_LAYOUT_VERSION
from eval_pipeline.sandbox.pod_manifest import pod_resources
from eval_pipeline.tasks import Task
from eval_pipeline.validation import VALIDATION_FILE, read_validation

# Code versions of the assets whose logic has no version of its own in the core.
SNAPSHOT_CODE_VERSION = "1"
PLAN_CODE_VERSION = "1"
RESULTS_CODE_VERSION = "4"
IMAGE_CODE_VERSION = "1"
# Concurrency pools (limits per Dagster instance: dagster.yaml, or `dagster instance concurrency set`).
ENVIRONMENT_POOL = "eval_pipeline_environments"  # image builds and environment pods started at once
MODEL_API_POOL = "eval_pipeline_model_api"  # agents running at once, each calling a model API


def lineage_metadata(portfolio: Portfolio, sandbox: SandboxBackend) -> dict[str, Any]:
    """What every materialization of a campaign's asset records: versions, sandbox and resources."""
    return {
        "harness_version": HARNESS_VERSION,
        "dataset_version": portfolio.version,
        "sandbox_backend": sandbox.name,
        "resources": MetadataValue.json(sandbox.resources_record()),
    }


def _trial_lineage(
    portfolio: Portfolio,
    sandbox: SandboxBackend,
    trial: Trial,
    agent_config_hash: str,
    environment: EnvironmentHandle,
) -> dict[str, Any]:
    return {
        **lineage_metadata(portfolio, sandbox),
        "slice": portfolio.slice_of(environment.instance_id),
        "environment": MetadataValue.json({"key": environment.key, **environment.details}),
        "variant": trial.variant.name,
        "agent": trial.variant.agent,
        "agent_config_hash": agent_config_hash,
        "seed": trial.seed,
    }


EnvironmentWork = Literal["build", "prepare"]


def prepare_environment(
    sandbox: SandboxBackend, portfolio: Portfolio, store: ArtifactStore, instance: Task, work: EnvironmentWork
) -> dict[str, Any] | EnvironmentHandle:
    """Build the instance's environment's image (`build`) or start the environment (`prepare`), keeping an
    infrastructure failure as an attempt at the environment before it is raised."""
    spec = portfolio.environment_for(instance)
    key = sandbox.environment_key(instance, spec)
    step = sandbox.build if work == "build" else sandbox.prepare
    with environment_attempt(store, instance.instance_id, key):
        return step(instance, spec, portfolio.source_for(instance))


K8S_CONFIG_TAG = "dagster-k8s/config"


def kubernetes_step_tags(limits: ResourceLimits) -> dict[str, Any]:
    """Tags that size a trial step's pod on Kubernetes (k8s_job_executor or K8sRunLauncher):
    its request is the task's floor and its limit the ceiling, as for an environment pod."""
    return {K8S_CONFIG_TAG: {"container_config": {"resources": pod_resources(limits)}}}


def build_campaign_assets(campaign: Campaign, partitions: CampaignPartitions) -> list[AssetsDefinition]:
    prefix = [campaign.name]
    snapshot_in = AssetIn(key=AssetKey([*prefix, "dataset_snapshot"]))  # loaded as `portfolio`
    environment_in = AssetIn(
        key=AssetKey([*prefix, "environment"]),
        partition_mapping=MultiToSingleDimensionPartitionMapping(partition_dimension_name=INSTANCE),
    )
    common = {"key_prefix": prefix, "group_name": campaign.name}
    retry_policy = RetryPolicy(
        max_retries=campaign.retries.max_retries,
        delay=campaign.retries.delay_s,
        backoff=Backoff.EXPONENTIAL,
        jitter=Jitter.PLUS_MINUS,
    )

    def partition_of(context: AssetExecutionContext, portfolio: Portfolio) -> tuple[Task, Trial]:
        keys = context.partition_key.keys_by_dimension
        return portfolio.instance(keys[INSTANCE]), campaign.trial(keys[TRIAL])

    @asset(**common, code_version=SNAPSHOT_CODE_VERSION)
    def dataset_snapshot(context: AssetExecutionContext, eval_pipeline: EvalPipelineResource) -> Output[Portfolio]:
        """Every slice's rows as evaluated, less the instances the campaign excludes; the hash of their content
        is the data version."""
        portfolio = load_portfolio(campaign.slices, eval_pipeline.paths).excluding(campaign.exclude)
        snapshots = {
            name: eval_pipeline.publish(write_snapshot(benchmark, eval_pipeline.paths.snapshots))
            for name, benchmark in portfolio.slices.items()
        }
        return Output(
            portfolio,
            data_version=DataVersion(portfolio.version),
            metadata={
                **sync_partitions(context, partitions.instances, [i.instance_id for i in portfolio.instances]),
                "instances": len(portfolio.instances),
                "slices": MetadataValue.json({name: len(b.instances) for name, b in portfolio.slices.items()}),
                "quarantined": len(portfolio.quarantined),
                "excluded": len(portfolio.excluded),
                "quarantined_rows": MetadataValue.md("\n".join(f"- {p}" for p in portfolio.quarantined) or "none"),
                "snapshots": MetadataValue.json(snapshots),
                "harness_version": HARNESS_VERSION,
                "dataset_version": portfolio.version,
            },
        )

    @asset(**common, code_version=PLAN_CODE_VERSION)
    def trial_plan(context: AssetExecutionContext) -> Output[list[str]]:
        """The campaign's trials (variant x seed), registered as partitions."""
        keys = [trial.key for trial in campaign.trials]
        return Output(
            keys,
            data_version=DataVersion(campaign.plan_version),
            metadata={"trials": len(keys), **sync_partitions(context, partitions.trials, keys)},
        )

    def environment_step(
        portfolio: Portfolio, eval_pipeline: EvalPipelineResource, instance: Task, work: EnvironmentWork
    ) -> tuple[SandboxBackend, Any]:
        """`prepare_environment` with its infrastructure failures typed as the step's."""
        sandbox = eval_pipeline.sandbox(campaign, instance)
        try:
            return sandbox, prepare_environment(sandbox, portfolio, eval_pipeline.artifact_store(), instance, work)
        except InfrastructureError as error:
            raise outcome_failure(
                f"{instance.instance_id}: {error}", error.outcome, lineage_metadata(portfolio, sandbox)
            ) from error

    @asset(
        **common,
        partitions_def=partitions.instances,
        ins={"portfolio": snapshot_in},
        code_version=IMAGE_CODE_VERSION,
        retry_policy=retry_policy,
        pool=ENVIRONMENT_POOL,
    )
    def environment_image(
        context: AssetExecutionContext, portfolio: Portfolio, eval_pipeline: EvalPipelineResource
    ) -> Output[dict]:
        """What the instance's environment starts from (an image, a directory), built once, before any trial."""
        sandbox, record = environment_step(portfolio, eval_pipeline, portfolio.instance(context.partition_key), "build")
        return Output(
            record,
            data_version=DataVersion(record.get("image_id") or record["environment_key"]),
            metadata={**lineage_metadata(portfolio, sandbox), **{k: MetadataValue.json(v) for k, v in record.items()}},
        )

    @asset(
        **common,
        partitions_def=partitions.instances,
        ins={"portfolio": snapshot_in},
        deps=[AssetKey([*prefix, "environment_image"])],
        code_version=ENVIRONMENT_LAYOUT_VERSION,
        retry_policy=retry_policy,
        pool=ENVIRONMENT_POOL,
    )
    def environment(
        context: AssetExecutionContext, portfolio: Portfolio, eval_pipeline: EvalPipelineResource
    ) -> Output[EnvironmentHandle]:
        """The instance's long-lived environment (a pod, a directory), started from its image."""
        sandbox, handle = environment_step(
            portfolio, eval_pipeline, portfolio.instance(context.partition_key), "prepare"
        )
        return Output(
            handle,
            data_version=DataVersion(handle.key),
            metadata={**lineage_metadata(portfolio, sandbox), "environment_key": handle.key},
        )

    @asset(
        **common,
        partitions_def=partitions.trial_runs,
        ins={"portfolio": snapshot_in, "environment": environment_in},
        deps=[AssetKey([*prefix, "trial_plan"])],
        code_version=GENERATION_VERSION,
        retry_policy=retry_policy,
        pool=MODEL_API_POOL,
        op_tags=kubernetes_step_tags(campaign.resources),
    )
    def generation(
        context: AssetExecutionContext,
        portfolio: Portfolio,
        environment: EnvironmentHandle,
        eval_pipeline: EvalPipelineResource,
    ) -> Output[Generation]:
        """The agent's patch for one (instance, trial); stored once, never regenerated.

        An infrastructure failure under the agent fails the step (retried with backoff), and the
        agent's own failure is stored like any patch: its evaluation records it.
        """
        instance, trial = partition_of(context, portfolio)
        sandbox = eval_pipeline.sandbox(campaign, instance)
        agent = trial.variant.make_agent()
        try:
            result = generate(
                instance,
                agent,
                trial.seed,
                environment,
                sandbox,
                eval_pipeline.artifact_store(),
                campaign.timeout_multiplier,
            )
        except InfrastructureError as error:
            lineage = _trial_lineage(portfolio, sandbox, trial, agent.config_hash, environment)
            raise outcome_failure(
                f"{instance.instance_id} {trial.key}: generation: {error}", error.outcome, lineage
            ) from error
        return Output(
            result,
            data_version=DataVersion(result.patch_sha256),
            metadata={
                **_trial_lineage(portfolio, sandbox, trial, result.agent_config_hash, environment),
                "status": result.status,
                "reused": result.reused,
                "artifact": result.key,
                "patch_bytes": len(result.patch),
                "duration_s": result.duration_s,
            },
        )

    @asset(
        **common,
        partitions_def=partitions.trial_runs,
        ins={
            "portfolio": snapshot_in,
            "environment": environment_in,
            "generation": AssetIn(key=AssetKey([*prefix, "generation"])),
        },
        code_version=GRADING_VERSION,
        retry_policy=retry_policy,
        op_tags=kubernetes_step_tags(campaign.resources),
    )
    def evaluation(
        context: AssetExecutionContext,
        portfolio: Portfolio,
        environment: EnvironmentHandle,
        generation: Generation,
        eval_pipeline: EvalPipelineResource,
    ) -> Output[Evaluation]:
        """The graded outcome of the stored generation.

        An unscored outcome fails the partition, so that "backfill failed partitions" re-runs exactly
        those; an infrastructure outcome is first retried in the run, with backoff.
        """
        instance, trial = partition_of(context, portfolio)
        sandbox = eval_pipeline.sandbox(campaign, instance)
        result = evaluate(
            instance,
            portfolio.environment_for(instance),
            generation,
            environment,
            sandbox,
            eval_pipeline.artifact_store(),
            campaign.test_timeout_for(instance),
        )
        metadata = {
            **_trial_lineage(portfolio, sandbox, trial, result.agent_config_hash, environment),
            "outcome": result.outcome,
            "reused": result.reused,
            "artifact": result.key,
            "attempt_id": result.attempt_id,
            "generation_artifact": generation.key,
        }
        if not result.outcome_type.is_scored:
            description = f"{instance.instance_id} {trial.key}: {result.detail[-2000:]}"
            raise outcome_failure(description, result.outcome_type, metadata)
        return Output(result, data_version=DataVersion(stable_hash([result.key, result.outcome])), metadata=metadata)

    @asset(**common, ins={"portfolio": snapshot_in}, deps=[evaluation], code_version=RESULTS_CODE_VERSION)
    def results(
        context: AssetExecutionContext, portfolio: Portfolio, eval_pipeline: EvalPipelineResource
    ) -> Output[str]:
        """The results warehouse (DuckDB: trials, attempts, instances, variants, lineage, and validation when the
        campaign's instances were validated), rebuilt from stored artifacts by this one writer."""
        sandbox = eval_pipeline.sandbox(campaign)
        validation_path = eval_pipeline.fetch(eval_pipeline.paths.reports / campaign.name / VALIDATION_FILE)
        warehouse = collect_warehouse(
            campaign,
            portfolio,
            lambda task: eval_pipeline.sandbox(campaign, task),
            eval_pipeline.artifact_store(),
            validation=read_validation(validation_path) if validation_path.exists() else None,
        )
        rows = warehouse.trials
        path = write_warehouse(warehouse, eval_pipeline.paths.results / f"{campaign.name}.duckdb")
        return Output(
            str(path),
            metadata={
                **lineage_metadata(portfolio, sandbox),
                "path": MetadataValue.path(eval_pipeline.publish(path)),
                "planned": len(rows),
                "attempts": len(warehouse.attempts),
                "validated_instances": len(warehouse.validation or []),
                "scored": sum(row.scored for row in rows),
            },
        )

    @asset(
        **common,
        ins={"portfolio": snapshot_in, "results_path": AssetIn(key=AssetKey([*prefix, "results"]))},
        code_version=f"{RESULTS_CODE_VERSION}.{REPORT_SCHEMA_VERSION}",  # a new report schema is a new report
    )
    def report(
        context: AssetExecutionContext, portfolio: Portfolio, results_path: str, eval_pipeline: EvalPipelineResource
    ) -> Output[Report]:
        """Per-variant resolved rates with confidence intervals and coverage, and each release gate's decision."""
        warehouse = eval_pipeline.fetch(Path(results_path))
        rows = read_results_table(warehouse)
        summary = build_report(
            campaign.name,
            portfolio.version,
            campaign.plan_version,
            rows,
            quarantined=len(portfolio.quarantined),
            baseline=campaign.baseline,
            validation=read_validation_table(warehouse),
            gates=campaign.gates,
            directory=eval_pipeline.paths.reports / campaign.name,
        )
        path = write_report(summary)
        html = write_html_report(summary, rows)
        return Output(
            summary,
            metadata={
                **lineage_metadata(portfolio, eval_pipeline.sandbox(campaign)),
                "path": MetadataValue.path(eval_pipeline.publish(path)),
                "html": MetadataValue.path(eval_pipeline.publish(html)),
                "json": MetadataValue.path(eval_pipeline.publish(path.with_suffix(".json"))),
                "summary": MetadataValue.md(render_markdown(summary)),
            },
        )

    return [dataset_snapshot, trial_plan, environment_image, environment, generation, evaluation, results, report]
