"""Tests of eval_pipeline.orchestration."""
