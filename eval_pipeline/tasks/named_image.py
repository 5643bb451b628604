"""An image a task names (a prebuilt environment in a registry), and a slice's policy for using it.

A row or task that ships with its image names it: SWE-bench's instance images
(`swebench/sweb.eval.x86_64.<instance>:latest`, as its harness forms them), SWE-bench Pro's tag column,
Terminal-Bench 2's `docker_image`. A slice's `images:` setting decides whether such an image is pulled or the
environment is built from its spec (`ImagePolicy`); the sandboxes pull it at a digest and put the harness's
layer on top (sandbox/pods/environment_images.py).
"""

import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DEFAULT_REGISTRY",
    "ImagePolicy",
    "NamedImage",
    "qualified_reference",
    "reference_problem",
    "uses_named_image",
]

# `build`: the harness builds every environment from its spec (the named image is never used); `pull`: every task
# of the slice is run in the image it names (a task that names none is refused at load); `auto`: pulled where the
# task names an image, built where it names none.
ImagePolicy = Literal["build", "pull", "auto"]

DEFAULT_REGISTRY = "docker.io"  # where a reference with no registry host is pulled from, as Docker reads it

# An image reference as Docker's grammar has it: an optional registry host (and port), lower-case path components,
# an optional tag, an optional digest (an algorithm and at least 32 hex digits). A dataset's reference reaches the
# engine's API and the harness's records, nothing else.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(
    rf"(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
    r"(?:@[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,})?"
)


@dataclass(frozen=True)
class NamedImage:
    """A task's prebuilt environment image.

    `reference` is the image as the dataset names it (`swebench/sweb.eval.x86_64.psf_1776_requests-1142:latest`,
    `docker.io/...`, `ghcr.io/...@sha256:...`); `workdir` the task's working tree in it (`/testbed`, `/app`);
    `python_prefix` the environment's Python installation that the harness's ENV_VENV (`/opt/env`) stands for
    (SWE-bench's conda env `/opt/miniconda3/envs/testbed`), '' where the image has none to use (the image's
    `python3` then stands for it, where it has one); `start_patch` a patch the task's starting state applies to
    the repository the image holds, committed as its only commit (SWE-smith's bug: common/start_patch.py), ''
    where the image's repository is at the task's base commit.
    """

    reference: str
    workdir: str
    python_prefix: str = ""
    start_patch: str = ""

    @property
    def qualified(self) -> str:
        """`reference` as the engine pulls it (`qualified_reference`)."""
        return qualified_reference(self.reference)


def qualified_reference(reference: str) -> str:
    """`reference` with the registry and tag Docker reads into it: `swebench/x` is `docker.io/swebench/x:latest`,
    `ubuntu` is `docker.io/library/ubuntu:latest`; a reference by digest keeps its digest and gets no tag."""
    name, at, digest = reference.partition("@")
    first, slash, rest = name.partition("/")
    if not slash or ("." not in first and ":" not in first and first != "localhost"):
        name = f"{DEFAULT_REGISTRY}/{name}" if slash else f"{DEFAULT_REGISTRY}/library/{name}"
    if not at and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return f"{name}{at}{digest}"


def reference_problem(reference: str) -> str:
    """Why `reference` (an image a dataset names) is not an image reference Docker reads, '' when it is."""
    return "" if _REFERENCE.fullmatch(reference) else f"{reference!r} is not an image reference"


def uses_named_image(policy: ImagePolicy, image: NamedImage | None) -> bool:
    """Whether a task that names `image` (None: it names none) is run in it under a slice's `policy`."""
    return image is not None and policy != "build"
