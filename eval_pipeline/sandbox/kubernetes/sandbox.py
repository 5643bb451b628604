"""The Kubernetes backend: one environment pod per instance, through the official `kubernetes` client.

Images are the container backend's three layers (sandbox/pods/: same tags, so the
same environment keys and artifacts), built on a Docker Engine API and pushed to
`image_registry` (EVAL_PIPELINE_IMAGE_REGISTRY) for the cluster to pull; with
no registry, pods name the local tag (a node that has the image, or `podman
kube play`). Each instance gets one long-lived pod in the environments
namespace (EVAL_PIPELINE_K8S_NAMESPACE), created idempotently, waited on
until ready, labelled so that the janitor can find leaked pods; its requests
are the task's floors and its limits the ceilings, times `pod_parallelism`.
Trials run in workspaces inside it, as in the container backend, through the
API's exec subresource (a command's request on its stdin, never in its
command line); the pod gets no service account token, and
k8s/networkpolicy.yaml denies it egress. A campaign with a variant that opted
into network labels its pods (NETWORK_LABEL) for a policy of the operator's
that allows what it needs; trials that did not opt in still get no network,
each command in a network namespace of its own (runner/namespaces.py).

The backend's parts: the exec transport (pod_exec.py), the pod's manifest (manifest.py) and the trial slots
claimed in the pod (slots.py); the workspace and the images are the container backend's too (sandbox/pods/).
"""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from eval_pipeline.common.outcomes import ImageBuildFailed, SandboxLost
from eval_pipeline.sandbox.base import EnvironmentHandle, SandboxBackend, SandboxError
from eval_pipeline.sandbox.kubernetes.manifest import (
    CAMPAIGN_LABEL,
    MANAGED_BY,
    environment_pod_manifest,
    label_value,
    pod_name,
    pod_resources,
)
from eval_pipeline.sandbox.kubernetes.pod_exec import API_FAILURES, API_TIMEOUT_S, KubernetesExec
from eval_pipeline.sandbox.kubernetes.slots import claimed_slot
from eval_pipeline.sandbox.pods.engine import engine_errors
from eval_pipeline.sandbox.pods.environment_images import EnvironmentImages, pulled_details
from eval_pipeline.sandbox.pods.exec_transport import PodExec
from eval_pipeline.sandbox.pods.images import WORKSPACES, ImageBuilder
from eval_pipeline.sandbox.pods.workspace import ExecWorkspace
from eval_pipeline.sandbox.tool_runtime import extract_runtime, runtime_identity, tools_layer
from eval_pipeline.tasks.data import TaskData
from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource

# Waiting reasons that will not resolve by waiting longer: the pod cannot start.
STUCK_REASONS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"}


