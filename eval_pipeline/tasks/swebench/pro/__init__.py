"""SWE-bench Pro rows as tasks: each row with its own run script and parser, run in the image it names, and graded
as its authors grade it with the parser out of the patch's reach (grading.py, report.py)."""

from eval_pipeline.tasks.swebench.pro.instance import ProInstance, benchmark_from_pro_rows

__all__ = ["ProInstance", "benchmark_from_pro_rows"]
