"""eval_pipeline: evaluate AI coding agents at scale, as a Dagster code location.

The domain core (tasks, sandboxes, grading, agents, trials, results) is plain
Python in packages by concept, each layer importing only those below it (the
README's map; eval_pipeline_tests/test_structure.py checks it); `eval_pipeline.defs` and
`eval_pipeline.orchestration` are the thin Dagster layer on top of it.
"""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["HARNESS_VERSION"]

try:
    HARNESS_VERSION = version("eval_pipeline")
except PackageNotFoundError:  # running from a source tree that was never installed
    HARNESS_VERSION = "0.0.0+source"
