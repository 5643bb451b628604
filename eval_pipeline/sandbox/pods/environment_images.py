"""An instance's environment image, as both backends build it: its layers (images.py) over the repository checked
out once under the backend's directory, built on this process's engine (engine.py). The environment's key is
its top layer's tag, so the container and Kubernetes backends give one instance the same key.

An environment whose spec names an image to pull (`EnvironmentSpec.image`: a task's named image under its
slice's `images:` policy) is that image, pulled at its registry digest (registry.py; by the digest the
campaign's `sandbox.image_digests` pins, where it pins one), with only the harness layer built on it."""

import os
import re
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import docker

from eval_pipeline.common.git import KEEP_ANCESTORS, clone_at
from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.common.outcomes import ImagePullFailed
from eval_pipeline.sandbox.base import SandboxSettings
from eval_pipeline.sandbox.pods.engine import engine_client, engine_errors
from eval_pipeline.sandbox.pods.images import (
    CA_BUNDLE,
    ImageBuilder,
    ImageLayer,
    PythonSource,
    base_layer,
    env_layer,
    find_image,
    instance_layer,
    pulled_code_layer,
    task_harness_layer,
    task_layers,
)
from eval_pipeline.sandbox.pods.registry import PulledImage, pin_for, pinned_reference, pull_image
from eval_pipeline.tasks.data import TaskData
from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource
from eval_pipeline.tasks.named_image import NamedImage

# The key of an environment whose named image could not be pulled (EnvironmentImages.environment_key): no image
# is ever built under it, and no trial runs in it.
UNPULLED_KEY = "localhost/eval-pipeline-unpulled:{identity}"


def slug(text: str) -> str:
    """`text` as a part of a name on the engine or on disk: letters, digits and `_.-` only, at most 100."""
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", text)[:100]


