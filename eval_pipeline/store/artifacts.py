"""Immutable, content-addressed artifacts: what makes trials resumable and reusable.

An artifact's key is the hash of everything that determines it (inputs'
versions, agent config, seed), so a trial whose complete artifact exists is
reused rather than recomputed, whether or not Dagster recorded it before a
crash. Writes are atomic and first-writer-wins; every artifact carries a
checksum and a keyed MAC (store/mac.py), and one that fails either is moved to
`quarantine/`, treated as absent and reported (`Rejection`): a result rewritten
by something that can write the store but has no results key is never counted.
A store that cannot be read or written raises StorageError (an infrastructure
outcome, retried), never a bare OSError.
"""

import copy
import functools
import hashlib
import json
import logging
import os
import tempfile
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from eval_pipeline.common.hashing import canonical_json, sha256_text
from eval_pipeline.common.outcomes import StorageError
from eval_pipeline.common.settings import split_s3_location
from eval_pipeline.store.mac import RecordMac, matches

logger = logging.getLogger(__name__)


class RecordError(ValueError):
    """A stored record this harness cannot read (a required field absent, a value of the wrong type).

    The message names the artifact's key and each field at fault, so a record
    written by an older or newer harness says what differs instead of failing
    with a bare TypeError.
    """


# What a record written before records carried a version is: the first version.
UNVERSIONED = 1


