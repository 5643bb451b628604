"""Tests of eval_pipeline.trial."""
