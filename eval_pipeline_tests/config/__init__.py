"""Tests of eval_pipeline.config."""