class StoredRecord(BaseModel):
    """A record kept as an artifact: typed, versioned, and readable across harness versions.

    Forward compatible: a field written by a newer harness is ignored, a field
    added since the record was written takes its default, and a required field
    that is absent raises RecordError naming the artifact and the field.
    `reused` says the record came from the store; it is never stored.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    record_version: int
    reused: bool = Field(default=False, exclude=True)

    @classmethod
    def from_payload(cls, payload: dict[str, Any], *, key: str, reused: bool) -> Self:
        """The record stored at `key`; RecordError when it lacks a required field or has a malformed one."""
        try:
            return cls.model_validate({"record_version": UNVERSIONED, **payload, "reused": reused})
        except ValidationError as error:
            problems = "; ".join(f"field {'.'.join(map(str, e['loc']))!r}: {e['msg']}" for e in error.errors())
            version = payload.get("record_version", UNVERSIONED)
            raise RecordError(f"{cls.__name__} record {key} (record_version {version}): {problems}") from None

    def payload(self) -> dict[str, Any]:
        return self.model_dump()


def attempts_prefix(key: str) -> str:
    """Where every attempt at the artifact `key` is kept, final or not: retries add, never replace."""
    return f"attempts/{key.removesuffix('.json')}"


class Rejection(StrEnum):
    """Why a stored record was not counted: each such record is moved to `quarantine/` and treated as absent."""

    DAMAGED = "damaged"  # not a record at all: truncated, or not JSON
    ALTERED = "altered"  # its bytes changed after writing: the checksum fails (damage, or an edit by hand)
    UNAUTHENTICATED = "unauthenticated"  # no MAC: written before results were authenticated, or stripped of it
    FORGED = "forged"  # checksum fixed up but MAC wrong: rewritten without the results key, or with another key


@dataclass(frozen=True)
class RejectedRecord:
    """A record that failed its checks: where it was stored, why it was refused, where it is kept now."""

    key: str
    reason: Rejection
    quarantined_as: str


QUARANTINE = "quarantine"
COUNTED = "counted"  # a record read that passed its checks (ArtifactStore.reads)


def quarantine_key(key: str, reason: Rejection) -> str:
    """Where a rejected record is moved: kept for inspection, out of the way of its recomputation, its reason
    in its name so that a report can say why from a listing."""
    return f"{QUARANTINE}/{key}.{time.time_ns()}.{reason}"


def rejected_record(quarantined_as: str) -> RejectedRecord:
    """The rejected record a quarantine key names; one quarantined before reasons were recorded had failed
    its checksum."""
    stem, _, last = quarantined_as.removeprefix(f"{QUARANTINE}/").rpartition(".")
    if last in set(Rejection):
        return RejectedRecord(stem.rpartition(".")[0], Rejection(last), quarantined_as)
    return RejectedRecord(stem, Rejection.ALTERED, quarantined_as)


class ArtifactStore(ABC):
    """What every store shares: records sealed with the results key on `put`, checked on `get`.

    A record that fails its checks (damaged, altered, unauthenticated, forged:
    `Rejection`) is moved to `quarantine/` and read as absent, so its trial is
    pending and runs or grades again, and the records around it still count.
    Records written before records carried a MAC are rejected as
    `unauthenticated`, not accepted with a warning: a forger could strip the
    MAC from any record to pass it off as old, so accepting them would undo
    the MAC. They stay in `quarantine/` (nothing is deleted) and their trials
    are run again by the next `eval-pipeline run`.
    """

    def __init__(self, mac: RecordMac | None = None) -> None:
        self.mac = mac or RecordMac.from_environment()
        self.quarantines = True
        self.reads: Counter[str] = Counter()  # records read: COUNTED, or the Rejection that refused them

    def reading_only(self) -> Self:
        """This store for a command that only reads (export, report): a record it refuses is read as absent
        and left where it is, since a reader holding another results key would refuse every record and so
        cost the next run every generation again. `reads` then tells such a key (`wrong_key_suspected`)."""
        view = copy.copy(self)
        view.quarantines, view.reads = False, Counter()
        return view

    def wrong_key_suspected(self) -> str:
        """Why this reader's results key looks wrong ('' when it does not): every record it read was forged."""
        forged = self.reads[Rejection.FORGED]
        if not forged or self.reads[COUNTED]:
            return ""
        return (
            f"every record read ({forged}) failed its MAC: wrong results key? (EVAL_PIPELINE_RESULTS_KEY, or the"
            " key file under DAGSTER_HOME, must be the one the campaign ran with); nothing was quarantined"
        )

    @abstractmethod
    def uri(self, key: str) -> str:
        """Where the artifact `key` lives, as a link a person can follow (file://, s3://)."""

    def get(self, key: str) -> dict[str, Any] | None:
        """The artifact's payload, or None when it is absent (or was rejected, and moved to quarantine)."""
        text = self._read(_checked(key))
        if text is None:
            return None
        payload, rejection = self._open(key, text)
        self.reads[rejection or COUNTED] += 1
        if rejection is not None and not self.quarantines:
            logger.warning("artifact %s is %s; not counted (left in place: this command only reads)", key, rejection)
        elif rejection is not None:
            target = quarantine_key(key, rejection)
            if self._move(key, target):
                logger.warning("artifact %s is %s; moved to %s, not counted, to be recomputed", key, rejection, target)
        return payload

    def _open(self, key: str, text: str) -> tuple[dict[str, Any] | None, Rejection | None]:
        """The payload of the envelope stored at `key`, or why it is rejected."""
        try:
            envelope = json.loads(text)
            payload = envelope["payload"]
        except (ValueError, KeyError, TypeError):
            return None, Rejection.DAMAGED
        if not isinstance(payload, dict):
            return None, Rejection.DAMAGED
        body = canonical_json(payload)
        if sha256_text(body) != envelope.get("sha256"):
            return None, Rejection.ALTERED
        if "mac" not in envelope:
            return None, Rejection.UNAUTHENTICATED
        if not matches(self.mac.of_record(key, body), envelope["mac"]):
            return None, Rejection.FORGED
        return payload, None

    def _envelope(self, key: str, payload: dict[str, Any]) -> str:
        body = canonical_json(payload)
        return json.dumps(
            {"sha256": sha256_text(body), "mac": self.mac.of_record(key, body), "payload": payload}, sort_keys=True
        )

    def fingerprint(self, key: str, payload: dict[str, Any]) -> str:
        """The MD5 of the bytes `put` stores for `payload` at `key` (a canonical envelope: reproducible)."""
        return hashlib.md5(self._envelope(key, payload).encode(), usedforsecurity=False).hexdigest()

    def rejected(self) -> list[RejectedRecord]:
        """Every record rejected so far, from one listing of `quarantine/`."""
        return [rejected_record(key) for key in self.keys(QUARANTINE)]

    @abstractmethod
    def _read(self, key: str) -> str | None:
        """The stored text at `key`, or None when there is none."""

    @abstractmethod
    def _move(self, key: str, target: str) -> bool:
        """Move the object at `key` to `target`; False when it was already gone (another reader moved it)."""

    @abstractmethod
    def put(self, key: str, payload: dict[str, Any]) -> bool:
        """Store the payload unless the key exists; True when this call wrote it."""

    @abstractmethod
    def keys(self, prefix: str) -> list[str]:
        """The keys under `prefix`, sorted."""

    @abstractmethod
    def fingerprints(self, prefix: str) -> dict[str, str]:
        """The keys under `prefix`, each with the MD5 of its stored bytes (`fingerprint` of what was put): on S3
        the listing's ETags, so that a scan can tell an intact artifact from a damaged one without reading it."""


def _checked(key: str) -> str:
    if ".." in key.split("/") or key.startswith("/"):
        raise ValueError(f"artifact key {key!r} must be a relative path")
    return key


