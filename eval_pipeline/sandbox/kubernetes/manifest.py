"""What the Kubernetes backend asks the cluster for: an environment pod's manifest, names, labels and resources.

Plain data, apart from the client (which takes half a second to import), so that the Dagster
layer can size trial steps and tests can validate manifests without loading it.
"""

import hashlib
import re
from typing import Any

from eval_pipeline.sandbox.base import ResourceLimits
from eval_pipeline.sandbox.pods.images import TESTBED
from eval_pipeline.sandbox.tool_runtime import TOOLS_ROOT, ToolRuntime

MANAGED_BY = {"app.kubernetes.io/managed-by": "eval-pipeline"}
CAMPAIGN_LABEL = "eval-pipeline/campaign"
INSTANCE_LABEL = "eval-pipeline/instance"
ROLE_LABEL = "eval-pipeline/role"
# On the pods of a campaign with a variant that opted into network: what a policy allowing egress selects
# (k8s/networkpolicy.yaml denies every environment pod everything otherwise).
NETWORK_LABEL = "eval-pipeline/network"
NETWORK_OPTED_IN = "opted-in"
INSTANCE_ANNOTATION = "eval-pipeline/instance-id"  # the exact id; a label value may have been shortened
CONTAINER = "environment"
TOOLS_VOLUME = "tool-server"


def label_value(text: str) -> str:
    """`text` as a valid label value: at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", text)
    if len(value) > 63:
        value = f"{value[:54]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    return value.strip("-_.") or "x"


def pod_name(campaign: str, instance_id: str, identity: str) -> str:
    """A DNS-1123 label (at most 63 characters) naming the instance's pod, unique per `identity`."""
    readable = re.sub(r"[^a-z0-9-]+", "-", f"{campaign}-{instance_id}".lower()).strip("-")[:48].strip("-")
    return f"env-{readable}-{hashlib.sha256(identity.encode()).hexdigest()[:10]}"


def _cpu(cores: float) -> str:
    return f"{round(cores * 1000)}m"


def pod_resources(limits: ResourceLimits, trials: int = 1) -> dict[str, dict[str, str]]:
    """Requests are the floors and limits the ceilings (absent when uncapped), for `trials` trials at once."""
    resources: dict[str, dict[str, str]] = {
        "requests": {"memory": f"{limits.memory_floor_mb * trials}Mi", "cpu": _cpu(limits.cpu_floor * trials)},
        "limits": {},
    }
    if limits.effective_memory_ceiling_mb is not None:
        resources["limits"]["memory"] = f"{limits.effective_memory_ceiling_mb * trials}Mi"
        floor = min(limits.memory_floor_mb, limits.effective_memory_ceiling_mb)  # a request never tops its limit
        resources["requests"]["memory"] = f"{floor * trials}Mi"
    if limits.effective_cpu_ceiling is not None:
        resources["limits"]["cpu"] = _cpu(limits.effective_cpu_ceiling * trials)
        resources["requests"]["cpu"] = _cpu(min(limits.cpu_floor, limits.effective_cpu_ceiling) * trials)
    if not resources["limits"]:
        del resources["limits"]
    return resources


def environment_pod_manifest(
    name: str,
    namespace: str,
    image: str,
    tools_image: str,
    campaign: str,
    instance_id: str,
    resources: dict[str, Any],
    network: bool = False,
) -> dict[str, Any]:
    """The environment pod: the instance image idling under the command runner, ready once /testbed exists,
    with the tool server's runtime (`tools_image`, tool_runtime.py) mounted read-only as an image volume (the
    ImageVolume feature); labelled NETWORK_LABEL when `network` (a variant of its campaign opted in)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                **MANAGED_BY,
                CAMPAIGN_LABEL: label_value(campaign),
                INSTANCE_LABEL: label_value(instance_id),
                ROLE_LABEL: "environment",
                **({NETWORK_LABEL: NETWORK_OPTED_IN} if network else {}),
            },
            "annotations": {INSTANCE_ANNOTATION: instance_id},
        },
        "spec": {
            "restartPolicy": "Never",  # a lost pod is reported (sandbox_lost) and recreated, never silently restarted
            "automountServiceAccountToken": False,  # agents get no credentials to the cluster
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 5,
            "volumes": [{"name": TOOLS_VOLUME, "image": {"reference": tools_image, "pullPolicy": "IfNotPresent"}}],
            "containers": [
                {
                    "name": CONTAINER,
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ToolRuntime().runner("--reap"),  # the runtime's interpreter, as every exec's
                    "resources": resources,
                    "readinessProbe": {"exec": {"command": ["test", "-d", TESTBED]}, "periodSeconds": 2},
                    "volumeMounts": [{"name": TOOLS_VOLUME, "mountPath": TOOLS_ROOT, "readOnly": True}],
                    # Root only to give each workspace its own uid; nothing may regain privileges after that.
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP", "SYS_CHROOT"]},
                    },
                }
            ],
        },
    }
