"""The local process sandbox: the embedded default, needing nothing but Python and git.

Each instance gets one prepared environment directory (the repository at its
base commit, installed into its own virtualenv made with the spec's Python,
built once under a lock); each workspace is a copy-on-write copy
(`cp --reflink=auto`, a plain copy where the file system cannot share blocks)
of that repository. Every command of a trial runs in its own mount namespace
where its workspace is mounted at the environment's repository path (see
runner/), so editable installs and absolute paths resolve to the
trial's files while the shared environment stays untouched, and with no
network but its own loopback unless the trial's variant opted in. Commands run in
their own process group with a timeout, a memory ceiling (watched on the
group's resident memory), the CPU ceiling as a core affinity, and capped
output, started by a small runner process rather than the harness's own
(command_runner.py: a fork from a run worker copies 260 MB of page tables).
An environment directory that vanished is SandboxLost, as a lost pod is.

Where the system refuses user namespaces (macOS, hardened kernels), commands
run in the workspace's own directory instead, and environments with install
steps, whose installed paths would import the environment's code rather than
the trial's, are refused with a message naming the container backend.

A campaign that opts in to untrusted agents (`allow_untrusted_agents_locally`)
walls each command further: every file system read-only but its workspace, a
pid namespace of its own with a fresh /proc (it sees and signals only its own
processes, which all end with it), and every unix socket bound on the host
(the container engine's, a database's) covered (`WALLS`). Where the system
cannot give those walls, the campaign is refused when its sandbox is made,
naming why (`walls_unavailable`).

Process isolation is weaker than a container's: a hostile command can still
read the rest of the file system. The container backend closes that gap.
"""

import base64
import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from packaging.requirements import Requirement

from eval_pipeline.common.git import COMMIT_BASELINE, STRIP_HISTORY, clone_at, git
from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.common.outcomes import ImageBuildFailed, InfrastructureError, SandboxLost
from eval_pipeline.common.settings import DeploymentError
from eval_pipeline.sandbox.base import (
    HARNESS_FILE_CAP_BYTES,
    OUTPUT_DIR,
    EnvironmentHandle,
    ExecResult,
    HarnessFileTooLarge,
    ResourceLimits,
    SandboxBackend,
    SandboxError,
    SandboxSettings,
    ToolChannel,
    Workspace,
)
from eval_pipeline.sandbox.command_runner import run_command
from eval_pipeline.sandbox.interpreters import (
    UPGRADE_PIP,
    Interpreter,
    copy_installation,
    find_interpreter,
    installs_with_pip,
)
from eval_pipeline.sandbox.runner.namespaces import ViewUnavailable
from eval_pipeline.sandbox.runner.quota import allocated_bytes
from eval_pipeline.sandbox.runner.read_back import read_back
from eval_pipeline.sandbox.runner.request import RunRequest, View
from eval_pipeline.tasks.data import TaskData
from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource

# Bump when the layout of a prepared environment changes, so old ones are not reused.
ENVIRONMENT_LAYOUT_VERSION = "5"
INSTALL_TIMEOUT_S = 1800.0
TOOL_SERVER = Path(__file__).with_name("tool_server.py")
_INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "PIP_INDEX_URL")
# What an untrusted agent's command gets besides its read-only view (runner/namespaces.py): a pid namespace of its
# own, and every unix socket of the host covered.
WALLS = {"own_pids": True, "hide_sockets": True}
# The shared temporary directories where a walled trial finds its own `tmp` (LocalWorkspace.command_placement).
PRIVATE_TMP = ("/tmp", "/var/tmp")


def walled_view(root: Path, interpreter: Path) -> dict[str, Any]:
    """An untrusted agent's command's view beyond its workspace's (runner/namespaces.py): it writes only under
    `root`, finds `root/tmp` at every PRIVATE_TMP directory, and its environment's `interpreter` directory where
    it is, even under /tmp; with a pid namespace of its own and the host's unix sockets covered (WALLS)."""
    private = {shared: str(root / "tmp") for shared in PRIVATE_TMP}
    return {"writable": [str(root)], "private": private, "visible": [str(interpreter)], **WALLS}


