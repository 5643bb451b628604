"""Tests of eval_pipeline.cli."""
