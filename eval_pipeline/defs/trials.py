"""The trials: generation and evaluation of a batch of (instance, trial) partitions in one step.

The step can be subset (Dagster's `can_subset`): the evaluation alone grades each partition's stored generation,
and a partition with none fails, naming the generation to select with it; the generation alone is refused in one
sentence naming the evaluation, since a generation is made by the trial that grades it.
"""

from collections.abc import Iterator
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetDep,
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    Failure,
    MetadataValue,
    MultiToSingleDimensionPartitionMapping,
    Output,
    multi_asset,
)

from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.defs.failures import describe_trial_outcome, outcome_failure
from eval_pipeline.defs.group import DATA_VERSION_TAG, MODEL_API_POOL, CampaignGroup, lineage_metadata
from eval_pipeline.defs.partitions import INSTANCE, trial_partition
from eval_pipeline.defs.resources import EvalPipelineResource
from eval_pipeline.defs.verdicts import (
    RESOLVED_CHECK,
    resolved_check_spec,
    trial_verdict,
    unscored_observation,
    verdicts_output,
)
from eval_pipeline.grading.verdict import GRADING_VERSION
from eval_pipeline.sandbox import EnvironmentHandle, SandboxBackend
from eval_pipeline.sandbox.kubernetes.manifest import pod_resources
from eval_pipeline.trial.generation import Generation
from eval_pipeline.trial.run import TrialResult, TrialSetup, run_trials
from eval_pipeline.trial.spec import GENERATION_VERSION, TrialSpec, agent_configs, task_trial_specs

__all__ = ["kubernetes_step_tags", "trials_asset"]

K8S_CONFIG_TAG = "dagster-k8s/config"


def kubernetes_step_tags(campaign: Campaign) -> dict[str, Any]:
    """Tags that size a trials step's pod on Kubernetes (k8s_job_executor or K8sRunLauncher): its request is
    the floors and its limit the ceilings of the trials it runs at once, as for an environment pod."""
    resources = pod_resources(campaign.resources, campaign.batches.concurrency)
    return {K8S_CONFIG_TAG: {"container_config": {"resources": resources}}}


