"""An instance's environment build and start, with every failure kept as an attempt.

When an environment cannot be built or started (an image that does not build,
an engine that does not answer), none of the instance's trials can run. The
failure is an infrastructure outcome for all of them: it is kept in the
attempt log (under `attempts/environment/`) so that the results table says why
those trials never ran (rather than `missing`), and raised so that the step is
retried.
"""

from contextlib import AbstractContextManager

from eval_pipeline.artifacts import ArtifactStore
from eval_pipeline.attempt_log import Stage, environment_artifact_key, failures_kept


def environment_attempt(store: ArtifactStore, instance_id: str, environment_key: str) -> AbstractContextManager[None]:
    """Keep an infrastructure failure inside the block as a failed attempt at the environment, and re-raise it."""
    keys = {"environment": environment_key, "instance_id": instance_id}
    return failures_kept(store, Stage.ENVIRONMENT, environment_artifact_key(environment_key), keys)
