"""The tests' image registries (eval_pipeline_tests/support/registry.py) as the engine sees them: an image pushed to
the mirror is pulled through the engine under its docker.io name, from the registry and nowhere else, and the
private registry serves an image only to a DOCKER_CONFIG that holds its credentials."""

import urllib.request
import uuid

import docker.errors
import pytest

from eval_pipeline_tests.support.registry import ImageRegistry, split_name

pytestmark = pytest.mark.slow

MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)


def pull_error(client, reference: str) -> str:
    """Pull `reference` through the engine's API; the engine's error, '' when it pulled."""
    repository, tag = split_name(reference)
    lines = client.api.pull(repository, tag, stream=True, decode=True)
    return next((str(line["error"]) for line in lines if line.get("error")), "")


def manifest_digest(registry: str, name: str) -> str:
    """The content digest the mirror (plain HTTP) serves `name`'s manifest under."""
    repository, tag = split_name(name)
    request = urllib.request.Request(
        f"http://{registry}/v2/{repository}/manifests/{tag}",
        method="HEAD",
        headers={"Accept": ",".join(MANIFEST_TYPES)},
    )
    return urllib.request.urlopen(request, timeout=10).headers["Docker-Content-Digest"]


def test_an_image_pushed_to_the_mirror_is_pulled_as_docker_io_from_it(
    engine, image_registry: ImageRegistry, fresh_images
):
    local, image_id = fresh_images()
    name = f"eval-pipeline-test/registry-probe:{uuid.uuid4().hex[:12]}"
    reference = image_registry.push(local, name)
    assert reference == f"docker.io/{name}"
    digest = manifest_digest(image_registry.mirror, name)
    engine.images.remove(local)  # the only other name of the image: what is pulled next comes from the registry
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(reference)

    assert pull_error(engine, reference) == ""
    pulled = engine.images.get(reference)
    assert pulled.id == image_id
    assert f"docker.io/eval-pipeline-test/registry-probe@{digest}" in pulled.attrs["RepoDigests"]

    image_registry.remove_local(reference)
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(reference)
    never_pushed = f"docker.io/eval-pipeline-test/registry-probe:never-{uuid.uuid4().hex[:8]}"
    assert "manifest unknown" in pull_error(engine, never_pushed)


def test_the_private_registry_serves_an_image_only_with_its_credentials(
    engine, image_registry: ImageRegistry, fresh_images, monkeypatch, tmp_path
):
    import docker

    local, image_id = fresh_images()
    reference = image_registry.push_private(local, f"eval-pipeline-test/private-probe:{uuid.uuid4().hex[:12]}")
    engine.images.remove(local)
    no_credentials = tmp_path / "empty"
    no_credentials.mkdir()
    outcomes = {}
    for config in (no_credentials, image_registry.wrong_config, image_registry.valid_config):
        monkeypatch.setenv("DOCKER_CONFIG", str(config))  # read by the docker SDK when a client is made
        client = docker.from_env()
        try:
            outcomes[config.name] = pull_error(client, reference)
        finally:
            client.close()

    assert "authentication required" in outcomes["empty"]
    assert "authentication required" in outcomes["wrong"]
    assert outcomes["valid"] == ""
    assert engine.images.get(reference).id == image_id
