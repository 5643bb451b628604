"""The container backend, through the Docker Engine API (Podman or Docker): one long-lived container per instance
from the images built in layers (sandbox/pods/), a workspace per trial inside it, and the janitor for what
leaked."""

# Nothing is imported here: the backend is loaded by name when first used (sandbox/__init__.py, BACKENDS), so
# that what only needs a module of this package (a pod's manifest, the janitor) does not pay for the rest.
__all__: list[str] = []
