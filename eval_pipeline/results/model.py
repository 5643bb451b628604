"""The campaign report as one typed model: what report.json holds and what every reader of it reads.

The markdown and HTML reports, the release gates, the CLI's summaries and
resource calibration all read these attributes, so a number is named once
and a renamed field fails where it is read, not as a missing key at run time.
report.json is `Report.model_dump(mode="json")`; `load_report` reads one back
and validates it. `REPORT_SCHEMA_VERSION` changes whenever a field is added,
removed or changes meaning, and `load_report` refuses a file of another
version (the campaign's next run rewrites it) rather than guess.

The definitions of the numbers are in docs/STATISTICS.md; results/report.py computes them.
"""

import json
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError

from eval_pipeline.common.fields import describe_errors, problem_lines

REPORT_SCHEMA_VERSION = 3
PORTFOLIO = "all"  # the label of the rows that summarise every slice together
REPORT_FILES = {"markdown": "report.md", "html": "report.html", "json": "report.json"}
ID_LISTS = ("resolved_ids", "unresolved_ids", "empty_patch_ids", "error_ids", "incomplete_ids")


class ReportError(ValueError):
    """A report.json that cannot be used; the message names the file and, where one is wrong, the field."""


class _Model(BaseModel):
    """Frozen: a report is a record of what was measured; readers never change it."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class SeedSpread(_Model):
    """Each seed's rate over the instances scored for every seed, and their spread."""

    seeds: tuple[int, ...]
    rates: tuple[float, ...]
    min: float
    max: float
    sd: float | None


class Durations(_Model):
    """Median and p95 of scored trials' durations (generation plus evaluation), in seconds."""

    median: float | None
    p95: float | None


class PairedComparison(_Model):
    """A variant minus the baseline on the instances scored for both (None where undefined, n 0 without any)."""

    baseline: str
    n: int
    diff: float | None = None
    se: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    correlation: float | None = None
    mde: float | None = None


class VariantSummary(_Model):
    """Every number the report gives for one variant, on one slice or over the whole portfolio.

    Rates and intervals are None when no trial was scored; `ci_*` cluster by
    instance, `ci_repo_*` by repository (only where instances share one).
    """

    planned: int
    scored: int
    resolved: int
    coverage: float
    outcomes: dict[str, int]
    outcome_kinds: dict[str, int]
    infrastructure_error_rate: float
    # Trials stopped by the memory ceiling or the time limit: scored as failures where the tests hit a limit the
    # reference passes within (patch_oom_killed, patch_test_timeout), else infrastructure (oom_killed,
    # test_timeout). trial/limits.py and trial/evaluation.py's intention to treat say which is which.
    limits_scored: int
    limits_unscored: int
    hard_violations: int
    audit_flags: dict[str, int]  # trials whose patch raised each audit flag (grading/patch_audit.py), scored or not
    resolved_rate: float | None
    n: int
    n_repos: int
    se: float | None
    ci_low: float | None
    ci_high: float | None
    se_repo: float | None
    ci_repo_low: float | None
    ci_repo_high: float | None
    seed_spread: SeedSpread | None
    pass_at_k: dict[int, float]
    planning_mde: float | None
    duration_s: Durations
    tokens_per_resolved: float | None
    cost_usd: float
    cost_per_resolved: float | None
    vs_baseline: PairedComparison | None = None  # every variant but the baseline, when the baseline ran
    # SWE-bench's report lists: the instance ids whose trial ended resolved; scored and not resolved with a patch
    # (or an agent's failure); scored and not resolved with no change at all; unscored (an infrastructure or
    # harness outcome: the harness could not judge); not run yet. results/report.py: `id_list`.
    resolved_ids: list[str]
    unresolved_ids: list[str]
    empty_patch_ids: list[str]
    error_ids: list[str]
    incomplete_ids: list[str]

    def headline(self) -> dict[str, Any]:
        """The numbers a summary line gives: rate with interval, instances, coverage and outcomes, and the
        instance ids by verdict."""
        return self.model_dump(
            mode="json",
            include={
                "resolved_rate",
                "n",
                "ci_low",
                "ci_high",
                "scored",
                "planned",
                "coverage",
                "outcomes",
                *ID_LISTS,
            },
        )


