"""SWE-bench rows as tasks: the instance and its dataset, SWE-bench's own environment specs and log parsers,
and its grading (the test patch's tests, run through the harness's pytest launcher, with canaries and twins)."""

from eval_pipeline.tasks.swebench.grading import grade
from eval_pipeline.tasks.swebench.instance import Instance, benchmark_from_rows
from eval_pipeline.tasks.swebench.specs import UnsupportedSpecError, builtin_spec

__all__ = [
    "Instance",
    "UnsupportedSpecError",
    "benchmark_from_rows",
    "builtin_spec",
    "grade",
]
