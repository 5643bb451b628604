"""Where a campaign's tasks come from (a dataset source per slice) and the portfolio of its slices."""

from eval_pipeline.datasets.config import DemoSource, SweBenchSource, TerminalSource, parse_source
from eval_pipeline.datasets.portfolio import DuplicateInstanceError, Portfolio
from eval_pipeline.datasets.sources import DatasetSourceError, load_portfolio, write_snapshot

__all__ = [
    "DatasetSourceError",
    "DemoSource",
    "DuplicateInstanceError",
    "Portfolio",
    "SweBenchSource",
    "TerminalSource",
    "load_portfolio",
    "parse_source",
    "write_snapshot",
]
