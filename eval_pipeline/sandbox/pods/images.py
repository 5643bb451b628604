"""Environment images in three layers, as the SWE-bench harness builds them.

- base: the base image for the spec's Python (the configured base image, or
  `python_image` for a version, or the configured base with the machine's
  pyenv build of that version copied in at its own path), over a system layer
  holding what SWE-bench's own base image installs (a compiler and headers,
  git, jq, curl, locales, tzdata: SWEBENCH_SYSTEM_PACKAGES) plus patch, built
  once per base image and shared by every Python and environment, and an
  extra CA bundle if set (the harness's own processes run on the runtime
  every container mounts, tool_runtime.py, not on anything in the image);
- env: per (repository, version), the spec's system steps and a virtualenv at
  /opt/env with the spec's requirements and packages (each one argument);
- instance: the repository at its base commit in /testbed, installed into
  /opt/env (plus the harness's pytest if nothing brought one), then its history
  cut back to the base commit, so no trial can read a later commit.

A layer's tag is the hash of its Dockerfile, its build context and its
parent's tag, so an unchanged spec is never rebuilt, and a change anywhere
below rebuilds exactly the layers above it.

A task whose slice pulls its named image (tasks/named_image.py) has one layer built here instead, the harness
layer over that image at its registry digest (`pulled_code_layer`, or `task_harness_layer` for a terminal
task): its tag holds the digest, so a tag that moved in the registry is a new environment.
"""

import fcntl
import hashlib
import io
import re
import shlex
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, NamedTuple

import docker
import docker.errors

from eval_pipeline.common.git import COMMIT_BASELINE, REFRESH_INDEX, STRIP_HISTORY, STRIP_REFS
from eval_pipeline.common.git import COMMIT_ENV as TASK_COMMIT_ENV
from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.common.outcomes import ImageBuildFailed
from eval_pipeline.common.start_patch import START_PATCH_FILE, start_from_patch
from eval_pipeline.sandbox.interpreters import UPGRADE_PIP, find_interpreter, installation_excludes, installs_with_pip
from eval_pipeline.sandbox.runner.processes import SIGNALLER_UID_OFFSET
from eval_pipeline.tasks.data import TaskData, TaskImage
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.named_image import NamedImage

HARNESS_ROOT = "/opt/eval"
CA_BUNDLE = f"{HARNESS_ROOT}/ca-bundle.crt"
ENV_VENV = "/opt/env"
TASK_GIT_DIR = f"{HARNESS_ROOT}/task.git"  # a terminal task's working tree history, kept outside its WORKDIR
TESTBED = "/testbed"
WORKSPACES = "/workspaces"
PATH = f"{ENV_VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MANAGED_LABEL = "eval_pipeline.managed"
# On a harness layer built on a pulled image: that image by its digest (`repository@sha256:...`), which the janitor
# removes with the last layer that names it (sandbox/container/janitor.py).
PULLED_LABEL = "eval_pipeline.pulled"
# How long an image found on the engine is taken as found, without asking again: an environment step asks about
# the same three images (the task's base, its own, the harness layer) eleven times within a second, each answer
# about 20 ms of Podman's CPU. An image not found is asked about every time; one removed within the window (a
# prune) still counts as there, and the container started from it fails as the engine's error, retried.
IMAGE_LOOKUP_TTL_S = 5.0


class FoundImage(NamedTuple):
    """What the harness reads of an image: its id and its configuration (WORKDIR, ENV)."""

    id: str
    config: dict[str, Any]


_found_images: dict[tuple[str, str], tuple[float, FoundImage]] = {}  # (engine, name) -> (when, image)


# The engine's id of an image by its name, or '' where the engine has none (yet: a registry's, pulled at build).
ImageId = Callable[[str], str]