def _fork_tree(source: Path, target: Path) -> None:
    """Copy a directory tree, sharing blocks where the file system supports reflinks."""
    try:
        subprocess.run(["cp", "-a", "--reflink=auto", str(source), str(target)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):  # no GNU cp (e.g. macOS)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, symlinks=True)


def _requirements_closure(name: str) -> set[str]:
    """The installed distribution `name` and every distribution it requires on this interpreter, recursively."""
    seen: set[str] = set()
    pending = [name]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        for line in metadata.requires(current) or ():
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return seen


@cache
def views_unavailable() -> str:
    """Why this system cannot give a command its own mount namespace ('' when it can), probed once."""
    with tempfile.TemporaryDirectory() as scratch:
        try:
            run_command(RunRequest("true", scratch, {}, 10, 100, view=View(source=scratch, target=scratch)))
        except (ViewUnavailable, OSError) as error:
            return str(error)
    return ""


@cache
def walls_unavailable() -> str:
    """Why this system cannot wall an untrusted agent's command in ('' when it can), probed once with the view an
    opt-in campaign's commands get (LocalWorkspace.command_placement)."""
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "tmp").mkdir()
        view = {"source": scratch, "target": scratch, **walled_view(Path(scratch), Path(scratch))}
        try:
            fields = {"command": "true", "cwd": scratch, "env": {}, "timeout_s": 30, "output_bytes": 1000, "view": view}
            probed = run_command(RunRequest.from_fields(fields))
        except (ViewUnavailable, OSError) as error:
            return str(error)
    return "" if probed["exit_code"] == 0 else f"a walled `true` exited {probed['exit_code']}: {probed['stderr']!r}"


class PipeChannel(ToolChannel):
    """A tool server run as a local process, over its stdin and stdout; its log goes to `log`."""

    def __init__(self, argv: list[str], session: Mapping[str, Any], log: Path) -> None:
        self.log = log
        with log.open("ab") as stderr:
            self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        assert self.process.stdin is not None and self.process.stdout is not None  # both piped
        self.stdin: IO[bytes] = self.process.stdin
        self.stdout: IO[bytes] = self.process.stdout
        self.send(json.dumps(session).encode() + b"\n")

    def send(self, data: bytes) -> None:
        try:
            self.stdin.write(data)
            self.stdin.flush()
        except (BrokenPipeError, ValueError) as error:
            raise SandboxLost(f"the tool server (pid {self.process.pid}) is gone: {error}") from error

    def receive(self) -> bytes:
        return os.read(self.stdout.fileno(), 65536)

    def close(self) -> None:
        try:
            self.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.stdout.close()

    def diagnostics(self) -> str:
        return self.log.read_text(errors="replace")[-self.DIAGNOSTICS_CHARS :] if self.log.exists() else ""

    def failure(self, message: str) -> InfrastructureError:
        return SandboxError(message)  # a local environment is a directory: it does not go away under a call


def remove_workspace(root: Path) -> None:
    """Remove a workspace whatever its trial left there: `rm -rf`, since shutil.rmtree recurses (before Python
    3.12) and a tree thousands of directories deep would raise out of the trial's end."""
    subprocess.run(["rm", "-rf", "--", str(root)], check=False, stdin=subprocess.DEVNULL, capture_output=True)


def quota_state(root: Path) -> Path:
    """Where a workspace's disk quota carries over between its commands: beside it, outside its walls."""
    return root.with_name(f"{root.name}.quota.json")


