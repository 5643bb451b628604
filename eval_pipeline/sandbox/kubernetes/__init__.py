"""The Kubernetes backend: one environment pod per instance (its manifest in manifest.py), trials as execs in it."""

# Nothing is imported here: the backend is loaded by name when first used (sandbox/__init__.py, BACKENDS), so
# that what only needs a module of this package (a pod's manifest, the janitor) does not pay for the rest.
__all__: list[str] = []
