"""The harness's runtime (tool_runtime.py) inside images it did not build: of another C library (musl, no glibc at
all), of an older glibc than the one its Python was linked against (Debian bullseye's 2.31), and Ubuntu's.

The pod is started as the container backend starts every pod (its PID 1 the runner's reaper, the tool volume
mounted read-only); a real request reaches the runner through the transport the backend uses (an exec per
request, the request on its private stdin), and a tool server is started and called through the MCP client as an
agent's session is. The shared objects mapped into the runner's and the server's processes are all the runtime's:
nothing of the image's C library or Python is loaded. The images are built here from Debian's packages
(scripts/build_foreign_images.sh), once per engine.
"""

import io
import json
import os
import subprocess
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import anyio
import docker.errors
import pytest
from mcp import Client

from eval_pipeline.agents import make_agent
from eval_pipeline.agents.tool_session import ToolSession, channel_transport
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.sandbox import tool_runtime
from eval_pipeline.sandbox.base import parse_task_base_images
from eval_pipeline.sandbox.container.engine_exec import EngineExec
from eval_pipeline.sandbox.container.sandbox import NO_NETWORK
from eval_pipeline.sandbox.pods.exec_transport import HARNESS, ExecPerRequest
from eval_pipeline.sandbox.runner.request import RunRequest
from eval_pipeline.sandbox.tool_runtime import TOOLS_ROOT, ToolRuntime, loader_name, runtime_archive, runtime_identity
from eval_pipeline.tasks.terminal.task import load_terminal_tasks
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate
from eval_pipeline_tests.support.terminal_tasks import write_terminal_task

BUILD_SCRIPT = Path(__file__).parents[2] / "scripts" / "build_foreign_images.sh"
# Each process's shared objects, one path a line, from the maps of the command's parent (the runner or server).
PARENT_SHARED_OBJECTS = "grep -o '/[^ ]*\\.so[.0-9]*$' /proc/$PPID/maps | sort -u"
PLACEMENT = {"cwd": "/", "env": {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}, "output_bytes": 1_000_000}


@dataclass(frozen=True)
class ForeignImage:
    """An image the harness did not build, and `identified_by`, a command that succeeds only where the image is
    what the test takes it for (no glibc nor Python; an older glibc and no Python; Ubuntu noble)."""

    tag: str
    built_here: bool  # by BUILD_SCRIPT; otherwise a task base stand-in (scripts/build_task_base.sh)
    identified_by: str


FOREIGN_IMAGES = {
    "alpine-like-musl": ForeignImage(
        "localhost/eval-test-alpine-like:musl",
        True,
        # musl's loader, no glibc file anywhere, no Python, no apt
        "test -e /lib/ld-musl-x86_64.so.1 && ! command -v python3 && ! command -v python && ! command -v apt-get"
        " && test -z \"$(find / -xdev \\( -name libc.so.6 -o -name 'ld-linux-*' \\))\"",
    ),
    "debian-bullseye": ForeignImage(
        "localhost/eval-test-debian:bullseye",
        True,
        "test -e /lib/x86_64-linux-gnu/libc-2.31.so && ! command -v python3 && ! command -v python",
    ),
    "ubuntu-noble": ForeignImage("ubuntu:24.04", False, "grep -q 'VERSION_CODENAME=noble' /etc/os-release"),
}


def on_the_engine(engine, key: str) -> ForeignImage:
    """FOREIGN_IMAGES[key], built once per engine where it is built here; the test skips (one line) where the image
    cannot be had."""
    image = FOREIGN_IMAGES[key]
    if not image.built_here:
        stand_in = parse_task_base_images(os.environ.get("EVAL_PIPELINE_TASK_BASE_IMAGES", "")).get(image.tag)
        if not stand_in:
            pytest.skip(f"no stand-in for {image.tag} in EVAL_PIPELINE_TASK_BASE_IMAGES (scripts/build_task_base.sh)")
        image = ForeignImage(stand_in, False, image.identified_by)
    try:
        engine.images.get(image.tag)
    except docker.errors.ImageNotFound:
        built = subprocess.run(["bash", str(BUILD_SCRIPT), image.tag], capture_output=True, text=True)
        if built.returncode != 0:
            pytest.skip(f"{image.tag} cannot be built here: {built.stderr.strip()[-300:]}")
    return image


