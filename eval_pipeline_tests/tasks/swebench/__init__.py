"""Tests of eval_pipeline.tasks.swebench."""
