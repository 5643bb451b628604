"""An instance's environment build and start, with every failure kept as an attempt.

When an environment cannot be built or started (an image that does not build,
an engine that does not answer), none of the instance's trials can run. The
failure is an infrastructure outcome for all of them: it is kept under
`attempts/environment/` so that the results table says why those trials never
ran (rather than `missing`), and raised so that the step is retried.
"""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from typing import Any

from eval_pipeline.artifacts import ArtifactStore, attempts_prefix
from eval_pipeline.hashing import stable_hash
from eval_pipeline.outcomes import InfrastructureError


def _prefix(environment_key: str) -> str:
    return attempts_prefix(f"environment/{stable_hash(environment_key)[:32]}")


@contextmanager
def environment_attempt(store: ArtifactStore, instance_id: str, environment_key: str) -> Iterator[None]:
    """Keep an infrastructure failure inside the block as a failed attempt at the environment, and re-raise it."""
    started_at = datetime.now(UTC).isoformat()
    try:
        yield
    except InfrastructureError as error:
        record = {
            "instance_id": instance_id,
            "environment_key": environment_key,
            "outcome": error.outcome.value,
            "detail": str(error)[-4000:],
            "started_at": started_at,
        }
        with suppress(InfrastructureError):  # a failing store cannot keep its own failure
            store.put(f"{_prefix(environment_key)}/{uuid.uuid4().hex}.json", record)
        raise


def environment_failures(store: ArtifactStore, environment_key: str) -> list[dict[str, Any]]:
    """The kept failed attempts at an environment, oldest first."""
    attempts = [payload for key in store.keys(_prefix(environment_key)) if (payload := store.get(key))]
    return sorted(attempts, key=lambda attempt: attempt["started_at"])
