"""What a campaign's trials run with: the artifact store, and one sandbox per campaign and resources.

The assets, the command line and the orchestration all reach the store and the sandboxes through a
`Harness`, so that they are built in one place and once per process: a backend is a small object, but building
one per trial step (as a lambda per call site did) hid which trials share one, and the store holds an S3 client
and its connections. The Dagster resource (defs/resources.py) is a thin wrapper around `harness_at`.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from threading import Lock

from eval_pipeline.common.settings import Deployment, Paths
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.sandbox import SandboxBackend, make_sandbox
from eval_pipeline.store.artifacts import ArtifactStore, S3ArtifactStore, open_artifact_store
from eval_pipeline.tasks.task import Task

__all__ = ["Harness", "harness_at"]


@dataclass
class Harness:
    """The data directory (EVAL_PIPELINE_DATA_DIR), the artifact store at `artifacts` (EVAL_PIPELINE_ARTIFACTS:
    `s3://bucket/prefix`, or empty for the data directory's `artifacts/`), and the sandboxes built there."""

    paths: Paths
    artifacts: str = ""
    _sandboxes: dict[tuple[object, ...], SandboxBackend] = field(default_factory=dict, repr=False)
    _lock: Lock = field(default_factory=Lock, repr=False)

    @classmethod
    def from_env(cls, paths: Paths | None = None) -> "Harness":
        """The harness at `paths` (by default the environment's) with the deployment's artifact store."""
        return harness_at(str((paths or Paths.from_env()).data_dir), Deployment.from_env().artifacts or "")

    @cached_property
    def store(self) -> ArtifactStore:
        return open_artifact_store(self.artifacts or str(self.paths.artifacts))

    def sandbox(self, campaign: Campaign, task: Task | None = None) -> SandboxBackend:
        """The campaign's sandbox, under `task`'s own resources when given (terminal tasks set theirs): one per
        campaign and resources, shared by every trial that runs under them."""
        limits = campaign.limits_for(task)
        key = (campaign.name, repr(campaign.sandbox), limits, campaign.network)
        with self._lock:
            if key not in self._sandboxes:
                self._sandboxes[key] = make_sandbox(
                    campaign.sandbox, self.paths.sandboxes, limits, campaign.name, campaign.network
                )
            return self._sandboxes[key]

    def sandbox_for(self, campaign: Campaign) -> Callable[[Task], SandboxBackend]:
        """A task's sandbox in `campaign`, as the trial specifications and the batch runner ask for it."""
        return lambda task: self.sandbox(campaign, task)

    def _shared_key(self, path: Path) -> str:
        return f"files/{path.relative_to(self.paths.data_dir)}"

    def publish(self, path: Path) -> str:
        """Where a file written under the data directory (snapshot, warehouse, report) can be found later.

        With artifacts on S3 the data directory is a pod's scratch space, so the file is copied beside
        the artifacts (under `files/`) and outlives the pod; locally it stays where it is.
        """
        store = self.store
        return store.upload(path, self._shared_key(path)) if isinstance(store, S3ArtifactStore) else str(path)

    def fetch(self, path: Path) -> Path:
        """`path`, downloaded from where `publish` put it when this process has not got it (another pod wrote it)."""
        if not path.exists() and isinstance(self.store, S3ArtifactStore):
            self.store.download(self._shared_key(path), path)
        return path


def harness_at(data_dir: str, artifacts: str = "") -> Harness:
    """This process's harness for a data directory and artifact location, made once."""
    return _harness(data_dir, artifacts)


@cache
def _harness(data_dir: str, artifacts: str) -> Harness:
    return Harness(Paths(Path(data_dir)), artifacts)
