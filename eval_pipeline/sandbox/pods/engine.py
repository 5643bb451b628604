"""The Docker Engine API (Docker Engine, or Podman's compatible service), reached through the `docker` SDK at
DOCKER_HOST: one client per process and engine, and the engine's failures as typed infrastructure errors.
Both backends build their images here; the container backend also runs its pods here."""

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import docker
import docker.errors
import requests.exceptions
from docker.constants import DEFAULT_DOCKER_API_VERSION

from eval_pipeline.common.outcomes import SandboxLost
from eval_pipeline.sandbox.base import EngineUnreachable, SandboxError

# Commands are timed out inside the container; the client waits as long as they may run.
CLIENT_TIMEOUT_S = 24 * 3600
ENGINE_FAILURES = (docker.errors.DockerException, requests.exceptions.RequestException)
# Per process and engine: the client, and whether the engine is Podman.
_clients: dict[tuple[int, str], tuple[docker.DockerClient, bool]] = {}
_clients_lock = threading.Lock()


@contextmanager
def engine_errors(what: str) -> Iterator[None]:
    """Engine failures as typed infrastructure errors: a missing container or image is SandboxLost,
    anything else the engine or its socket raise (it stopped, it refused) a SandboxError (engine_error)."""
    try:
        yield
    except docker.errors.NotFound as error:
        raise SandboxLost(f"{what}: {error}") from error
    except ENGINE_FAILURES as error:
        raise SandboxError(f"{what}: {error}") from error


def engine_client() -> docker.DockerClient:
    """This process's client of the engine at DOCKER_HOST, made once: a client per step cost a third of a pod
    campaign's wall (each one reads the environment, opens a connection pool and asks the engine its version).
    Keyed by pid too, so a forked worker does not share its parent's connections."""
    return _engine()[0]


def engine_is_podman() -> bool:
    """Whether this process's engine is Podman (its ping names Libpod's API version)."""
    return _engine()[1]


def _engine() -> tuple[docker.DockerClient, bool]:
    key = (os.getpid(), os.environ.get("DOCKER_HOST", ""))
    with _clients_lock:
        if key not in _clients:
            try:
                with engine_errors(
                    f"connecting to the container engine at {key[1] or 'the default socket'} (DOCKER_HOST)"
                ):
                    _clients[key] = _connect()
            except SandboxError as error:
                raise EngineUnreachable(str(error)) from error.__cause__
        return _clients[key]


def _connect() -> tuple[docker.DockerClient, bool]:
    """A client speaking the engine's API version as its ping states it, and whether the engine is Podman.
    docker-py's own negotiation asks the engine's /version, which Podman answers by running its OCI runtime's and
    conmon's binaries: 0.45 s idle and a second under load, in every process of the command (twice, with the
    question which engine it is). The version is the engine's, as docker-py's negotiation takes it; an engine
    whose ping names none gets that negotiation."""
    client = docker.from_env(version=DEFAULT_DOCKER_API_VERSION, timeout=CLIENT_TIMEOUT_S)  # asks nothing yet
    ping = client.api._get(client.api._url("/_ping", versioned_api=False))  # with the client's headers, timeout
    ping.raise_for_status()
    podman = "Libpod-Api-Version" in ping.headers
    version = ping.headers.get("Api-Version") or "auto"
    client.close()
    return docker.from_env(version=version, timeout=CLIENT_TIMEOUT_S), podman
