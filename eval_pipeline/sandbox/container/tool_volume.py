"""The tool volume: the tool server's runtime (tool_runtime.py) in a volume of the engine, filled once per engine and
mounted read-only into every container the container backend starts."""

import fcntl
import io
import os
import tarfile
import uuid
from pathlib import Path

import docker
import docker.errors
from docker.models.containers import Container
from docker.models.volumes import Volume

from eval_pipeline.sandbox.pods.engine import engine_errors
from eval_pipeline.sandbox.pods.images import MANAGED_LABEL
from eval_pipeline.sandbox.tool_runtime import TOOLS_ROOT, runtime_archive, runtime_identity

TOOLS_VOLUME_PREFIX = "eval-pipeline-tools-"
VOLUME_ID_LABEL = "eval_pipeline.volume_id"  # a tool volume's own id, new each time one is created
TOOLS_MARKER = ".complete"
_FILLED_VOLUMES: set[tuple[str, str]] = set()  # (engine, volume) filled by this process


def tools_volume(client: docker.DockerClient, image: str, locks: Path) -> str:
    """The volume holding the tool server's runtime (tool_runtime.py), filled once per engine through a
    container of `image` that is never started, under a lock in `locks` that the processes of this machine share;
    a volume whose filling was cut short (no marker) is filled again. Once a volume is seen full, an empty volume named for its own id (a label it was created
    with) says so on the engine (`_filled_mark`): every later process, whatever its data directory, asks
    the engine for that name (milliseconds) instead of looking through a container (a second of the
    engine's under load, which the first trials of every command waited for). A volume made again under
    the same name has another id, and one made without an id is always looked into."""
    name = f"{TOOLS_VOLUME_PREFIX}{runtime_identity()}"
    engine = os.environ.get("DOCKER_HOST", "")
    if (engine, name) in _FILLED_VOLUMES:
        return name
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / name, "w") as lock, engine_errors(f"filling the volume {name}"):
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            volume = client.volumes.get(name)
        except docker.errors.NotFound:
            volume = client.volumes.create(name, labels={MANAGED_LABEL: "true", VOLUME_ID_LABEL: uuid.uuid4().hex})
        mark = _filled_mark(volume)
        if not (mark and _volume_exists(client, mark)):
            _fill_if_empty(client, name, image)
            if mark:  # after the fill: a fill cut short leaves no mark
                client.volumes.create(mark, labels={MANAGED_LABEL: "true"})
    _FILLED_VOLUMES.add((engine, name))
    return name


def _fill_if_empty(client: docker.DockerClient, name: str, image: str) -> None:
    # nocopy: the engine would otherwise copy what `image` holds at TOOLS_ROOT into the empty volume
    # (a task's own image could plant a sitecustomize.py there, run as root by every later server).
    filler = client.containers.create(
        image, ["true"], volumes={name: {"bind": TOOLS_ROOT, "mode": "rw,nocopy"}}, network_mode="none"
    )
    try:
        try:
            filler.get_archive(f"{TOOLS_ROOT}/{TOOLS_MARKER}")
        except docker.errors.NotFound:
            _fill_tools(filler)
    finally:
        filler.remove(force=True)


def _marker_archive() -> bytes:
    """A tar holding TOOLS_MARKER: put last, it says the tool volume is complete."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.addfile(tarfile.TarInfo(TOOLS_MARKER), io.BytesIO(b""))
    return buffer.getvalue()


def _filled_mark(volume: Volume) -> str | None:
    """The name of the empty volume that says `volume` was seen full: its name and its own id (None without
    one). Only the harness reaches the engine; no trial can make it."""
    volume_id = (volume.attrs.get("Labels") or {}).get(VOLUME_ID_LABEL, "")
    return f"{volume.name}.filled-{volume_id}" if volume_id else None


def _volume_exists(client: docker.DockerClient, name: str) -> bool:
    try:
        client.volumes.get(name)
    except docker.errors.NotFound:
        return False
    return True


def _fill_tools(filler: Container) -> None:
    """Put the runtime, then its marker, into the tool volume through `filler`. Podman copies into a container
    through a subprocess of its own, which under load has broken its pipe (a 500, "passing bulk input to
    subprocess"): a put only overwrites, so one that failed on the engine's side is made once more."""
    for attempt in range(2):
        try:
            filler.put_archive(TOOLS_ROOT, runtime_archive())
            filler.put_archive(TOOLS_ROOT, _marker_archive())
            return
        except docker.errors.APIError as error:
            if attempt or not error.is_server_error():
                raise
