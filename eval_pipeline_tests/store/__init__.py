"""Tests of eval_pipeline.store."""
