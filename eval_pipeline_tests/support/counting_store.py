"""A local artifact store that counts its requests: what the pending scan costs on an object store, which bills
each read and each listing page."""

from pathlib import Path
from typing import Any

from eval_pipeline.store.artifacts import LocalArtifactStore

# Keys per page of an S3 listing (ListObjectsV2 returns at most 1,000).
S3_PAGE = 1000


class CountingStore(LocalArtifactStore):
    """`gets` and `listings` as called; `requests` as S3 would count them (a listing is a request per page; a
    listing of fingerprints is one too, as S3 lists ETags, though this store reads its files to hash them)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reset()

    def reset(self) -> None:
        self.gets = self.listings = self.requests = 0

    def get(self, key: str) -> dict[str, Any] | None:
        self.gets += 1
        self.requests += 1
        return super().get(key)

    def keys(self, prefix: str) -> list[str]:
        keys = super().keys(prefix)
        self.listings += 1
        self.requests += max(1, -(-len(keys) // S3_PAGE))
        return keys
