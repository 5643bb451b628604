"""Find what eval_pipeline left on a container engine, remove it, and report disk usage.

Everything the container backend creates carries the label
`eval_pipeline.managed=true` (and campaign, instance, trial labels), so a
crashed run's containers can be found and removed, and old images pruned by
age without touching anything else on the engine.
"""

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import docker
import docker.errors

from eval_pipeline.sandbox.pods.images import MANAGED_LABEL


def _filters(campaign: str | None) -> dict[str, list[str]]:
    labels = [f"{MANAGED_LABEL}=true"] + ([f"eval_pipeline.campaign={campaign}"] if campaign else [])
    return {"label": labels}


def remove_containers(client: docker.DockerClient, campaign: str | None = None) -> list[str]:
    """Remove the managed containers (of one campaign, or all); return their names."""
    removed = []
    for container in client.containers.list(all=True, filters=_filters(campaign)):
        try:
            container.remove(force=True)
        except docker.errors.APIError:  # removed meanwhile by the run that owned it
            continue
        removed.append(container.name)
    return removed


def _created(image: Any) -> datetime:
    # Engines report up to nanoseconds; datetime takes microseconds.
    stamp = re.sub(r"(\.\d{6})\d+", r"\1", image.attrs["Created"]).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp)


def prune_images(client: docker.DockerClient, older_than: timedelta) -> list[str]:
    """Remove managed images created before `older_than` ago that no container uses; return their tags.

    Instance images go before env images before base images, so that parents
    are free when their turn comes; an image still in use is kept.
    """
    cutoff = datetime.now(UTC) - older_than
    order = {"instance": 0, "env": 1, "base": 2}
    images = sorted(
        client.images.list(filters=_filters(None)),
        key=lambda image: order.get(image.labels.get("eval_pipeline.layer", ""), 3),
    )
    removed: list[str] = []
    for image in images:
        if _created(image) >= cutoff:
            continue
        try:
            client.images.remove(image.id)
        except docker.errors.APIError:  # in use by a container or a child image
            continue
        removed.extend(image.tags or [image.id])
    return removed


def disk_usage(client: docker.DockerClient) -> dict[str, Any]:
    """Managed images and containers on the engine, and what the images take on disk.

    `image_bytes_unique` counts only layers no other image shares (what pruning
    would free); `image_bytes_total` counts each image's full size.
    """
    managed = {image.id for image in client.images.list(filters=_filters(None))}
    sizes = [image for image in client.df()["Images"] if image["Id"] in managed or f"sha256:{image['Id']}" in managed]
    return {
        "images": len(managed),
        "image_bytes_total": sum(int(image.get("Size") or 0) for image in sizes),
        "image_bytes_unique": sum(int(image.get("Size") or 0) - int(image.get("SharedSize") or 0) for image in sizes),
        "containers": len(client.containers.list(all=True, filters=_filters(None))),
    }
