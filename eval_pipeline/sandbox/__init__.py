"""Sandbox backends behind one interface; `make_sandbox` picks one by name."""

from pathlib import Path

from eval_pipeline.sandbox.base import EnvironmentHandle, ExecResult, ResourceLimits, SandboxBackend, Workspace
from eval_pipeline.sandbox.local import LocalSandbox

__all__ = [
    "BACKENDS",
    "EnvironmentHandle",
    "ExecResult",
    "ResourceLimits",
    "SandboxBackend",
    "Workspace",
    "make_sandbox",
]

BACKENDS: dict[str, type[LocalSandbox]] = {LocalSandbox.name: LocalSandbox}


def make_sandbox(backend: str, root: Path, limits: ResourceLimits) -> SandboxBackend:
    """The sandbox backend called `backend`, keeping its state under `root/backend`."""
    if backend not in BACKENDS:
        raise ValueError(f"sandbox.backend: unknown backend {backend!r} (known: {', '.join(sorted(BACKENDS))})")
    return BACKENDS[backend](root / backend, limits)
