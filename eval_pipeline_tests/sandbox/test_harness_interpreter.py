"""Every harness process in a pod is started on the runtime's own interpreter, by path, never as `python3`.

The environment's venv is first on PATH in every container, so `python3` there is the environment's (Python 3.6
for django 3.x rows, which lacks what the runner calls) or whatever a trial or an image put first. These tests
record every command line the harness sends into a pod (no engine needed); test_container_sandbox.py runs the same
attack in real pods, with a `python3` planted first on PATH.
"""

import json
import re
import shlex
from collections.abc import Mapping

import pytest

from eval_pipeline.common.outcomes import InfrastructureError
from eval_pipeline.sandbox.base import ResourceLimits, SandboxError, ToolChannel, parse_task_base_images
from eval_pipeline.sandbox.kubernetes.manifest import environment_pod_manifest
from eval_pipeline.sandbox.kubernetes.slots import claimed_slot
from eval_pipeline.sandbox.pods.exec_transport import PodExec
from eval_pipeline.sandbox.pods.images import (
    SWEBENCH_SYSTEM_PACKAGES,
    PythonSource,
    base_layer,
    substitute_from,
    task_layers,
)
from eval_pipeline.sandbox.pods.workspace import ExecWorkspace
from eval_pipeline.sandbox.tool_runtime import TOOLS_ROOT, ToolRuntime
from eval_pipeline.tasks.terminal.task import DEMO_TASKS_DIR, load_terminal_tasks

INTERPRETER = f"{TOOLS_ROOT}/python/bin/python3"
RESULT = {"command": "", "exit_code": 0, "stdout": "", "stderr": "", "duration_s": 0.1}


class RecordingPod(PodExec):
    """A pod that answers each harness command as a real one would and records its command line."""

    name = "recording"

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def run(self, argv: list[str], timeout_s: float = 0, private: str | None = None) -> tuple[int, bytes, bytes]:
        self.commands.append(argv)
        if argv[:2] == ["sh", "-c"] and "chown" in argv[2]:
            # The uid claim prints the uid, /testbed's commit and what the copy takes on disk.
            return 0, b"20000\n" + b"a" * 40 + b"\n4096\n", b""
        if f"{TOOLS_ROOT}/runner" in argv and "--sweep" not in argv:
            return 0, json.dumps(RESULT).encode(), b""
        if any("print(slot)" in arg for arg in argv):
            return 0, b"0\n", b""
        if any("b64encode" in arg for arg in argv):
            return 0, b"aGk=", b""
        return 0, b"", b""

    def failure(self, message: str) -> InfrastructureError:
        return SandboxError(message)

    def open_channel(self, argv: list[str], env: Mapping[str, str], first_line: str) -> ToolChannel:
        raise NotImplementedError


def python_invocations(argv: list[str]) -> list[list[str]]:
    """Each Python interpreter the command line starts, as the words from its program on: directly, or inside
    an `sh -c` script, where the words are split as the shell splits them."""
    words = shlex.split(argv[2]) if argv[:2] == ["sh", "-c"] else argv
    return [words[i:] for i, word in enumerate(words) if word.rsplit("/", 1)[-1].startswith("python")]


def test_every_harness_command_in_a_pod_starts_the_runtime_interpreter_by_path():
    pod = RecordingPod()
    with claimed_slot(pod, 2, heartbeat_s=60) as slot:
        workspace = ExecWorkspace(pod, f"/workspaces/slot{slot}", {}, ResourceLimits(output_bytes=1000))
        with workspace.created():
            workspace.run("python3 -m pytest", timeout_s=10)
            workspace.write_harness_file("model.patch", "diff")
            assert workspace.read_harness_file("model.patch") == b"hi"
    started = [invocation for argv in pod.commands for invocation in python_invocations(argv)]
    # slot claim, uid claim, the copy's usage, runner, write, read, sweep, slot release
    assert len(started) == 8, pod.commands
    for invocation in started:
        assert invocation[:2] == [INTERPRETER, "-I"], invocation
    runs = [argv for argv in pod.commands if argv[-1] == f"{TOOLS_ROOT}/runner"]
    loader = [f"{TOOLS_ROOT}/lib/ld-linux-x86-64.so.2", "--inhibit-cache", "--library-path", f"{TOOLS_ROOT}/lib"]
    assert runs == [[*loader, INTERPRETER, "-I", runs[0][-1]]], "through the runtime's own loader and libraries"


