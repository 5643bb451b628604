"""The container engine (Podman's Docker API in CI, Docker Engine elsewhere) and container sandboxes on it:
fixtures for tests in every directory that runs containers (listed in the root conftest's `pytest_plugins`).
docker is imported by the fixtures that use it, so that a test run that needs no engine does not import it."""

import os
import time
import uuid

import pytest

from eval_pipeline.sandbox import ResourceLimits, SandboxSettings, make_sandbox
from eval_pipeline.sandbox.container.removal import removals_done
from eval_pipeline.sandbox.pods.images import MANAGED_LABEL

TRIAL_LIMITS = ResourceLimits(memory_floor_mb=128, memory_ceiling_mb=512, cpu_ceiling=1)


@pytest.fixture(scope="session")
def engine():
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as error:  # noqa: BLE001 - any failure to reach the engine
        if os.environ.get("CI"):
            pytest.fail(f"CI must provide a container engine (see scripts/start_container_engine.sh): {error}")
        pytest.skip(f"no container engine reachable: {error}")
    yield client
    removals_done()  # trial containers this process is removing behind its trials
    leftovers = client.containers.list(all=True, filters={"label": [f"{MANAGED_LABEL}=true"]})
    assert not leftovers, f"tests left containers behind: {[c.name for c in leftovers]}"


def output_of(engine, image: str, command: list[str], **options) -> bytes:
    """What `command` prints in a fresh container of `image`, read from its logs once it has exited: docker-py's
    `containers.run` reads an attached stream, which Podman has left open under load until the test's timeout
    (600 s) after the command had long ended."""
    container = engine.containers.create(image=image, command=command, **options)  # by name: see the tool test
    try:
        container.start()
        container.wait(timeout=120)
        return container.logs(stdout=True, stderr=False)
    finally:
        container.remove(force=True)


@pytest.fixture
def container_sandbox(engine, tmp_path):
    """A factory of container sandboxes for a unique test campaign, removing its containers after the test."""
    campaign = f"test-{uuid.uuid4().hex[:8]}"
    made = []

    def make(limits=TRIAL_LIMITS, network=False, **settings):
        sandbox = make_sandbox(
            SandboxSettings.from_mapping({"backend": "container", **settings}),
            tmp_path / "sb",
            limits,
            campaign,
            network,
        )
        made.append(sandbox)
        return sandbox

    yield make
    for sandbox in made:
        sandbox.release()
    # A terminal trial's snapshot outlives its campaign's run. Listed by one label: Podman 4.3 lists no image for
    # a filter of two labels, whatever the images carry.
    for image in listed_images(engine, {"label": [f"eval_pipeline.campaign={campaign}"]}):
        if image.labels.get("eval_pipeline.layer") == "snapshot" and image.labels.get(MANAGED_LABEL) == "true":
            engine.images.remove(image.id, force=True)


def listed_images(engine, filters, attempts: int = 5):
    """The engine's images matching `filters`; Podman fails a listing when another test removes an image during
    it ("image not known"), so a failed listing is tried again."""
    import docker

    for _ in range(attempts - 1):
        try:
            return engine.images.list(filters=filters)
        except docker.errors.APIError:
            time.sleep(1)
    return engine.images.list(filters=filters)
