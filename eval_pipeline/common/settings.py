"""Where eval_pipeline keeps its state, chosen by environment variables.

- ``DAGSTER_HOME``: the Dagster instance (SQLite storage by default). The CLI
  uses ``~/.eval_pipeline/dagster_home`` when it is unset.
- ``EVAL_PIPELINE_DATA_DIR``: artifacts, prepared environments, workspaces,
  demo repositories, result tables and reports. Defaults to
  ``$DAGSTER_HOME/eval_pipeline`` so one directory holds a whole installation.

`Deployment` reads the variables that move a campaign from the embedded
default to production (PostgreSQL, S3, Kubernetes) without a code change.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


def split_s3_location(location: str) -> tuple[str, str]:
    """`s3://bucket/some/prefix/` as ("bucket", "some/prefix")."""
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    if not location.startswith("s3://") or not bucket:
        raise ValueError(f"artifact location {location!r} names no bucket (expected s3://bucket[/prefix])")
    return bucket, prefix.strip("/")


# The results key (store/mac.py): where production sets it; read by store/mac.py, checked by `Deployment`.
RESULTS_KEY_VARIABLE = "EVAL_PIPELINE_RESULTS_KEY"
DEFAULT_DAGSTER_HOME = Path.home() / ".eval_pipeline" / "dagster_home"


def dagster_home() -> Path:
    return Path(os.environ.get("DAGSTER_HOME") or DEFAULT_DAGSTER_HOME)


@dataclass(frozen=True)
class Paths:
    """The directory layout under the data directory."""

    data_dir: Path

    @classmethod
    def from_env(cls) -> "Paths":
        configured = os.environ.get("EVAL_PIPELINE_DATA_DIR")
        return cls(Path(configured) if configured else dagster_home() / "eval_pipeline")

    @property
    def artifacts(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def sandboxes(self) -> Path:
        return self.data_dir / "sandboxes"

    @property
    def mirrors(self) -> Path:
        return self.data_dir / "mirrors"

    @property
    def results(self) -> Path:
        return self.data_dir / "results"

    @property
    def snapshots(self) -> Path:
        return self.data_dir / "snapshots"

    @property
    def reports(self) -> Path:
        return self.data_dir / "reports"


EXECUTORS = ("in_process", "k8s")
POSTGRES_SCHEME = "postgresql+psycopg2://"


class DeploymentError(ValueError):
    """A deployment variable has a value that cannot be used; the message names the variable."""


@dataclass(frozen=True)
class Deployment:
    """The embedded default (every field unset) or a production deployment.

    - ``EVAL_PIPELINE_POSTGRES_URL``: Dagster's run, event and schedule storage
      on PostgreSQL (``postgresql+psycopg2://user:password@host:port/database``:
      Dagster's storage needs the psycopg2 driver, which SQLAlchemy 2.1 no longer
      picks for a bare ``postgresql://``). dagster.yaml refers to the variable, so
      the password stays out of files.
    - ``EVAL_PIPELINE_ARTIFACTS``: ``s3://bucket/prefix`` puts artifacts under
      ``prefix/``, step outputs under ``prefix/io/`` and compute logs under
      ``prefix/compute-logs/``; the standard AWS variables (``AWS_ENDPOINT_URL``
      for S3-compatible servers, credentials, region) reach the server.
    - ``EVAL_PIPELINE_EXECUTOR``: ``in_process`` (default; a run's few steps in
      its run worker) or ``k8s`` (a Kubernetes job per step, sized by its
      ``dagster-k8s/config`` tag).
    - ``EVAL_PIPELINE_MAX_CONCURRENT_RUNS``: the run queue's limit (default 8).
    - ``KUBERNETES_SERVICE_HOST`` (set by Kubernetes in every pod): the code
      location runs on a cluster, where each run is a pod sized by its job's
      ``dagster-k8s/config`` tag; elsewhere that tag would be noise on every run.
      There ``EVAL_PIPELINE_RESULTS_KEY`` must be set (from a Secret): each pod
      has its own DAGSTER_HOME, so a key file there would differ from pod to
      pod, and every result one pod stored would be rejected by the next.
    """

    postgres_url: str | None = None
    artifacts: str | None = None
    executor: str = "in_process"
    max_concurrent_runs: int = 8
    on_kubernetes: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "Deployment":
        artifacts = environ.get("EVAL_PIPELINE_ARTIFACTS") or None
        if artifacts:
            try:
                split_s3_location(artifacts)
            except ValueError as error:
                raise DeploymentError(f"EVAL_PIPELINE_ARTIFACTS: {error}") from error
        postgres_url = environ.get("EVAL_PIPELINE_POSTGRES_URL") or None
        if postgres_url and not postgres_url.startswith(POSTGRES_SCHEME):
            raise DeploymentError(
                f"EVAL_PIPELINE_POSTGRES_URL must start with {POSTGRES_SCHEME} (Dagster's PostgreSQL storage"
                f" runs on psycopg2), got {postgres_url.partition('://')[0]}://..."
            )
        executor = environ.get("EVAL_PIPELINE_EXECUTOR") or "in_process"
        if executor not in EXECUTORS:
            raise DeploymentError(f"EVAL_PIPELINE_EXECUTOR must be one of {EXECUTORS}, got {executor!r}")
        runs = environ.get("EVAL_PIPELINE_MAX_CONCURRENT_RUNS") or "8"
        if not runs.isdigit() or int(runs) < 1:
            raise DeploymentError(f"EVAL_PIPELINE_MAX_CONCURRENT_RUNS must be a positive integer, got {runs!r}")
        on_kubernetes = bool(environ.get("KUBERNETES_SERVICE_HOST"))
        if on_kubernetes and not environ.get(RESULTS_KEY_VARIABLE):
            raise DeploymentError(
                f"{RESULTS_KEY_VARIABLE} must be set on Kubernetes (k8s/results-key-secret.example.yaml): a key"
                " file in a pod's DAGSTER_HOME differs from pod to pod, so stored results could not be verified"
            )
        return cls(postgres_url, artifacts, executor, int(runs), on_kubernetes)

    @property
    def s3_bucket(self) -> str | None:
        return split_s3_location(self.artifacts)[0] if self.artifacts else None

    def s3_prefix(self, *parts: str) -> str:
        """The key prefix under the artifacts' bucket for `parts` (no trailing slash)."""
        base = split_s3_location(self.artifacts)[1] if self.artifacts else ""
        return "/".join(p for p in (base, *parts) if p)
