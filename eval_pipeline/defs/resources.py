"""The one resource the assets need: the harness (trial/harness.py) at the deployment's data directory."""

from dagster import ConfigurableResource

from eval_pipeline.common.settings import Deployment, Paths
from eval_pipeline.trial.harness import Harness, harness_at


class EvalPipelineResource(ConfigurableResource):
    """eval_pipeline's storage root (EVAL_PIPELINE_DATA_DIR) and its artifact store's location
    (EVAL_PIPELINE_ARTIFACTS: `s3://bucket/prefix`, or empty for the data directory's `artifacts/`): the
    configuration Dagster shows and passes to run workers. Everything else is the harness's."""

    data_dir: str
    artifacts: str = ""

    @classmethod
    def for_deployment(cls, paths: Paths, deployment: Deployment) -> "EvalPipelineResource":
        return cls(data_dir=str(paths.data_dir), artifacts=deployment.artifacts or "")

    @property
    def harness(self) -> Harness:
        return harness_at(self.data_dir, self.artifacts)
