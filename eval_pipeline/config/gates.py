"""Release gates: whether a campaign's report lets its candidate variant be promoted to an environment.

A policy file (one per environment: staging, prod) sets, for the candidate
variant:

- `floors`: the lowest resolved rate per slice (`"*"` for every slice not
  named). Each slice is checked on its own, so a slice below its floor blocks
  promotion even when the portfolio's rate rises.
- `max_regression`: the largest tolerated regression against the campaign's
  baseline variant, on every slice: `resolved_rate` in rate points (the paired
  difference, candidate minus baseline, may not fall below minus this);
  `p95_duration` and `cost_per_resolved` as fractions above the baseline's.
- `max_hard_violations` (default 0): scored trials whose patch reached for the
  test runner: changed test infrastructure (conftest.py, test files, pytest
  settings), which the grader undid, raised a patch audit flag, or forged its
  report (`report_forged`); an attempt to game the grader is never tolerated
  by default.
- `min_coverage` (default 0): the share of planned trials that were scored.

Evaluating a policy is a pure function of the policy and the report; its
decision (results/model.py: GateDecision; passed, and every violation with its
rule, slice, measured value and limit) is stored in the report itself, which
the CLI, the HTML report and the Dagster gate checks read.
"""

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from eval_pipeline.common.fields import describe_errors, problem_lines

ANY_SLICE = "*"
Limit = Annotated[float, Field(ge=0, strict=True)]  # strict: `true` or "0.5" in a policy is a mistake, not a number


class GatePolicyError(ValueError):
    """A policy file that cannot be used; the message names the file and field."""


class GatePolicy(BaseModel):
    """One environment's release gate, as its policy file sets it (every field validated at load)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    environment: Annotated[str, Field(min_length=1, strict=True)]
    candidate: Annotated[str, Field(min_length=1, strict=True)]
    floors: dict[str, Limit] = {}
    max_regression: dict[Literal["resolved_rate", "p95_duration", "cost_per_resolved"], Limit] = {}
    max_hard_violations: Annotated[int, Field(ge=0, strict=True)] = 0
    min_coverage: Limit = 0.0

    @field_validator("floors", "max_regression", mode="before")
    @classmethod
    def _empty_mapping(cls, value: Any) -> Any:
        """`floors:` with nothing under it is YAML's null: no floors, as when the field is left out."""
        return {} if value is None else value

    def floor_for(self, slice_name: str) -> float | None:
        return self.floors.get(slice_name, self.floors.get(ANY_SLICE))


def parse_policy(data: Any, origin: str) -> GatePolicy:
    """A GatePolicy from parsed YAML; `origin` names the file in error messages."""
    try:
        return GatePolicy.model_validate(data)
    except ValidationError as error:
        raise GatePolicyError(problem_lines(origin, describe_errors(error, GatePolicy))) from None


def load_policy(path: Path) -> GatePolicy:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise GatePolicyError(f"gate policy {path}: cannot be read: {error}") from None
    except yaml.YAMLError as error:
        raise GatePolicyError(f"{path}: not valid YAML: {error}") from None
    return parse_policy(data, str(path))
