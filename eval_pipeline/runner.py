"""Run or resume a campaign in process, one Dagster run per partition.

Each stage is a job of the campaign's definitions; the runner executes only
what is not done yet: environments not materialized, and trials whose final
evaluation is not stored or not recorded by Dagster. One run per partition
keeps a failing trial from failing others (Dagster fails a multi-partition
run as a whole), and the artifact store makes a re-run of a finished trial
cost a lookup, not a regeneration.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dagster import AssetKey, DagsterInstance, Definitions, ExecuteInProcessResult

from eval_pipeline.campaign import Campaign
from eval_pipeline.defs import stage_job_name
from eval_pipeline.defs.partitions import trial_run_key
from eval_pipeline.results import collect_results

QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


@dataclass
class StageCounts:
    """How many steps computed, reused a stored artifact, or failed."""

    computed: int = 0
    reused: int = 0
    failed: int = 0

    def count(self, run: ExecuteInProcessResult, node: str) -> str:
        materializations = run.asset_materializations_for_node(node)
        if not materializations:
            self.failed += 1
            return "failed"
        reused = materializations[0].metadata["reused"].value
        if reused:
            self.reused += 1
        else:
            self.computed += 1
        return "reused" if reused else "computed"


@dataclass
class CampaignRun:
    report: dict[str, Any]
    environments_prepared: int = 0
    generation: StageCounts = field(default_factory=StageCounts)
    evaluation: StageCounts = field(default_factory=StageCounts)

    def as_json(self) -> dict[str, Any]:
        variants = {
            name: {key: summary[key] for key in ("resolved_rate", "n", "ci_low", "ci_high", "scored", "planned", "coverage", "outcomes")}
            for name, summary in self.report["variants"].items()
        }
        return {
            "campaign": self.report["campaign"],
            "planned": self.report["planned"],
            "scored": self.report["scored"],
            "coverage": self.report["coverage"],
            "dataset_version": self.report["dataset_version"],
            "variants": variants,
            "report": self.report["report_path"],
            "environments_prepared": self.environments_prepared,
            "generation": vars(self.generation),
            "evaluation": vars(self.evaluation),
        }


def run_campaign(
    campaign: Campaign, defs: Definitions, instance: DagsterInstance, progress: Callable[[str], None] = lambda _: None
) -> CampaignRun:
    def execute(stage: str, **kwargs: Any) -> ExecuteInProcessResult:
        job = defs.resolve_job_def(stage_job_name(campaign, stage))
        return job.execute_in_process(instance=instance, run_config=QUIET_RUN_CONFIG, raise_on_error=False, **kwargs)

    def asset_key(name: str) -> AssetKey:
        return AssetKey([campaign.name, name])

    prepared = execute("prepare")
    if not prepared.success:
        raise RuntimeError(f"campaign {campaign.name}: preparing the dataset failed (Dagster run {prepared.run_id})")
    benchmark = prepared.asset_value(asset_key("dataset_snapshot"))
    progress(f"{campaign.name}: {len(benchmark.instances)} instances x {len(campaign.trials)} trials, dataset {benchmark.version[:12]}")

    run = CampaignRun(report={})
    ready = instance.get_materialized_partitions(asset_key("environment"))
    for item in benchmark.instances:
        if item.instance_id not in ready:
            if not execute("environments", partition_key=item.instance_id).success:
                raise RuntimeError(f"{item.instance_id}: preparing the environment failed")
            run.environments_prepared += 1
            progress(f"environment ready: {item.instance_id}")

    eval_pipeline = defs.resources["eval_pipeline"]
    rows = collect_results(campaign, benchmark, eval_pipeline.sandbox(campaign), eval_pipeline.artifact_store())
    recorded = instance.get_materialized_partitions(asset_key("evaluation"))
    pending = [row for row in rows if not row.scored or str(trial_run_key(row.instance_id, row.trial)) not in recorded]
    progress(f"{len(rows) - len(pending)} of {len(rows)} trials already done; running {len(pending)}")
    for number, row in enumerate(pending, start=1):
        result = execute("trials", partition_key=trial_run_key(row.instance_id, row.trial))
        generated = run.generation.count(result, f"{campaign.name}__generation")
        evaluated = run.evaluation.count(result, f"{campaign.name}__evaluation")
        outcome = result.asset_value(asset_key("evaluation")).outcome if result.success else f"failed (run {result.run_id})"
        progress(f"[{number}/{len(pending)}] {row.instance_id} {row.trial}: {outcome} (generation {generated}, evaluation {evaluated})")

    finished = execute("results")
    if not finished.success:
        raise RuntimeError(f"campaign {campaign.name}: building results failed (Dagster run {finished.run_id})")
    run.report = finished.asset_value(asset_key("report"))
    return run