@dataclass(frozen=True)
class ImageLayer:
    kind: str
    dockerfile: str
    files: Mapping[str, bytes] = field(default_factory=dict)
    # Directories copied into the context, with a short identity standing for their
    # content (a repository at a commit), so computing the tag never reads them.
    directory: tuple[str, Path] | None = None
    directory_identity: str = ""
    # Paths inside `directory` left out of the context (a Python's site-packages: only its standard library goes).
    directory_excludes: tuple[str, ...] = ()
    parent: "ImageLayer | None" = None
    labels: Mapping[str, str] = field(default_factory=dict)
    # The engine's id of the image a layer with no parent is built FROM, where the engine has it: an image made
    # outside the harness (a base or task base image) rebuilt under the same tag then rebuilds what is built on it.
    from_id: str = ""

    @property
    def tag(self) -> str:
        identity = {
            "from_id": self.from_id,
            "kind": self.kind,
            "dockerfile": self.dockerfile,
            "files": {path: hashlib.sha256(data).hexdigest() for path, data in self.files.items()},
            "directory": [self.directory_identity, self.directory_excludes],
            "parent": self.parent.tag if self.parent else None,
        }
        return f"localhost/eval-pipeline-{self.kind}:{stable_hash(identity)[:24]}"

    def chain(self) -> list["ImageLayer"]:
        """This layer and its ancestors, base first."""
        return [*(self.parent.chain() if self.parent else []), self]


def _extra_ca(bundle: str | None) -> tuple[str, dict[str, bytes]]:
    if not bundle:
        return "", {}
    lines = (
        "COPY extra-ca.crt /opt/eval/extra-ca.crt\n"
        f"RUN cat /etc/ssl/certs/ca-certificates.crt /opt/eval/extra-ca.crt > {CA_BUNDLE} 2>/dev/null"
        f" || cp /opt/eval/extra-ca.crt {CA_BUNDLE}\n"
        f"ENV SSL_CERT_FILE={CA_BUNDLE} REQUESTS_CA_BUNDLE={CA_BUNDLE} PIP_CERT={CA_BUNDLE}\n"
    )
    return lines, {"extra-ca.crt": Path(bundle).read_bytes()}


# What SWE-bench's base image installs with apt (swebench 4.0.4, harness/dockerfiles/python.py), with
# recommends, as it does: its environments assume them (django's pywatchman compiles C at install, locale-gen
# runs in its eval commands). patch and ca-certificates are the harness's own (patches, the extra CA bundle).
SWEBENCH_SYSTEM_PACKAGES = (
    "wget",
    "git",
    "build-essential",
    "libffi-dev",
    "libtiff-dev",
    "python3",
    "python3-pip",
    "python-is-python3",
    "jq",
    "curl",
    "locales",
    "locales-all",
    "tzdata",
)
HARNESS_SYSTEM_PACKAGES = ("patch", "ca-certificates")


def system_layer(image: str, image_id: ImageId) -> ImageLayer:
    """SWE-bench's base packages over `image`: one layer per base image, built once per engine and shared by
    every Python version and environment above it (its tag depends on nothing else)."""
    packages = " ".join((*SWEBENCH_SYSTEM_PACKAGES, *HARNESS_SYSTEM_PACKAGES))
    dockerfile = (
        f"FROM {image}\n"
        "ENV TZ=Etc/UTC\n"
        f"RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y {packages}"
        " && rm -rf /var/lib/apt/lists/*\n"
    )
    return ImageLayer("system", dockerfile, labels={"eval_pipeline.layer": "system"}, from_id=image_id(image))


@dataclass(frozen=True)
class PythonSource:
    """Where an environment's Python comes from (SandboxSettings): `image` takes `python_image` with the version
    filled in (`python:3.9-slim`), for machines that reach a registry; `pyenv` copies the machine's pyenv build of
    that version into the configured base image, at the same path (its libpython is linked by absolute path)."""

    base_image: str
    source: str = "image"
    python_image: str = "python:{version}-slim"


def base_layer(
    python: PythonSource, version: str, extra_ca_bundle: str | None, image_id: ImageId
) -> tuple[ImageLayer, str]:
    """The base layer for Python `version` ('' for the base image's own), and the interpreter to make venvs with."""
    ca_lines, ca_files = _extra_ca(extra_ca_bundle)
    image, interpreter, copy, directory, identity = python.base_image, "python3", "", None, ""
    if version and python.source == "image":
        image, interpreter = python.python_image.format(version=version), f"python{version}"
    elif version:
        found = find_interpreter(version)
        if found.prefix is None:
            raise ImageBuildFailed(f"Python {version} is not a pyenv build on this machine; it cannot be copied")
        # Every trial's uid must reach it, /root's mode notwithstanding.
        parents = " ".join(str(parent) for parent in reversed(found.prefix.parents) if str(parent) != "/")
        copy = f"COPY python {found.prefix}\nRUN chmod a+x {parents}\n"
        interpreter, directory = str(found.executable), ("python", found.prefix)
        identity = f"{found.prefix}@{found.version}"
    system = system_layer(image, image_id)
    dockerfile = (
        f"FROM {system.tag}\n{ca_lines}{copy}ENV PATH={PATH}\nRUN mkdir -p {WORKSPACES} && chmod 711 {WORKSPACES}\n"
    )
    layer = ImageLayer(
        "base",
        dockerfile,
        ca_files,
        directory=directory,
        directory_identity=identity,
        directory_excludes=installation_excludes(found) if directory else (),
        parent=system,
        labels={"eval_pipeline.layer": "base"},
    )
    return layer, interpreter


