"""The harness's runtime, carried into every container: a Python of its own with the `mcp` SDK, and its C library.

An environment's own Python may be 3.6, or absent (a terminal task's image),
and its packages are the task's, so no harness process (the command runner
runner/, the pod's PID 1, the uid and slot claims, the tool server
tool_server.py) can run on them. They bring their own instead: this machine's
interpreter (its binary, shared library and standard library) and the
installed distributions `mcp` needs, with tool_server.py and the runner's
directory beside them, laid out under TOOLS_ROOT. Nor can they run on the
image's C library: an Alpine image has musl and no glibc, an older Debian's
glibc is older than the one the interpreter was linked against, a distroless
one lacks libssl or libffi. So the runtime also holds this machine's dynamic
loader and every shared library its binary and extension modules name (their
ELF DT_NEEDED, as the loader resolves them here: `shared_libraries`), under
`lib/`, and every harness process is started through that loader
(`ToolRuntime.python`): by absolute path, with the runtime's `lib/` as the only
place libraries are looked for first and the image's /etc/ld.so.cache never
read, never as `python3` from PATH, where the environment's venv comes first.
Nothing of the image is used but the kernel's interfaces, /bin/sh (the
runner's commands are the trial's), /etc/ld.so.preload (which glibc's loader
reads however it is started) and its locale files, where it has them (Python
moves a C locale to C.UTF-8). The container backend puts that in a volume once per
engine and mounts it read-only into every pod and container
(container/tool_volume.py); the Kubernetes backend builds it as an image of its
own (`tools_layer`, FROM scratch) that pods mount read-only as an image volume.
Either way no environment image changes and no trial can alter it. It needs an
image of this machine's architecture, of any distribution and C library.
"""

import hashlib
import importlib.util
import io
import os
import py_compile
import struct
import subprocess
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
from eval_pipeline.common.outcomes import InfrastructureError
from eval_pipeline.sandbox.pods.images import ImageLayer
from eval_pipeline.sandbox.runner.entry import DIRECTORY

TOOLS_ROOT = "/opt/eval/tools"
SERVER_DISTRIBUTION = "mcp"
TOOL_SERVER = Path(__file__).with_name("tool_server.py")
RUNNER = Path(DIRECTORY)  # the runner's directory, shipped whole beside the tool server and run by path
LIBRARIES = "lib"  # in the runtime: the dynamic loader and every shared library the runtime's ELF files name
# Extension modules for terminals, Tk and NIS, which no harness process imports: left out with the libraries they
# link (ncurses, X11, Kerberos), which the runtime would otherwise carry.
_EXTENSIONS_LEFT_OUT = ("_tkinter", "_curses", "_curses_panel", "readline", "nis")
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

    def _interpreter(self) -> list[str]:
        """The runtime's interpreter started through the runtime's own loader, by absolute path: its libraries,
        the C library first, from the runtime's `lib/` (--library-path, which outranks the binary's RUNPATH, and
        which no process it starts inherits, as it would an LD_LIBRARY_PATH), the image's /etc/ld.so.cache never
        read (--inhibit-cache). The image's own loader, which the binary names, may be musl's, older, or none."""
        libraries = f"{self.root}/{LIBRARIES}"
        loader = f"{libraries}/{loader_name()}"
        return [loader, "--inhibit-cache", "--library-path", libraries, f"{self.root}/python/bin/python3"]

    def python(self, *args: str) -> list[str]:
        """A command line running the runtime's interpreter on `args`, whatever PATH and the image's variables
        and libraries say: through the runtime's loader (`_interpreter`), isolated (-I: no PYTHON* variable,
        user site directory or script directory that an environment's image or a trial could have planted is
        read). Nothing sets a variable: no exec API offers an environment everywhere (Kubernetes' has none)."""
        return [*self._interpreter(), "-I", *args]

    def runner(self, *args: str) -> list[str]:
        """The command runner (its directory, run by path: runner/__main__.py) on the runtime's interpreter."""
        return self.python(f"{self.root}/{RUNNER.name}", *args)

    @property
    def argv(self) -> list[str]:
        """The tool server, isolated as every harness process is (-I: no PYTHON* variable of the image's or user
        site directory is read), writing no bytecode (-B); it finds the `mcp` distributions in the interpreter's
        own site-packages."""
        return [*self._interpreter(), "-I", "-B", f"{self.root}/tool_server.py"]

    @property
    def env(self) -> dict[str, str]:
        """None: the interpreter finds its home and site-packages from its own path, so the server starts where
        nothing can set a variable (an image without /usr/bin/env)."""
        return {}


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
    """(file here, path in the runtime) for this interpreter: its binary and standard library (its shared
    library, where it has one, is among `shared_libraries`)."""
    yield Path(os.path.realpath(sys.executable)), "python/bin/python3"
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for directory, names, files in os.walk(stdlib):
        here = Path(directory)
        if here == stdlib:  # config-3.X-…: the static library and build files
            names[:] = [name for name in names if name not in _STDLIB_LEFT_OUT and not name.startswith("config-")]
        for name in files:
            if ".opt-" in name or name.split(".")[0] in _EXTENSIONS_LEFT_OUT:  # .opt-: bytecode for -O and -OO
                continue
            yield here / name, f"python/lib/{stdlib.name}/{(here / name).relative_to(stdlib)}"


