"""Sandbox backends behind one interface; `make_sandbox` picks one by name."""

import importlib
from pathlib import Path

from eval_pipeline.sandbox.base import (
    EngineUnreachable,
    EnvironmentHandle,
    ExecResult,
    ResourceLimits,
    SandboxBackend,
    SandboxError,
    SandboxSettings,
    ToolChannel,
    Workspace,
)

__all__ = [
    "BACKENDS",
    "EnvironmentHandle",
    "ExecResult",
    "ResourceLimits",
    "SandboxBackend",
    "EngineUnreachable",
    "SandboxError",
    "SandboxSettings",
    "ToolChannel",
    "Workspace",
    "make_sandbox",
]

# Backends by name, imported when first used: the Kubernetes client alone takes half a second to import,
# which every run worker of an embedded-default campaign would otherwise pay.
BACKENDS = {
    "local": "eval_pipeline.sandbox.local:LocalSandbox",
    "container": "eval_pipeline.sandbox.container.sandbox:ContainerSandbox",
    "kubernetes": "eval_pipeline.sandbox.kubernetes.sandbox:KubernetesSandbox",
}


def make_sandbox(
    settings: SandboxSettings, root: Path, limits: ResourceLimits, campaign: str, network: bool = False
) -> SandboxBackend:
    """The backend `settings.backend`, keeping its state under `root/<backend>`, labelled for `campaign`;
    `network` when a variant of the campaign opted into network (SandboxBackend)."""
    if settings.backend not in BACKENDS:
        raise ValueError(
            f"sandbox.backend: unknown backend {settings.backend!r} (known: {', '.join(sorted(BACKENDS))})"
        )
    module, _, name = BACKENDS[settings.backend].partition(":")
    backend: type[SandboxBackend] = getattr(importlib.import_module(module), name)
    return backend(root / settings.backend, limits, settings, campaign, network)
