"""A local artifact store that counts its requests: what the pending scan costs on an object store, which bills
each read and each listing page."""

from pathlib import Path
from typing import Any

from eval_pipeline.artifacts import LocalArtifactStore


class CountingStore(LocalArtifactStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gets = self.listings = 0

    def get(self, key: str) -> dict[str, Any] | None:
        self.gets += 1
        return super().get(key)

    def keys(self, prefix: str) -> list[str]:
        self.listings += 1
        return super().keys(prefix)
