"""What a campaign's trials add up to: the results warehouse (DuckDB), the report with its statistics and
gates, its markdown and HTML renderings, trajectories, per-trial folders and calibration."""

from eval_pipeline.results.export import export_trials
from eval_pipeline.results.gates import evaluate_gate, with_gates
from eval_pipeline.results.model import Report, load_report
from eval_pipeline.results.report import build_report, write_report
from eval_pipeline.results.warehouse import Warehouse, collect_warehouse, read_results_table, write_warehouse

__all__ = [
    "Report",
    "Warehouse",
    "build_report",
    "collect_warehouse",
    "evaluate_gate",
    "export_trials",
    "load_report",
    "read_results_table",
    "with_gates",
    "write_report",
    "write_warehouse",
]