@pytest.fixture(params=list(FOREIGN_IMAGES))
def foreign_image(request, engine) -> ForeignImage:
    return on_the_engine(engine, request.param)


def not_the_runtimes(shared_objects: str) -> list[str]:
    return [path for path in shared_objects.split() if not path.startswith(f"{TOOLS_ROOT}/")]


async def tool_server_shared_objects(pod: EngineExec) -> tuple[set[str], str]:
    """The tools a tool server in `pod` offers, and the shared objects mapped into its process (as a command run
    through its run_command tool reads them from its parent, the server)."""
    session = {"placement": PLACEMENT, "max_timeout_s": 60, "git_env": {}, "base_revision": None}
    channel = await anyio.to_thread.run_sync(pod.open_channel, HARNESS.argv, HARNESS.env, json.dumps(session))
    async with Client(channel_transport(channel)) as client:
        tools = ToolSession(client, channel, agent_reaches_server=False)
        names = {tool.name for tool in await tools.tools()}
        mapped = await tools.call("run_command", {"command": PARENT_SHARED_OBJECTS})
    assert mapped.structured and mapped.structured["exit_code"] == 0, mapped.text
    return names, mapped.structured["stdout"]


@pytest.mark.slow
def test_the_runner_and_the_tool_server_run_on_the_runtime_alone_in_an_image_it_did_not_build(
    container_sandbox, foreign_image
):
    """In a musl image without glibc, in an image of an older glibc, in Ubuntu's: the pod starts (its PID 1 is
    the runner's reaper), a request through an exec is answered, a tool server answers an MCP session, and every
    shared object in the runner's, PID 1's and the server's maps is the runtime's (its loader and libc among them)."""
    sandbox = container_sandbox()
    name = f"{sandbox.campaign}-foreign-{uuid.uuid4().hex[:8]}"
    container = sandbox._start(foreign_image.tag, name, sandbox._labels(**{"eval_pipeline.role": "pod"}), 1, NO_NETWORK)
    pod = EngineExec(container)
    fields = {**PLACEMENT, "timeout_s": 60}
    pid1_shared_objects = PARENT_SHARED_OBJECTS.replace("$PPID", "1")
    command = f"({foreign_image.identified_by}) >&2 && {PARENT_SHARED_OBJECTS} && echo === && {pid1_shared_objects}"
    answer = ExecPerRequest(pod).ask(RunRequest.from_fields({**fields, "command": command}), 90)
    assert answer["exit_code"] == 0, answer
    runner, reaper = answer["stdout"].split("===\n")
    for shared_objects in (runner, reaper):
        assert f"{TOOLS_ROOT}/lib/libc.so.6" in shared_objects.split(), shared_objects
        assert not not_the_runtimes(shared_objects), "the image's own libraries were loaded"
    tools, server = anyio.run(tool_server_shared_objects, pod)
    assert "run_command" in tools
    assert any("_pydantic_core" in path for path in server.split()), "the server's extension modules are loaded"
    assert not not_the_runtimes(server), "the image's own libraries were loaded into the tool server"


