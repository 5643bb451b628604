"""Stable content hashes: the identity of datasets, configs and artifacts."""

import hashlib
from typing import Any

from eval_pipeline.common.foreign_text import json_text


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace, so equal values hash equally; valid Unicode whatever the strings
    hold (common/foreign_text.py), so any value has a hash."""
    return json_text(value, sort_keys=True, separators=(",", ":"), default=str)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stable_hash(value: Any) -> str:
    """The sha256 of a JSON-serialisable value's canonical form."""
    return sha256_text(canonical_json(value))
