"""The one public copy of a SWE-rebench row reachable from this machine, cut from its public source.

nebius/SWE-rebench is published on Hugging Face only. animaios/animamunchmcp's benchmark vendors one of its rows,
`0b01001001__spectree-64`, as a dict literal (FALLBACK_TASK), without the row's patch, test patch and
install_config.test_cmd: the tests (tasks/swebench/test_rebench_rows.py) and the population table
(benchmarks/dataset_population.py) read it as that file holds it. Nothing of it is committed.
"""

import ast

from eval_pipeline_tests.support.real_data import FilesFixture, provide

__all__ = ["PUBLISHED_ROW", "published_rebench_row"]

PUBLISHED_ROW = FilesFixture(
    "animaios/animamunchmcp",
    "ee4f2469acfe54a811b758888e27499636024c77",
    ("/benchmarks/mcp_vs_direct/benchmark_mcp_vs_direct.py",),
)


def published_rebench_row() -> dict:
    """SWE-rebench's spectree row as the benchmark file vendors it."""
    source = (provide(PUBLISHED_ROW) / PUBLISHED_ROW.paths[0].lstrip("/")).read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "FALLBACK_TASK":
            return ast.literal_eval(node.value)
    raise AssertionError("the vendored row is not in the file at the pinned commit")
