"""The artifact store (local or S3, every record sealed with the results key) and the attempt log kept in it."""

from eval_pipeline.store.artifacts import (
    ArtifactStore,
    LocalArtifactStore,
    RecordError,
    S3ArtifactStore,
    StoredRecord,
    open_artifact_store,
)
from eval_pipeline.store.attempts import Attempt, AttemptLog, Stage, attempts, environment_attempt, failures_kept
from eval_pipeline.store.mac import RecordMac, ResultsKeyError

__all__ = [
    "ArtifactStore",
    "Attempt",
    "AttemptLog",
    "LocalArtifactStore",
    "RecordError",
    "RecordMac",
    "ResultsKeyError",
    "S3ArtifactStore",
    "Stage",
    "StoredRecord",
    "attempts",
    "environment_attempt",
    "failures_kept",
    "open_artifact_store",
]