def _program_interpreter(executable: str) -> Path:
    """The dynamic loader the ELF file `executable` names (its PT_INTERP), as a file here (64-bit little-endian,
    the only ELF class and byte order of the machines this project runs on)."""
    with open(executable, "rb") as elf:
        header = elf.read(64)
        (program_headers,) = struct.unpack_from("<Q", header, 32)
        entry_size, count = struct.unpack_from("<HH", header, 54)
        for index in range(count):
            elf.seek(program_headers + index * entry_size)
            kind, _, offset, _, _, size = struct.unpack("<IIQQQQ", elf.read(40))
            if kind == 3:  # PT_INTERP: the loader's path, NUL-terminated
                elf.seek(offset)
                return Path(os.path.realpath(elf.read(size).rstrip(b"\0").decode()))
    raise InfrastructureError(f"the tool runtime cannot be made: {executable} names no dynamic loader")


@cache
def loader_name() -> str:
    """The file name of the dynamic loader in the runtime's `lib/`: the one this interpreter names, by its own name
    (ld-linux-x86-64.so.2 here)."""
    return _program_interpreter(sys.executable).name


def _site_files() -> Iterator[tuple[Path, str]]:
    """(file here, path in the runtime) for the server's distributions, in the runtime's interpreter's own
    site-packages, where the interpreter finds them by its own path (a .pth file among them would run at
    every start of it, the runner's too: the server's distributions have none)."""
    site_packages = f"python/lib/{Path(sysconfig.get_paths()['stdlib']).name}/site-packages"
    for distribution in server_distributions():
        for file in distribution.files or []:
            if not str(file).startswith(".."):  # scripts installed to bin/: not needed
                yield Path(str(file.locate())), f"{site_packages}/{file}"


def _is_elf(path: Path) -> bool:
    with path.open("rb") as file:
        return file.read(4) == b"\x7fELF"


@cache
def shared_libraries() -> tuple[tuple[Path, str], ...]:
    """(file here, path in the runtime) for this machine's dynamic loader and every shared library the runtime's
    ELF files (its binary, the extension modules of its standard library and distributions) name, directly or
    through another, as the loader resolves them here (`ldd`), each under `lib/` by the name it is asked for; a
    library found among the runtime's own files (a wheel's vendored `.libs/`, named through $ORIGIN) stays where
    it is. Libraries the C library loads by itself (NSS modules, gconv) are not among them: no harness process
    asks for what they serve beyond the C library's own (files, dns, UTF-8)."""
    shipped = {source for source, _ in [*_interpreter_files(), *_site_files()]}
    libraries = sorted(str(path) for path in shipped if ".so" in path.name and path.is_file() and _is_elf(path))
    objects = [os.path.realpath(sys.executable), *libraries]
    # No LD_LIBRARY_PATH or LD_PRELOAD of this process's environment changes what the loader resolves.
    environment = {"LC_ALL": "C", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    listed = subprocess.run(["ldd", *objects], capture_output=True, text=True, env=environment).stdout
    found = {loader_name(): _program_interpreter(sys.executable)}
    needing = ""
    for line in listed.splitlines():
        if not line.startswith("\t"):  # ldd names each file before the libraries it needs
            needing = line.rstrip(":")
            continue
        name, arrow, resolved = line.strip().partition(" => ")
        resolved = resolved.rsplit(" (0x", 1)[0]
        if not arrow:  # the vDSO and the loader, named by no library
            continue
        if resolved == "not found":
            raise InfrastructureError(f"the tool runtime cannot be made: {needing} needs {name}, not found here")
        path = Path(os.path.realpath(resolved))
        if path not in shipped and Path(resolved) not in shipped:
            found.setdefault(name, path)
    return tuple((path, f"{LIBRARIES}/{name}") for name, path in sorted(found.items()))


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
    """What the runtime is made of, cheaply: the interpreter, the distributions' versions, the harness's files and
    this module (which lays the runtime out and starts it), and the loader and shared libraries it carries (each
    by name, size and modification time: a library an upgrade of this machine replaces is another runtime)."""
    sources = [Path(__file__), *(source for source, _ in _harness_files())]
    scripts = [hashlib.sha256(source.read_bytes()).hexdigest() for source in sources]
    distributions = [f"{dist.metadata['Name']}=={dist.version}" for dist in server_distributions()]
    libraries = [(name, *_size_and_time(source)) for source, name in shared_libraries()]
    return stable_hash([os.path.realpath(sys.executable), sys.version, distributions, scripts, libraries])[:16]


def _size_and_time(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_size, status.st_mtime_ns


def runtime_archive() -> bytes:
    """The runtime as a tar archive to extract at TOOLS_ROOT, every entry readable by every uid."""
    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory() as scratch, tarfile.open(fileobj=buffer, mode="w") as archive:
        files = [*_interpreter_files(), *_site_files(), *shared_libraries()]
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
