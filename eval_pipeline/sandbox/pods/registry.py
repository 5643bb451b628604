"""Pulling a task's named image (tasks/named_image.py) through the engine's API, at a digest, failures named.

The engine pulls as it is configured: its registry mirrors (Podman's registries.conf, Docker's
`registry-mirrors`) and the credentials the docker SDK finds in `$DOCKER_CONFIG/config.json`, or, when
EVAL_PIPELINE_REGISTRY_AUTH_FILE names a file of that shape, that file's entry for the image's registry (sent
with the pull request, never written to a message, a log or a record).

The digest is the registry's content digest of the image's manifest, what `name@sha256:...` pulls: a pinned one
is pulled by it; otherwise the image is pulled by its tag and the digest read from the pulled image's
RepoDigests (Podman implements no /distribution/{name}/json to ask the registry first).
"""

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import docker
import docker.auth
import docker.errors

from eval_pipeline.common.outcomes import (
    ImageDigestMismatch,
    ImageNoSpace,
    ImageNotFound,
    ImagePullDenied,
    ImagePullFailed,
)
from eval_pipeline.sandbox.pods.engine import ENGINE_FAILURES
from eval_pipeline.tasks.named_image import qualified_reference

__all__ = ["AUTH_FILE_VARIABLE", "PulledImage", "pin_for", "pinned_reference", "pull_image", "repository_of"]

AUTH_FILE_VARIABLE = "EVAL_PIPELINE_REGISTRY_AUTH_FILE"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# What the engine says (Podman's and Docker's words) when the registry has no such image, and when it refused.
_NOT_FOUND = re.compile(r"manifest unknown|not found|name unknown|no such image|does not exist", re.IGNORECASE)
_DENIED = re.compile(r"unauthorized|authentication required|access denied|denied|forbidden", re.IGNORECASE)
_NO_SPACE = re.compile(r"no space left on device|disk quota exceeded", re.IGNORECASE)


@dataclass(frozen=True)
class PulledImage:
    """A named image on the engine: its `reference` as named, the registry's `digest` of it, the engine's
    `image_id` and its size."""

    reference: str
    digest: str
    image_id: str
    size_bytes: int

    @property
    def pinned_reference(self) -> str:
        """The image by its digest (`docker.io/swebench/x@sha256:...`): what a layer built on it names."""
        return pinned_reference(self.reference, self.digest)

    def as_record(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "digest": self.digest,
            "image_id": self.image_id,
            "size_bytes": self.size_bytes,
        }


def repository_of(reference: str) -> str:
    """The qualified repository of `reference`, without tag or digest: `docker.io/swebench/x`."""
    name = qualified_reference(reference).partition("@")[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: name.rindex(":")]
    return name


def pinned_reference(reference: str, digest: str) -> str:
    """`reference`'s repository at `digest` (`docker.io/swebench/x@sha256:...`): the image, whatever its tag says."""
    return f"{repository_of(reference)}@{digest}"


def pin_for(reference: str, pins: Mapping[str, str]) -> str:
    """The digest `pins` (a campaign's `sandbox.image_digests`) give `reference`, keyed as the task names it or as
    Docker qualifies it; a reference that holds its own digest is pinned by that; '' when none is."""
    if own := reference.partition("@")[2]:
        return own
    qualified = qualified_reference(reference)
    for key, digest in pins.items():
        if key == reference or qualified_reference(key) == qualified:
            return digest
    return ""