def _trial_lineage(
    portfolio: Portfolio,
    sandbox: SandboxBackend,
    spec: TrialSpec,
    generation: Generation,
    environment: EnvironmentHandle,
) -> dict[str, Any]:
    return {
        **lineage_metadata(portfolio, sandbox),
        "slice": spec.slice,
        "environment": MetadataValue.json({"key": environment.key, **environment.details}),
        "variant": spec.variant,
        "agent": spec.agent,
        "agent_config_hash": generation.agent_config_hash,
        "seed": spec.seed,
        "network": spec.network,  # its agent's workspace had network (the variant opted in); grading never
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
    partition, evaluation = trial_partition(result.spec), result.evaluation
    yield AssetMaterialization(
        generation_key,
        partition=partition,
        tags={DATA_VERSION_TAG: generation.patch_sha256},
        metadata={
            "trial_outcome": result.outcome.value,  # first: what a person opening the partition looks for
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
            "outcome": evaluation.outcome,  # first: what a person opening the partition looks for
            **lineage,
            "reused": evaluation.reused,
            "artifact": evaluation.key,
            "attempt_id": evaluation.attempt_id,
            "generation_artifact": generation.key,
            "tries": result.tries,
            "grading_mode": evaluation.grading_mode,  # patch_replay, in_container or snapshot (trial/evaluation.py)
            "audit_flags": MetadataValue.json(evaluation.audit),
        },
    )


def _partition_specs(setup: TrialSetup, partition_keys: list[str]) -> list[TrialSpec]:
    """The specification of each trial partition, in the order given, its environment the one prepared for it
    (its key read from the loaded handle: nothing is computed again, no engine asked)."""
    campaign, portfolio, configs = setup.campaign, setup.portfolio, agent_configs(setup.campaign)
    specs = {
        trial_partition(spec): spec
        for instance_id in dict.fromkeys(key.split("|", 1)[0] for key in partition_keys)
        for task in [portfolio.instance(instance_id)]
        for spec in task_trial_specs(
            campaign, portfolio, task, setup.sandbox_for(task), setup.environments[instance_id].key, configs
        )
    }
    return [specs[key] for key in partition_keys]


def _environment_dep(group: CampaignGroup) -> AssetDep:
    """A trial partition depends on its instance's environment partition."""
    return AssetDep(
        group.key("environment"),
        partition_mapping=MultiToSingleDimensionPartitionMapping(partition_dimension_name=INSTANCE),
    )


def _trial_specs(group: CampaignGroup) -> list[AssetSpec]:
    """The generation and the evaluation, one partition per (instance, trial) each."""
    environment, snapshot = _environment_dep(group), group.snapshot_key
    shared: dict[str, Any] = {
        "partitions_def": group.partitions.trial_runs,
        "group_name": group.campaign.name,
        "skippable": True,
    }
    return [
        AssetSpec(
            group.key("generation"),
            deps=[environment, snapshot, group.key("trial_plan")],
            code_version=GENERATION_VERSION,
            description="The agent's patch for one (instance, trial); stored once, never regenerated.",
            **shared,
        ),
        AssetSpec(
            group.key("evaluation"),
            deps=[group.key("generation"), environment, snapshot],
            code_version=GRADING_VERSION,
            description="The graded outcome of the stored generation.",
            **shared,
        ),
    ]


def trials_asset(group: CampaignGroup) -> AssetsDefinition:
    campaign = group.campaign
    generation_key, evaluation_key = group.key("generation"), group.key("evaluation")

    @multi_asset(
        name=f"{campaign.name}__trials",
        specs=_trial_specs(group),
        check_specs=[resolved_check_spec(group)],
        ins={"portfolio": group.snapshot_in, "environment": AssetIn(key=group.key("environment"))},
        backfill_policy=BackfillPolicy.multi_run(max_partitions_per_run=campaign.batches.size),
        pool=MODEL_API_POOL,
        op_tags=kubernetes_step_tags(campaign),
        can_subset=True,
    )
    def trials(
        context: AssetExecutionContext,
        portfolio: Portfolio,
        environment: Any,  # one EnvironmentHandle, or a dict of them by instance when the range has several
        eval_pipeline: EvalPipelineResource,
    ) -> Iterator[AssetMaterialization | AssetObservation | AssetCheckEvaluation | Output[None]]:
        """A batch of trial partitions (a partition range), `batches.concurrency` at a time: each partition's
        generation and evaluation are materialized as its trial ends, and its verdict checked (defs/verdicts.py).

        A trial whose infrastructure failed is retried with backoff within the run (trial/run.py); an
        agent's own failure is stored like any patch and scored. A trial that still ends unscored leaves its
        evaluation unmaterialized, its outcome observed on the partition once it was graded, and fails the step
        once the batch is done, so exactly those partitions are failed.
        """
        selected = context.selected_asset_keys
        if evaluation_key not in selected:
            raise Failure(
                description=f"{generation_key.to_user_string()} is made by the trial that grades it: select"
                f" {evaluation_key.to_user_string()} with it (or alone, to grade stored generations)."
            )
        verdicts = AssetCheckKey(evaluation_key, RESOLVED_CHECK) in context.selected_asset_check_keys
        partition_keys = list(context.partition_keys)
        if isinstance(environment, EnvironmentHandle):  # a range of one instance is loaded as its one handle
            environment = {partition_keys[0].split("|", 1)[0]: environment}
        setup = TrialSetup(
            campaign,
            portfolio,
            eval_pipeline.harness.store,
            eval_pipeline.harness.sandbox_for(campaign),
            environment,
        )
        specs = _partition_specs(setup, partition_keys)
        # Without the generation selected, only stored generations are graded (none is made).
        ungenerated = (
            [] if generation_key in selected else [s for s in specs if setup.store.get(s.generation_key) is None]
        )
        unscored: dict[str, TrialResult] = {}
        trials = {spec: setup.trial(spec) for spec in specs if spec not in ungenerated}
        for result in run_trials(trials.values(), campaign.batches.concurrency):
            partition = trial_partition(result.spec)
            if generation := result.generation:  # else generating failed on infrastructure: nothing is stored
                trial = trials[result.spec]
                lineage = _trial_lineage(portfolio, trial.sandbox, result.spec, generation, trial.environment)
                materializations = _trial_materializations(
                    generation_key, evaluation_key, result, generation, lineage, setup.store.uri(generation.key)
                )
                yield from (m for m in materializations if m.asset_key in selected)
            if result.outcome.is_scored:
                if verdicts:
                    yield trial_verdict(context.instance, evaluation_key, partition, result)
            else:
                unscored[partition] = result
                if result.evaluation is not None:  # graded, with no verdict
                    yield unscored_observation(evaluation_key, partition, result)
        described = [describe_trial_outcome(key, r.outcome, r.detail) for key, r in unscored.items()]
        described += [
            f"{key}: no stored generation to grade: select {generation_key.to_user_string()} with"
            f" {evaluation_key.to_user_string()}."
            for key in map(trial_partition, ungenerated)
        ]
        if described:
            raise outcome_failure("\n\n".join(described), {key: r.outcome for key, r in unscored.items()}, {})
        if verdicts:
            yield verdicts_output(context, evaluation_key)

    return trials
