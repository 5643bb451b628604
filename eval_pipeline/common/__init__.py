"""What every layer uses: stable hashes, the typed outcomes, git, where state lives (settings), typed
configuration fields and small text helpers. Imports nothing else of eval_pipeline."""

from eval_pipeline.common.hashing import canonical_json, sha256_text, stable_hash
from eval_pipeline.common.outcomes import InfrastructureError, Outcome, OutcomeKind
from eval_pipeline.common.settings import Deployment, DeploymentError, Paths, dagster_home

__all__ = [
    "Deployment",
    "DeploymentError",
    "InfrastructureError",
    "Outcome",
    "OutcomeKind",
    "Paths",
    "canonical_json",
    "dagster_home",
    "sha256_text",
    "stable_hash",
]