class LocalArtifactStore(ArtifactStore):
    """Artifacts as JSON files under `root`, one file per key."""

    def __init__(self, root: Path, mac: RecordMac | None = None) -> None:
        super().__init__(mac)
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / _checked(key)

    def uri(self, key: str) -> str:
        return self._path(key).absolute().as_uri()

    def _read(self, key: str) -> str | None:
        try:
            return self._path(key).read_text()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StorageError(f"reading artifact {key}: {error}") from error

    def _move(self, key: str, target: str) -> bool:
        destination = self._path(target)
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(self._path(key), destination)
        except FileNotFoundError:
            return False
        return True

    def put(self, key: str, payload: dict[str, Any]) -> bool:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".tmp-", delete=False) as handle:
                handle.write(self._envelope(key, payload))
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
        # os.walk reads each directory once and stats no file: a campaign's listing is tens of thousands of keys.
        found: list[str] = []
        for directory, _, names in os.walk(self._path(prefix)):
            relative = Path(directory).relative_to(self.root).as_posix()
            found.extend(f"{relative}/{name}" for name in names if not name.startswith(".tmp-"))
        return sorted(found)

    def fingerprints(self, prefix: str) -> dict[str, str]:
        """Local files are read to hash them: a disk read, where S3 would answer from its listing."""
        found = {}
        for key in self.keys(prefix):
            with suppress(FileNotFoundError):
                found[key] = hashlib.md5(self._path(key).read_bytes(), usedforsecurity=False).hexdigest()
        return found


class S3ArtifactStore(ArtifactStore):
    """Artifacts as objects under `s3://bucket/prefix`, one object per key, with local disk's guarantees.

    A PUT is atomic (an object is whole or absent), and `If-None-Match: *`
    makes it first-writer-wins as `os.link` does on disk: a second writer gets
    412 and keeps the first artifact. Any S3-compatible server that honours
    conditional writes works (AWS S3, SeaweedFS, MinIO); AWS_ENDPOINT_URL and
    the usual AWS variables select it and its credentials.
    """

    def __init__(self, bucket: str, prefix: str = "", client: Any = None, mac: RecordMac | None = None) -> None:
        super().__init__(mac)
        import boto3
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.client = client or boto3.client(
            "s3", config=Config(connect_timeout=5, read_timeout=60, retries={"mode": "standard", "max_attempts": 3})
        )

    @property
    def location(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def uri(self, key: str) -> str:
        return f"{self.location}{_checked(key)}"

    @contextmanager
    def _storage_errors(self, what: str) -> Iterator[None]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except (BotoCoreError, ClientError) as error:
            raise StorageError(f"{what} in {self.location}: {error}") from error

    def _read(self, key: str) -> str | None:
        with self._storage_errors(f"reading artifact {key}"):
            try:
                body = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"]
            except self.client.exceptions.NoSuchKey:
                return None
            return body.read().decode(errors="replace")

    def _move(self, key: str, target: str) -> bool:
        name = self.prefix + key
        with self._storage_errors(f"quarantining artifact {key}"):
            self.client.copy_object(
                Bucket=self.bucket, Key=self.prefix + target, CopySource={"Bucket": self.bucket, "Key": name}
            )
            self.client.delete_object(Bucket=self.bucket, Key=name)
        return True

    def put(self, key: str, payload: dict[str, Any]) -> bool:
        from botocore.exceptions import ClientError

        name = self.prefix + _checked(key)
        with self._storage_errors(f"writing artifact {key}"):
            try:
                self.client.put_object(
                    Bucket=self.bucket, Key=name, Body=self._envelope(key, payload).encode(), IfNoneMatch="*"
                )
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") != "PreconditionFailed":
                    raise
                return False
        return True

    def upload(self, path: Path, key: str) -> str:
        """Copy a file to `key` (replacing it: a derived file such as a report, not an artifact); its URL."""
        with self._storage_errors(f"uploading {path}"):
            self.client.upload_file(str(path), self.bucket, self.prefix + _checked(key))
        return f"{self.location}{key}"

    def download(self, key: str, path: Path) -> bool:
        """Fetch `key` into `path` atomically; False when there is no such object."""
        from botocore.exceptions import ClientError

        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with self._storage_errors(f"downloading {key}"):
            try:
                self.client.download_file(self.bucket, self.prefix + _checked(key), str(scratch))
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey"):
                    raise
                return False
        os.replace(scratch, path)
        return True

    def keys(self, prefix: str) -> list[str]:
        base = self.prefix + _checked(prefix).rstrip("/") + "/"
        with self._storage_errors(f"listing {prefix}"):
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base)
            return sorted(item["Key"].removeprefix(self.prefix) for page in pages for item in page.get("Contents", []))

    def fingerprints(self, prefix: str) -> dict[str, str]:
        """From the listing alone: an object written by one PUT (every artifact is) has its MD5 as its ETag."""
        base = self.prefix + _checked(prefix).rstrip("/") + "/"
        with self._storage_errors(f"listing {prefix}"):
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base)
            items = (item for page in pages for item in page.get("Contents", []))
            return {item["Key"].removeprefix(self.prefix): item["ETag"].strip('"') for item in items}


@functools.cache
def open_artifact_store(location: str) -> ArtifactStore:
    """The store at `location`: `s3://bucket/prefix`, or a local directory.

    One per location and process, so every step and published file reuses one S3 client and its
    connections (boto3 clients are thread-safe; worker processes are spawned, or forked before any store is
    opened: run_workers.py).
    """
    if location.startswith("s3://"):
        return S3ArtifactStore(*split_s3_location(location))
    return LocalArtifactStore(Path(location))