def test_every_shared_object_the_runtime_carries_finds_its_libraries_in_the_runtime(tmp_path):
    """The runtime's shared objects laid out as a container sees them: each of its ELF files (the interpreter,
    every extension module, every library), resolved by the runtime's own loader on the runtime's library path,
    finds every library it names inside the runtime, none on this machine (whose libraries an image lacks)."""
    root = tmp_path / "tools"
    with tarfile.open(fileobj=io.BytesIO(runtime_archive())) as archive:
        shared = [member for member in archive if ".so" in member.name or member.name == "python/bin/python3"]
        archive.extractall(root, members=shared, filter="tar")
    loader = root / "lib" / loader_name()
    objects = [root / "python/bin/python3", *(path for path in root.rglob("*.so*") if path.is_file())]
    assert loader in objects and root / "lib/libc.so.6" in objects
    outside = {}
    for path in objects:
        listing = [str(loader), "--inhibit-cache", "--library-path", str(root / "lib"), "--list", str(path)]
        listed = subprocess.run(listing, capture_output=True, text=True, env={})
        resolved = [line.split(" => ")[1].split(" (")[0] for line in listed.stdout.splitlines() if " => " in line]
        outside[path.name] = [found for found in resolved if not found.startswith(f"{root}/")]
    assert not {name: found for name, found in outside.items() if found}


def test_the_runtime_is_another_when_a_library_it_carries_changes(monkeypatch, tmp_path):
    """The runtime's identity (the tool volume's and the tools image's name) follows the libraries it carries:
    a library that an upgrade of this machine replaces makes another runtime, never a volume of the old one."""
    library = tmp_path / "libz.so.1"
    library.write_bytes(b"z")
    monkeypatch.setattr(tool_runtime, "shared_libraries", lambda: ((library, "lib/libz.so.1"),))
    before = runtime_identity.__wrapped__()
    library.write_bytes(b"z, upgraded")
    assert runtime_identity.__wrapped__() != before


@pytest.mark.slow
def test_a_terminal_task_from_an_image_of_an_older_c_library_is_graded_in_its_container(
    tmp_path, container_sandbox, engine, monkeypatch, store
):
    """A terminal task whose Dockerfile is FROM debian:11 (its stand-in Debian bullseye: glibc 2.31, no Python)
    through the whole container backend: its image built, its pod's runner, the agent's and the verifier's
    commands, the files the harness reads back. The oracle's answer passes, the null agent's fails."""
    image = on_the_engine(engine, "debian-bullseye")
    monkeypatch.setenv("EVAL_PIPELINE_TASK_BASE_IMAGES", f"debian:11={image.tag}")
    task_dir = write_terminal_task(
        tmp_path / "tasks",
        "greet",
        'grep -qx "hello from $(. /etc/os-release && echo $VERSION_CODENAME)" /app/greeting.txt'
        " && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
        solve_sh='echo "hello from $(. /etc/os-release && echo $VERSION_CODENAME)" > /app/greeting.txt\n',
    )
    (task_dir / "environment" / "Dockerfile").write_text("FROM debian:11\nWORKDIR /app\n")
    tasks = load_terminal_tasks(tmp_path / "tasks", tmp_path / "mirrors")
    task = tasks.instance("greet")
    sandbox = container_sandbox(mode="pod")
    environment = sandbox.prepare(task, tasks.environment_for(task), tasks.source)
    for agent, expected in (("oracle", Outcome.RESOLVED), ("null", Outcome.UNRESOLVED)):
        generation = generate(task, make_agent(agent), 0, environment, sandbox, store, test_timeout_s=30)
        verdict = evaluate(task, tasks.environment_for(task), generation, environment, sandbox, store, 30)
        assert verdict.outcome == expected, (agent, verdict.detail)


def test_every_harness_command_line_starts_a_program_of_the_runtime_and_sets_no_variable():
    """What the runtime does not carry an image may lack: no harness command line starts `/usr/bin/env` or any
    program but the runtime's loader, and the tool server needs no variable (an exec on Kubernetes takes none)."""
    runtime = ToolRuntime()
    loader = f"{TOOLS_ROOT}/lib/{loader_name()}"
    for argv in (runtime.python("-c", "pass"), runtime.runner("--reap"), runtime.argv):
        assert argv[0] == loader and all(word.startswith((f"{TOOLS_ROOT}/", "-")) for word in argv[:7]), argv
    assert runtime.env == {}
