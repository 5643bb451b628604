"""The Kubernetes backend: one environment pod per instance (its manifest in manifest.py), trials as execs in it."""

from eval_pipeline.sandbox.kubernetes.sandbox import KubernetesSandbox, remove_pods

__all__ = [
    "KubernetesSandbox",
    "remove_pods",
]
