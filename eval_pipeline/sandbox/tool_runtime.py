"""The harness's runtime, carried into every container: a Python of its own with the `mcp` SDK.

An environment's own Python may be 3.6, or absent (a terminal task's image),
and its packages are the task's, so no harness process (the command runner
runner/, the pod's PID 1, the uid and slot claims, the tool server
tool_server.py) can run on them. They bring their own instead: this machine's
interpreter (its binary, shared library and standard library) and the
installed distributions `mcp` needs, with tool_server.py and the runner's
directory beside them, laid out under TOOLS_ROOT, and started by absolute path
(`ToolRuntime.python`), never as `python3` from PATH, where the environment's
venv comes first. The container backend puts that in a volume once per engine
and mounts it read-only into every pod and container (container/tool_volume.py); the
Kubernetes backend builds it as an image of its own (`tools_layer`, FROM
scratch) that pods mount read-only as an image volume. Either way no
environment image changes and no trial can alter it. It needs a glibc image of
this machine's architecture, as every environment image built here is.
"""

import hashlib
import importlib.util
import io
import os
import py_compile
import sys
import sysconfig
import tarfile
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import cast

from packaging.markers import default_environment
from packaging.requirements import Requirement

from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.sandbox.pods.images import ImageLayer
from eval_pipeline.sandbox.runner.entry import DIRECTORY

TOOLS_ROOT = "/opt/eval/tools"
SERVER_DISTRIBUTION = "mcp"
TOOL_SERVER = Path(__file__).with_name("tool_server.py")
RUNNER = Path(DIRECTORY)  # the runner's directory, shipped whole beside the tool server and run by path
# Parts of the standard library the server never imports (tests alone are half of it).
_STDLIB_LEFT_OUT = (
    "site-packages",
    "dist-packages",
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
)


@dataclass(frozen=True)
class ToolRuntime:
    """What a container needs to start a tool server: the command and its environment, under `root`."""

    root: str = TOOLS_ROOT

    def python(self, *args: str) -> list[str]:
        """A command line running the runtime's interpreter on `args`, whatever PATH and the image's variables
        say: by absolute path, isolated (-I: no PYTHON* variable, user site directory or script directory
        that an environment's image or a trial could have planted is read), its shared library found through
        LD_LIBRARY_PATH (its own link names the machine's pyenv directory). `/usr/bin/env` sets that variable
        for this process alone: no exec API offers an environment everywhere (Kubernetes' has none)."""
        return [
            "/usr/bin/env",
            f"LD_LIBRARY_PATH={self.root}/python/lib",
            f"{self.root}/python/bin/python3",
            "-I",
            *args,
        ]

    def runner(self, *args: str) -> list[str]:
        """The command runner (its directory, run by path: runner/__main__.py) on the runtime's interpreter."""
        return self.python(f"{self.root}/{RUNNER.name}", *args)

    @property
    def argv(self) -> list[str]:
        # -s: no user site directory, whose sitecustomize a task's image or agent could have planted.
        return [f"{self.root}/python/bin/python3", "-s", f"{self.root}/tool_server.py"]

    @property
    def env(self) -> dict[str, str]:
        return {
            "PYTHONHOME": f"{self.root}/python",
            "PYTHONPATH": f"{self.root}/site",
            "LD_LIBRARY_PATH": f"{self.root}/python/lib",
            "PYTHONDONTWRITEBYTECODE": "1",
        }


def _requirements(distribution: metadata.Distribution, extras: frozenset[str]) -> Iterator[Requirement]:
    """What `distribution` with `extras` needs here (markers evaluated)."""
    for text in distribution.requires or []:
        requirement = Requirement(text)
        if requirement.marker is None or any(
            # default_environment() is a TypedDict of strings
            requirement.marker.evaluate({**cast(Mapping[str, str], default_environment()), "extra": extra})
            for extra in {"", *extras}
        ):
            yield requirement


def server_distributions() -> list[metadata.Distribution]:
    """`mcp` and everything it needs, extras included (`pyjwt[crypto]`), as installed here."""
    found: dict[str, metadata.Distribution] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    pending = [Requirement(SERVER_DISTRIBUTION)]
    while pending:
        requirement = pending.pop()
        key = requirement.name.lower().replace("_", "-")
        if (key, frozenset(requirement.extras)) in seen:
            continue
        seen.add((key, frozenset(requirement.extras)))
        found[key] = found.get(key) or metadata.distribution(requirement.name)
        pending.extend(_requirements(found[key], frozenset(requirement.extras)))
    return sorted(found.values(), key=lambda dist: dist.metadata["Name"].lower())


