"""eval_pipeline: evaluate AI coding agents at scale, as a Dagster code location.

The domain core (benchmarks, sandboxes, agents, grading, statistics) is plain
Python; `eval_pipeline.defs` is the thin Dagster layer on top of it.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    HARNESS_VERSION = version("eval_pipeline")
except PackageNotFoundError:  # running from a source tree that was never installed
    HARNESS_VERSION = "0.0.0+source"