def env_layer(
    base: ImageLayer, interpreter: str, instance: TaskData, spec: EnvironmentSpec, requirements: Path | None
) -> ImageLayer:
    """The spec's system steps and the environment's Python at ENV_VENV, with its packages; `requirements` is
    where the build finds requirements.txt.

    For a spec that names its Python version ENV_VENV is that version's whole installation (the image's own,
    or the pyenv build the base layer copied), which the packages are installed into: each image has its own
    copy-on-write layer of it, and tools that re-execute `sys.executable` through a link keep the packages
    (interpreters.copy_installation says why a virtualenv does not). The base image's own Python (Debian's,
    which refuses system-wide pip installs) gets a virtualenv.
    """
    pip = f"{ENV_VENV}/bin/python -m pip install --no-cache-dir"
    system = [f"RUN {step}" for step in spec.image_install]
    quoted = shlex.quote(interpreter)
    python = (
        f"RUN ln -s \"$({quoted} -c 'import sys; print(sys.prefix)')\" {ENV_VENV}"
        f" && ({ENV_VENV}/bin/python -m pip --version >/dev/null 2>&1 || {ENV_VENV}/bin/python -m ensurepip)"
        if spec.python
        else f"RUN {quoted} -m venv {ENV_VENV}"
    )
    lines = [f"FROM {base.tag}", *system, python]
    if installs_with_pip(spec):
        lines.append(f"RUN {ENV_VENV}/bin/{UPGRADE_PIP} --no-cache-dir")  # interpreters.UPGRADE_PIP says why
    if spec.requirements:
        lines += [
            f"COPY requirements {HARNESS_ROOT}/requirements",
            f"RUN {pip} -r {HARNESS_ROOT}/requirements/requirements.txt",
        ]
    if spec.packages:
        lines.append(f"RUN {pip} {shlex.join(spec.packages)}")
    lines.append(f"LABEL eval_pipeline.env={shlex.quote(f'{instance.repo}@{instance.version}')}")
    return ImageLayer(
        "env",
        "\n".join(lines) + "\n",
        directory=("requirements", requirements) if requirements else None,
        directory_identity=f"{instance.repo}@{instance.environment_setup_commit}:{spec.requirements}"
        if spec.requirements
        else "",
        parent=base,
        labels={"eval_pipeline.layer": "env"},
    )


def readable_by_all(directory: str) -> str:
    """`chmod -R a+rX directory` for only the entries that lack those bits: chmod copies every file it touches into
    the layer it runs in, even when the mode does not change, which stored the whole repository twice."""
    lacking = r"\( ! -perm -0444 -o \( -perm /0111 ! -perm -0111 \) \)"
    return f"find {directory} {lacking} -exec chmod a+rX {{}} +"


def _harness_pytest(spec: EnvironmentSpec) -> str:
    """The Dockerfile line that installs the harness's pytest into ENV_VENV when the spec's tests use pytest and
    nothing brought one ('' otherwise)."""
    if not spec.uses_pytest:
        return ""
    return (
        f"RUN {ENV_VENV}/bin/python -c 'import pytest' 2>/dev/null || {ENV_VENV}/bin/python -m pip install"
        f" --no-cache-dir pytest=={version('pytest')} || {ENV_VENV}/bin/python -m pip install --no-cache-dir pytest\n"
    )


