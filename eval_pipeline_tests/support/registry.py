"""The image registries `.ci/run` starts (scripts/start_image_registry.sh), for tests of images pulled by name: the
engine's mirror of docker.io, and a private registry that requires credentials. Required in CI and skipped
without elsewhere (a fixture listed in the root conftest's `pytest_plugins`).

An image built here is pushed to the mirror under a dataset's name (`swebench/sweb.eval.x86_64.<instance>:latest`)
and pulled through the engine as `docker.io/<name>`, as users behind a pull-through cache pull it."""

import base64
import io
import json
import os
import ssl
import tarfile
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eval_pipeline_tests.support.services import ci_service

REGISTRY_SCRIPT = "start_image_registry.sh"
# The private registry's certificate, which the engine trusts from certs.d (the script puts it there).
PRIVATE_REGISTRY_CA = Path("/var/lib/eval-pipeline-registry/private/tls.crt")


def split_name(name: str) -> tuple[str, str]:
    """`swebench/x:v1` as its repository and tag (`latest` where it names none)."""
    repository, colon, tag = name.rpartition(":")
    if not colon or "/" in tag:
        return name, "latest"
    return repository, tag


def registry_status(url: str) -> int | None:
    """The status a registry's API root at `url` answers with (200 open, 401 with auth), None when nothing answers."""
    context = ssl.create_default_context(cafile=PRIVATE_REGISTRY_CA) if url.startswith("https:") else None
    try:
        return urllib.request.urlopen(f"{url}/v2/", timeout=5, context=context).status
    except urllib.error.HTTPError as error:
        return error.code
    except (OSError, ssl.SSLError):
        return None


def auth_entry(username: str, password: str) -> dict[str, str]:
    """A config.json `auths` entry, as `docker login` writes it."""
    return {"auth": base64.b64encode(f"{username}:{password}".encode()).decode()}


def docker_config(directory: Path, registry: str, username: str, password: str) -> Path:
    """A DOCKER_CONFIG directory whose config.json holds `username`'s credentials for `registry`."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {"auths": {registry: auth_entry(username, password)}}
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@dataclass(frozen=True)
class ImageRegistry:
    """The registries the tests pull from, and how to put images there.

    `mirror` is the engine's mirror of docker.io (`127.0.0.1:15000`); `private` a registry over TLS that refuses
    pulls without `username`'s credentials; `valid_config` and `wrong_config` are DOCKER_CONFIG directories whose
    config.json holds those credentials for `private`, and a wrong password for it."""

    engine: Any
    mirror: str
    private: str
    username: str
    password: str
    valid_config: Path
    wrong_config: Path

    def push(self, local_image: str, name: str) -> str:
        """Push the engine's `local_image` to the mirror as `name`; return the reference that pulls it through the
        mirror (`docker.io/<name>`)."""
        repository, tag = split_name(name)
        self._push(local_image, f"{self.mirror}/{repository}", tag, auth={}, tls=False)
        return f"docker.io/{repository}:{tag}"

    def push_private(self, local_image: str, name: str) -> str:
        """Push the engine's `local_image` to the private registry as `name`; return its reference there."""
        repository, tag = split_name(name)
        target = f"{self.private}/{repository}"
        self._push(local_image, target, tag, auth={"username": self.username, "password": self.password}, tls=True)
        return f"{target}:{tag}"

    def remove_local(self, reference: str) -> None:
        """Remove `reference` from the engine (the name; the image too where no other name holds it), so that the
        next use of it pulls. Forced: a build the engine lost mid-way (a test restarts the engine) leaves its working
        container holding the image it was built from."""
        import docker.errors

        try:
            self.engine.images.remove(reference, force=True)
        except docker.errors.NotFound:  # not on the engine
            pass

    def _push(self, local_image: str, repository: str, tag: str, auth: dict[str, str], tls: bool) -> None:
        """Tag `local_image` as `repository:tag`, push it with `auth` (sent with the request only), untag it.

        A registry without `tls` serves plain HTTP: Podman's service takes a registry as such from the
        registries.conf it read when it started, or from the push's `tlsVerify=false`, which Docker Engine (taking
        loopback registries over HTTP as they are) ignores; docker-py's `push` sends no such parameter, so the
        request is made here.
        """
        api = self.engine.api
        self.engine.images.get(local_image).tag(repository, tag)
        try:
            response = api.post(
                f"{api.base_url}/v{api.api_version}/images/{repository}/push",
                params={"tag": tag} if tls else {"tag": tag, "tlsVerify": "false"},
                headers={"X-Registry-Auth": base64.urlsafe_b64encode(json.dumps(auth).encode()).decode()},
                stream=True,
            )
            response.raise_for_status()
            errors = [line["error"] for line in map(json.loads, response.iter_lines()) if line.get("error")]
            assert not errors, f"pushing {local_image} as {repository}:{tag} failed: {errors}"
        finally:
            self.engine.images.remove(f"{repository}:{tag}")


@pytest.fixture(scope="session")
def image_registry(engine, tmp_path_factory) -> ImageRegistry:
    """The mirror of docker.io and the private registry, with DOCKER_CONFIG directories for the private one."""
    mirror = ci_service("EVAL_PIPELINE_TEST_REGISTRY", REGISTRY_SCRIPT)
    private_url = ci_service("EVAL_PIPELINE_TEST_PRIVATE_REGISTRY", REGISTRY_SCRIPT)
    credentials, _, private = private_url.rpartition("@")
    username, _, password = credentials.partition(":")
    for url, expected in ((f"http://{mirror}", 200), (f"https://{private}", 401)):
        if (status := registry_status(url)) != expected:
            message = f"no image registry answers at {url} (status {status}); start it with scripts/{REGISTRY_SCRIPT}"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
    configs = tmp_path_factory.mktemp("docker-configs")
    return ImageRegistry(
        engine=engine,
        mirror=mirror,
        private=private,
        username=username,
        password=password,
        valid_config=docker_config(configs / "valid", private, username, password),
        wrong_config=docker_config(configs / "wrong", private, username, f"not-{password}"),
    )


@pytest.fixture
def fresh_images(engine):
    """Makes images of one small layer that no registry or engine has seen (each one's content is new), returning
    each one's tag and id; removes what is left of them after the test."""
    import docker.errors

    made: list[str] = []

    def make() -> tuple[str, str]:
        files = {"Dockerfile": b"FROM scratch\nCOPY marker /marker\n", "marker": uuid.uuid4().hex.encode()}
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        context.seek(0)
        tag = f"localhost/eval-pipeline-test-image:{uuid.uuid4().hex[:12]}"
        image, _ = engine.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
        made.append(image.id)
        return tag, image.id

    yield make
    for image_id in made:
        try:
            engine.images.remove(image_id, force=True)
        except docker.errors.NotFound:  # the test removed it
            pass
