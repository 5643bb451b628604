"""The attempt log: every attempt at a trial's stages, kept in the artifact store and never deleted.

An environment that would not build, a generation the infrastructure cut
short, every evaluation (final or not): each is one `Attempt` under
`attempts/`, next to the artifact it tried to make, so a retry adds a record
and the results say why a trial never finished. This module is the only one
that writes or reads them, so every stage's attempts have one shape.

Attempts written before the log existed (a whole Generation or Evaluation
record, or an environment's failure dict) are read into the same shape.
"""

import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.common.outcomes import InfrastructureError
from eval_pipeline.store.artifacts import ArtifactStore, StoredRecord, attempts_prefix


class Stage(StrEnum):
    ENVIRONMENT = "environment"
    GENERATION = "generation"
    EVALUATION = "evaluation"


class Attempt(StoredRecord):
    """One attempt at a stage: how it ended, when, for how long, and the keys of what it tried to make.

    `record` is the stage's own record when the attempt produced one (an
    evaluation's tests and steps), so a trial that never finished still shows
    what its last attempt measured (its peak memory, an OOM kill).
    """

    record_version: int = 2
    stage: Stage
    outcome: str
    started_at: str
    duration_s: float | None = None
    detail: str = ""
    keys: dict[str, str] = {}
    record: dict[str, Any] | None = None


def now() -> str:
    """An attempt's start time, as every stage records it."""
    return datetime.now(UTC).isoformat()


def environment_artifact_key(environment_key: str) -> str:
    """The name an environment's attempts are kept under (an environment key is an image tag or a path)."""
    return f"{Stage.ENVIRONMENT}/{stable_hash(environment_key)[:32]}"


def keep_attempt(store: ArtifactStore, artifact_key: str, attempt: Attempt) -> str:
    """Add `attempt` at `artifact_key` to the log (raising StorageError if it cannot be kept); its key."""
    key = f"{attempts_prefix(artifact_key)}/{attempt.keys.get('attempt_id') or uuid.uuid4().hex}.json"
    store.put(key, attempt.payload())
    return key


@contextmanager
def failures_kept(store: ArtifactStore, stage: Stage, artifact_key: str, keys: dict[str, str]) -> Iterator[None]:
    """Keep an infrastructure failure inside the block as a failed attempt at `artifact_key`, and re-raise it.

    A store that fails keeps nothing: the raised failure already says what happened, and there is nowhere to
    keep it.
    """
    started_at, clock = now(), time.monotonic()
    try:
        yield
    except InfrastructureError as error:
        attempt = Attempt(
            stage=stage,
            outcome=error.outcome.value,
            started_at=started_at,
            duration_s=round(time.monotonic() - clock, 3),
            detail=str(error)[-4000:],
            keys=keys,
        )
        with suppress(InfrastructureError):
            keep_attempt(store, artifact_key, attempt)
        raise


def environment_attempt(store: ArtifactStore, instance_id: str, environment_key: str) -> AbstractContextManager[None]:
    """Keep a failure to build or start an instance's environment as a failed attempt at it, and re-raise it.

    When an environment cannot be built or started (an image that does not build, an engine that does not
    answer), none of the instance's trials can run: the failure is an infrastructure outcome for all of them,
    kept under `attempts/environment/` so that the results say why those trials never ran (rather than
    `missing`), and raised so that the step is retried."""
    keys = {"environment": environment_key, "instance_id": instance_id}
    return failures_kept(store, Stage.ENVIRONMENT, environment_artifact_key(environment_key), keys)


def _legacy(stage: Stage, payload: dict[str, Any]) -> dict[str, Any]:
    """An attempt written before the log, as an Attempt's fields: a whole stage record, or an environment dict."""
    if stage is Stage.ENVIRONMENT:
        keys = {"environment": payload.get("environment_key", ""), "instance_id": payload.get("instance_id", "")}
        return {**payload, "stage": stage, "keys": keys}
    outcome, detail = (payload.get("status"), payload.get("error")) if stage is Stage.GENERATION else (None, None)
    keys = {"artifact": payload.get("key", ""), "attempt_id": payload.get("attempt_id", "")}
    return {
        "stage": stage,
        "outcome": outcome or payload.get("outcome"),
        "started_at": payload.get("started_at"),
        "duration_s": payload.get("duration_s"),
        "detail": detail or payload.get("detail", ""),
        "keys": {name: value for name, value in keys.items() if value},
        "record": payload,
    }


def _read(store: ArtifactStore, key: str) -> Attempt | None:
    payload = store.get(key)
    if payload is None:
        return None
    stage = Stage(key.split("/")[1])
    return Attempt.from_payload(payload if "stage" in payload else _legacy(stage, payload), key=key, reused=True)


def _oldest_first(store: ArtifactStore, keys: Iterable[str]) -> list[Attempt]:
    attempts = [attempt for key in keys if (attempt := _read(store, key))]
    return sorted(attempts, key=lambda attempt: attempt.started_at)


def attempts(store: ArtifactStore, artifact_key: str) -> list[Attempt]:
    """The kept attempts at one artifact, oldest first."""
    return _oldest_first(store, store.keys(attempts_prefix(artifact_key)))


class AttemptLog:
    """The whole log read through one listing per stage, for a reader that visits many trials.

    Listing each stage once, rather than each artifact's attempts, keeps the
    store's requests per campaign near constant; records are read only for
    artifacts that have attempts.
    """

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store
        self._listed: dict[str, list[str]] = defaultdict(list)
        for stage in Stage:
            for key in store.keys(attempts_prefix(stage)):
                self._listed[key.rsplit("/", 1)[0]].append(key)

    def attempts(self, artifact_key: str) -> list[Attempt]:
        """The kept attempts at one artifact, oldest first."""
        return _oldest_first(self.store, self._listed.get(attempts_prefix(artifact_key), []))

    def environment_attempts(self, environment_key: str) -> list[Attempt]:
        return self.attempts(environment_artifact_key(environment_key))