def instance_layer(env: ImageLayer, instance: TaskData, spec: EnvironmentSpec, checkout: Path) -> ImageLayer:
    steps = [*spec.pre_install, *spec.install]
    dockerfile = (
        f"FROM {env.tag}\nCOPY repo {TESTBED}\nWORKDIR {TESTBED}\n"
        + "".join(f"RUN {command}\n" for command in steps)
        + _harness_pytest(spec)
        # The checkout holds no later commit already (KEEP_ANCESTORS); its refs go once the install has read them.
        + f"RUN {REFRESH_INDEX} && {COMMIT_BASELINE} && {STRIP_REFS} && {readable_by_all(TESTBED)}\n"
    )
    return ImageLayer(
        "instance",
        dockerfile,
        directory=("repo", checkout),
        directory_identity=f"{instance.repo}@{instance.base_commit}",
        parent=env,
        labels={"eval_pipeline.layer": "instance", "eval_pipeline.instance": instance.instance_id},
    )


def _readable(info: tarfile.TarInfo, excluded: tuple[str, ...]) -> tarfile.TarInfo | None:
    """A context entry readable by every trial's uid (a+rX), or None when it is left out."""
    if (info.name + "/").startswith(excluded):
        return None
    info.mode |= 0o444 | (0o111 if info.isdir() or info.mode & 0o100 else 0)
    return info


def _context(layer: ImageLayer) -> io.BufferedRandom:
    """The layer's build context as an uncompressed tar in a temporary file."""
    archive = tempfile.TemporaryFile()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in {"Dockerfile": layer.dockerfile.encode(), **layer.files}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if layer.directory:
            arcname, path = layer.directory
            excluded = tuple(f"{arcname}/{relative}/" for relative in layer.directory_excludes)
            tar.add(path, arcname=arcname, filter=lambda info: _readable(info, excluded))
    archive.seek(0)
    return archive


def _log_text(lines: Iterable[Mapping[str, Any]]) -> str:
    return "".join(str(line.get("stream") or line.get("error") or "") for line in lines)


def find_image(client: docker.DockerClient, name: str) -> FoundImage | None:
    """The engine's image `name` (a tag or an id), or None; one found within IMAGE_LOOKUP_TTL_S is not asked again."""
    key, now = (client.api.base_url, name), time.monotonic()
    found = _found_images.get(key)
    if found and now - found[0] < IMAGE_LOOKUP_TTL_S:
        return found[1]
    try:
        image = client.images.get(name)
    except docker.errors.ImageNotFound:
        return None
    for stale in [k for k, (when, _) in _found_images.items() if now - when >= IMAGE_LOOKUP_TTL_S]:
        _found_images.pop(stale, None)
    _found_images[key] = (now, FoundImage(image.id, image.attrs.get("Config") or {}))
    return _found_images[key][1]


class ImageBuilder:
    """Builds layers that do not exist yet, one builder per tag across processes, keeping every log."""

    def __init__(self, client: docker.DockerClient, root: Path) -> None:
        self.client = client
        self.logs = root / "build_logs"
        self.locks = root / "locks"

    def image_id(self, tag: str) -> str | None:
        image = find_image(self.client, tag)
        return image.id if image else None

    def ensure(
        self, layer: ImageLayer, prepare_context: Callable[[ImageLayer], None] = lambda _: None
    ) -> dict[str, Any]:
        """Build the layer's missing ancestors and itself; return its id and the tags built now."""
        built: list[str] = []
        for step in layer.chain():
            if self.image_id(step.tag):
                continue
            self.locks.mkdir(parents=True, exist_ok=True)
            with open(self.locks / f"{stable_hash(step.tag)[:24]}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not self.image_id(step.tag):  # another process may have built it while we waited
                    prepare_context(step)
                    self._build(step)
                    built.append(step.tag)
        return {"tag": layer.tag, "image_id": self.image_id(layer.tag), "built": built}

    def log_path(self, tag: str) -> Path:
        return self.logs / f"{tag.replace('/', '_').replace(':', '_')}.log"

    def _build(self, layer: ImageLayer) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        with _context(layer) as context:
            try:
                _, lines = self.client.images.build(
                    fileobj=context,
                    custom_context=True,
                    tag=layer.tag,
                    labels={MANAGED_LABEL: "true", **layer.labels},
                    rm=True,
                    forcerm=True,
                )
                self.log_path(layer.tag).write_text(_log_text(lines))
            except docker.errors.BuildError as error:
                self.log_path(layer.tag).write_text(_log_text(error.build_log))
                raise ImageBuildFailed(
                    f"building {layer.kind} image {layer.tag} failed: {error.msg}; log: {self.log_path(layer.tag)}"
                ) from None


_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE | re.MULTILINE)


