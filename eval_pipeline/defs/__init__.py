"""The Dagster layer's definitions, built per campaign from the plain core: assets by domain (dataset,
environments, trials, results; validation and release), partitions, checks, sensors and schedules, the
resource that wraps the harness (location.py: `build_definitions`).

The stages (stages.py) are imported here and light; the definitions, which load the asset graph and Dagster,
only when first asked for, so that what needs a stage's name (the instance settings) does not pay for them.
"""

from typing import Any

from eval_pipeline.defs.stages import (
    RELEASE_STAGE,
    STAGE_TAG,
    VALIDATION_REPORT_STAGE,
    VALIDATION_STAGE,
    stage_job_name,
)

__all__ = [
    "RELEASE_STAGE",
    "STAGE_TAG",
    "VALIDATION_REPORT_STAGE",
    "VALIDATION_STAGE",
    "build_definitions",
    "stage_job_name",
]


def __getattr__(name: str) -> Any:
    if name == "build_definitions":
        from eval_pipeline.defs.location import build_definitions

        return build_definitions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
