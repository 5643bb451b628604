"""The command line's drivers: they request runs of the code location's jobs and tell what each did.

Dagster executes every run; `defs/progress.py` decides what a cycle needs next, for the CLI and the
nightly sensor alike. The modules are imported by name (campaign_run, validation_run, driver, launchers;
run_workers, errors and instance_config, which import no Dagster; sqlite_storage, postgres_storage), so that the light ones stay
light: this package re-exports nothing.
"""

__all__: list[str] = []