def test_the_pod_spec_starts_its_runner_on_the_runtime_interpreter():
    manifest = environment_pod_manifest("pod", "ns", "image", "tools", "campaign", "instance", {})
    container = manifest["spec"]["containers"][0]
    assert container["command"] == ToolRuntime().runner("--reap")
    assert container["command"][4:6] == [INTERPRETER, "-I"]
    assert {"mountPath": TOOLS_ROOT, "readOnly": True}.items() <= container["volumeMounts"][0].items()


def test_the_system_layer_holds_what_swebenchs_base_image_installs_under_every_environment():
    """The list is SWE-bench's own, read from the pinned swebench package's base Dockerfile."""
    from swebench.harness.dockerfiles.python import _DOCKERFILE_BASE_PY

    listed = re.search(r"apt install -y \\\n(.*?)&& rm", _DOCKERFILE_BASE_PY, re.DOTALL)
    assert listed, "swebench's base Dockerfile no longer installs its packages in one apt line"
    assert set(SWEBENCH_SYSTEM_PACKAGES) == {word for word in listed[1].split() if word != "\\"}
    base, _ = base_layer(PythonSource("localhost/eval-base:bookworm"), "", None, lambda name: "")
    system = base.parent
    assert system is not None and system.kind == "system" and system.parent is None
    assert all(package in system.dockerfile for package in SWEBENCH_SYSTEM_PACKAGES)
    ca = "/etc/ssl/certs/ca-certificates.crt"
    other, _ = base_layer(PythonSource("localhost/eval-base:bookworm"), "", ca, lambda name: "")
    assert other.parent == system and other.tag != base.tag, "one system layer, whatever is above it"


def test_a_base_image_rebuilt_under_the_same_name_rebuilds_every_layer_built_on_it(tmp_path):
    """Base and task base images are made outside the harness (scripts/): their engine id, not only their name,
    is in the identity of what is built on them, so an image rebuilt under its old tag is never built upon stale."""
    python = PythonSource("localhost/eval-base:bookworm")
    before, _ = base_layer(python, "", None, lambda name: "sha256:1")
    after, _ = base_layer(python, "", None, lambda name: "sha256:2")
    assert before.tag != after.tag
    task = load_terminal_tasks(DEMO_TASKS_DIR, tmp_path).instances[0]
    assert (
        task_layers(task, {"*": "base:tag"}, lambda name: "sha256:1").tag
        != task_layers(task, {"*": "base:tag"}, lambda name: "sha256:2").tag
    )


def test_each_task_base_stands_in_for_the_from_it_is_named_for_and_later_stages_keep_their_own():
    """A task FROM ubuntu:24.04 builds on the Ubuntu stand-in, not on the one of python images: tasks install
    their distribution's packages by name and version. A stage built on an earlier stage is never replaced."""
    dockerfile = "FROM ubuntu:24.04 AS build\nRUN make\nFROM --platform=linux/amd64 python:3.13-slim\nFROM build\n"
    stand_ins = parse_task_base_images("ubuntu:24.04=localhost/base:noble  localhost:5000/base:any")
    assert stand_ins == {"ubuntu:24.04": "localhost/base:noble", "*": "localhost:5000/base:any"}
    text, replaced = substitute_from(dockerfile, stand_ins)
    assert text == (
        "FROM localhost/base:noble AS build\nRUN make\n"
        "FROM --platform=linux/amd64 localhost:5000/base:any\nFROM build\n"
    )
    assert replaced == {"ubuntu:24.04": "localhost/base:noble", "python:3.13-slim": "localhost:5000/base:any"}
    kept, replaced = substitute_from(dockerfile, {"ubuntu:24.04": "localhost/base:noble"})
    assert "FROM --platform=linux/amd64 python:3.13-slim\n" in kept and list(replaced) == ["ubuntu:24.04"]
    with pytest.raises(ValueError, match="'ubuntu:24.04=' names no image"):
        parse_task_base_images("ubuntu:24.04=")
