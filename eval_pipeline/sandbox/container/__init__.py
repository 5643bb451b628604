"""The container backend, through the Docker Engine API (Podman or Docker): images built in layers, one
long-lived container per instance, a workspace per trial inside it, and the janitor for what leaked."""

from eval_pipeline.sandbox.container.sandbox import ContainerSandbox, engine_client

__all__ = [
    "ContainerSandbox",
    "engine_client",
]
