"""The command line's drivers: they request runs of the code location's jobs and tell what each did.

Dagster executes every run; `defs/progress.py` decides what a cycle needs next, for the CLI and the
nightly sensor alike.
"""
