"""Immutable, content-addressed artifacts: what makes trials resumable and reusable.

An artifact's key is the hash of everything that determines it (inputs'
versions, agent config, seed), so a trial whose complete artifact exists is
reused rather than recomputed, whether or not Dagster recorded it before a
crash. Writes are atomic and first-writer-wins; every artifact carries a
checksum, and one that fails it is moved to `quarantine/` and treated as absent.
A store that cannot be read or written raises StorageError (an infrastructure
outcome, retried), never a bare OSError.
"""

import json
import logging
import os
import tempfile
import time
from abc import ABC, abstractmethod
from dataclasses import asdict
from pathlib import Path
from typing import Any, Self

from eval_pipeline.hashing import canonical_json, sha256_text
from eval_pipeline.outcomes import StorageError

logger = logging.getLogger(__name__)


class StoredRecord:
    """Mixin for a frozen dataclass kept as an artifact; its `reused` field says it came from the store."""

    reused: bool

    @classmethod
    def from_payload(cls, payload: dict[str, Any], *, reused: bool) -> Self:
        return cls(**{**payload, "reused": reused})

    def payload(self) -> dict[str, Any]:
        return {name: value for name, value in asdict(self).items() if name != "reused"}  # type: ignore[call-overload]


def attempts_prefix(key: str) -> str:
    """Where every attempt at the artifact `key` is kept, final or not: retries add, never replace."""
    return f"attempts/{key.removesuffix('.json')}"


class ArtifactStore(ABC):
    @abstractmethod
    def get(self, key: str) -> dict[str, Any] | None:
        """The artifact's payload, or None when it is absent (or was corrupt)."""

    @abstractmethod
    def put(self, key: str, payload: dict[str, Any]) -> bool:
        """Store the payload unless the key exists; True when this call wrote it."""

    @abstractmethod
    def keys(self, prefix: str) -> list[str]:
        """The keys under `prefix`, sorted."""


def _envelope(payload: dict[str, Any]) -> str:
    body = canonical_json(payload)
    return json.dumps({"sha256": sha256_text(body), "payload": payload}, sort_keys=True)


def _unwrap(text: str) -> dict[str, Any] | None:
    """The payload if the envelope parses and its checksum matches, else None."""
    try:
        envelope = json.loads(text)
        payload = envelope["payload"]
        if sha256_text(canonical_json(payload)) == envelope["sha256"]:
            return payload
    except (ValueError, KeyError, TypeError):
        pass
    return None


class LocalArtifactStore(ArtifactStore):
    """Artifacts as JSON files under `root`, one file per key."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        if ".." in key.split("/") or key.startswith("/"):
            raise ValueError(f"artifact key {key!r} must be a relative path")
        return self.root / key

    def get(self, key: str) -> dict[str, Any] | None:
        path = self._path(key)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StorageError(f"reading artifact {key}: {error}") from error
        payload = _unwrap(text)
        if payload is None:
            self._quarantine(key, path)
        return payload

    def _quarantine(self, key: str, path: Path) -> None:
        target = self.root / "quarantine" / f"{key}.{time.time_ns()}"
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(path, target)
        except FileNotFoundError:  # another reader quarantined it first
            return
        logger.warning("artifact %s failed its checksum; moved to %s and will be recomputed", key, target)

    def put(self, key: str, payload: dict[str, Any]) -> bool:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".tmp-", delete=False) as handle:
                handle.write(_envelope(payload))
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as error:
            raise StorageError(f"writing artifact {key}: {error}") from error
        try:
            os.link(handle.name, path)  # atomic, and fails rather than replace an existing artifact
            return True
        except FileExistsError:
            return False
        except OSError as error:
            raise StorageError(f"writing artifact {key}: {error}") from error
        finally:
            os.unlink(handle.name)

    def keys(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return []
        return sorted(
            str(path.relative_to(self.root))
            for path in base.rglob("*")
            if path.is_file() and not path.name.startswith(".tmp-")
        )
