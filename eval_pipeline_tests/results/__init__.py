"""Tests of eval_pipeline.results."""
