"""Whole campaigns and servers as a user runs them: the CLI, `dagster dev`, faults injected for real."""
