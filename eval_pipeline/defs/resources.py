"""The one resource the assets need: where data lives, and the stores and sandboxes there."""

from pathlib import Path

from dagster import ConfigurableResource

from eval_pipeline.common.settings import Deployment, Paths
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.sandbox import SandboxBackend, make_sandbox
from eval_pipeline.store.artifacts import ArtifactStore, S3ArtifactStore, open_artifact_store
from eval_pipeline.tasks.task import Task


class EvalPipelineResource(ConfigurableResource):
    """eval_pipeline's storage root (EVAL_PIPELINE_DATA_DIR), its artifact store, and the backends built on them.

    `artifacts` is the artifact store's location (EVAL_PIPELINE_ARTIFACTS: `s3://bucket/prefix`), or
    empty for the data directory's `artifacts/`.
    """

    data_dir: str
    artifacts: str = ""

    @classmethod
    def for_deployment(cls, paths: Paths, deployment: Deployment) -> "EvalPipelineResource":
        return cls(data_dir=str(paths.data_dir), artifacts=deployment.artifacts or "")

    @property
    def paths(self) -> Paths:
        return Paths(Path(self.data_dir))

    def artifact_store(self) -> ArtifactStore:
        return open_artifact_store(self.artifacts or str(self.paths.artifacts))

    def _shared_key(self, path: Path) -> str:
        return f"files/{path.relative_to(self.paths.data_dir)}"

    def publish(self, path: Path) -> str:
        """Where a file written under the data directory (snapshot, warehouse, report) can be found later.

        With artifacts on S3 the data directory is a pod's scratch space, so the file is copied beside
        the artifacts (under `files/`) and outlives the pod; locally it stays where it is.
        """
        store = self.artifact_store()
        return store.upload(path, self._shared_key(path)) if isinstance(store, S3ArtifactStore) else str(path)

    def fetch(self, path: Path) -> Path:
        """`path`, downloaded from where `publish` put it when this process has not got it (another pod wrote it)."""
        store = self.artifact_store()
        if not path.exists() and isinstance(store, S3ArtifactStore):
            store.download(self._shared_key(path), path)
        return path

    def sandbox(self, campaign: Campaign, task: Task | None = None) -> SandboxBackend:
        """The campaign's sandbox, under `task`'s own resources when given (terminal tasks set theirs)."""
        return make_sandbox(
            campaign.sandbox, self.paths.sandboxes, campaign.limits_for(task), campaign.name, campaign.network
        )
