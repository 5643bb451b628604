"""Sandbox backends behind one interface; `make_sandbox` picks one by name."""

from pathlib import Path

from eval_pipeline.sandbox.base import EnvironmentHandle, ExecResult, ResourceLimits, SandboxBackend, Workspace
from eval_pipeline.sandbox.local import LocalSandbox

__all__ = ["EnvironmentHandle", "ExecResult", "ResourceLimits", "SandboxBackend", "Workspace", "make_sandbox"]


def make_sandbox(backend: str, root: Path, limits: ResourceLimits) -> SandboxBackend:
    """The sandbox backend called `backend`, keeping its state under `root/backend`."""
    if backend == LocalSandbox.name:
        return LocalSandbox(root / backend, limits)
    raise ValueError(f"sandbox.backend: unknown backend {backend!r} (known: local)")