def _interpreter_files() -> Iterator[tuple[Path, str]]:
    """(file here, path in the runtime) for this interpreter: its binary, shared library, standard library."""
    yield Path(os.path.realpath(sys.executable)), "python/bin/python3"
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        soname = sysconfig.get_config_var("INSTSONAME")
        yield Path(sysconfig.get_config_var("LIBDIR")) / soname, f"python/lib/{soname}"
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for directory, names, files in os.walk(stdlib):
        here = Path(directory)
        if here == stdlib:  # config-3.X-…: the static library and build files
            names[:] = [name for name in names if name not in _STDLIB_LEFT_OUT and not name.startswith("config-")]
        for name in files:
            if ".opt-" in name:  # bytecode for -O and -OO
                continue
            yield here / name, f"python/lib/{stdlib.name}/{(here / name).relative_to(stdlib)}"


def _site_files() -> Iterator[tuple[Path, str]]:
    for distribution in server_distributions():
        for file in distribution.files or []:
            if not str(file).startswith(".."):  # scripts installed to bin/: not needed
                yield Path(str(file.locate())), f"site/{file}"


def _harness_files() -> list[tuple[Path, str]]:
    """(file here, path in the runtime) for the tool server and the runner's directory beside it."""
    runner = sorted(RUNNER.glob("*.py"))
    return [(TOOL_SERVER, TOOL_SERVER.name), *((path, f"{RUNNER.name}/{path.name}") for path in runner)]


def _runner_bytecode(directory: Path) -> list[tuple[Path, str]]:
    """(file in `directory`, path in the runtime) for the runner's modules compiled by this interpreter, the
    runtime's: the runtime is mounted read-only, where a runner without them compiles every module at every start
    (a pod's runner starts for every command). Checked against no source (unchecked-hash): the runtime is made
    whole, its sources and their bytecode together."""
    compiled = []
    for source in sorted(RUNNER.glob("*.py")):
        name = importlib.util.cache_from_source(f"{RUNNER.name}/{source.name}")
        mode = py_compile.PycInvalidationMode.UNCHECKED_HASH
        py_compile.compile(str(source), cfile=str(directory / name), doraise=True, invalidation_mode=mode)
        compiled.append((directory / name, name))
    return compiled


@cache
def runtime_identity() -> str:
    """What the runtime is made of, cheaply: the interpreter, the distributions' versions, the harness's files."""
    scripts = [hashlib.sha256(source.read_bytes()).hexdigest() for source, _ in _harness_files()]
    distributions = [f"{dist.metadata['Name']}=={dist.version}" for dist in server_distributions()]
    return stable_hash([os.path.realpath(sys.executable), sys.version, distributions, scripts])[:16]


def runtime_archive() -> bytes:
    """The runtime as a tar archive to extract at TOOLS_ROOT, every entry readable by every uid."""
    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory() as scratch, tarfile.open(fileobj=buffer, mode="w") as archive:
        files = [*_interpreter_files(), *_site_files()]
        files += [*_harness_files(), *_runner_bytecode(Path(scratch))]
        for source, name in files:
            if not source.is_file():
                continue
            info = archive.gettarinfo(str(source), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o755 if info.mode & 0o111 else 0o644
            with source.open("rb") as data:
                archive.addfile(info, data)
    return buffer.getvalue()


def extract_runtime(directory: Path) -> None:
    """The runtime laid out in `directory` (once: it is renamed into place whole)."""
    if directory.exists():
        return
    partial = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}")
    with tarfile.open(fileobj=io.BytesIO(runtime_archive())) as archive:
        archive.extractall(partial, filter="tar")
    partial.rename(directory)


def tools_layer(directory: Path) -> ImageLayer:
    """The runtime as an image holding nothing else, for clusters that mount it as an image volume; its
    context is `directory`, laid out by `extract_runtime` before it is built."""
    return ImageLayer(
        "tools",
        "FROM scratch\nCOPY tools /\n",
        directory=("tools", directory),
        directory_identity=runtime_identity(),
        labels={"eval_pipeline.layer": "tools"},
    )