def pull_image(
    client: docker.DockerClient, reference: str, pinned_digest: str = "", instance_id: str = ""
) -> PulledImage:
    """The image `reference` names, pulled (by `pinned_digest` when given), with the registry's digest of it.

    A typed ImagePullFailed names the instance (`instance_id`) and the reference: ImageNotFound, ImagePullDenied,
    ImageDigestMismatch (the registry holds no image at the pinned digest), ImageNoSpace, or ImagePullFailed
    itself (the registry did not answer). An image the engine holds already costs the registry's answer about its
    manifest (0.28 s measured here for a 1.4 GB SWE-bench image, load 7 on 2 cores), so a tag that moved is seen
    at the next pull.
    """
    what = f"{instance_id}: the image {reference}" if instance_id else f"the image {reference}"
    repository = repository_of(reference)
    target = f"{repository}@{pinned_digest}" if pinned_digest else qualified_reference(reference)
    error = _pull(client, target)
    if error and pinned_digest and _NOT_FOUND.search(error) and not _DENIED.search(error):
        raise ImageDigestMismatch(
            f"{what} is not in its registry at the digest the campaign pins (sandbox.image_digests:"
            f" {pinned_digest}); the tag has moved or the pin is wrong: {error}"
        )
    if error:
        raise _pull_failure(what, error)
    try:
        image = client.images.get(target)
    except ENGINE_FAILURES as failure:
        raise ImagePullFailed(f"{what}: pulled, but the engine cannot find it: {failure}") from None
    digest = pinned_digest or _registry_digest(client, repository, image.attrs.get("RepoDigests") or [])
    if not digest:
        raise ImagePullFailed(f"{what}: pulled, but the engine records no digest of it from its registry")
    if pinned_digest and f"{repository}@{pinned_digest}" not in (image.attrs.get("RepoDigests") or []):
        raise ImageDigestMismatch(f"{what}: the image pulled does not carry the pinned digest {pinned_digest}")
    return PulledImage(reference, digest, image.id, int(image.attrs.get("Size") or 0))


def _pull(client: docker.DockerClient, target: str) -> str:
    """Pull `target` with the configured credentials; the engine's error ('' when it pulled)."""
    repository, _, tag = target.rpartition("@") if "@" in target else target.rpartition(":")
    try:
        for line in client.api.pull(repository, tag, stream=True, decode=True, auth_config=_auth_config(target)):
            if isinstance(line, dict) and line.get("error"):
                return str(line["error"])
    except docker.errors.APIError as error:
        return str(error.explanation or error)
    except ENGINE_FAILURES as error:
        return str(error)
    return ""


def _pull_failure(what: str, error: str) -> ImagePullFailed:
    """The engine's pull error as its typed failure; the engine's words follow the harness's."""
    if _NO_SPACE.search(error):
        return ImageNoSpace(f"{what} does not fit on the engine's disk (no space left): {error}")
    if _DENIED.search(error):
        return ImagePullDenied(
            f"{what}: the registry refused the pull (no credentials for it, or ones it does not accept; set them"
            f" in $DOCKER_CONFIG/config.json or {AUTH_FILE_VARIABLE}): {error}"
        )
    if _NOT_FOUND.search(error):
        return ImageNotFound(f"{what}: no such image in the registry (or its mirror): {error}")
    return ImagePullFailed(f"{what}: the registry could not be reached: {error}")


def _auth_config(target: str) -> dict[str, Any] | None:
    """The credentials EVAL_PIPELINE_REGISTRY_AUTH_FILE holds for `target`'s registry; None (the SDK's own,
    from $DOCKER_CONFIG/config.json) when it is unset or holds none for it."""
    path = os.environ.get(AUTH_FILE_VARIABLE)
    if not path:
        return None
    registry, _ = docker.auth.resolve_repository_name(target.partition("@")[0])
    found = docker.auth.load_config(config_path=path).resolve_authconfig(registry)
    return dict(found) if found else None


def _registry_digest(client: docker.DockerClient, repository: str, repo_digests: list[str]) -> str:
    """The registry's digest of the image just pulled from `repository`: its one RepoDigest there, or, where the
    engine records several (an image built on this engine and pushed holds its local manifest's digest too), the
    first, in order, that the registry serves."""
    candidates = sorted(
        digest
        for name, _, digest in (entry.partition("@") for entry in repo_digests)
        if name == repository and _DIGEST.fullmatch(digest)
    )
    if len(candidates) <= 1:
        return candidates[0] if candidates else ""
    return next((digest for digest in candidates if not _pull(client, f"{repository}@{digest}")), "")
