"""A campaign's release gates as asset checks on its report, and the release decision they add up to.

The report carries each gate's decision (results/report.py evaluates the campaign's
policies when it builds the report); each policy in the campaign's `gates:`
becomes the check `gate_<environment>`, which reads that decision and records
it (every violation with its rule, slice, value and limit), also written beside
the report as `gate_<environment>.json`. The checks run in the `release` stage
with the `release_decision` asset, which says whether to promote the candidate.

A failed gate is a result, not a breakage: its check fails (labelled with the
gate and the broken rules), and the release decision is materialized with
`promote: false`; the run itself succeeds. The checks are therefore not
blocking: blocking would fail the run, which reads as an error of the harness.
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

from eval_pipeline.config.campaign import Campaign
from eval_pipeline.config.gates import GatePolicy
from eval_pipeline.defs.resources import EvalPipelineResource
from eval_pipeline.results.model import GateDecision, Report
from eval_pipeline.results.report import write_json

RELEASE_CODE_VERSION = "3"


def write_decision(decision: GateDecision, directory: Path) -> Path:
    return write_json(decision.model_dump(mode="json"), directory / f"gate_{decision.environment}.json")


def _decision(report: Report, policy: GatePolicy) -> GateDecision:
    """The report's decision for this gate; a report built without it (before the gate was added to the
    campaign) must be built again, not judged by a policy it never saw."""
    if policy.environment not in report.gates:
        raise ValueError(
            f"report of campaign {report.campaign} has no decision for gate {policy.environment}:"
            " materialize the report again"
        )
    return report.gates[policy.environment]


def _gate_check(campaign: Campaign, policy: GatePolicy, report_key: AssetKey) -> AssetChecksDefinition:
    @asset_check(
        asset=report_key,
        name=f"gate_{policy.environment}",
        description=f"Release gate for {policy.environment}: may {policy.candidate} be promoted?",
    )
    def gate(report: Report, eval_pipeline: EvalPipelineResource) -> AssetCheckResult:
        decision = _decision(report, policy)
        path = write_decision(decision, eval_pipeline.harness.paths.reports / campaign.name)
        return AssetCheckResult(
            passed=decision.passed,
            severity=AssetCheckSeverity.ERROR,
            metadata={
                "decision": MetadataValue.json(decision.model_dump(mode="json")),
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
        context: AssetExecutionContext, report: Report, eval_pipeline: EvalPipelineResource
    ) -> Output[dict[str, Any]]:
        """Whether the candidate passed every gate, so that it may be promoted to these environments."""
        decisions = [_decision(report, policy) for policy in campaign.gates]
        decision: dict[str, Any] = {
            "promote": all(d.passed for d in decisions),
            "environments": [d.environment for d in decisions],
            "candidates": sorted({d.candidate for d in decisions}),
            "dataset_version": report.dataset_version,
            "plan_version": report.plan_version,
            "decisions": [d.model_dump(mode="json") for d in decisions],
        }
        path = write_json(decision, eval_pipeline.harness.paths.reports / campaign.name / "release_decision.json")
        return Output(decision, metadata={"promote": decision["promote"], "path": MetadataValue.path(str(path))})

    return [_gate_check(campaign, policy, report_key) for policy in campaign.gates], [release_decision]