def stand_in(base: str, stand_ins: Mapping[str, str]) -> str:
    """The image that stands in for `FROM base`: the one named for `base`, else the one for `*`, else `base`."""
    return stand_ins.get(base) or stand_ins.get("*") or base


def substitute_from(dockerfile: str, stand_ins: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The Dockerfile with each stage's external base image replaced by its stand-in, and which replaced which;
    stages built on an earlier stage of the same file keep it. Nothing else of the file changes."""
    stages: set[str] = set()
    replaced: dict[str, str] = {}

    def replace(match: re.Match[str]) -> str:
        prefix, flags, base, rest = match.groups()
        if alias := re.search(r"\bAS\s+(\S+)", rest, re.IGNORECASE):
            stages.add(alias[1].lower())
        if base.lower() in stages or (image := stand_in(base, stand_ins)) == base:
            return match[0]
        replaced[base] = image
        return f"{prefix}{flags}{image}{rest}"

    return _FROM.sub(replace, dockerfile), replaced


# Names every trial uid of a pod (pods/workspace.py: TRIAL_UIDS, gid = uid) in the image's user database, as
# `trial<uid>`: programs a dataset's own test script runs look their user up (SWE-bench Pro's qutebrowser rows run
# `dbus-run-session`, whose daemon fails for a uid with no passwd entry).
_EACH_TRIAL_UID = f"for (id = 20000; id < {65534 - SIGNALLER_UID_OFFSET}; id++)"
TRIAL_USERS = (
    f"RUN awk 'BEGIN {{ {_EACH_TRIAL_UID} printf \"trial%d:x:%d:%d::/tmp:/usr/sbin/nologin\\n\", id, id, id }}'"
    f" >> /etc/passwd && awk 'BEGIN {{ {_EACH_TRIAL_UID} printf \"trial%d:x:%d:\\n\", id, id }}' >> /etc/group\n"
)
# Installs git where the image has none: the harness's patches need it.
_INSTALL_GIT = (
    "RUN command -v git >/dev/null 2>&1 || (apt-get update"
    " && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends git"
    " && rm -rf /var/lib/apt/lists/*)\n"
)


# The symbolic refs of a repository (a clone's `refs/remotes/origin/HEAD`), deleted as links: deleting every ref at
# once (STRIP_HISTORY) would otherwise update a symbolic ref's target twice, which `git update-ref` refuses.
_DROP_SYMBOLIC_REFS = (
    "{ git for-each-ref --format='%(symref) %(refname)' | awk '$2 != \"\" { print \"delete \" $2 }'"
    " | git update-ref --no-deref --stdin; }"
)


def pulled_code_layer(
    pulled_from: str, digest: str, image: NamedImage, instance: TaskData, spec: EnvironmentSpec, extra_ca: str | None
) -> ImageLayer:
    """The harness layer that makes a code task's pulled image (`pulled_from`, its reference by `digest`) an
    environment as instance_layer leaves one: git where it lacks it; ENV_VENV a link to the image's Python
    installation (`image.python_prefix`, else its python3's prefix) and first on PATH; the repository at TESTBED
    (moved there from `image.workdir`, which then links to it), checked to be at the task's base commit, its
    state committed as the baseline and its history cut back to that commit (no branch, tag, reflog, linked
    worktree or object of a later commit: SWE-bench's images keep them); all of it readable by every trial's uid;
    and no ENTRYPOINT of the image's, which would take the harness's pod command as its arguments."""
    ca_lines, ca_files = _extra_ca(extra_ca)
    workdir, base = shlex.quote(image.workdir), shlex.quote(instance.base_commit)
    prefix = (
        shlex.quote(image.python_prefix) if image.python_prefix else "\"$(python3 -c 'import sys; print(sys.prefix)')\""
    )
    link_env = f'prefix={prefix} && {{ [ "$prefix" = {ENV_VENV} ] || {{ rm -rf {ENV_VENV} && ln -s "$prefix" {ENV_VENV}; }}; }}'
    move = (
        ""
        if image.workdir == TESTBED
        else f"RUN rm -rf {TESTBED} && mv {workdir} {TESTBED} && ln -s {TESTBED} {workdir}\n"
    )
    at_base = (
        f'test "$(git rev-parse HEAD)" = "$(git rev-parse {base}^{{commit}})" || {{ echo "{image.reference}: the'
        f' repository at {image.workdir} is at $(git rev-parse HEAD), not the base commit {instance.base_commit}"'
        " >&2; exit 1; }"
    )
    # A task that starts from the image's tree plus a patch (SWE-smith's bug) is checked by the patch applying, and
    # its baseline is that tree alone (common/start_patch.py); any other is checked to be at its base commit.
    settle, start_copy = f"{COMMIT_BASELINE} && {STRIP_HISTORY}", ""
    if image.start_patch:
        at_base, settle = "true", start_from_patch(START_PATCH_FILE, image.reference)
        start_copy = f"COPY start.patch {START_PATCH_FILE}\n"
        ca_files = {**ca_files, "start.patch": image.start_patch.encode()}
    dockerfile = (
        f"FROM {pulled_from}\nUSER root\n{_INSTALL_GIT}{ca_lines}"
        f"RUN {link_env} && {ENV_VENV}/bin/python -c 'import sys'"
        f" && mkdir -p {WORKSPACES} && chmod 711 {WORKSPACES}\n"
        f"ENV PATH={PATH}\n{move}WORKDIR {TESTBED}\nENTRYPOINT []\n{TRIAL_USERS}"
        + _harness_pytest(spec)
        + start_copy
        + f"RUN {at_base} && git checkout -q --detach"
        " && rm -rf .git/objects/pack/*.keep .git/objects/info/alternates .git/worktrees"
        f" && {_DROP_SYMBOLIC_REFS}"
        f" && {REFRESH_INDEX} && {settle}"
        f" && {readable_by_all(TESTBED)} && {readable_by_all(f'{ENV_VENV}/')}\n"
    )
    return ImageLayer(
        "harness",
        dockerfile,
        ca_files,
        labels={
            "eval_pipeline.layer": "harness",
            "eval_pipeline.instance": instance.instance_id,
            PULLED_LABEL: pulled_from,
        },
        from_id=digest,
    )


def task_layers(task: TaskImage, stand_ins: Mapping[str, str], image_id: ImageId) -> ImageLayer:
    """A task's own image (a terminal task's), built from its Dockerfile as written (only `FROM` replaced by its
    stand-in, where `stand_ins` names one: a machine that cannot pull the task's base), with the harness on top
    (`task_harness_layer`)."""
    dockerfile, replaced = substitute_from(task.dockerfile, stand_ins)
    own = ImageLayer(
        "task",
        dockerfile,
        directory=(".", Path(task.environment_dir)),
        directory_identity=task.environment_hash,
        directory_excludes=("Dockerfile",),
        labels={"eval_pipeline.layer": "task", "eval_pipeline.instance": task.instance_id},
        from_id=" ".join(image_id(image) for image in sorted(set(replaced.values()))),
    )
    return task_harness_layer(task, own.tag, own)


def task_harness_layer(task: TaskImage, image: str, parent: ImageLayer | None = None, digest: str = "") -> ImageLayer:
    """The harness over a terminal task's image (`image`: its built layer `parent`, or a pulled image by its
    `digest`): git if the image lacks it, and the WORKDIR's content committed in a git directory outside it, for
    the agent's patch (the command runner needs nothing of the image: it runs on the runtime every container
    mounts, tool_runtime.py)."""
    git = f"GIT_DIR={TASK_GIT_DIR} GIT_WORK_TREE={shlex.quote(task.workdir)} git -c safe.directory='*'"
    identity = " ".join(f"{name}={value}" for name, value in TASK_COMMIT_ENV.items())
    harness = (
        f"FROM {image}\nUSER root\n{_INSTALL_GIT}"
        f"RUN mkdir -p {shlex.quote(task.workdir)} {HARNESS_ROOT} && {git} init -q && {git} add -A"
        f" && {identity} {git} commit -q --allow-empty --no-gpg-sign -m 'task working tree'"
        f" && chmod 700 {TASK_GIT_DIR}\n"
        f"WORKDIR {task.workdir}\n"
    )
    return ImageLayer(
        "harness",
        harness,
        parent=parent,
        labels={
            "eval_pipeline.layer": "harness",
            "eval_pipeline.instance": task.instance_id,
            **({PULLED_LABEL: image} if digest else {}),
        },
        from_id=digest,
    )