class EnvironmentImages:
    """The environment images of one backend's directory `root` (its checkouts, requirements and build logs there),
    built as `settings` say."""

    def __init__(self, root: Path, settings: SandboxSettings) -> None:
        self.root = root
        self.settings = settings

    @property
    def client(self) -> docker.DockerClient:
        return engine_client()

    def _checkout_dir(self, instance: TaskData) -> Path:
        return self.root / "checkouts" / slug(f"{instance.repo}@{instance.base_commit}")

    def _image_checkout_dir(self, instance: TaskData) -> Path:
        return self.root / "image-checkouts" / slug(f"{instance.repo}@{instance.base_commit}")

    def _requirements_dir(self, instance: TaskData) -> Path:
        return self.root / "requirements" / slug(f"{instance.repo}@{instance.environment_setup_commit}")

    def _layers(self, instance: TaskData, spec: EnvironmentSpec) -> ImageLayer:
        if spec.image is not None:
            return self._pulled_layers(instance, spec, spec.image, self._digest(instance, spec.image))
        if (own_image := instance.own_image) is not None:
            return task_layers(own_image, self.settings.task_base_images, self._image_id)
        settings = self.settings
        python = PythonSource(settings.base_image, settings.python_source, settings.python_image)
        base, interpreter = base_layer(python, spec.python, settings.extra_ca_bundle, self._image_id)
        requirements = self._requirements_dir(instance) if spec.requirements else None
        env = env_layer(base, interpreter, instance, spec, requirements)
        return instance_layer(env, instance, spec, self._image_checkout_dir(instance))

    def _pulled_layers(self, instance: TaskData, spec: EnvironmentSpec, image: NamedImage, digest: str) -> ImageLayer:
        """The harness layer over `image` at `digest`: a terminal task's harness (its own image's WORKDIR), or a
        code task's (pulled_code_layer)."""
        pulled_from = pinned_reference(image.reference, digest)
        if (own_image := instance.own_image) is not None:
            return task_harness_layer(own_image, pulled_from, digest=digest)
        return pulled_code_layer(pulled_from, digest, image, instance, spec, self.settings.extra_ca_bundle)

    def pull(self, instance: TaskData, image: NamedImage) -> PulledImage:
        """`image` on this engine, pulled by the digest the campaign pins for it, else by its tag."""
        pin = pin_for(image.reference, self.settings.image_digests)
        return pull_image(self.client, image.reference, pin, instance.instance_id)

    def _digest(self, instance: TaskData, image: NamedImage) -> str:
        """The digest `image` is used at: the campaign's pin (nothing pulled), else the registry's, pulled."""
        return pin_for(image.reference, self.settings.image_digests) or self.pull(instance, image).digest

    def environment_key(self, instance: TaskData, spec: EnvironmentSpec) -> str:
        """The tag of the environment's top layer, computed without building anything (an image to pull that the
        campaign does not pin is pulled, for its digest). An image that cannot be pulled has a key that names it
        and no digest (UNPULLED_KEY): the plan holds every instance, and the instance's environment step (`build`)
        fails with the pull's named outcome."""
        try:
            return self._layers(instance, spec).tag
        except ImagePullFailed:
            if spec.image is None:
                raise
            return UNPULLED_KEY.format(identity=stable_hash([spec.image.reference, instance.instance_id])[:24])

    def _image_id(self, name: str) -> str:
        """images.ImageId on this engine."""
        image = find_image(self.client, name)
        return image.id if image else ""

    def _checkout(self, instance: TaskData, source: RepoSource) -> Path:
        """The repository at the base commit with its full history (requirements are read at the environment's
        setup commit, which may be later), made once; it never goes into an image."""
        return _cloned_once(source.location(instance.repo), instance.base_commit, self._checkout_dir(instance))

    def _image_checkout(self, instance: TaskData, source: RepoSource) -> Path:
        """What the instance image copies: the base commit, its ancestors and the tags on them (an install may read
        them), and no object of a later commit (KEEP_ANCESTORS), made once from the full checkout."""
        full = self._checkout(instance, source)
        return _cloned_once(str(full), instance.base_commit, self._image_checkout_dir(instance), KEEP_ANCESTORS)

    def build(self, instance: TaskData, spec: EnvironmentSpec, source: RepoSource) -> dict[str, Any]:
        """The environment's layers on the engine, each built unless it is there (ImageBuilder.ensure's record),
        with the environment's key and the logs of the layers built."""

        image = spec.image
        pulled = self.pull(instance, image) if image is not None else None
        layers = (
            self._pulled_layers(instance, spec, image, pulled.digest)
            if image is not None and pulled is not None
            else self._layers(instance, spec)
        )

        def prepare_context(layer: ImageLayer) -> None:
            if instance.own_image is not None or pulled:  # the task's own environment/ directory, or none
                return
            if layer.kind == "instance":
                self._image_checkout(instance, source)
            elif layer.kind == "env" and spec.requirements:
                text = instance.requirements(spec, self._checkout(instance, source))
                directory = self._requirements_dir(instance)
                directory.mkdir(parents=True, exist_ok=True)
                (directory / "requirements.txt").write_text(text)

        builder = ImageBuilder(self.client, self.root)
        with engine_errors(f"building the environment of {instance.instance_id}"):
            record = builder.ensure(layers, prepare_context=prepare_context)
        return {
            **record,
            "environment_key": record["tag"],
            "build_logs": [str(builder.log_path(t)) for t in record["built"]],
            **({"pulled_image": pulled.as_record()} if pulled else {}),
        }

    def extra_env(self) -> dict[str, str]:
        """What every trial command's environment adds: where the extra CA bundle is, when the images hold one."""
        if not self.settings.extra_ca_bundle:
            return {}
        return {"SSL_CERT_FILE": CA_BUNDLE, "REQUESTS_CA_BUNDLE": CA_BUNDLE, "PIP_CERT": CA_BUNDLE}


def pulled_details(record: Mapping[str, Any]) -> dict[str, Any]:
    """The named image an environment was built on, as its build record (`EnvironmentImages.build`) holds it:
    part of the environment's details, so the environment's records name the digest that was graded."""
    return {"pulled_image": record["pulled_image"]} if "pulled_image" in record else {}


def _cloned_once(location: str, commit: str, target: Path, then: str = "") -> Path:
    """`location` cloned at `commit` into `target` (then the shell command `then` run in it), unless it is there:
    made in a scratch directory beside it and moved into place, so a crash never leaves half a clone."""
    if not (target / ".git").exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            clone_at(location, commit, Path(scratch) / "repo")
            if then:
                subprocess.run(["sh", "-c", then], cwd=Path(scratch) / "repo", check=True, capture_output=True)
            os.replace(Path(scratch) / "repo", target)
    return target
