"""The container backend: environment images and pods on any Docker Engine API.

Docker Engine for users, Podman's Docker-compatible service in CI; both are
reached through the `docker` SDK (DOCKER_HOST selects the engine).

In `pod` mode each instance gets one long-lived container, started once, that
serves many trials: each workspace is a copy of /testbed under /workspaces,
under a uid of its own and closed to every other (sandbox/pods/workspace.py says how
nothing of a trial outlives it or reaches the harness), and each of its
commands sees it at /testbed (its own mount namespace), so the environment's
installs import the trial's code while /testbed itself stays untouched. At most
`pod_parallelism` trials share a pod at once, and the pod's cgroup limits are
that many times a trial's, so with the default of one the limits are exactly
the trial's. In `strict` mode every workspace gets a fresh container from the
instance image, with the trial's limits. A terminal task always runs as Harbor
runs it: its own image, a container per workspace, the agent as root in its
WORKDIR (tasks/terminal/task.py).

No trial has a network by default: pods and strict containers start with the
engine's network `none` unless a variant of the campaign opted in
(`SandboxBackend.network`), and even then every command of a trial that did
not opt in runs in a network namespace of its own with only loopback
(runner/), since a pod serves every variant. A terminal task keeps its
own `allow_internet`.

Every command runs through the runner (runner/) inside the container, as root
dropping to the workspace's uid: timeout, capped output and the cgroup's OOM
counter are read in the container, and one JSON result comes back.

The backend's parts: its workspace (workspace.py) reached through the engine's exec (engine_exec.py) and one
runner session (session.py), the tool volume every container mounts (tool_volume.py), trial containers removed
behind their trials (removal.py); the images and the engine's client are the Kubernetes backend's too
(sandbox/pods/).
"""

import fcntl
import os
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.sandbox.base import EnvironmentHandle, SandboxBackend
from eval_pipeline.sandbox.container.removal import removals_done, remove_soon
from eval_pipeline.sandbox.container.tool_volume import tools_volume
from eval_pipeline.sandbox.container.workspace import CAMPAIGN_LABEL, ContainerWorkspace
from eval_pipeline.sandbox.pods.engine import engine_client, engine_errors, engine_is_podman
from eval_pipeline.sandbox.pods.environment_images import EnvironmentImages, pulled_details, slug
from eval_pipeline.sandbox.pods.exec_transport import HARNESS
from eval_pipeline.sandbox.pods.images import HARNESS_ROOT, MANAGED_LABEL, WORKSPACES, find_image, substitute_from
from eval_pipeline.sandbox.pods.workspace import TaskLayout
from eval_pipeline.sandbox.tool_runtime import TOOLS_ROOT, runtime_identity
from eval_pipeline.tasks.data import TaskData, TaskImage
from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource

RELEASE_PARALLELISM = 8  # containers removed at once when a campaign releases its pods
# A container's network, as environment handles record it: the engine's default network, or none at all.
ENGINE_NETWORK, NO_NETWORK = "engine default", "none"


def _existing_parent(path: Path) -> Path:
    """`path`, or the nearest of its parents that exists (a data directory not made yet)."""
    return next(candidate for candidate in (path, *path.parents) if candidate.exists())


