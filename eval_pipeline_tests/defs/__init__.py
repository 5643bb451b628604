"""Tests of eval_pipeline.defs."""
