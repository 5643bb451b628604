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

from eval_pipeline.config.campaign import Campaign
from eval_pipeline.results.markdown import format_interval, format_number, markdown_table
from eval_pipeline.results.model import Report
from eval_pipeline.sandbox.base import parse_multiplier


def parse_multipliers(text: str) -> list[float | None]:
    """Comma-separated multipliers (numbers, `3x`, or `uncapped` as None), every one checked before any
    campaign runs: a typo in the last must not cost the first's whole run. ValueError names the bad item."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise ValueError(f"--multipliers: expected numbers or 'uncapped', separated by commas, got {text!r}")
    multipliers = []
    for item in items:
        try:
            multipliers.append(parse_multiplier(item))
        except ValueError:
            raise ValueError(
                f"--multipliers: {item!r} is not a positive number (such as 3 or 3x) or 'uncapped'"
            ) from None
    return multipliers


def multiplier_label(multiplier: float | None) -> str:
    return "uncapped" if multiplier is None else f"x{multiplier:g}"


def at_multiplier(campaign: Campaign, multiplier: float | None) -> Campaign:
    """The campaign with its ceilings scaled by `multiplier` (None: uncapped), under its own name."""
    return replace(
        campaign,
        name=f"{campaign.name}_{multiplier_label(multiplier).replace('.', '_')}",
        resources=campaign.resources.with_multiplier(multiplier),
        gates=(),  # release gates judge the campaign as configured, not its calibration runs
    )


def calibration_rows(reports: Mapping[str, Report]) -> list[dict[str, Any]]:
    """One row per multiplier, slice and variant: resolved rate, interval, infrastructure error rate, coverage."""
    return [
        {
            "multiplier": multiplier,
            "slice": row.slice,
            "variant": row.variant,
            "resolved_rate": row.summary.resolved_rate,
            "ci_low": row.summary.ci_low,
            "ci_high": row.summary.ci_high,
            "infrastructure_error_rate": row.summary.infrastructure_error_rate,
            "coverage": row.summary.coverage,
        }
        for multiplier, report in reports.items()
        for row in report.rows()
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
