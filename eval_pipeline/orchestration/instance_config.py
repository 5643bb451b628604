"""The Dagster instance's settings (dagster.yaml) for the embedded default or a production deployment.

One function renders both, so the repository's dagster.yaml (the embedded
default, checked against this module by a test) and a production DAGSTER_HOME
share their policies: run retries, run monitoring, and a run queue with tag
concurrency limits. Production adds PostgreSQL storage (its connections held) and compute logs on S3; a
DAGSTER_HOME of the command's own captures compute logs to files only.
On Kubernetes the Dagster Helm chart writes dagster.yaml; k8s/values.yaml sets
the same policies there.
"""

import os
from pathlib import Path
from typing import Any

import yaml

from eval_pipeline.common.settings import Deployment
from eval_pipeline.defs.stages import STAGE_TAG
from eval_pipeline.results.report import write_text_atomically

# The header that marks a dagster.yaml as ours, to rewrite: it keeps the module's old path, so that the files
# written before the package move are still recognised.
# A file starting with the mark is ours to rewrite (files written before the module moved name its old path).
GENERATED_MARK = "# Written by eval-pipeline from its environment variables"
GENERATED_HEADER = f"{GENERATED_MARK} (eval_pipeline/orchestration/instance_config.py)."


# Settings Dagster reads from the environment of the process that creates runs (this CLI, the daemon for
# backfills, sensors and run retries, the webserver for runs launched from the UI), never from dagster.yaml.
# DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS: a run of a range of trial partitions records one "planned"
# event per asset and the range, not one per asset and partition. Without it, a 64-trial run writes 128 events
# (on SQLite a connection and a commit each) before it starts, and Dagster's daemon queues a 16k-trial backfill
# at about 45 partitions a second (docs/SCALE.md). The cost: the asset's Partitions tab does not mark a
# failed run's partitions failed, only missing; the `resolved` check's partitions show why, by trial.
PROCESS_ENVIRONMENT = {"DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS": "1"}


def held_sqlite_storage(home: Path) -> dict[str, Any]:
    """The embedded default's storage in the DAGSTER_HOME `home`: Dagster's SQLite files in their usual places,
    their connections held (orchestration/sqlite_storage.py). The eval-pipeline command rewrites the path
    whenever the home it runs in has moved."""
    module = "eval_pipeline.orchestration.sqlite_storage"
    return {"custom": {"module": module, "class": "HeldSqliteStorage", "config": {"base_dir": str(home.resolve())}}}


def pooled_postgres_storage() -> dict[str, Any]:
    """The production storage: Dagster's PostgreSQL tables, one connection held per process
    (orchestration/postgres_storage.py). A reference to the URL, not the URL: the password stays in the
    environment, out of the file."""
    module = "eval_pipeline.orchestration.postgres_storage"
    config = {"postgres_url": {"env": "EVAL_PIPELINE_POSTGRES_URL"}}
    return {"custom": {"module": module, "class": "PooledPostgresStorage", "config": config}}


def file_compute_logs(home: Path) -> dict[str, Any]:
    """The embedded default's compute logs: Dagster's files in their usual place under `home`, captured without
    the copy to the worker's output (orchestration/compute_logs.py)."""
    module = "eval_pipeline.orchestration.compute_logs"
    return {"module": module, "class": "FileComputeLogManager", "config": {"base_dir": str(home.resolve() / "storage")}}


def use_process_environment() -> None:
    """Set PROCESS_ENVIRONMENT in this process, leaving any variable the user set as it is."""
    for name, value in PROCESS_ENVIRONMENT.items():
        os.environ.setdefault(name, value)


def instance_config(deployment: Deployment, home: Path | None = None) -> dict[str, Any]:
    """The settings for `deployment`, in the DAGSTER_HOME `home` when given: on the embedded default, its storage
    is then the held SQLite storage there. Without a home (the repository's file, which `dagster dev` reads for a
    temporary home of its own), Dagster's own SQLite storage."""
    config: dict[str, Any] = {
        "telemetry": {"enabled": False},
        # Runs wait in a queue; the daemon starts them within the limits under `concurrency`.
        "run_coordinator": {"module": "dagster.core.run_coordinator", "class": "QueuedRunCoordinator"},
        # A run whose worker crashed (SIGKILL, OOM-killed worker, lost node) is launched again. A run
        # whose steps failed is not: a step's retry policy already retried its infrastructure outcomes,
        # and agent outcomes must never be retried.
        "run_retries": {"enabled": True, "max_retries": 2, "retry_on_asset_or_op_failure": False},
        # Fails runs whose worker died or never started, so that run_retries can launch them again.
        "run_monitoring": {"enabled": True, "start_timeout_seconds": 180, "poll_interval_seconds": 30},
        "concurrency": {
            "runs": {
                "max_concurrent_runs": deployment.max_concurrent_runs,
                # Environment builds are heavy: at most two environment-stage runs at once.
                "tag_concurrency_limits": [{"key": STAGE_TAG, "value": "environments", "limit": 2}],
            },
            # Every pool unless set otherwise (`dagster instance concurrency set <pool> <limit>`):
            # eval_pipeline_environments (builds and pods started at once) and eval_pipeline_model_api
            # (agents running at once, each calling a model API).
            "pools": {"default_limit": 4, "granularity": "op"},
        },
    }
    if deployment.postgres_url:
        config["storage"] = pooled_postgres_storage()
    elif home:
        config["storage"] = held_sqlite_storage(home)
    if home and not deployment.s3_bucket:
        config["compute_logs"] = file_compute_logs(home)
    if deployment.s3_bucket:
        config["compute_logs"] = {
            "module": "dagster_aws.s3.compute_log_manager",
            "class": "S3ComputeLogManager",
            "config": {
                "bucket": deployment.s3_bucket,
                "prefix": deployment.s3_prefix("compute-logs"),
                # An empty log is not worth a request, and SeaweedFS stalls 60 s (a read timeout) on
                # the empty uploads Dagster's run workers make at the end of every run.
                "skip_empty_files": True,
            },
        }
    return config


def instance_yaml(deployment: Deployment, home: Path | None = None) -> str:
    environment = "".join(f"#   {name}={value}\n" for name, value in PROCESS_ENVIRONMENT.items())
    note = f"# Also set for dagster dev, the daemon and the webserver (eval-pipeline sets it itself):\n{environment}"
    return f"{GENERATED_HEADER}\n{note}" + yaml.safe_dump(instance_config(deployment, home), sort_keys=False)


def ensure_instance_config(home: Path, deployment: Deployment) -> bool:
    """Write `home`/dagster.yaml for `deployment` unless the user keeps a dagster.yaml of their own there.

    Returns whether it wrote the file. A file this function wrote before is rewritten, so a changed
    variable (say, EVAL_PIPELINE_POSTGRES_URL set for the first time) takes effect on the next run.
    """
    path = home / "dagster.yaml"
    if path.exists() and not path.read_text().startswith(GENERATED_MARK):
        return False
    text = instance_yaml(deployment, home)
    if not path.exists() or path.read_text() != text:
        write_text_atomically(path, text)
    return True
