"""Tests of eval_pipeline.grading."""
