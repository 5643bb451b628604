"""Sandbox backends behind one interface; `make_sandbox` picks one by name."""

from pathlib import Path

from eval_pipeline.sandbox.base import (
    EnvironmentHandle,
    ExecResult,
    ResourceLimits,
    SandboxBackend,
    SandboxError,
    SandboxSettings,
    Workspace,
)
from eval_pipeline.sandbox.container import ContainerSandbox
from eval_pipeline.sandbox.kubernetes import KubernetesSandbox
from eval_pipeline.sandbox.local import LocalSandbox

__all__ = [
    "BACKENDS",
    "EnvironmentHandle",
    "ExecResult",
    "ResourceLimits",
    "SandboxBackend",
    "SandboxError",
    "SandboxSettings",
    "Workspace",
    "make_sandbox",
]

BACKENDS: dict[str, type[SandboxBackend]] = {
    backend.name: backend for backend in (LocalSandbox, ContainerSandbox, KubernetesSandbox)
}


def make_sandbox(settings: SandboxSettings, root: Path, limits: ResourceLimits, campaign: str) -> SandboxBackend:
    """The backend `settings.backend`, keeping its state under `root/<backend>`, labelled for `campaign`."""
    if settings.backend not in BACKENDS:
        raise ValueError(
            f"sandbox.backend: unknown backend {settings.backend!r} (known: {', '.join(sorted(BACKENDS))})"
        )
    return BACKENDS[settings.backend](root / settings.backend, limits, settings, campaign)