class ContainerSandbox(SandboxBackend):
    """Environments as images on this process's engine, trials in pods or containers of their own (the module's
    docstring says which)."""

    name = "container"

    @property
    def client(self) -> docker.DockerClient:
        return engine_client()

    @cached_property
    def images(self) -> EnvironmentImages:
        """The environment images, built on this process's engine, their checkouts under this backend's root."""
        return EnvironmentImages(self.root, self.settings)

    def _labels(self, **extra: str) -> dict[str, str]:
        return {MANAGED_LABEL: "true", CAMPAIGN_LABEL: self.campaign, **extra}

    def environment_key(self, instance: TaskData, spec: EnvironmentSpec) -> str:
        return self.images.environment_key(instance, spec)

    def enforced_limits(self) -> dict[str, bool]:
        return {
            "memory_floor_mb": True,  # the cgroup's soft limit (reservation)
            "memory_ceiling_mb": self.limits.multiplier is not None,
            "cpu_floor": False,  # engines offer relative CPU shares, not a guarantee
            "cpu_ceiling": self.limits.multiplier is not None,
            "pids": True,
            "output_bytes": True,
        }

    def _container_limits(self, trials: int) -> dict[str, Any]:
        """Engine limits for a container that holds `trials` trials at once."""
        limits = self.limits
        memory_ceiling = limits.effective_memory_ceiling_mb
        reservation = limits.memory_floor_mb if memory_ceiling is None else min(limits.memory_floor_mb, memory_ceiling)
        kwargs: dict[str, Any] = {
            "mem_reservation": f"{reservation * trials}m",
            "pids_limit": limits.pids * trials,
            "cpu_shares": max(2, int(1024 * limits.cpu_floor * trials)),
        }
        if memory_ceiling is not None:
            kwargs["mem_limit"] = kwargs["memswap_limit"] = f"{memory_ceiling * trials}m"
        if limits.effective_cpu_ceiling is not None:
            cpus = min(limits.effective_cpu_ceiling * trials, os.cpu_count() or 1)
            kwargs["nano_cpus"] = int(cpus * 1e9)
        return kwargs

    def build(self, instance: TaskData, spec: EnvironmentSpec, source: RepoSource) -> dict[str, Any]:
        return self.images.build(instance, spec, source)

    def _task_layout(self, task: TaskImage, image: str) -> dict[str, Any]:
        """The task's container layout: its WORKDIR and its image's own variables. The commit its working tree
        starts at is read in each trial's container before the agent's first command (ExecWorkspace.create):
        a container started here only to read it cost each environment a second under load."""
        with engine_errors(f"reading the image of {task.instance_id}"):
            found = find_image(self.client, image)
            if found is None:
                raise docker.errors.ImageNotFound(f"no image {image}")
            config = found.config
        env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
        return {"workdir": task.workdir, "env": {"HOME": "/root", **env}}

    def prepare(self, instance: TaskData, spec: EnvironmentSpec, source: RepoSource) -> EnvironmentHandle:
        record = self.build(instance, spec, source)
        if (own_image := instance.own_image) is not None:  # Harbor's way: a container per workspace, as root
            return EnvironmentHandle(
                backend=self.name,
                instance_id=instance.instance_id,
                key=record["environment_key"],
                location=record["tag"],
                details={
                    "image": record["tag"],
                    "image_id": record["image_id"],
                    "mode": "strict",
                    "task": self._task_layout(own_image, record["tag"]),
                    # The task's own allow_internet decides: the engine's default network, or none at all.
                    "network": ENGINE_NETWORK if own_image.allow_internet else NO_NETWORK,
                    "storage_mb": own_image.storage_mb,
                    "from_images": substitute_from(own_image.dockerfile, self.settings.task_base_images)[1],
                    **pulled_details(record),
                },
            )
        network = ENGINE_NETWORK if self.network else NO_NETWORK
        limits_id = stable_hash([self._container_limits(self.settings.pod_parallelism), network, runtime_identity()])[
            :8
        ]
        handle = EnvironmentHandle(
            backend=self.name,
            instance_id=instance.instance_id,
            key=record["environment_key"],
            # The pod's limits, network and tool runtime are part of its identity: a pod started with others
            # is never reused.
            location=f"eval-pod-{slug(self.campaign)}-{slug(instance.instance_id)}-{limits_id}",
            details={
                "image": record["tag"],
                "image_id": record["image_id"],
                "mode": self.settings.mode,
                "python": spec.python or "base image's",
                "trial_view": "mount namespace",
                # The pod's (or strict container's) network; a trial that did not opt in has none either way.
                "network": network,
                **pulled_details(record),
            },
        )
        if self.settings.mode == "pod":
            self._pod(handle)
        return handle

    def snapshot_environment(self, environment: EnvironmentHandle, snapshot: Mapping[str, str]) -> EnvironmentHandle:
        """The task's environment with the snapshot as its image, found by its id (its tag names the generation,
        which another campaign on this engine may have committed since); SandboxLost when it is gone (a re-grade
        then cannot start from the agent's state)."""
        with engine_errors(f"the snapshot {snapshot['image']} ({snapshot['image_id']})"):
            self.client.images.get(snapshot["image_id"])
        details = {**environment.details, "image": snapshot["image_id"]}
        if task := details.get("task"):
            details["task"] = {**task, "from_snapshot": True}
        return replace(environment, details=details)

    def disks_shared_with(self, paths: Mapping[str, Path]) -> list[str]:
        """The engine's storage (its root directory, where containers' writable layers live) against each of
        `paths`, when the engine runs on this machine (its root exists here)."""
        with engine_errors("asking the engine where it stores containers"):
            root = Path(self.client.info().get("DockerRootDir") or "/nonexistent")
        if not root.exists():
            return []
        device = root.stat().st_dev
        return [
            f"the container engine's storage ({root}) is on the same file system as {name} ({path}): trials'"
            " writes (each within resources.storage_mb) and images fill the disk the harness stores on;"
            " put it on a disk of its own (README, 'Storage')"
            for name, path in paths.items()
            if _existing_parent(path).stat().st_dev == device
        ]

    def _security_options(self) -> list[str]:
        """Each trial command enters a user and mount namespace of its own (its view of /testbed). Podman's
        default seccomp profile allows that; Docker Engine's allows it only with CAP_SYS_ADMIN, a far larger
        grant than lifting the filter, so there the filter is lifted instead. No process may regain privileges
        (set-uid files), as the Kubernetes pod's security context says too."""
        return ["no-new-privileges", *([] if engine_is_podman() else ["seccomp=unconfined"])]

    def _start(
        self, image: str, name: str, labels: Mapping[str, str], trials: int, network: str, task: bool = False
    ) -> Container:
        """Start a container on `network` (ENGINE_NETWORK or NO_NETWORK), with the tool runtime mounted. A
        terminal task's lets any user bind ports below 1024, as Docker Engine's containers do by default: its
        agent is root in a user namespace of its own (runner/namespaces.py), which holds no capability over the
        container's network (an nginx on port 80 would otherwise fail)."""
        tools = tools_volume(self.client, image, self.root / "locks")
        with engine_errors(f"starting {name}"):
            try:
                return self.client.containers.run(
                    image,
                    HARNESS.runner("--reap"),
                    name=name,
                    detach=True,
                    labels=dict(labels),
                    volumes={tools: {"bind": TOOLS_ROOT, "mode": "ro,nocopy"}},
                    security_opt=self._security_options(),
                    **({"network_mode": "none"} if network != ENGINE_NETWORK else {}),
                    **({"sysctls": {"net.ipv4.ip_unprivileged_port_start": "0"}} if task else {}),
                    **self._container_limits(trials),
                )
            except docker.errors.APIError as error:
                if error.status_code != 409:
                    raise
                return self.client.containers.get(name)  # another process started it first

    def _pod(self, handle: EnvironmentHandle) -> Container:
        """The instance's running pod, started (or restarted, if it was lost) on demand."""
        with engine_errors(f"pod {handle.location}"):
            try:
                pod = self.client.containers.get(handle.location)
                if pod.status == "running":
                    return pod
                pod.remove(force=True)
            except docker.errors.NotFound:
                pass
        labels = self._labels(**{"eval_pipeline.instance": handle.instance_id, "eval_pipeline.role": "pod"})
        network = handle.details.get("network", NO_NETWORK)
        return self._start(handle.details["image"], handle.location, labels, self.settings.pod_parallelism, network)

    @contextmanager
    def pod_slot(self, handle: EnvironmentHandle) -> Iterator[int]:
        """One of the pod's `pod_parallelism` trial slots, held across processes; yields its index."""
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        while True:
            for slot in range(self.settings.pod_parallelism):
                with open(locks / f"{handle.location}.slot{slot}", "w") as lock:
                    try:
                        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue
                    yield slot
                    return
            with open(locks / f"{handle.location}.slot0", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # wait for the first slot rather than spin

    @contextmanager
    def workspace(
        self, environment: EnvironmentHandle, label: str, network: bool = False
    ) -> Iterator[ContainerWorkspace]:
        self.check_network(network)
        if self.settings.mode == "pod" and "task" not in environment.details:
            with (
                self.pod_slot(environment) as slot,
                self._used(
                    self._pod(environment), f"slot{slot}", cut_network=self.network and not network
                ) as workspace,
            ):
                yield workspace
            return
        labels = self._labels(
            **{
                "eval_pipeline.instance": environment.instance_id,
                "eval_pipeline.trial": label,
                "eval_pipeline.role": "trial",
            }
        )
        name = f"eval-trial-{slug(self.campaign)}-{slug(label)}-{uuid.uuid4().hex[:8]}"
        task = environment.details.get("task")
        if task:  # its own allow_internet decided at prepare
            engine_network = environment.details.get("network", NO_NETWORK)
        else:
            engine_network = ENGINE_NETWORK if network else NO_NETWORK
        container = self._start(environment.details["image"], name, labels, 1, engine_network, bool(task))
        try:
            with self._used(container, "trial", task, cut_network=False) as workspace:  # its own network, or none
                yield workspace
        finally:
            remove_soon(container)

    @contextmanager
    def _used(
        self, container: Container, name: str, task: Mapping[str, Any] | None = None, cut_network: bool = True
    ) -> Iterator[ContainerWorkspace]:
        """A workspace made in `container` for the duration of the block, under a uid of its own; a terminal
        task's is its container's WORKDIR, worked on as root, as its author expects."""
        if task:
            layout = TaskLayout.from_details(task)
            workspace = ContainerWorkspace(container, f"{HARNESS_ROOT}/trial", {}, self.limits, layout)
        else:
            workspace = ContainerWorkspace(
                container, f"{WORKSPACES}/{name}", self.images.extra_env(), self.limits, cut_network=cut_network
            )
        with workspace.created():
            yield workspace

    def release(self) -> None:
        """Remove the campaign's containers, several at once: the engine stops each (its runner exits on
        SIGTERM), unmounts and deletes it, about half a second a pod, which one after the other made most of
        the seconds between a campaign's last trial and its report."""
        removals_done()
        with engine_errors(f"releasing campaign {self.campaign}'s containers"):
            containers = self.client.containers.list(
                all=True, filters={"label": [f"{MANAGED_LABEL}=true", f"{CAMPAIGN_LABEL}={self.campaign}"]}
            )
            with ThreadPoolExecutor(max_workers=RELEASE_PARALLELISM) as removing:
                list(removing.map(lambda container: container.remove(force=True), containers))
