"""The local process sandbox: the embedded default, needing nothing but Python and git.

Each instance gets one prepared environment directory (the repository at its
base commit and its own virtualenv, built once under a lock); each workspace is
a copy-on-write copy (`cp --reflink=auto`, a plain copy where the file system
cannot share blocks) of that repository, so a trial never touches the shared
environment. Commands run in their own process group with a timeout, a memory
ceiling (watched on the group's resident memory), the CPU ceiling as a core
affinity, and capped output. An environment directory that vanished is
SandboxLost, as a lost pod is.

Process isolation is weaker than a container's: a hostile command can still
reach the rest of the file system. The container backend closes that gap.
"""

import fcntl
import os
import shutil
import subprocess
import sys
import uuid
import venv
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from eval_pipeline.benchmark import EnvironmentSpec, Instance, RepoSource
from eval_pipeline.gitutil import clone_at
from eval_pipeline.hashing import stable_hash
from eval_pipeline.outcomes import ImageBuildFailed, SandboxLost
from eval_pipeline.sandbox.base import EnvironmentHandle, ExecResult, ResourceLimits, SandboxBackend, Workspace
from eval_pipeline.sandbox.limited_exec import run_limited

# Bump when the layout of a prepared environment changes, so old ones are not reused.
ENVIRONMENT_LAYOUT_VERSION = "1"
INSTALL_TIMEOUT_S = 1800.0
_INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "PIP_INDEX_URL")


def _fork_tree(source: Path, target: Path) -> None:
    """Copy a directory tree, sharing blocks where the file system supports reflinks."""
    try:
        subprocess.run(["cp", "-a", "--reflink=auto", str(source), str(target)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):  # no GNU cp (e.g. macOS)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, symlinks=True)


class LocalWorkspace(Workspace):
    def __init__(self, root: Path, venv_dir: Path, limits: ResourceLimits) -> None:
        self.root = root
        self.repo = root / "repo"
        self.harness = root / "harness"
        self._venv = venv_dir
        self._limits = limits

    def _environ(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        inherited = {name: os.environ[name] for name in _INHERITED_ENV if name in os.environ}
        home = self.root / "home"
        tmp = self.root / "tmp"
        home.mkdir(exist_ok=True)
        tmp.mkdir(exist_ok=True)
        return {
            **inherited,
            "PATH": f"{self._venv / 'bin'}{os.pathsep}{inherited.get('PATH', os.defpath)}",
            "VIRTUAL_ENV": str(self._venv),
            "HOME": str(home),
            "TMPDIR": str(tmp),
            "PYTHONDONTWRITEBYTECODE": "1",
            **(extra or {}),
        }

    def run(self, command: str, *, timeout_s: float, env: Mapping[str, str] | None = None) -> ExecResult:
        result = run_limited(
            command,
            cwd=str(self.repo),
            env=self._environ(env),
            timeout_s=timeout_s,
            output_bytes=self._limits.output_bytes,
            memory_ceiling_mb=self._limits.effective_memory_ceiling_mb,
            cpu_ceiling=self._limits.effective_cpu_ceiling,
        )
        return ExecResult(**result)

    def harness_path(self, name: str) -> str:
        return str(self.harness / name)

    def write_harness_file(self, name: str, content: str) -> str:
        path = self.harness / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        return str(path)

    def read_harness_file(self, name: str) -> bytes | None:
        path = self.harness / name
        return path.read_bytes() if path.is_file() else None


class LocalSandbox(SandboxBackend):
    """Environments and workspaces as directories under `root`, commands as local processes."""

    name = "local"

    def enforced_limits(self) -> dict[str, bool]:
        return {
            "memory_floor_mb": False,  # no reservation without cgroups
            "memory_ceiling_mb": True,  # the process group's resident memory, watched
            "cpu_floor": False,
            "cpu_ceiling": hasattr(os, "sched_setaffinity"),  # core affinity, rounded up; not on macOS
            "pids": False,  # RLIMIT_NPROC counts all of a user's processes; use containers
            "output_bytes": True,
        }

    def environment_key(self, instance: Instance, spec: EnvironmentSpec) -> str:
        return stable_hash(
            {
                "layout": ENVIRONMENT_LAYOUT_VERSION,
                "repo": instance.repo,
                "base_commit": instance.base_commit,
                # Image steps never run on the host, so they do not change what is built here.
                "spec": {name: value for name, value in spec.__dict__.items() if name != "image_install"},
                "python": sys.version_info[:2],
            }
        )

    def build(self, instance: Instance, spec: EnvironmentSpec, source: RepoSource) -> dict[str, Any]:
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
            "skipped_image_steps": list(spec.image_install),
        }

    def prepare(self, instance: Instance, spec: EnvironmentSpec, source: RepoSource) -> EnvironmentHandle:
        record = self.build(instance, spec, source)
        return EnvironmentHandle(
            backend=self.name,
            instance_id=instance.instance_id,
            key=record["environment_key"],
            location=record["location"],
            details={"base_commit": instance.base_commit},
        )

    def _build(self, directory: Path, instance: Instance, spec: EnvironmentSpec, source: RepoSource) -> None:
        repo = directory / "repo"
        directory.mkdir(parents=True)
        clone_at(source.location(instance.repo), instance.base_commit, repo)
        venv_dir = directory / "venv"
        venv.create(venv_dir, with_pip=bool(spec.packages), symlinks=True)
        self._expose_harness_test_tools(venv_dir)
        workspace = LocalWorkspace(directory, venv_dir, self.limits)
        commands = ([f"python -m pip install {' '.join(spec.packages)}"] if spec.packages else []) + list(spec.install)
        for command in commands:
            result = workspace.run(command, timeout_s=INSTALL_TIMEOUT_S)
            if not result.ok:
                raise ImageBuildFailed(
                    f"environment for {instance.instance_id}: install step {command!r} failed "
                    f"(exit {result.exit_code}): {result.stderr[-1000:]}"
                )

    @staticmethod
    def _expose_harness_test_tools(venv_dir: Path) -> None:
        """Let the venv import pytest from the harness's own site-packages, after its own packages.

        Grading needs pytest even on an offline machine; the environment's own
        packages still come first on sys.path, so a pinned pytest wins.
        """
        import pytest

        harness_site = Path(pytest.__file__).resolve().parents[1]
        for site_packages in venv_dir.glob("lib/python*/site-packages"):
            (site_packages / "zz_eval_pipeline_harness.pth").write_text(f"{harness_site}\n")

    @contextmanager
    def workspace(self, environment: EnvironmentHandle, label: str) -> Iterator[LocalWorkspace]:
        source = Path(environment.location)
        if not (source / ".ready").is_file():
            raise SandboxLost(f"the environment of {environment.instance_id} at {source} is gone")
        root = self.root / "workspaces" / f"{label}-{uuid.uuid4().hex[:8]}"
        root.mkdir(parents=True)
        try:
            _fork_tree(source / "repo", root / "repo")
            (root / "harness").mkdir()
            yield LocalWorkspace(root, source / "venv", self.limits)
        finally:
            shutil.rmtree(root, ignore_errors=True)
