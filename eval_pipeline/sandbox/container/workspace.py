"""A trial's workspace in a container of the engine (`ContainerWorkspace`): an exec workspace (pods/workspace.py)
whose commands go to one runner session (session.py), whose harness files move as tar archives, and which
reads a terminal task's container from outside it: its snapshot, its changes against its image, where a path
leads."""

import base64
import io
import json
import tarfile
from collections.abc import Mapping
from pathlib import Path

import docker.errors
from docker.models.containers import Container

from eval_pipeline.common.outcomes import SandboxLost
from eval_pipeline.sandbox.base import ImageChange, ResourceLimits
from eval_pipeline.sandbox.container.engine_exec import EngineExec
from eval_pipeline.sandbox.container.session import SessionTransport
from eval_pipeline.sandbox.pods.engine import ENGINE_FAILURES
from eval_pipeline.sandbox.pods.images import MANAGED_LABEL
from eval_pipeline.sandbox.pods.workspace import ExecWorkspace, TaskLayout

SNAPSHOT_REPOSITORY = "localhost/eval-pipeline-snapshot"  # terminal task containers as their agent left them
CAMPAIGN_LABEL = "eval_pipeline.campaign"
# The engine's kinds of change (`GET /containers/{id}/changes`), Docker's and Podman's alike.
_CHANGE_KINDS = {0: ImageChange.CHANGED, 1: ImageChange.ADDED, 2: ImageChange.DELETED}


class ContainerWorkspace(ExecWorkspace):
    """An exec workspace whose harness files move as tar archives, one engine call each, and whose commands all
    go to one runner session (`SessionTransport`), started by the first."""

    def __init__(
        self,
        container: Container,
        root: str,
        extra_env: Mapping[str, str],
        limits: ResourceLimits,
        task: TaskLayout | None = None,
        cut_network: bool = True,
    ) -> None:
        engine_exec = EngineExec(container)
        super().__init__(engine_exec, root, extra_env, limits, task, cut_network, SessionTransport(engine_exec))
        self.container = container

    def write_harness_file(self, name: str, content: str | bytes) -> str:
        """Root's file, readable (not writable) by the workspace's uid: the harness directory above it is
        root's and open to the uid's group only."""
        data = content.encode() if isinstance(content, str) else content
        path = self._writable_harness_path(name)
        at_harbor_path = bool(self.task and self.task.path(name))
        destination, relative = ("/", path.lstrip("/")) if at_harbor_path else (f"{self.root}/harness", name)
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            for parent in reversed(Path(relative).parents[:-1]):
                directory = tarfile.TarInfo(str(parent))
                directory.type, directory.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(directory)
            info = tarfile.TarInfo(relative)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        try:
            written = self.container.put_archive(destination, archive.getvalue())
        except ENGINE_FAILURES as error:
            raise self.pod.failure(f"writing {name}: {error}") from error
        if not written:
            raise self.pod.failure(f"could not write {name}")
        return self.harness_path(name)

    @property
    def judged_in_place(self) -> bool:
        return self.task is not None  # a terminal task's own container; a pod's workspaces give their diff

    def snapshot(self, name: str) -> dict[str, str] | None:
        """A terminal task's container committed as an image (its filesystem, not its processes), tagged
        `name` and labelled as the harness's and its campaign's."""
        if not self.judged_in_place:
            return None
        campaign = self.container.labels.get(CAMPAIGN_LABEL, "")
        labels = [
            f"LABEL {MANAGED_LABEL}=true",
            "LABEL eval_pipeline.layer=snapshot",
            f"LABEL {CAMPAIGN_LABEL}={campaign}",
        ]
        try:  # the API's own call: the model's would also fetch the whole image record, unused
            image_id = self.container.client.api.commit(
                self.container.id, repository=SNAPSHOT_REPOSITORY, tag=name, changes=labels
            )["Id"]
        except ENGINE_FAILURES as error:
            raise self.pod.failure(f"committing {self.container.name}: {error}") from error
        # Docker names the id with its digest's algorithm, Podman without: recorded as images' ids are
        image_id = image_id if image_id.startswith("sha256:") else f"sha256:{image_id}"
        return {"image": f"{SNAPSHOT_REPOSITORY}:{name}", "image_id": image_id}

    def image_changes(self) -> list[ImageChange] | None:
        """A terminal task's container against its image, as the engine records it (`GET /containers/{id}/changes`):
        outside the container, which nothing in it can alter. A re-grade's container is against its snapshot."""
        if not self.judged_in_place:
            return None
        try:
            changes = self.container.diff() or []
        except ENGINE_FAILURES as error:
            raise self.pod.failure(f"reading the changes of {self.container.name}: {error}") from error
        return [ImageChange(change["Path"], _CHANGE_KINDS[change["Kind"]]) for change in changes]

    def real_path(self, path: str) -> str | None:
        """The engine's stat of `path` (`HEAD /containers/{id}/archive`), which names where a final link leads
        (Podman names every path's own): nothing inside the container answers it."""
        api = self.container.client.api
        try:
            response = api.head(api._url("/containers/{0}/archive", self.container.id), params={"path": path})
        except ENGINE_FAILURES as error:
            raise self.pod.failure(f"looking up {path}: {error}") from error
        if response.status_code == 404:
            if isinstance(failure := self.pod.failure(f"looking up {path}"), SandboxLost):
                raise failure
            return None
        if not response.ok:
            raise self.pod.failure(f"looking up {path}: the engine answered {response.status_code}")
        stat = json.loads(base64.b64decode(response.headers["X-Docker-Container-Path-Stat"]))
        return stat.get("linkTarget") or path

    def read_harness_file(self, name: str) -> bytes | None:
        """Through the engine's archive, whose output an exec without the private channel can lose under load
        (files a command leaves come back with its answer instead, over that channel: `run_then_read`). The
        archive follows a final link, so one (planted by the uid in out/: it could name another trial's file) is
        read as no file; names under out/ are flat, so no directory on the way is the uid's."""
        path = self._readable_harness_path(name)
        try:
            chunks, stat = self.container.get_archive(path)
        except docker.errors.NotFound as error:
            failure = self.pod.failure(f"reading {name}: {error}")
            if isinstance(failure, SandboxLost):
                raise failure from error
            return None  # the container is fine; no command wrote the file
        except ENGINE_FAILURES as error:
            raise self.pod.failure(f"reading {name}: {error}") from error
        if stat.get("linkTarget") not in ("", path):  # Docker names a link's target; Podman every path's own
            return None
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            member = tar.getmembers()[0]
            content = tar.extractfile(member) if member.isfile() else None
            return content.read() if content else None
