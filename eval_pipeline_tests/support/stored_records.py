"""Stored artifacts read and rewritten behind the store's back, as a crash or an intruder would."""

import json

from eval_pipeline.common.hashing import canonical_json, sha256_text
from eval_pipeline.store.artifacts import ArtifactStore, LocalArtifactStore


def overwrite(store: ArtifactStore, key: str, text: str) -> None:
    """Change a stored artifact behind the store's back, as a crash or an intruder would."""
    if isinstance(store, LocalArtifactStore):
        (store.root / key).write_text(text)
    else:
        store.client.put_object(Bucket=store.bucket, Key=store.prefix + key, Body=text.encode())


def raw(store: ArtifactStore, key: str) -> str:
    if isinstance(store, LocalArtifactStore):
        return (store.root / key).read_text()
    return store.client.get_object(Bucket=store.bucket, Key=store.prefix + key)["Body"].read().decode()


def rehashed(text: str, **changes) -> str:
    """The stored envelope with its payload changed and its unkeyed checksum fixed up, as a process that can
    write the store but has no results key would rewrite a result (the red team did this on the local backend)."""
    envelope = json.loads(text)
    envelope["payload"].update(changes)
    envelope["sha256"] = sha256_text(canonical_json(envelope["payload"]))
    return json.dumps(envelope, sort_keys=True)
