"""Tests of eval_pipeline.testing."""