class LocalWorkspace(Workspace):
    """A workspace directory (`root/repo`, `root/harness`, `root/home`, `root/tmp`); with `view_target`, commands
    see `root/repo` there, with network only when `network`, and when `walled` (an untrusted agent's campaign)
    may write nowhere outside `root`: the environment, other trials' workspaces and the data directory are
    read-only to them; /tmp and /var/tmp are `root/tmp` (kept from command to command, gone with the
    workspace), /dev/shm their own; each command has a pid namespace of its own and finds the host's unix
    sockets covered (`WALLS`)."""

    def __init__(
        self,
        root: Path,
        python_dir: Path,
        limits: ResourceLimits,
        view_target: Path | None = None,
        network: bool = False,
        base_revision: str | None = None,
        walled: bool = False,
    ) -> None:
        """The disk quota counts from what the workspace holds now (the repository's copy)."""
        self.root = root
        self.network = network
        self.base_revision = base_revision
        self.repo = root / "repo"
        self.harness = root / "harness"
        self._python = python_dir
        self._limits = limits
        self._view_target = view_target
        self._walled = walled
        self._storage_limit_bytes = allocated_bytes([str(root)]) + limits.storage_mb * 2**20
        self._quota = str(quota_state(root))

    def _environ(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        inherited = {name: os.environ[name] for name in _INHERITED_ENV if name in os.environ}
        home = self.root / "home"
        tmp = self.root / "tmp"
        home.mkdir(exist_ok=True)
        tmp.mkdir(exist_ok=True)
        return {
            **inherited,
            "PATH": f"{self._python / 'bin'}{os.pathsep}{inherited.get('PATH', os.defpath)}",
            **({"VIRTUAL_ENV": str(self._python)} if (self._python / "pyvenv.cfg").exists() else {}),
            "HOME": str(home),
            "TMPDIR": str(tmp),
            "PYTHONDONTWRITEBYTECODE": "1",
            **(extra or {}),
        }

    def command_placement(self) -> dict[str, Any]:
        view = (
            {"source": str(self.repo), "target": str(self._view_target), "network": self.network}
            | (walled_view(self.root, self._python) if self._walled else {})
            if self._view_target
            else None
        )
        return {
            "cwd": str(self._view_target or self.repo),
            "env": self._environ(None),
            "output_bytes": self._limits.output_bytes,
            "memory_ceiling_mb": self._limits.effective_memory_ceiling_mb,
            "cpu_ceiling": self._limits.effective_cpu_ceiling,
            "view": view,
            # The quota's state beside the workspace, where no command of a walled trial may write.
            "storage": {"paths": [str(self.root)], "limit_bytes": self._storage_limit_bytes, "state": self._quota},
        }

    def run(self, command: str, *, timeout_s: float, env: Mapping[str, str] | None = None) -> ExecResult:
        placement = self.command_placement()
        try:
            environment = {**placement["env"], **(env or {})}
            result = run_command(
                RunRequest.from_fields({**placement, "command": command, "timeout_s": timeout_s, "env": environment})
            )
        except ViewUnavailable as error:
            raise SandboxError(str(error)) from error
        return ExecResult(**result)

    def tool_server_command(self) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, str(TOOL_SERVER)], {}

    def open_tool_channel(self, session: Mapping[str, Any]) -> ToolChannel:
        self.harness.mkdir(parents=True, exist_ok=True)
        argv, _ = self.tool_server_command()
        return PipeChannel(argv, session, self.harness / "tool_server.log")

    def harness_path(self, name: str) -> str:
        return str(self.harness / name)

    def write_harness_file(self, name: str, content: str | bytes) -> str:
        path = self.harness / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return str(path)

    def read_harness_file(self, name: str) -> bytes | None:
        """Read as the pod's runner reads a file back (runner/read_back.py), never following a link."""
        data = read_back(os.path.join(os.path.realpath(self.harness), name), HARNESS_FILE_CAP_BYTES)
        if data is False:
            raise HarnessFileTooLarge(f"the harness file {name} holds more than {HARNESS_FILE_CAP_BYTES} bytes")
        return None if data is None else base64.b64decode(data)


_APT_INSTALL = re.compile(r"\bapt(?:-get)?\s+(?:-\S+\s+)*install\s+([^&|;]+)")