def _ready(pod: k8s.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


class KubernetesSandbox(SandboxBackend):
    name = "kubernetes"
    ready_timeout_s = 600.0
    poll_interval_s = 1.0

    @property
    def core(self) -> k8s.CoreV1Api:
        """The API, configured in-cluster or from KUBECONFIG; tests and callers may set their own.

        One client per thread: an exec stream swaps its client's request method while it runs
        (kubernetes.stream), so the trials of a batch running at once on this backend must not share one.
        """
        if (given := self.__dict__.get("_given_core")) is not None:
            return given
        local = self.__dict__.setdefault("_thread_cores", threading.local())
        if not hasattr(local, "core"):
            from kubernetes import config

            try:
                config.load_config()
            except config.ConfigException as error:
                raise SandboxError(f"no Kubernetes configuration (in-cluster or KUBECONFIG): {error}") from error
            local.core = k8s.CoreV1Api(k8s.ApiClient())
        return local.core

    @core.setter
    def core(self, api: k8s.CoreV1Api) -> None:
        self._given_core = api

    @cached_property
    def images(self) -> EnvironmentImages:
        """Builds the environment images on a Docker Engine API, exactly as the container backend does."""
        return EnvironmentImages(self.root, self.settings)

    def environment_key(self, instance: TaskData, spec: EnvironmentSpec) -> str:
        return self.images.environment_key(instance, spec)

    def enforced_limits(self) -> dict[str, bool]:
        capped = self.limits.multiplier is not None
        return {
            "memory_floor_mb": True,  # the pod's request: the scheduler reserves it on a node
            "memory_ceiling_mb": capped,
            "cpu_floor": True,  # the pod's CPU request is reserved too
            "cpu_ceiling": capped,
            "pids": False,  # a node-wide kubelet setting (podPidsLimit), not a pod field
            "output_bytes": True,
        }

    def image_reference(self, tag: str) -> str:
        registry = self.settings.image_registry
        return f"{registry.rstrip('/')}/{tag.removeprefix('localhost/')}" if registry else tag

    def _pushed(self, local_tag: str, what: str) -> str:
        """The reference pods pull `local_tag` by: pushed to the registry first, when there is one."""
        reference = self.image_reference(local_tag)
        if reference != local_tag:
            repository, _, tag = reference.rpartition(":")
            image = self.images.client.images.get(local_tag)
            image.tag(repository, tag)
            for line in self.images.client.images.push(repository, tag, stream=True, decode=True):
                if "error" in line:
                    raise SandboxError(f"pushing {reference} for {what}: {line['error']}")
        return reference

    def tools_image(self) -> str:
        """The tool server's runtime as an image (tool_runtime.py), built and pushed once."""
        directory = self.root / "tool-runtime" / runtime_identity()
        layer = tools_layer(directory)  # one layer, FROM scratch: its context is `directory`
        builder = ImageBuilder(self.images.client, self.root)
        with engine_errors("building the tool server's image"):
            builder.ensure(layer, prepare_context=lambda _: extract_runtime(directory))
        return self._pushed(layer.tag, "the tool server")

    def build(self, instance: TaskData, spec: EnvironmentSpec, source: RepoSource) -> dict[str, Any]:
        record = self.images.build(instance, spec, source)
        return {**record, "image": self._pushed(record["tag"], instance.instance_id), "tools_image": self.tools_image()}

    def pod_manifest(self, instance_id: str, image: str, tools_image: str) -> dict[str, Any]:
        resources = pod_resources(self.limits, self.settings.pod_parallelism)
        identity = f"{self.campaign}|{instance_id}|{image}|{tools_image}|{resources}" + (
            "|network" if self.network else ""
        )
        name = pod_name(self.campaign, instance_id, identity)
        return environment_pod_manifest(
            name, self.settings.namespace, image, tools_image, self.campaign, instance_id, resources, self.network
        )

    def prepare(self, instance: TaskData, spec: EnvironmentSpec, source: RepoSource) -> EnvironmentHandle:
        if instance.own_image is not None:
            raise ImageBuildFailed(
                f"{instance.instance_id}: terminal tasks run as their authors wrote them (as root, a container per "
                "workspace) on the container backend; the Kubernetes backend runs code tasks only"
            )
        record = self.build(instance, spec, source)
        manifest = self.pod_manifest(instance.instance_id, record["image"], record["tools_image"])
        handle = EnvironmentHandle(
            backend=self.name,
            instance_id=instance.instance_id,
            key=record["environment_key"],
            location=manifest["metadata"]["name"],
            details={
                "image": record["image"],
                "image_id": record["image_id"],
                "tools_image": record["tools_image"],
                "namespace": self.settings.namespace,
                **pulled_details(record),
            },
        )
        self.ensure_pod(manifest)
        return handle

    def _read_pod(self, name: str) -> k8s.V1Pod | None:
        try:
            return self.core.read_namespaced_pod(name, self.settings.namespace, _request_timeout=API_TIMEOUT_S)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    @contextmanager
    def _api(self, what: str) -> Iterator[None]:
        try:
            yield
        except ApiException as error:
            raise SandboxError(f"{what}: {error.status} {error.reason}: {error.body}") from error
        except API_FAILURES as error:
            raise SandboxError(f"{what}: the Kubernetes API is unreachable: {error}") from error

    def ensure_pod(self, manifest: dict[str, Any]) -> None:
        """Create the pod unless it exists (a finished or deleted one is replaced), then wait until it is ready."""
        name, namespace = manifest["metadata"]["name"], self.settings.namespace
        with self._api(f"creating pod {name}"):
            pod = self._read_pod(name)
            if pod is not None and (pod.status.phase in ("Failed", "Succeeded") or pod.metadata.deletion_timestamp):
                self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0, _request_timeout=API_TIMEOUT_S)
                self._wait(name, until_gone=True)
                pod = None
            if pod is not None and _ready(pod):
                return
            if pod is None:
                try:
                    self.core.create_namespaced_pod(namespace, manifest, _request_timeout=API_TIMEOUT_S)
                except ApiException as error:
                    if error.status != 409:  # 409: another process created it first
                        raise
            self._wait(name)

    def _wait(self, name: str, *, until_gone: bool = False) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            pod = self._read_pod(name)
            if until_gone and pod is None:
                return
            if not until_gone:
                if pod is None:
                    raise SandboxLost(f"pod {name} was deleted while starting")
                if pod.status.phase in ("Failed", "Succeeded"):
                    raise SandboxLost(f"pod {name} ended ({pod.status.phase}) while starting")
                if _ready(pod):
                    return
                for status in pod.status.container_statuses or []:
                    waiting = status.state.waiting if status.state else None
                    if waiting and waiting.reason in STUCK_REASONS:
                        raise SandboxError(f"pod {name} cannot start: {waiting.reason}: {waiting.message}")
            if time.monotonic() > deadline:
                raise SandboxError(
                    f"pod {name} not {'gone' if until_gone else 'ready'} after {self.ready_timeout_s:.0f} s"
                )
            time.sleep(self.poll_interval_s)

    def pod_exec(self, environment: EnvironmentHandle) -> PodExec:
        return KubernetesExec(self.core, self.settings.namespace, environment.location)

    @contextmanager
    def workspace(self, environment: EnvironmentHandle, label: str, network: bool = False) -> Iterator[ExecWorkspace]:
        """A workspace in the instance's pod (recreated if it was lost), in one of its `pod_parallelism` slots,
        claimed in the pod itself: the run pods that share an environment pod share nothing else."""
        self.check_network(network)
        tools_image = environment.details.get("tools_image") or self.tools_image()  # handles from before it
        manifest = self.pod_manifest(environment.instance_id, environment.details["image"], tools_image)
        if manifest["metadata"]["name"] != environment.location:
            raise SandboxError(
                f"{environment.instance_id}: its pod {environment.location} was prepared for other resources"
                f" or another image than this sandbox's ({manifest['metadata']['name']})"
            )
        self.ensure_pod(manifest)
        pod = self.pod_exec(environment)
        with claimed_slot(pod, self.settings.pod_parallelism, poll_s=self.poll_interval_s) as slot:
            workspace = ExecWorkspace(
                pod,
                f"{WORKSPACES}/slot{slot}",
                self.images.extra_env(),
                self.limits,
                cut_network=not network,  # the pod has a network, whatever the policy lets through
            )
            with workspace.created():
                yield workspace

    def release(self) -> None:
        with self._api(f"releasing campaign {self.campaign}'s pods"):
            remove_pods(self.core, self.settings.namespace, campaign=self.campaign)


def remove_pods(
    core: k8s.CoreV1Api, namespace: str, campaign: str | None = None, older_than: timedelta | None = None
) -> list[str]:
    """Delete eval_pipeline's environment pods (of one campaign, or all; only those older than `older_than`,
    or finished ones, when it is given); return their names. This is the janitor for pods leaked by crashed runs."""
    selector = ",".join(
        f"{key}={value}"
        for key, value in {**MANAGED_BY, **({CAMPAIGN_LABEL: label_value(campaign)} if campaign else {})}.items()
    )
    cutoff = datetime.now(UTC) - older_than if older_than is not None else None
    removed = []
    for pod in core.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=API_TIMEOUT_S).items:
        finished = pod.status is not None and pod.status.phase in ("Failed", "Succeeded")
        if cutoff is not None and not finished and pod.metadata.creation_timestamp >= cutoff:
            continue
        try:
            core.delete_namespaced_pod(
                pod.metadata.name, namespace, grace_period_seconds=0, _request_timeout=API_TIMEOUT_S
            )
        except ApiException as error:
            if error.status != 404:  # 404: deleted meanwhile by the run that owned it
                raise
            continue
        removed.append(pod.metadata.name)
    return removed
