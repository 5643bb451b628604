"""Resource calibration: the same campaign at several resource multipliers (1x, 3x, uncapped).

How much of a score is the infrastructure's? Run the campaign with its
ceilings scaled by each multiplier and compare, per slice and variant, the
resolved rate (with its interval) and the infrastructure error rate. Each
multiplier is its own campaign (`<name>_x1`, `<name>_x3`, `<name>_uncapped`)
with its own partitions and results, on the same artifact store: a
generation's key does not depend on the grading's resources, so every
multiplier grades the same patches, and only the first generates them.
"""

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from eval_pipeline.campaign import Campaign
from eval_pipeline.report import format_interval, format_number, markdown_table, report_rows
from eval_pipeline.sandbox.base import parse_multiplier

DEFAULT_MULTIPLIERS = ("1", "3", "uncapped")


def multiplier_label(multiplier: float | None) -> str:
    return "uncapped" if multiplier is None else f"x{multiplier:g}"


def at_multiplier(campaign: Campaign, multiplier: str) -> Campaign:
    """The campaign with its ceilings scaled by `multiplier` (a number or 'uncapped'), under its own name."""
    scale = parse_multiplier(multiplier)
    return replace(
        campaign,
        name=f"{campaign.name}_{multiplier_label(scale).replace('.', '_')}",
        resources=campaign.resources.with_multiplier(scale),
        gates=(),  # release gates judge the campaign as configured, not its calibration runs
    )


def calibration_rows(reports: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per multiplier, slice and variant: resolved rate, interval, infrastructure error rate, coverage."""
    return [
        {
            "multiplier": multiplier,
            "slice": slice_name.strip("*"),
            "variant": variant,
            "resolved_rate": summary["resolved_rate"],
            "ci_low": summary.get("ci_low"),
            "ci_high": summary.get("ci_high"),
            "infrastructure_error_rate": summary["infrastructure_error_rate"],
            "coverage": summary["coverage"],
        }
        for multiplier, report in reports.items()
        for slice_name, variant, summary in report_rows(report)
    ]


def render_calibration(rows: Sequence[dict[str, Any]]) -> str:
    headers = ["multiplier", "slice", "variant", "resolved rate", "95% CI", "infra error rate", "coverage"]
    cells = [
        [
            r["multiplier"],
            r["slice"],
            r["variant"],
            format_number(r["resolved_rate"]),
            format_interval(r["ci_low"], r["ci_high"]),
            format_number(r["infrastructure_error_rate"]),
            format_number(r["coverage"]),
        ]
        for r in rows
    ]
    return "\n".join(markdown_table(headers, cells)) + "\n"
