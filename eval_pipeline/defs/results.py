"""The results warehouse, rebuilt from the store, and the report with its gates."""

from pathlib import Path

from dagster import AssetExecutionContext, AssetIn, AssetsDefinition, MetadataValue, Output, asset

from eval_pipeline.config.quarantine import read_validation
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.defs.group import RESULTS_CODE_VERSION, CampaignGroup, lineage_metadata
from eval_pipeline.defs.resources import EvalPipelineResource
from eval_pipeline.defs.verdicts import verdict_metadata
from eval_pipeline.results.html import write_html_report
from eval_pipeline.results.markdown import render_markdown
from eval_pipeline.results.matrix import unscored_reasons
from eval_pipeline.results.model import REPORT_SCHEMA_VERSION, Report
from eval_pipeline.results.report import build_report, write_report
from eval_pipeline.results.trajectory import trajectories_for
from eval_pipeline.results.warehouse import (
    collect_warehouse,
    read_attempts_table,
    read_rejected_table,
    read_results_table,
    read_validation_table,
    write_warehouse,
)
from eval_pipeline.trial.validation import VALIDATION_FILE

__all__ = ["report_asset", "results_asset"]


def results_asset(group: CampaignGroup) -> AssetsDefinition:
    campaign, common, snapshot_in = group.campaign, group.common, group.snapshot_in

    @asset(**common, ins={"portfolio": snapshot_in}, deps=[group.key("evaluation")], code_version=RESULTS_CODE_VERSION)
    def results(
        context: AssetExecutionContext, portfolio: Portfolio, eval_pipeline: EvalPipelineResource
    ) -> Output[str]:
        """The results warehouse (DuckDB: trials, attempts, instances, variants, lineage, and validation when the
        campaign's instances were validated), rebuilt from stored artifacts by this one writer. Its
        materialization shows every trial's verdict (`verdicts`) and each variant's counts (`variants`)."""
        sandbox = eval_pipeline.harness.sandbox(campaign)
        validation_path = eval_pipeline.harness.fetch(
            eval_pipeline.harness.paths.reports / campaign.name / VALIDATION_FILE
        )
        warehouse = collect_warehouse(
            campaign,
            portfolio,
            eval_pipeline.harness.sandbox_for(campaign),
            eval_pipeline.harness.store,
            validation=read_validation(validation_path) if validation_path.exists() else None,
        )
        rows = warehouse.trials
        path = write_warehouse(warehouse, eval_pipeline.harness.paths.results / f"{campaign.name}.duckdb")
        return Output(
            str(path),
            metadata={
                # First, at a glance: each variant's counts, then every trial's verdict (defs/verdicts.py).
                **verdict_metadata(rows),
                **lineage_metadata(portfolio, sandbox),
                "path": MetadataValue.path(eval_pipeline.harness.publish(path)),
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

    return results


def report_asset(group: CampaignGroup) -> AssetsDefinition:
    campaign, common, snapshot_in = group.campaign, group.common, group.snapshot_in

    @asset(
        **common,
        ins={"portfolio": snapshot_in, "results_path": AssetIn(key=group.key("results"))},
        code_version=f"{RESULTS_CODE_VERSION}.{REPORT_SCHEMA_VERSION}",  # a new report schema is a new report
    )
    def report(
        context: AssetExecutionContext, portfolio: Portfolio, results_path: str, eval_pipeline: EvalPipelineResource
    ) -> Output[Report]:
        """Per-variant resolved rates with confidence intervals and coverage, and each release gate's decision."""
        warehouse = eval_pipeline.harness.fetch(Path(results_path))
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
            directory=eval_pipeline.harness.paths.reports / campaign.name,
            rejected=read_rejected_table(warehouse),
        )
        path = write_report(summary)
        # The failed trials' trajectories (at most TRAJECTORY_LIMIT), read from their generation records.
        reasons = unscored_reasons(read_attempts_table(warehouse))
        html = write_html_report(summary, rows, trajectories_for(rows, eval_pipeline.harness.store), reasons)
        return Output(
            summary,
            metadata={
                **lineage_metadata(portfolio, eval_pipeline.harness.sandbox(campaign)),
                "path": MetadataValue.path(eval_pipeline.harness.publish(path)),
                "html": MetadataValue.path(eval_pipeline.harness.publish(html)),
                "json": MetadataValue.path(eval_pipeline.harness.publish(path.with_suffix(".json"))),
                "summary": MetadataValue.md(render_markdown(summary)),
            },
        )

    return report
