"""The one resource the assets need: where data lives, and the stores and sandboxes there."""

from pathlib import Path
from typing import Any

from dagster import ConfigurableResource

from eval_pipeline.artifacts import ArtifactStore, open_artifact_store
from eval_pipeline.campaign import Campaign
from eval_pipeline.sandbox import SandboxBackend, make_sandbox
from eval_pipeline.settings import Paths


class EvalPipelineResource(ConfigurableResource):
    """eval_pipeline's storage root (EVAL_PIPELINE_DATA_DIR), its artifact store, and the backends built on them.

    `artifacts` is the artifact store's location (EVAL_PIPELINE_ARTIFACTS: `s3://bucket/prefix`), or
    empty for the data directory's `artifacts/`.
    """

    data_dir: str
    artifacts: str = ""

    @property
    def paths(self) -> Paths:
        return Paths(Path(self.data_dir))

    def artifact_store(self) -> ArtifactStore:
        return open_artifact_store(self.artifacts or str(self.paths.artifacts))

    def sandbox(self, campaign: Campaign, task: Any = None) -> SandboxBackend:
        """The campaign's sandbox, under `task`'s own resources when given (terminal tasks set theirs)."""
        return make_sandbox(campaign.sandbox, self.paths.sandboxes, campaign.limits_for(task), campaign.name)
