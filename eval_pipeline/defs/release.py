"""A campaign's release gates as blocking asset checks on its report, and the release decision behind them.

Each policy in the campaign's `gates:` becomes the check `gate_<environment>`
on the report. The checks run in the `release` stage together with the
`release_decision` asset; a gate that fails stops that asset from being
materialized, and its check records the machine-readable decision (every
violation with its rule, slice, value and limit), also written beside the
report as `gate_<environment>.json`.
"""

from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetsDefinition,
    MetadataValue,
    Output,
    asset,
    asset_check,
)

from eval_pipeline.campaign import Campaign
from eval_pipeline.defs.resources import EvalPipelineResource
from eval_pipeline.gates import GateDecision, GatePolicy, evaluate_gate
from eval_pipeline.report import write_json

RELEASE_CODE_VERSION = "1"


def write_decision(decision: GateDecision, directory: Path) -> Path:
    return write_json(decision.as_record(), directory / f"gate_{decision.environment}.json")


def _gate_check(campaign: Campaign, policy: GatePolicy, report_key: AssetKey) -> AssetChecksDefinition:
    @asset_check(
        asset=report_key,
        name=f"gate_{policy.environment}",
        blocking=True,
        description=f"Release gate for {policy.environment}: may {policy.candidate} be promoted?",
    )
    def gate(report: dict[str, Any], eval_pipeline: EvalPipelineResource) -> AssetCheckResult:
        decision = evaluate_gate(policy, report)
        path = write_decision(decision, eval_pipeline.paths.reports / campaign.name)
        return AssetCheckResult(
            passed=decision.passed,
            severity=AssetCheckSeverity.ERROR,
            metadata={
                "decision": MetadataValue.json(decision.as_record()),
                "violations": MetadataValue.md("\n".join(f"- {v.message}" for v in decision.violations) or "none"),
                "path": MetadataValue.path(str(path)),
            },
        )

    return gate


def build_release_definitions(campaign: Campaign) -> tuple[list[AssetChecksDefinition], list[AssetsDefinition]]:
    """The gate checks and the release decision; none for a campaign without gates."""
    if not campaign.gates:
        return [], []
    report_key = AssetKey([campaign.name, "report"])

    @asset(
        key_prefix=[campaign.name],
        group_name=campaign.name,
        ins={"report": AssetIn(key=report_key)},
        code_version=RELEASE_CODE_VERSION,
    )
    def release_decision(
        context: AssetExecutionContext, report: dict[str, Any], eval_pipeline: EvalPipelineResource
    ) -> Output[dict[str, Any]]:
        """The candidate passed every gate: promote it to these environments. Blocked when any gate fails."""
        decisions = [evaluate_gate(policy, report).as_record() for policy in campaign.gates]
        decision = {
            "promote": all(d["passed"] for d in decisions),
            "environments": [d["environment"] for d in decisions],
            "candidates": sorted({d["candidate"] for d in decisions}),
            "dataset_version": report["dataset_version"],
            "plan_version": report["plan_version"],
            "decisions": decisions,
        }
        path = write_json(decision, eval_pipeline.paths.reports / campaign.name / "release_decision.json")
        return Output(decision, metadata={"promote": decision["promote"], "path": MetadataValue.path(str(path))})

    return [_gate_check(campaign, policy, report_key) for policy in campaign.gates], [release_decision]
