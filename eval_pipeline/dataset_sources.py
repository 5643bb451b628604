"""Where a campaign's benchmark comes from: the `benchmark:` section of a campaign."""

from collections.abc import Mapping
from typing import Any

from eval_pipeline.benchmark import Benchmark
from eval_pipeline.demo_benchmark import build_demo_benchmark
from eval_pipeline.settings import Paths


def load_benchmark(source: Mapping[str, Any], paths: Paths) -> Benchmark:
    """The benchmark a campaign names; `kind` selects the loader."""
    kind = source.get("kind")
    if kind == "demo":
        return build_demo_benchmark(paths.mirrors)
    raise ValueError(f"benchmark.kind: unknown kind {kind!r} (known: demo)")
