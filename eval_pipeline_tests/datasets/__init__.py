"""Tests of eval_pipeline.datasets."""
