"""Tests of eval_pipeline.agents."""