def missing_system_packages(steps: tuple[str, ...]) -> list[str]:
    """The packages `steps` install with apt that this machine has not installed. The local backend runs no
    system step, so an environment whose spec needs one (sphinx 7.2's graphviz, without which its graded tests
    skip) is only faithful where the machine has it already."""
    wanted = [word for step in steps for match in _APT_INSTALL.finditer(step) for word in match[1].split()]
    return [package for package in dict.fromkeys(wanted) if not package.startswith("-") and not _installed(package)]


def _installed(package: str) -> bool:
    try:
        query = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    except FileNotFoundError:  # no dpkg: nothing can be shown installed
        return False
    return query.stdout.strip() == "install ok installed"


# The files pytest takes its configuration from, and the section that makes one of them a configuration.
PYTEST_CONFIGURATIONS = {
    "pytest.ini": "",
    ".pytest.ini": "",
    "pyproject.toml": "[tool.pytest",
    "tox.ini": "[pytest]",
    "setup.cfg": "[tool:pytest]",
}


def pytest_configuration_above(directory: Path) -> Path | None:
    """A pytest configuration file in `directory` or a directory above it. pytest looks for its configuration
    from the tests up to the file system's root, and takes the first it finds: a repository with none of its own
    whose workspace lies below one is run with that file's options (its `addopts`, its plugins), not as
    SWE-bench runs it in a container, where nothing is above the repository."""
    for folder in (directory, *directory.parents):
        for name, section in PYTEST_CONFIGURATIONS.items():
            path = folder / name
            if not path.is_file():
                continue
            try:
                if not section or section in path.read_text(errors="replace"):
                    return path
            except OSError:
                continue
    return None


