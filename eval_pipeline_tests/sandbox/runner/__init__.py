"""Tests of eval_pipeline.sandbox.runner."""
