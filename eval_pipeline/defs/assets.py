"""A campaign's assets. Each function is short: the work is in the plain core modules.

dataset_snapshot -> environment[instance] -> generation[instance x trial]
                                          -> evaluation[instance x trial] -> results -> report
trial_plan registers the trial partitions from the campaign file. Instance
validation (validation[instance], validation_report) is in defs/validation.py.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from dagster import (
    AssetDep,
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetMaterialization,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    Backoff,
    DataVersion,
    Jitter,
    MetadataValue,
    MultiToSingleDimensionPartitionMapping,
    Output,
    RetryPolicy,
    asset,
    multi_asset,
)

from eval_pipeline import HARNESS_VERSION
from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.common.outcomes import InfrastructureError
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.config.quarantine import read_validation
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.datasets.sources import load_portfolio, write_snapshot
from eval_pipeline.defs.failures import describe_outcome, outcome_failure
from eval_pipeline.defs.partitions import INSTANCE, CampaignPartitions, sync_partitions
from eval_pipeline.defs.resources import EvalPipelineResource
from eval_pipeline.grading.verdict import GRADING_VERSION
from eval_pipeline.results.html import write_html_report
from eval_pipeline.results.markdown import render_markdown
from eval_pipeline.results.model import REPORT_SCHEMA_VERSION, Report
from eval_pipeline.results.report import build_report, write_report
from eval_pipeline.results.trajectory import trajectories_for
from eval_pipeline.results.warehouse import (
    collect_warehouse,
    read_rejected_table,
    read_results_table,
    read_validation_table,
    write_warehouse,
)
from eval_pipeline.sandbox import EnvironmentHandle, SandboxBackend
from eval_pipeline.sandbox.kubernetes.manifest import pod_resources
from eval_pipeline.sandbox.local import ENVIRONMENT_LAYOUT_VERSION
from eval_pipeline.store.artifacts import ArtifactStore
from eval_pipeline.store.attempts import environment_attempt
from eval_pipeline.tasks.task import Task
from eval_pipeline.trial.batch import TrialResult, TrialSetup, TrialWork, run_batch
from eval_pipeline.trial.generation import GENERATION_VERSION, Generation
from eval_pipeline.trial.validation import VALIDATION_FILE

# Code versions of the assets whose logic has no version of its own in the core.
SNAPSHOT_CODE_VERSION = "1"
PLAN_CODE_VERSION = "1"
RESULTS_CODE_VERSION = "5"
IMAGE_CODE_VERSION = "1"
# Concurrency pools (limits per Dagster instance: dagster.yaml, or `dagster instance concurrency set`).
ENVIRONMENT_POOL = "eval_pipeline_environments"  # image builds and environment pods started at once
MODEL_API_POOL = "eval_pipeline_model_api"  # trial batches running at once, their agents calling a model API
# Where Output(data_version=...) records the data version; a materialization logged by the step sets it itself.
DATA_VERSION_TAG = "dagster/data_version"


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
    result: TrialResult,
    generation: Generation,
    environments: dict[str, EnvironmentHandle],
) -> dict[str, Any]:
    instance_id, trial = result.work.instance.instance_id, result.work.trial
    environment = environments[instance_id]
    return {
        **lineage_metadata(portfolio, sandbox),
        "slice": portfolio.slice_of(instance_id),
        "environment": MetadataValue.json({"key": environment.key, **environment.details}),
        "variant": trial.variant.name,
        "agent": trial.variant.agent,
        "agent_config_hash": generation.agent_config_hash,
        "seed": trial.seed,
        "network": trial.variant.network,  # its agent's workspace had network (the variant opted in); grading never
    }


def _trial_materializations(
    generation_key: AssetKey,
    evaluation_key: AssetKey,
    result: TrialResult,
    generation: Generation,
    lineage: dict[str, Any],
    generation_uri: str,
) -> Iterator[AssetMaterialization]:
    """A trial's stored generation (with a link to its record, which holds the agent's trajectory, and what the
    agent spent), and its evaluation once it is scored, each with its lineage."""
    partition, evaluation = result.work.partition, result.evaluation
    yield AssetMaterialization(
        generation_key,
        partition=partition,
        tags={DATA_VERSION_TAG: generation.patch_sha256},
        metadata={
            **lineage,
            "status": generation.status,
            "reused": generation.reused,
            "artifact": generation.key,
            "patch_bytes": len(generation.patch),
            "duration_s": generation.duration_s,
            "trajectory": MetadataValue.url(generation_uri),
            "steps": generation.steps,
            "stop_reason": generation.stop_reason,
            "input_tokens": generation.input_tokens,
            "output_tokens": generation.output_tokens,
            "cost_usd": generation.cost_usd,
        },
    )
    if evaluation is None or not result.outcome.is_scored:
        return
    yield AssetMaterialization(
        evaluation_key,
        partition=partition,
        tags={DATA_VERSION_TAG: stable_hash([evaluation.key, evaluation.outcome])},
        metadata={
            **lineage,
            "outcome": evaluation.outcome,
            "reused": evaluation.reused,
            "artifact": evaluation.key,
            "attempt_id": evaluation.attempt_id,
            "generation_artifact": generation.key,
            "tries": result.tries,
            "grading_mode": evaluation.grading_mode,  # patch_replay, in_container or snapshot (evaluation.py)
            "audit_flags": MetadataValue.json(evaluation.audit),
        },
    )


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


def kubernetes_step_tags(campaign: Campaign) -> dict[str, Any]:
    """Tags that size a trials step's pod on Kubernetes (k8s_job_executor or K8sRunLauncher): its request is
    the floors and its limit the ceilings of the trials it runs at once, as for an environment pod."""
    resources = pod_resources(campaign.resources, campaign.batches.concurrency)
    return {K8S_CONFIG_TAG: {"container_config": {"resources": resources}}}


def build_campaign_assets(campaign: Campaign, partitions: CampaignPartitions) -> list[AssetsDefinition]:
    prefix = [campaign.name]
    snapshot_in = AssetIn(key=AssetKey([*prefix, "dataset_snapshot"]))  # loaded as `portfolio`
    common = {"key_prefix": prefix, "group_name": campaign.name}
    retry_policy = RetryPolicy(
        max_retries=campaign.retries.max_retries,
        delay=campaign.retries.delay_s,
        backoff=Backoff.EXPONENTIAL,
        jitter=Jitter.PLUS_MINUS,
    )

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
                f"{instance.instance_id}: {describe_outcome(error.outcome, str(error))}",
                {instance.instance_id: error.outcome},
                lineage_metadata(portfolio, sandbox),
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

    environment_dep = AssetDep(
        AssetKey([*prefix, "environment"]),
        partition_mapping=MultiToSingleDimensionPartitionMapping(partition_dimension_name=INSTANCE),
    )
    generation_key, evaluation_key = AssetKey([*prefix, "generation"]), AssetKey([*prefix, "evaluation"])
    trial_spec = {"partitions_def": partitions.trial_runs, "group_name": campaign.name, "skippable": True}

    @multi_asset(
        name=f"{campaign.name}__trials",
        specs=[
            AssetSpec(
                generation_key,
                deps=[environment_dep, snapshot_in.key, AssetKey([*prefix, "trial_plan"])],
                code_version=GENERATION_VERSION,
                description="The agent's patch for one (instance, trial); stored once, never regenerated.",
                **trial_spec,
            ),
            AssetSpec(
                evaluation_key,
                deps=[generation_key, environment_dep, snapshot_in.key],
                code_version=GRADING_VERSION,
                description="The graded outcome of the stored generation.",
                **trial_spec,
            ),
        ],
        ins={"portfolio": snapshot_in, "environment": AssetIn(key=environment_dep.asset_key)},
        backfill_policy=BackfillPolicy.multi_run(max_partitions_per_run=campaign.batches.size),
        pool=MODEL_API_POOL,
        op_tags=kubernetes_step_tags(campaign),
    )
    def trials(
        context: AssetExecutionContext,
        portfolio: Portfolio,
        environment: Any,  # one EnvironmentHandle, or a dict of them by instance when the range has several
        eval_pipeline: EvalPipelineResource,
    ) -> Iterator[AssetMaterialization]:
        """A batch of trial partitions (a partition range), `batches.concurrency` at a time: each partition's
        generation and evaluation are materialized as its trial ends.

        A trial whose infrastructure failed is retried with backoff within the run (trial_batch.py); an
        agent's own failure is stored like any patch and scored. A trial that still ends unscored is left
        unmaterialized and fails the step once the batch is done, so exactly those partitions are failed.
        """
        works = [
            TrialWork(key, portfolio.instance(instance_id), campaign.trial(trial))
            for key in context.partition_keys
            for instance_id, trial in [key.split("|", 1)]
        ]
        if isinstance(environment, EnvironmentHandle):  # a range of one instance is loaded as its one handle
            environment = {works[0].instance.instance_id: environment}
        setup = TrialSetup(
            campaign,
            portfolio,
            eval_pipeline.artifact_store(),
            lambda task: eval_pipeline.sandbox(campaign, task),
            environment,
        )
        unscored = {}
        for result in run_batch(setup, works, campaign.batches.concurrency):
            if generation := result.generation:  # else generating failed on infrastructure: nothing is stored
                sandbox = setup.sandbox_for(result.work.instance)
                lineage = _trial_lineage(portfolio, sandbox, result, generation, environment)
                yield from _trial_materializations(
                    generation_key, evaluation_key, result, generation, lineage, setup.store.uri(generation.key)
                )
            if not result.outcome.is_scored:
                unscored[result.work.partition] = result
        if unscored:
            lines = [f"{key}: {describe_outcome(r.outcome, r.detail[-2000:])}" for key, r in unscored.items()]
            raise outcome_failure("\n".join(lines), {key: r.outcome for key, r in unscored.items()}, {})

    @asset(**common, ins={"portfolio": snapshot_in}, deps=[evaluation_key], code_version=RESULTS_CODE_VERSION)
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
                "rejected_records": len(warehouse.rejected),
                "rejected": MetadataValue.md(
                    "\n".join(f"- {r.reason}: `{r.key}`" for r in warehouse.rejected) or "none"
                ),
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
            rejected=read_rejected_table(warehouse),
        )
        path = write_report(summary)
        # The failed trials' trajectories (at most TRAJECTORY_LIMIT), read from their generation records.
        html = write_html_report(summary, rows, trajectories_for(rows, eval_pipeline.artifact_store()))
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

    return [dataset_snapshot, trial_plan, environment_image, environment, trials, results, report]