class LocalSandbox(SandboxBackend):
    """Environments and workspaces as directories under `root`, commands as local processes."""

    name = "local"
    isolation = ""  # no walls (SandboxBackend.isolation)

    def __init__(
        self, root: Path, limits: ResourceLimits, settings: SandboxSettings, campaign: str, network: bool = False
    ) -> None:
        super().__init__(root, limits, settings, campaign, network)
        if found := pytest_configuration_above(root):
            raise DeploymentError(
                f"EVAL_PIPELINE_DATA_DIR: the local sandbox keeps its workspaces in {root}, below {found}, a pytest"
                " configuration that pytest would read for every repository without one of its own; set"
                " EVAL_PIPELINE_DATA_DIR to a directory outside it"
            )
        if settings.allow_untrusted_agents_locally and (reason := walls_unavailable()):
            raise DeploymentError(
                "sandbox.allow_untrusted_agents_locally: this system cannot wall an untrusted agent's commands in"
                f" on the local backend ({reason}); use the container backend (sandbox: {{backend: container}})"
            )

    def enforced_limits(self) -> dict[str, bool]:
        return {
            "memory_floor_mb": False,  # no reservation without cgroups
            "memory_ceiling_mb": True,  # the process group's resident memory, watched
            "cpu_floor": False,
            "cpu_ceiling": hasattr(os, "sched_setaffinity"),  # core affinity, rounded up; not on macOS
            "pids": False,  # RLIMIT_NPROC counts all of a user's processes; use containers
            "output_bytes": True,
        }

    def environment_key(self, instance: TaskData, spec: EnvironmentSpec) -> str:
        interpreter = find_interpreter(spec.python)
        return stable_hash(
            {
                "layout": ENVIRONMENT_LAYOUT_VERSION,
                "repo": instance.repo,
                "base_commit": instance.base_commit,
                "environment_setup_commit": instance.environment_setup_commit if spec.requirements else "",
                # Image steps never run on the host, so they do not change what is built here.
                "spec": {name: value for name, value in spec.as_record().items() if name != "image_install"},
                "python": [str(interpreter.executable), interpreter.version],
                "harness_pytest": metadata.version("pytest"),
                "pip": UPGRADE_PIP,
                # An opt-in campaign's environments are its own: never one a trusted campaign also uses.
                **({"untrusted_agents": True} if self.settings.allow_untrusted_agents_locally else {}),
            }
        )

    def build(self, instance: TaskData, spec: EnvironmentSpec, source: RepoSource) -> dict[str, Any]:
        key = self.environment_key(instance, spec)
        directory = self.root / "environments" / key[:24]
        directory.parent.mkdir(parents=True, exist_ok=True)
        built = []
        with open(directory.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per environment, across processes
            if not (directory / ".ready").exists():
                shutil.rmtree(directory, ignore_errors=True)  # a build that died half-way
                self._build(directory, instance, spec, source)
                (directory / ".ready").write_text(key)
                built.append(key)
        return {
            "environment_key": key,
            "location": str(directory),
            "built": built,
            "python": find_interpreter(spec.python).version,
            # How a trial sees its workspace: at the environment's path in its own mount namespace, or as a copy.
            "trial_view": "copy" if views_unavailable() else "mount namespace",
            "skipped_image_steps": list(spec.image_install),
        }

    def prepare(self, instance: TaskData, spec: EnvironmentSpec, source: RepoSource) -> EnvironmentHandle:
        record = self.build(instance, spec, source)
        return EnvironmentHandle(
            backend=self.name,
            instance_id=instance.instance_id,
            key=record["environment_key"],
            location=record["location"],
            details={
                "base_commit": instance.base_commit,
                # What every workspace starts at and every patch is taken against (common/git.py: COMMIT_BASELINE).
                "baseline": git(["rev-parse", "HEAD"], Path(record["location"]) / "repo").strip(),
                "python": record["python"],
                "trial_view": record["trial_view"],
            },
        )

    def _build(self, directory: Path, instance: TaskData, spec: EnvironmentSpec, source: RepoSource) -> None:
        if problem := instance.local_problem:
            raise ImageBuildFailed(
                f"{instance.instance_id}: the local backend cannot run this task as its author wrote it: {problem}; "
                "run it on the container backend (sandbox: {backend: container})"
            )
        if missing := missing_system_packages(spec.image_install):
            raise ImageBuildFailed(
                f"environment for {instance.instance_id}: its spec installs system packages with apt-get, which only "
                f"an image build runs, and this machine lacks {', '.join(missing)}: install them here "
                f"(apt-get install {' '.join(missing)}) or use the container backend"
            )
        installs = spec.pre_install or spec.requirements or spec.packages or spec.install
        if installs and (reason := views_unavailable()):
            raise ImageBuildFailed(
                f"environment for {instance.instance_id}: its install steps need every trial to see its own "
                f"workspace at the environment's path, which this system refuses ({reason}); "
                "use the container backend"
            )
        interpreter = find_interpreter(spec.python)
        repo = directory / "repo"
        directory.mkdir(parents=True)
        clone_at(source.location(instance.repo), instance.base_commit, repo)
        python_dir = directory / "python"
        self._make_python(interpreter, python_dir, with_pip=bool(installs), own_installation=bool(spec.python))
        builder = LocalWorkspace(directory, python_dir, self.limits)
        log = directory.with_suffix(".log")  # beside the environment: kept when a failed build is removed
        with open(log, "w") as build_log:
            for command in self._install_commands(instance, spec, directory):
                result = builder.run(command, timeout_s=INSTALL_TIMEOUT_S)
                build_log.write(f"$ {command}\n{result.stdout}{result.stderr}(exit {result.exit_code})\n")
                if not result.ok:
                    raise ImageBuildFailed(
                        f"environment for {instance.instance_id}: install step {command!r} failed "
                        f"(exit {result.exit_code}): {(result.stderr or result.stdout)[-1500:]}; log: {log}"
                    )
        if spec.uses_pytest and not builder.run("python -c 'import pytest'", timeout_s=120).ok:
            self._lend_harness_pytest(python_dir, interpreter.version, instance.instance_id)

    @staticmethod
    def _make_python(interpreter: Interpreter, target: Path, *, with_pip: bool, own_installation: bool) -> None:
        """The environment's Python at `target`: for a spec that names its version, a whole installation of
        its own copied from the pyenv build (interpreters.copy_installation says why); otherwise, and where
        the version is not a pyenv build, a virtualenv of the interpreter."""
        if own_installation and interpreter.prefix is not None:
            copy_installation(interpreter, target)
            command = [str(target / "bin" / interpreter.executable.name), "-m", "ensurepip", "--default-pip"]
            if not with_pip:
                return
        else:
            command = [str(interpreter.executable), "-m", "venv", *([] if with_pip else ["--without-pip"]), str(target)]
        created = subprocess.run(command, capture_output=True, text=True, check=False)
        if created.returncode != 0:
            raise ImageBuildFailed(f"making the environment's Python: {shlex.join(command)}: {created.stderr[-1500:]}")

    @staticmethod
    def _install_commands(instance: TaskData, spec: EnvironmentSpec, directory: Path) -> list[str]:
        """The spec's steps as shell commands, run in the repository; package names are single arguments."""
        commands = list(spec.pre_install)
        if installs_with_pip(spec):
            commands.append(UPGRADE_PIP)
        if spec.requirements:
            text = instance.requirements(spec, directory / "repo")
            (directory / "requirements.txt").write_text(text)
            commands.append(f"python -m pip install -r {shlex.quote(str(directory / 'requirements.txt'))}")
        if spec.packages:
            commands.append(f"python -m pip install {shlex.join(spec.packages)}")
        return [*commands, *spec.install, COMMIT_BASELINE, STRIP_HISTORY]

    @staticmethod
    def _lend_harness_pytest(python_dir: Path, python_version: str, instance_id: str) -> None:
        """Let an environment that installed no pytest import the harness's, and nothing else of the harness's.

        Grading needs pytest even on an offline machine (the demo). The lent
        directory holds only pytest and its dependencies, with their metadata,
        added after every install step, so pip never mistook the harness's
        packages for the environment's.
        """
        if python_version.rsplit(".", 1)[0] != f"{sys.version_info[0]}.{sys.version_info[1]}":
            raise ImageBuildFailed(
                f"environment for {instance_id}: its test command runs pytest, which its packages do not install, "
                f"and the harness's pytest is for Python {sys.version_info[0]}.{sys.version_info[1]}, not "
                f"{python_version}: add pytest to the environment's packages"
            )
        lent = python_dir / "harness-pytest"
        lent.mkdir()
        for name in _requirements_closure("pytest"):
            distribution = metadata.distribution(name)
            # Its modules and its metadata: pluggy (1.7 on) and pytest read their own versions from it.
            tops = {Path(str(file)).parts[0] for file in distribution.files or ()}
            for top in tops - {"..", "__pycache__"}:
                origin = Path(str(distribution.locate_file(top)))
                if origin.exists() and not (lent / top).exists():
                    (lent / top).symlink_to(origin)
        for site_packages in python_dir.glob("lib/python*/site-packages"):
            (site_packages / "zz_eval_pipeline_harness_pytest.pth").write_text(f"{lent}\n")

    @contextmanager
    def workspace(self, environment: EnvironmentHandle, label: str, network: bool = False) -> Iterator[LocalWorkspace]:
        self.check_network(network)
        source = Path(environment.location)
        if not (source / ".ready").is_file():
            raise SandboxLost(f"the environment of {environment.instance_id} at {source} is gone")
        root = self.root / "workspaces" / f"{label}-{uuid.uuid4().hex[:8]}"
        root.mkdir(parents=True)
        try:
            _fork_tree(source / "repo", root / "repo")
            (root / "harness" / OUTPUT_DIR).mkdir(parents=True)
            view = source / "repo" if environment.details.get("trial_view") != "copy" else None
            baseline = environment.details.get("baseline")
            walled = self.settings.allow_untrusted_agents_locally
            yield LocalWorkspace(root, source / "python", self.limits, view, network, baseline, walled)
        finally:
            remove_workspace(root)
            quota_state(root).unlink(missing_ok=True)