class InvalidInstance(_Model):
    """An instance whose validation found it not valid, and whether this campaign evaluated it anyway."""

    instance_id: str
    slice: str
    status: str
    gold_resolved: int
    gold_runs: int
    empty_resolved: int
    empty_runs: int
    evaluated: bool
    detail: str


class ValidationSummary(_Model):
    """How the campaign's instances fared in their validation (trial/validation.py)."""

    validated: int
    statuses: dict[str, int]
    not_valid: list[InvalidInstance]
    unvalidated: list[str]  # evaluated here without a validation of their current content


class Violation(_Model):
    """One gate rule broken on one slice: the measured value against the policy's limit."""

    rule: str
    slice: str
    value: float | None
    limit: float
    message: str


class GateDecision(_Model):
    """Whether a release gate lets the candidate be promoted to its environment, and every rule it broke."""

    environment: str
    candidate: str
    baseline: str
    passed: bool
    violations: tuple[Violation, ...]


class RejectedRecordEntry(_Model):
    """A stored record of a trial that was not counted (artifacts.Rejection: forged, unauthenticated, altered,
    damaged), kept in quarantine; its trial is not scored by it and runs again."""

    instance_id: str
    trial: str
    key: str
    reason: str
    quarantined_as: str


class ReportRow(NamedTuple):
    """One line of a report's tables: a variant on a slice, or (`portfolio`) over every slice."""

    slice: str
    variant: str
    summary: VariantSummary
    portfolio: bool


class Report(_Model):
    """A campaign's numbers per variant, over the portfolio (`variants`) and per slice (`slices`)."""

    schema_version: int = REPORT_SCHEMA_VERSION
    campaign: str
    harness_version: str
    dataset_version: str
    plan_version: str
    quarantined_rows: int
    baseline: str
    planned: int
    scored: int
    coverage: float
    variants: dict[str, VariantSummary]
    slices: dict[str, dict[str, VariantSummary]]
    validation: ValidationSummary | None
    gates: dict[str, GateDecision] = {}  # environment -> decision, for each of the campaign's release gates
    rejected_records: list[RejectedRecordEntry] = []  # stored records refused: never counted in the numbers above
    directory: str | None = None  # where report.md, report.html and report.json are written

    def rows(self) -> list[ReportRow]:
        """Every slice's variants, then the whole portfolio's when there are several slices."""
        rows = [
            ReportRow(slice_name, name, summary, False)
            for slice_name, variants in self.slices.items()
            for name, summary in variants.items()
        ]
        if len(self.slices) > 1:
            rows += [ReportRow(PORTFOLIO, name, summary, True) for name, summary in self.variants.items()]
        return rows

    def paths(self) -> dict[str, str]:
        """The report's files by format (markdown, html, json); none for a report not written anywhere."""
        if self.directory is None:
            return {}
        return {form: str(Path(self.directory) / name) for form, name in REPORT_FILES.items()}

    def summary(self) -> dict[str, Any]:
        """What `eval-pipeline run --json` prints: the headline numbers per variant over the portfolio and
        per slice, each gate's verdict, and where the full report is."""
        return {
            "campaign": self.campaign,
            "planned": self.planned,
            "scored": self.scored,
            "coverage": self.coverage,
            "dataset_version": self.dataset_version,
            "variants": {name: summary.headline() for name, summary in self.variants.items()},
            "slices": {
                slice_name: {name: summary.headline() for name, summary in variants.items()}
                for slice_name, variants in self.slices.items()
            },
            "gates": {environment: decision.passed for environment, decision in self.gates.items()},
            "rejected_records": len(self.rejected_records),
            "report": self.paths(),
        }


def load_report(path: Path) -> Report:
    """A stored report.json, validated; ReportError naming the file when it cannot be read or used."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ReportError(f"report {path}: {error}") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != REPORT_SCHEMA_VERSION:
        raise ReportError(
            f"report {path}: schema version {version}, this eval-pipeline reads {REPORT_SCHEMA_VERSION};"
            " run the campaign again to rewrite it"
        )
    try:
        return Report.model_validate(data)
    except ValidationError as error:
        raise ReportError(problem_lines(f"report {path}", describe_errors(error, Report))) from None
