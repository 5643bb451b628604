"""The janitor's image pruning over images pulled from a registry: a pulled image carries no label of ours, so it is
removed with the last harness layer that names it (`eval_pipeline.pulled`), kept while a container uses it, and
never touched when the harness built nothing on it (a user's own pull)."""

import uuid
from dataclasses import dataclass
from datetime import timedelta

import docker.errors
import pytest

from eval_pipeline.common.settings import Paths
from eval_pipeline.datasets.sources import load_benchmark
from eval_pipeline.sandbox.container.janitor import prune_images
from eval_pipeline.sandbox.pods.images import (
    PULLED_LABEL,
    ImageBuilder,
    ImageLayer,
    pulled_code_layer,
    task_harness_layer,
)
from eval_pipeline.sandbox.pods.registry import PulledImage, pull_image
from eval_pipeline_tests.support.registry import ImageRegistry
from eval_pipeline_tests.support.rows import row, write_jsonl

DIGEST = "sha256:" + "ab" * 32


@dataclass(frozen=True)
class TerminalTask:
    """A terminal task's image as the harness layer reads it (tasks/data.py's TaskImage)."""

    instance_id: str = "regex-log"
    dockerfile: str = "FROM ubuntu:24.04\n"
    environment_dir: str = ""
    environment_hash: str = ""
    workdir: str = "/app"
    allow_internet: bool = False
    storage_mb: int | None = None


def test_the_harness_layer_on_a_pulled_image_names_it_and_one_on_a_built_image_names_none(tmp_path):
    """What the janitor reads: the harness layers over a pulled image (a code task's, a terminal task's) carry it
    by its digest; the harness layer over a task image built here carries no such label."""
    rows = write_jsonl(tmp_path / "rows.jsonl", [row()])
    benchmark = load_benchmark({"kind": "swebench", "path": str(rows), "images": "pull"}, Paths(tmp_path / "data"))
    (instance,) = benchmark.instances
    spec = benchmark.environment_for(instance)
    pinned = f"docker.io/swebench/x@{DIGEST}"
    assert spec.image is not None
    assert pulled_code_layer(pinned, DIGEST, spec.image, instance, spec, None).labels[PULLED_LABEL] == pinned
    pinned = f"docker.io/alexgshaw/regex-log@{DIGEST}"
    assert task_harness_layer(TerminalTask(), pinned, digest=DIGEST).labels[PULLED_LABEL] == pinned
    built = ImageLayer("task", "FROM ubuntu:24.04\n")
    assert PULLED_LABEL not in task_harness_layer(TerminalTask(), built.tag, built).labels


@pytest.fixture
def pulled_image(engine, image_registry: ImageRegistry, fresh_images):
    """Makes images of one new layer, pushed to the mirror and pulled through it as docker.io/...; removed after
    the test (fresh_images)."""

    def make() -> PulledImage:
        local, _ = fresh_images()
        reference = image_registry.push(local, f"eval-pipeline-test/pulled:{uuid.uuid4().hex[:12]}")
        engine.images.remove(local)
        return pull_image(engine, reference)

    return make


def harness_layer(engine, tmp_path, pulled: PulledImage, campaign: str) -> str:
    """A harness-managed layer built on `pulled` (by its digest, labelled with it, as the harness builds its layer
    over a pulled image), of `campaign`; its tag."""
    layer = ImageLayer(
        "harness",
        f"FROM {pulled.pinned_reference}\nENV EVAL_PIPELINE_TEST_LAYER={uuid.uuid4().hex}\n",
        labels={
            "eval_pipeline.layer": "harness",
            "eval_pipeline.campaign": campaign,
            PULLED_LABEL: pulled.pinned_reference,
        },
    )
    return ImageBuilder(engine, tmp_path).ensure(layer)["tag"]


def on_engine(engine, name: str) -> bool:
    try:
        engine.images.get(name)
    except docker.errors.NotFound:
        return False
    return True


@pytest.mark.slow
def test_a_pulled_image_goes_with_the_last_harness_layer_built_on_it(engine, tmp_path, pulled_image):
    pulled, users_own = pulled_image(), pulled_image()  # nothing of the harness is built on the user's own pull
    first, second = f"test-{uuid.uuid4().hex[:8]}", f"test-{uuid.uuid4().hex[:8]}"
    first_layer = harness_layer(engine, tmp_path, pulled, first)
    second_layer = harness_layer(engine, tmp_path, pulled, second)

    assert prune_images(engine, timedelta(0), first) == [first_layer]
    assert on_engine(engine, pulled.pinned_reference)  # the second campaign's layer still names it

    assert prune_images(engine, timedelta(0), second) == [second_layer, pulled.pinned_reference]
    assert not on_engine(engine, pulled.image_id)
    assert not on_engine(engine, pulled.reference)
    assert on_engine(engine, users_own.reference)


@pytest.mark.slow
def test_a_pulled_image_a_container_uses_stays(engine, tmp_path, pulled_image):
    pulled = pulled_image()
    campaign = f"test-{uuid.uuid4().hex[:8]}"
    layer = harness_layer(engine, tmp_path, pulled, campaign)
    container = engine.containers.create(pulled.pinned_reference, command=["/marker"])
    try:
        assert prune_images(engine, timedelta(0), campaign) == [layer]
        assert on_engine(engine, pulled.image_id)
    finally:
        container.remove(force=True)
