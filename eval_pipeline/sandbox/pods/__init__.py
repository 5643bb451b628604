"""What the container and Kubernetes backends share: environment images built in layers on a Docker Engine API
(images.py, environment_images.py, engine.py), the exec transport that reaches a long-lived environment pod
(exec_transport.py), and a trial's workspace inside such a pod, reached only by exec (workspace.py)."""

# Nothing is imported here: each backend imports the modules it uses, and the backends are loaded by name
# when first used (sandbox/__init__.py, BACKENDS).
__all__: list[str] = []
