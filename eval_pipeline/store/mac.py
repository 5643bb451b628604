"""The results key and the keyed MACs that make stored results unforgeable by whatever can write the store.

A record's checksum (sha256 of its payload) tells damage from an intact
record, but anyone who can write the store can rewrite a result and fix the
checksum up. So every stored record also carries an HMAC-SHA256, keyed with
the results key, over its artifact key and its canonical bytes; the markers
the pending scan lists carry one over their names. Trials never hold the key:
it comes from `EVAL_PIPELINE_RESULTS_KEY` (a Kubernetes Secret in production,
given to the harness's pods only, never to environment pods; the local sandbox
passes trials no variable of the harness's), else from a key file made once,
mode 0600, under DAGSTER_HOME: never in the artifact store, and not under the
data directory, where workspaces and environments live.
"""

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from eval_pipeline.common.settings import RESULTS_KEY_VARIABLE, dagster_home

KEY_FILE_NAME = "results.key"
MIN_KEY_CHARACTERS = 32  # a key file holds 64 hex digits (256 bits); a configured key needs at least this many
MARKER_MAC_DIGITS = 32  # 128 bits: enough against forgery, short enough for a marker's file name


class ResultsKeyError(ValueError):
    """The results key cannot be used (too short, or a key file other users can read); the message says why."""


@dataclass(frozen=True)
class RecordMac:
    """HMAC-SHA256 with the results key, each use under its own label so one MAC never passes for another."""

    key: bytes = field(repr=False)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> "RecordMac":
        return cls(results_key(environ))

    def _digest(self, purpose: str, *parts: str) -> str:
        message = "\0".join((purpose, *parts)).encode()
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()

    def of_record(self, artifact_key: str, body: str) -> str:
        """The MAC of a record's canonical body stored at `artifact_key` (bound to it: a valid record copied to
        another trial's key does not verify there)."""
        return self._digest("record", artifact_key, body)

    def of_marker(self, scored_id: str, evaluation_key: str, evaluation_fingerprint: str) -> str:
        """The MAC in a scored marker's name, so a scan can trust a marker from the listing alone."""
        return self._digest("scored", scored_id, evaluation_key, evaluation_fingerprint)[:MARKER_MAC_DIGITS]


def matches(expected: str, found: object) -> bool:
    """Whether a stored MAC is the expected one, compared in constant time (a non-string never matches)."""
    return isinstance(found, str) and hmac.compare_digest(expected, found)


def results_key(environ: Mapping[str, str] = os.environ) -> bytes:
    """The results key: `EVAL_PIPELINE_RESULTS_KEY` when set, else this installation's key file (made on first
    use). Every process that writes or counts results must see the same key, so a deployment whose processes
    do not share DAGSTER_HOME (Kubernetes pods) must set the variable."""
    configured = environ.get(RESULTS_KEY_VARIABLE, "")
    if configured:
        if len(configured) < MIN_KEY_CHARACTERS:
            raise ResultsKeyError(
                f"{RESULTS_KEY_VARIABLE} has {len(configured)} characters; use at least {MIN_KEY_CHARACTERS}"
                " random ones (for example `openssl rand -hex 32`)"
            )
        return configured.encode()
    return key_file(dagster_home() / KEY_FILE_NAME)


def key_file(path: Path) -> bytes:
    """The key kept in `path`, made (256 random bits, mode 0600) when there is none yet."""
    if not path.exists():
        _create_key_file(path)
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise ResultsKeyError(
            f"results key file {path} has mode {mode:o}: other users could forge results with it;"
            f" `chmod 600 {path}` (or set {RESULTS_KEY_VARIABLE})"
        )
    return path.read_text().strip().encode()


def _create_key_file(path: Path) -> None:
    """Write a new key beside `path`, then link it into place: concurrent first runs agree on one key, and
    no reader sees a half-written one. Created 0600 from the start, never widened afterwards."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.link(scratch, path)
    except FileExistsError:  # another process made the key first: theirs is the key
        pass
    finally:
        scratch.unlink()
