"""Find what eval_pipeline left on a container engine, remove it, and report disk usage.

Everything the container backend creates carries the label
`eval_pipeline.managed=true` (and campaign, instance, trial labels), so a
crashed run's containers can be found and removed, and old images pruned by
age without touching anything else on the engine. An image pulled from a
registry carries no label of ours: the harness layer built on it names it
(`eval_pipeline.pulled`), and it is removed with the last such layer.
"""

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import docker
import docker.errors

from eval_pipeline.sandbox.pods.images import MANAGED_LABEL, PULLED_LABEL


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


def _images_labelled(client: docker.DockerClient, label: str, attempts: int = 3) -> list[Any]:
    """The engine's images carrying `label` (`key` or `key=value`). One label per listing: Podman's Docker API
    returns no image for two label filters that an image matches both of. Podman fails a listing when an image
    is removed during it ("image not known"), so a failed listing is tried again."""
    for _ in range(attempts - 1):
        try:
            return client.images.list(filters={"label": [label]})
        except docker.errors.APIError:
            time.sleep(1)
    return client.images.list(filters={"label": [label]})


def _managed_images(client: docker.DockerClient, campaign: str | None) -> list[Any]:
    """The managed images (of one campaign, or all)."""
    if campaign is None:
        return _images_labelled(client, f"{MANAGED_LABEL}=true")
    images = _images_labelled(client, f"eval_pipeline.campaign={campaign}")
    return [image for image in images if image.labels.get(MANAGED_LABEL) == "true"]


def _created(image: Any) -> datetime:
    # Engines report up to nanoseconds; datetime takes microseconds.
    stamp = re.sub(r"(\.\d{6})\d+", r"\1", image.attrs["Created"]).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp)


def prune_images(client: docker.DockerClient, older_than: timedelta, campaign: str | None = None) -> list[str]:
    """Remove managed images (of one campaign, or all) created before `older_than` ago that no container uses, and
    the pulled images that only those named; return their tags and the pulled images' references.

    Instance images go before env images before base images, so that parents
    are free when their turn comes; an image still in use is kept.
    """
    cutoff = datetime.now(UTC) - older_than
    order = {"instance": 0, "env": 1, "base": 2}
    images = sorted(
        _managed_images(client, campaign),
        key=lambda image: order.get(image.labels.get("eval_pipeline.layer", ""), 3),
    )
    removed: list[str] = []
    pulled: set[str] = set()
    for image in images:
        if _created(image) >= cutoff:
            continue
        try:
            client.images.remove(image.id)
        except docker.errors.APIError:  # in use by a container or a child image
            continue
        removed.extend(image.tags or [image.id])
        pulled |= _pulled_names(image)
    return removed + _remove_pulled(client, pulled)


def _pulled_names(image: Any) -> set[str]:
    """The pulled image (`repository@digest`) a harness layer is built on, if it is built on one."""
    return {image.labels[PULLED_LABEL]} if image.labels.get(PULLED_LABEL) else set()


def _remove_pulled(client: docker.DockerClient, references: set[str]) -> list[str]:
    """Remove the pulled images `references` name that no harness image on the engine still names and no container
    uses; return their references. An image pulled that no harness layer ever named is never among them.

    The engine is asked which images still name them after the removals (a layer built meanwhile counts), and an
    image goes with all its names (Podman removes an image other images are built on: only the labels say which).
    """
    named = {name for image in _images_labelled(client, PULLED_LABEL) for name in _pulled_names(image)}
    removed = []
    for reference in sorted(references - named):
        try:
            client.images.remove(client.images.get(reference).id)
        except docker.errors.APIError:  # in use by a container, or gone already
            continue
        removed.append(reference)
    return removed


def disk_usage(client: docker.DockerClient) -> dict[str, Any]:
    """Managed images and containers on the engine, and what the images take on disk.

    `image_bytes_unique` counts only layers no other image shares (what pruning
    would free); `image_bytes_total` counts each image's full size.
    """
    managed = {image.id for image in _managed_images(client, None)}
    sizes = [image for image in client.df()["Images"] if image["Id"] in managed or f"sha256:{image['Id']}" in managed]
    return {
        "images": len(managed),
        "image_bytes_total": sum(int(image.get("Size") or 0) for image in sizes),
        "image_bytes_unique": sum(int(image.get("Size") or 0) - int(image.get("SharedSize") or 0) for image in sizes),
        "containers": len(client.containers.list(all=True, filters=_filters(None))),
    }
