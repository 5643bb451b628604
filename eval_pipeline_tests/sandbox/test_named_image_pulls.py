"""Pulling a task's named image, and each way it fails, named: through the engine's API (Podman's service), from
the registries `.ci/run` starts (the engine's mirror of docker.io, a private registry that wants credentials).

A registry that has no such image, one that refuses the credentials and a pin the registry does not hold are the
campaign's to fix (harness outcomes, not retried); a registry that does not answer and a full disk are the
machine's (infrastructure, retried). Every message names the instance and the reference, and never a credential.
"""

import io
import json
import tarfile
from dataclasses import replace

import docker
import pytest

from eval_pipeline.common.outcomes import (
    ImageDigestMismatch,
    ImageNoSpace,
    ImageNotFound,
    ImagePullDenied,
    ImagePullFailed,
    Outcome,
    OutcomeKind,
)
from eval_pipeline.sandbox.pods.environment_images import UNPULLED_KEY
from eval_pipeline.sandbox.pods.registry import AUTH_FILE_VARIABLE, pull_image
from eval_pipeline.trial.validation import Status, environment_failure

ZERO_DIGEST = "sha256:" + "0" * 64


@pytest.fixture(scope="module")
def tiny_image(engine) -> str:
    """An image of one file, FROM scratch: a few hundred bytes to push and pull."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in {"Dockerfile": b"FROM scratch\nCOPY hello /hello\n", "hello": b"named image\n"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive.seek(0)
    image, _ = engine.images.build(fileobj=archive, custom_context=True, tag="localhost/named-image-tiny:v1", rm=True)
    return "localhost/named-image-tiny:v1"


def _pull_fails(client, reference: str, pin: str = "", instance_id: str = "owner__repo-1") -> ImagePullFailed:
    with pytest.raises(ImagePullFailed) as raised:
        pull_image(client, reference, pin, instance_id)
    assert instance_id in str(raised.value) and reference in str(raised.value)
    return raised.value


def test_an_unknown_image_is_the_campaign_s_to_fix(engine):
    failure = _pull_fails(engine, "swebench/sweb.eval.x86_64.nobody_1776_nothing-1:latest")
    assert type(failure) is ImageNotFound and "no such image" in str(failure)
    assert failure.outcome is Outcome.IMAGE_NOT_FOUND and failure.outcome.kind is OutcomeKind.HARNESS
    assert not failure.outcome.is_retried and not failure.outcome.is_scored


def test_a_registry_that_does_not_answer_is_the_machine_s_and_retried(engine):
    failure = _pull_fails(engine, "127.0.0.1:1/named-image/nothing:v1")  # no registry listens on port 1
    assert type(failure) is ImagePullFailed and "could not be reached" in str(failure)
    assert failure.outcome is Outcome.IMAGE_PULL_FAILED and failure.outcome.is_retried


def test_a_pin_the_registry_does_not_hold_fails_and_the_true_one_pulls(engine, image_registry, tiny_image):
    reference = image_registry.push(tiny_image, "named-image/pinned:v1")
    found = pull_image(engine, reference)
    assert found.digest.startswith("sha256:") and found.size_bytes > 0
    failure = _pull_fails(engine, reference, pin=ZERO_DIGEST)
    assert type(failure) is ImageDigestMismatch and ZERO_DIGEST in str(failure)
    assert failure.outcome is Outcome.IMAGE_DIGEST_MISMATCH and not failure.outcome.is_retried
    assert pull_image(engine, reference, found.digest).image_id == found.image_id


def test_a_private_registry_refuses_a_pull_without_its_credentials(
    engine, image_registry, tiny_image, monkeypatch, tmp_path
):
    """Refused without credentials and with wrong ones ($DOCKER_CONFIG); pulled with the file the project reads,
    EVAL_PIPELINE_REGISTRY_AUTH_FILE. No message holds the credentials."""
    reference = image_registry.push_private(tiny_image, "named-image/private:v1")
    image_registry.remove_local(reference)
    secrets = (image_registry.password, json.loads((image_registry.valid_config / "config.json").read_text()))
    failure = _pull_fails(engine, reference)
    assert type(failure) is ImagePullDenied and "refused the pull" in str(failure)
    assert failure.outcome is Outcome.IMAGE_PULL_DENIED and not failure.outcome.is_retried
    monkeypatch.setenv("DOCKER_CONFIG", str(image_registry.wrong_config))
    wrong = docker.from_env()  # the SDK reads $DOCKER_CONFIG/config.json as a client is made
    denied = _pull_fails(wrong, reference)
    assert type(denied) is ImagePullDenied
    monkeypatch.delenv("DOCKER_CONFIG")
    monkeypatch.setenv(AUTH_FILE_VARIABLE, str(image_registry.valid_config / "config.json"))
    pulled = pull_image(engine, reference, instance_id="owner__repo-1")
    assert pulled.digest.startswith("sha256:")
    for message in (str(failure), str(denied), repr(pulled.as_record())):
        assert secrets[0] not in message
        assert all(entry["auth"] not in message for entry in secrets[1]["auths"].values())


class _FullDisk:
    """The engine's API as it answers a pull onto a full disk: its stream ends in Podman's ENOSPC error (a full
    disk is not made here; this stands at the API boundary, where the engine's words are all the harness sees)."""

    class api:  # noqa: N801 - the attribute docker.DockerClient has
        base_url = "http+docker://full-disk"

        @staticmethod
        def pull(*args, **kwargs):
            return iter(
                [
                    {"status": "Pulling fs layer", "id": "e1062104a2a0"},
                    {
                        "error": 'writing blob: storing blob to file "/var/tmp/storage123/1": write'
                        " /var/tmp/storage123/1: no space left on device"
                    },
                ]
            )


def test_an_image_too_large_for_the_disk_is_the_machine_s_and_retried():
    failure = _pull_fails(_FullDisk(), "swebench/sweb.eval.x86_64.big_1776_image-1:latest")
    assert type(failure) is ImageNoSpace and "no space left" in str(failure)
    assert failure.outcome is Outcome.IMAGE_NO_SPACE and failure.outcome.is_retried


def test_an_environment_whose_image_cannot_be_pulled_fails_its_step_by_name(engine, container_sandbox, demo_benchmark):
    """The plan keeps the instance (its key names no digest); its environment fails with the pull's outcome,
    and validation reports that outcome for the instance."""
    instance = replace(demo_benchmark.instances[0], image_namespace="no-such-namespace")
    benchmark = replace(demo_benchmark, instances=(instance,), images="pull")
    spec = benchmark.environment_for(instance)
    assert spec.image == instance.named_image
    sandbox = container_sandbox()
    key = sandbox.environment_key(instance, spec)
    assert key.startswith(UNPULLED_KEY.split(":")[0])
    with pytest.raises(ImageNotFound) as raised:
        sandbox.prepare(instance, spec, benchmark.source)
    assert instance.instance_id in str(raised.value) and spec.image.reference in str(raised.value)
    validation = environment_failure("code", instance, 3, raised.value)
    assert validation.status == Status.ENVIRONMENT_FAILED
    assert validation.as_record()["environment_outcome"] == "image_not_found"
    assert spec.image.reference in validation.detail
