"""The local sandbox: one environment per instance, isolated workspaces, enforced limits."""

import json
import os
import resource
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from eval_pipeline.common.git import git
from eval_pipeline.common.outcomes import ImageBuildFailed
from eval_pipeline.common.settings import DeploymentError
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings, local
from eval_pipeline.sandbox.base import RunnerEnded
from eval_pipeline.sandbox.interpreters import UPGRADE_PIP
from eval_pipeline.sandbox.local import LocalSandbox, missing_system_packages
from eval_pipeline.sandbox.runner.entry import DIRECTORY as RUNNER
from eval_pipeline.sandbox.runner.processes import become_signaller, signal_all_of
from eval_pipeline.sandbox.runner.quota import INODE_CHARGE, allocated_bytes
from eval_pipeline.sandbox.runner.read_back import read_back
from eval_pipeline.sandbox.runner.request import Quota, RunRequest
from eval_pipeline.sandbox.runner.run import run_limited
from eval_pipeline.tasks.environment import EnvironmentSpec


@pytest.fixture
def instance(demo_benchmark):
    return demo_benchmark.instances[0]


@pytest.fixture
def environment(prepare, instance):
    return prepare(instance)


def test_environment_is_prepared_once_at_the_base_commit(prepare, instance, environment):
    ready = os.path.join(environment.location, ".ready")
    built_at = os.stat(ready).st_mtime_ns
    again = prepare(instance)
    assert again == environment
    assert os.stat(ready).st_mtime_ns == built_at
    repo = os.path.join(environment.location, "repo")
    assert git(["rev-parse", "HEAD"], repo).strip() == instance.base_commit
    assert git(["remote"], repo).strip() == "", "the agent must not be able to fetch upstream"


def test_a_half_built_environment_is_rebuilt(tmp_path, prepare, instance):
    sandbox = LocalSandbox(tmp_path, ResourceLimits(), SandboxSettings(), "test")
    handle = prepare(instance, sandbox)
    os.remove(os.path.join(handle.location, ".ready"))
    os.remove(os.path.join(handle.location, "repo", "README.md"))
    prepare(instance, sandbox)
    assert os.path.exists(os.path.join(handle.location, "repo", "README.md"))


def test_workspaces_are_isolated_from_each_other_and_the_environment(shared_sandbox, environment):
    with shared_sandbox.workspace(environment, "a") as first, shared_sandbox.workspace(environment, "b") as second:
        assert first.run("echo agent-a > README.md && rm -r tests", timeout_s=10).ok
        assert second.run("cat README.md && ls tests", timeout_s=10).stdout.startswith("# calclib")
        first_root = first.root
    assert not first_root.exists(), "workspaces are removed after use"
    repo = os.path.join(environment.location, "repo")
    assert git(["status", "--porcelain"], repo) == ""


def test_each_trial_sees_its_own_workspace_at_the_environment_s_path(shared_sandbox, environment):
    """What the environment installed points at its repository: there, each trial finds its own files."""
    repo = os.path.join(environment.location, "repo")
    with shared_sandbox.workspace(environment, "a") as first, shared_sandbox.workspace(environment, "b") as second:
        assert first.run(f"echo patched-a > {repo}/README.md && pwd", timeout_s=10).stdout.strip() == repo
        assert second.run(f"echo patched-b > {repo}/README.md", timeout_s=10).ok
        assert first.run(f"cat {repo}/README.md", timeout_s=10).stdout == "patched-a\n"
        assert second.run("cat README.md", timeout_s=10).stdout == "patched-b\n"
        assert (first.repo / "README.md").read_text() == "patched-a\n"
    assert git(["status", "--porcelain"], repo) == "", "the environment itself is untouched"


def test_a_trial_has_no_network_but_its_own_loopback(shared_sandbox, environment):
    probe = (
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; python -c 'import socket; s = socket.socket(); "
        's.bind(("127.0.0.1", 0)); s.listen(); socket.create_connection(s.getsockname()); print("loopback works")\''
    )
    with shared_sandbox.workspace(environment, "offline") as workspace:
        assert workspace.run(probe, timeout_s=30).stdout.splitlines() == ["lo", "loopback works"]
    with pytest.raises(ValueError, match="no variant opted in"):
        with shared_sandbox.workspace(environment, "online", network=True):
            pass


def test_commands_run_in_the_environment_virtualenv_and_only_see_its_packages(shared_sandbox, environment):
    with shared_sandbox.workspace(environment, "venv") as workspace:
        result = workspace.run("python -c 'import sys, pytest; print(sys.prefix)'", timeout_s=30)
        harness_only = workspace.run("python -c 'import dagster'", timeout_s=30)
        # The lent pytest comes with its metadata: pluggy 1.7 and pytest read their versions from it.
        metadata = workspace.run(
            'python -c \'import importlib.metadata as m; print(m.version("pluggy"), m.version("pytest"))\'',
            timeout_s=30,
        )
    assert result.ok, result.stderr
    assert result.stdout.strip() == os.path.join(environment.location, "python")
    assert not harness_only.ok, "the harness's packages are not the environment's"
    assert metadata.ok, metadata.stderr


def test_an_environment_of_a_named_python_is_a_whole_installation_that_keeps_its_packages_through_a_link(
    tmp_path, demo_benchmark, instance
):
    """tox-current-env (sphinx's SWE-bench test command) links `.tox/py39/bin/python` to `sys.executable` and
    runs the tests through that link: a virtualenv's interpreter reached so has none of the virtualenv's
    packages; an installation of the environment's own keeps them. It holds none of the machine's packages."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    spec = EnvironmentSpec(python=version, packages=("iniconfig==2.0.0",))
    sandbox = LocalSandbox(tmp_path / "sb", ResourceLimits(), SandboxSettings(), "own-python")
    environment = sandbox.prepare(instance, spec, demo_benchmark.source)
    with sandbox.workspace(environment, "link") as workspace:
        linked = workspace.run(
            "mkdir -p .tox/py/bin && ln -s \"$(python -c 'import sys; print(sys.executable)')\" .tox/py/bin/python"
            " && .tox/py/bin/python -c 'import sys, iniconfig; print(sys.prefix)'",
            timeout_s=60,
        )
        machine = workspace.run("python -c 'import dagster'", timeout_s=60)
    assert linked.ok, linked.stderr
    assert linked.stdout.strip() == os.path.join(environment.location, "python")
    assert not (Path(environment.location) / "python" / "pyvenv.cfg").exists(), "not a virtualenv"
    assert not machine.ok, "the machine's installed packages are not the environment's"


def test_install_steps_take_package_specifiers_as_single_arguments(tmp_path, instance):
    spec = EnvironmentSpec(packages=("numpy<2", "pytest>=8.3"), install=("python -m pip install -e .",))
    commands = LocalSandbox._install_commands(instance, spec, tmp_path)
    assert commands[0] == UPGRADE_PIP, "the venv's own pip may be too old for today's wheels (Python 3.6's)"
    assert shlex.split(commands[1]) == ["python", "-m", "pip", "install", "numpy<2", "pytest>=8.3"]
    assert commands[2] == "python -m pip install -e ."


def test_an_environment_whose_python_this_machine_lacks_fails_naming_the_version(tmp_path, demo_benchmark, instance):
    sandbox = LocalSandbox(tmp_path, ResourceLimits(), SandboxSettings(), "test")
    with pytest.raises(ImageBuildFailed, match="needs Python 3.4"):
        sandbox.prepare(instance, EnvironmentSpec(python="3.4"), demo_benchmark.source)


def test_timeout_kills_the_whole_process_group(shared_sandbox, environment, tmp_path):
    marker = tmp_path / "survivor"
    with shared_sandbox.workspace(environment, "timeout") as workspace:
        started = time.monotonic()
        result = workspace.run(f"(sleep 2; touch {marker}) & sleep 30", timeout_s=0.5)
    assert result.timed_out and not result.ok
    assert time.monotonic() - started < 15, "killed at its timeout, not after its sleep"
    time.sleep(2.5)
    assert not marker.exists(), "a background child outlived the timeout"


def running(tag: str) -> list[int]:
    """The live (not zombie) processes whose command line holds `tag`."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline, open(f"/proc/{entry}/stat") as stat:
                if tag.encode() in cmdline.read() and stat.read().rpartition(")")[2].split()[0] != "Z":
                    pids.append(int(entry))
        except (OSError, ValueError):
            continue
    return pids


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="a trial's uid is given by root")
def test_a_setsid_process_escapes_its_process_group_but_not_its_trial_s_uid():
    """What a pod's trial could leave running: killing the command's group misses a new session (the attack,
    as on the local backend, with no uid), ending every process of the trial's uid does not (pods)."""
    for uid in (None, 54321):
        tag = f"{60 + (uid or 0) / 1e6:.6f}"
        # The command outlasts the background's setsid (3 s): killed before it, the group would take it along.
        command = f"setsid sleep {tag} </dev/null >/dev/null 2>&1 & sleep 3"
        run_limited(RunRequest(command, "/", {"PATH": os.defpath}, 10, 1000, uid=uid))
        deadline = time.monotonic() + 10  # a SIGKILL is delivered at once; the exit takes a moment
        while (survivors := running(tag)) and uid is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in survivors:
            os.kill(pid, 9)
        assert bool(survivors) == (uid is None), f"uid {uid}: {survivors}"


def test_output_is_capped_and_drained(tmp_path, prepare, instance):
    sandbox = LocalSandbox(tmp_path, ResourceLimits(output_bytes=1000), SandboxSettings(), "test")
    environment = prepare(instance, sandbox)
    with sandbox.workspace(environment, "output") as workspace:
        result = workspace.run("head -c 50000000 /dev/zero | tr '\\0' x", timeout_s=30)
    assert result.ok
    assert len(result.stdout) == 1000 and result.output_truncated


def test_memory_ceiling_kills_a_command_above_it_as_oom(tmp_path, prepare, instance):
    sandbox = LocalSandbox(
        tmp_path, ResourceLimits(memory_floor_mb=128, memory_ceiling_mb=300), SandboxSettings(), "test"
    )
    environment = prepare(instance, sandbox)
    with sandbox.workspace(environment, "memory") as workspace:
        small = workspace.run("python -c 'import time; x = bytearray(50 * 2**20); time.sleep(1.5)'", timeout_s=30)
        held = workspace.run("python -c 'import time; x = bytearray(600 * 2**20); time.sleep(20)'", timeout_s=30)
        # A child of the shell, not the shell itself: the whole process group is measured.
        child = workspace.run(
            'sh -c "python -c \'import time; x = b\\"y\\" * (400 * 2**20); time.sleep(20)\'"', timeout_s=30
        )
    assert small.ok and not small.oom_killed, small.stderr
    assert small.peak_memory_mb and small.peak_memory_mb >= 50
    for result in (held, child):
        assert result.oom_killed and not result.ok and not result.timed_out, result.summary()
        assert result.duration_s < 10, "killed when it passed the ceiling, not at the timeout"


def test_commands_are_the_oom_killers_first_choice(shared_sandbox, environment):
    """Under memory pressure the kernel kills a trial's command before the harness that reports on it; and a
    crashing command leaves no core file, whatever the harness's own limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
    try:
        with shared_sandbox.workspace(environment, "oom-score") as workspace:
            command = "cat /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'; ulimit -c"
            score = workspace.run(command, timeout_s=30)
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
    assert score.stdout.split() == ["1000", "1000", "0"], "the command and what it starts; and it dumps no core"


def test_cpu_ceiling_pins_commands_to_that_many_cores(tmp_path, prepare, instance):
    sandbox = LocalSandbox(tmp_path, ResourceLimits(cpu_floor=0.5, cpu_ceiling=1), SandboxSettings(), "test")
    environment = prepare(instance, sandbox)
    with sandbox.workspace(environment, "cpu") as workspace:
        result = workspace.run("python -c 'import os; print(len(os.sched_getaffinity(0)))'", timeout_s=30)
        cores = {workspace.run("grep Cpus_allowed_list /proc/self/status", timeout_s=30).stdout for _ in range(20)}
    assert result.stdout.strip() == "1"
    if len(os.sched_getaffinity(0)) > 1:
        assert len(cores) > 1, "commands spread over the cores (else every trial of a machine shares its first)"


def test_limits_are_recorded_requested_and_enforced(shared_sandbox):
    record = shared_sandbox.resources_record()
    assert record["backend"] == "local"
    assert record["requested"]["memory_ceiling_mb"] == 1024
    assert record["enforced"]["memory_ceiling_mb"] is True
    assert record["enforced"]["memory_floor_mb"] is False


def test_an_environment_whose_spec_needs_a_system_package_this_machine_lacks_is_refused_naming_it(
    tmp_path, demo_benchmark, instance
):
    """SWE-bench's sphinx 7.2 spec apt-installs graphviz; the local backend runs no system step, and without
    graphviz the row's graded tests skip, so every fix would fail: the environment is refused instead."""
    steps = ("apt-get update && apt-get install -y graphviz-not-a-package git", "locale-gen en_US.UTF-8")
    assert missing_system_packages(steps) == ["graphviz-not-a-package"], "git is installed here; locale-gen is no apt"
    sandbox = LocalSandbox(tmp_path, ResourceLimits(), SandboxSettings(), "test")
    spec = replace(demo_benchmark.environment_for(instance), image_install=steps)
    with pytest.raises(ImageBuildFailed, match=r"lacks graphviz-not-a-package: install them here .*container backend"):
        sandbox.prepare(instance, spec, demo_benchmark.source)


def test_an_opt_in_campaigns_trials_write_nowhere_but_their_workspace_and_share_no_environment(
    tmp_path, demo_benchmark, instance
):
    """The door: a `.pth` in the environment's virtualenv, written by an untrusted agent on the local backend,
    resolved every later trial with an empty patch, and a trusted campaign's after it. Now an opt-in campaign's
    commands find everything outside their workspace read-only (and /dev/shm their own), and its environments
    are never a trusted campaign's."""
    opted = LocalSandbox(tmp_path / "sb", ResourceLimits(), SandboxSettings(allow_untrusted_agents_locally=True), "o")
    trusted = LocalSandbox(tmp_path / "sb", ResourceLimits(), SandboxSettings(), "t")
    spec = demo_benchmark.environment_for(instance)
    assert opted.environment_key(instance, spec) != trusted.environment_key(instance, spec)
    environment = opted.prepare(instance, spec, demo_benchmark.source)
    if environment.details["trial_view"] == "copy":
        pytest.skip("this system refuses the mount namespace the walls take")
    site = next(Path(environment.location).glob("python/lib/python*/site-packages"))
    leak = f"eval-leak-{uuid.uuid4().hex[:8]}"
    elsewhere = [
        site / "zz_poison.pth",
        tmp_path / "sb" / "left-for-the-next-trial",
        Path("/tmp") / leak,
        *(point / leak for point in writable_mount_points()),  # /run, the engine's storage, any disk apart
    ]
    try:
        with opted.workspace(environment, "attacker") as workspace:
            written = workspace.run(
                " ; ".join(f"echo x > {shlex.quote(str(path))} && echo wrote {path}" for path in elsewhere)
                + f" ; echo mine > mine.txt && echo secret > /dev/shm/{leak}"
                f" && {{ [ ! -d /dev/mqueue ] || touch /dev/mqueue/{leak}; }} && echo wrote own",
                timeout_s=30,
            )
        assert "Read-only file system" in written.stderr and "wrote own" in written.stdout, written.summary()
        assert not [path for path in elsewhere if path.exists()], written.stdout
        assert not Path(f"/dev/shm/{leak}").exists() and not Path(f"/dev/mqueue/{leak}").exists()
    finally:
        for path in [*elsewhere, Path(f"/dev/shm/{leak}"), Path(f"/dev/mqueue/{leak}")]:
            path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def opted_in(tmp_path_factory, demo_benchmark):
    """An opt-in campaign's sandbox (untrusted agents on the local backend, walled) and the demo's first
    environment in it."""
    settings = SandboxSettings(allow_untrusted_agents_locally=True)
    sandbox = LocalSandbox(tmp_path_factory.mktemp("opted-in"), ResourceLimits(), settings, "opted-in")
    instance = demo_benchmark.instances[0]
    environment = sandbox.prepare(instance, demo_benchmark.environment_for(instance), demo_benchmark.source)
    if environment.details["trial_view"] == "copy":
        pytest.skip("this system refuses the mount namespace the walls take")
    return sandbox, environment


# Signals every process the attacker may (kill(-1)) with SIGURG, which no process dies of (nothing else on a
# machine the test runs on is harmed if a wall is missing), then SIGKILLs the harness's process by its pid and
# every process whose command line holds one of the tags, as it finds them in /proc, until its time is up.
_ATTACKER = """
import os, signal, sys, time

harness_pid, *tags = open(sys.argv[1]).read().split()
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    for target, number in ((-1, signal.SIGURG), (int(harness_pid), signal.SIGKILL)):
        try:
            os.kill(target, number)
        except OSError:
            pass
    for entry in (entry for entry in os.listdir("/proc") if entry.isdigit() and int(entry) != os.getpid()):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                words = cmdline.read()
            if any(tag.encode() in words for tag in tags):
                os.kill(int(entry), signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.05)
print("attacked")
"""

# A process that tells when a signal reaches it (`{told}`: SIGURG, which kill(-1) sends), then sleeps.
_SIGNALLED = (
    "import signal, time; signal.signal(signal.SIGURG, lambda *_: {told}); time.sleep({seconds}); print('done')"
)


def test_a_process_an_opt_in_command_leaves_reaches_nothing_outside_its_trial(opted_in, tmp_path):
    """The door: a process an untrusted agent leaves behind (setsid) ran as the harness's own user and killed the
    pytest launchers of its own grading, of the reference and of honest neighbours (all unscored); a user
    namespace does not stop it, since the kernel lets a process signal another of the same uid. The attack, as
    the command and as the process it leaves: kill(-1), a SIGKILL to the harness's process by its pid, and to
    every process it finds in /proc that is the harness's or a neighbour's (one started after the command
    ended). Each command has a pid namespace of its own with its own /proc, which ends with it: the harness's
    process and the neighbour's command are never reached, and nothing the command left outlives it."""
    sandbox, environment = opted_in
    harness_tag, neighbour_tag = (f"eval-{role}-{uuid.uuid4().hex[:8]}" for role in ("harness", "neighbour"))
    name = f"attack-{uuid.uuid4().hex[:8]}.py"
    reached = tmp_path / "harness-reached"
    told = f"open({str(reached)!r}, 'w').close()"
    harness = subprocess.Popen([sys.executable, "-c", _SIGNALLED.format(told=told, seconds=60), harness_tag])
    try:
        with sandbox.workspace(environment, "attacker") as attacker, sandbox.workspace(environment, "ok") as neighbour:
            (attacker.repo / name).write_text(_ATTACKER)
            (attacker.repo / "targets").write_text(f"{harness.pid} {harness_tag} {neighbour_tag}")
            attack = attacker.run(
                f"setsid python {name} targets 4 </dev/null >/dev/null 2>&1 & python {name} targets 0.5",
                timeout_s=30,
            )
            assert (attack.exit_code, attack.stdout) == (0, "attacked\n"), attack.summary()
            honest_code = _SIGNALLED.format(told="print('reached', flush=True)", seconds=2.5)
            honest = neighbour.run(f'python -c "{honest_code}" {neighbour_tag}', timeout_s=30)
        assert (honest.exit_code, honest.stdout) == (0, "done\n"), honest.summary()
        assert harness.poll() is None and not reached.exists(), "the harness's process was signalled"
        assert not running(name), "a process the command left outlived it"
    finally:
        harness.kill()
        for pid in running(name):
            os.kill(pid, signal.SIGKILL)


# Connects to each unix socket named on its command line, as a stream and as a packet socket (an engine's attach
# sockets), and says how that went; through its directory's descriptor, as conmon binds them (their paths are too
# long for a socket address).
_SOCKET_PROBE = """
import os, socket, sys

for path in sys.argv[1:]:
    outcomes = set()
    try:
        directory = os.open(os.path.dirname(path), os.O_PATH)
    except OSError as error:
        print(path, type(error).__name__)
        continue
    for kind in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET):
        try:
            socket.socket(socket.AF_UNIX, kind).connect(f"/proc/self/fd/{directory}/{os.path.basename(path)}")
            outcomes.add("reached")
        except OSError as error:
            outcomes.add(type(error).__name__)
    print(path, *sorted(outcomes))
"""

# An honest agent's habit: a server of its own on a unix socket in its own temporary directory, in the background,
# and a client talking to it.
_OWN_SERVER = """
import os, socket, sys, time

path = os.path.join(os.environ["TMPDIR"], "own.sock")
if sys.argv[1:] == ["serve"]:
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()
    connection, _ = server.accept()
    connection.sendall(connection.recv(100).upper())
else:
    for _ in range(100):
        try:
            client = socket.socket(socket.AF_UNIX)
            client.connect(path)
            break
        except OSError:
            time.sleep(0.05)
    client.sendall(b"own server")
    print(client.recv(100).decode())
"""


def test_an_opt_in_command_finds_the_host_s_unix_sockets_covered_and_its_own_server_works(opted_in, tmp_path):
    """The door: a unix socket on the host (the container engine's, a database's) answered a walled command, since
    a read-only mount does not refuse connect(); with the engine's, an agent had the engine bind-mount the
    directory above its workspace and wrote there. Every socket bound in the harness's network namespace is
    covered in the command's own view: the socket the test serves in /run refuses it, the one in /tmp is not
    even found (its /tmp is its own), while a server of the command's own, on a socket in its own temporary
    directory, still answers."""
    sandbox, environment = opted_in
    places = [tmp_path / "service.sock"]
    if os.access("/run", os.W_OK):
        places.append(Path("/run") / f"eval-test-{uuid.uuid4().hex[:8]}.sock")
    services = []
    try:
        for place in places:
            services.append(socket.socket(socket.AF_UNIX))
            services[-1].bind(str(place))
            services[-1].listen()
        with sandbox.workspace(environment, "sockets") as workspace:
            (workspace.repo / "probe.py").write_text(_SOCKET_PROBE)
            (workspace.repo / "own.py").write_text(_OWN_SERVER)
            paths = " ".join(shlex.quote(str(place)) for place in places)
            probed = workspace.run(f"python probe.py {paths}; python own.py serve & python own.py", timeout_s=60)
        hidden = [any(map(place.is_relative_to, local.PRIVATE_TMP)) for place in places]
        expected = [
            f"{place} {'FileNotFoundError' if own_tmp else 'ConnectionRefusedError'}"
            for place, own_tmp in zip(places, hidden, strict=True)
        ] + ["OWN SERVER"]
        assert probed.stdout.splitlines() == expected, probed.summary()
    finally:
        for service in services:
            service.close()
        for place in places:
            place.unlink(missing_ok=True)


@pytest.mark.slow
def test_an_opt_in_command_reaches_neither_the_container_engine_nor_its_containers(opted_in, engine):
    """The same door with the real engine: its API socket, and the attach socket of a running container (Podman's
    conmon binds it at `/proc/self/fd/<its directory>/attach`, and the container's stdin is behind it)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip(f"the engine is not behind a unix socket here ({host})")
    image = next((image for image in engine.images.list() if image.tags), None)
    if image is None:
        pytest.skip("the engine holds no image to start a container from")
    container = engine.containers.run(image.tags[0], ["sleep", "120"], detach=True, stdin_open=True)
    try:
        sockets = [host.removeprefix("unix://")]
        for storage in ("/var/lib/containers/storage", "/run/containers/storage"):
            sockets += map(str, Path(storage, "overlay-containers", container.id).glob("**/attach"))
        sandbox, environment = opted_in
        with sandbox.workspace(environment, "engine") as workspace:
            (workspace.repo / "probe.py").write_text(_SOCKET_PROBE)
            probed = workspace.run(f"python probe.py {shlex.join(sockets)}", timeout_s=60)
        assert probed.stdout.splitlines() == [f"{path} ConnectionRefusedError" for path in sockets], probed
    finally:
        container.remove(force=True)


def test_an_opt_in_campaign_is_refused_where_the_system_cannot_wall_its_commands(tmp_path, monkeypatch):
    """Where the system cannot give an untrusted agent's commands their walls (a pid namespace with its own /proc
    is refused under an engine's masked paths, user namespaces on hardened kernels), the opt-in is refused
    when the campaign's sandbox is made, in one line naming why and the way out; a trusted campaign runs."""
    settings = SandboxSettings(allow_untrusted_agents_locally=True)
    if reason := local.walls_unavailable():  # this system's own verdict
        with pytest.raises(DeploymentError) as refused:
            LocalSandbox(tmp_path / "sb", ResourceLimits(), settings, "opted-in")
        assert reason in str(refused.value)
    else:
        LocalSandbox(tmp_path / "sb", ResourceLimits(), settings, "opted-in")
    why = "cannot give the command its own view (own_pids): mounting a fresh /proc: [Errno 1] Operation not permitted"
    monkeypatch.setattr(local, "walls_unavailable", lambda: why)
    with pytest.raises(DeploymentError) as refused:
        LocalSandbox(tmp_path / "sb", ResourceLimits(), settings, "opted-in")
    assert str(refused.value) == (
        "sandbox.allow_untrusted_agents_locally: this system cannot wall an untrusted agent's commands in on the"
        f" local backend ({why}); use the container backend (sandbox: {{backend: container}})"
    )
    LocalSandbox(tmp_path / "sb", ResourceLimits(), SandboxSettings(), "trusted")


@pytest.mark.parametrize(
    ("untrusted", "views"), [(False, True), (True, True), (False, False)], ids=["trusted", "opt-in walls", "no views"]
)
def test_a_command_cannot_talk_to_the_runner_that_started_it(
    tmp_path, demo_benchmark, instance, untrusted, views, monkeypatch
):
    """The attack that knows the design: a trial's commands are started by a small runner process
    (sandbox/command_runner.py) that reads a JSON request per line on its stdin and answers on its stdout.
    Its command, a child of the same uid, writes through /proc/<its parent>/fd: a request without walls
    into the runner's stdin, and forged answers into its stdout, where the harness reads its next commands'
    (a test run's, say). The runner is not dumpable, so /proc refuses its descriptors to the command: each
    command's answer is its own. A command in a view is refused by its user namespace too; one on a system
    without views only by the runner's guard, and not as root, whose CAP_SYS_PTRACE no guard refuses. Behind
    the opt-in's walls its parent is its pid namespace's init, which holds none of the runner's descriptors."""
    settings = SandboxSettings(allow_untrusted_agents_locally=untrusted)
    sandbox = LocalSandbox(tmp_path / "sb", ResourceLimits(), settings, "runner")
    if not views:
        if os.geteuid() == 0:
            pytest.skip("a root command outside any namespace holds CAP_SYS_PTRACE: nothing here walls it off")
        monkeypatch.setattr(local, "views_unavailable", lambda: "refused here, for the test")
    environment = sandbox.prepare(instance, demo_benchmark.environment_for(instance), demo_benchmark.source)
    if views and environment.details["trial_view"] == "copy":
        pytest.skip("this system refuses the namespaces a command's view takes")
    escaped = tmp_path / "escaped"
    request = {"command": f"touch {escaped}", "cwd": "/", "env": {}, "timeout_s": 10, "output_bytes": 100}
    forged = {"command": "", "exit_code": 0, "stdout": "forged", "stderr": "", "duration_s": 0.1, "timed_out": False}
    forged |= {"output_truncated": False, "peak_memory_mb": None, "oom_killed": False, "storage_exceeded": False}
    lines = {0: json.dumps(request), 1: json.dumps({"result": forged})}
    attack = " ; ".join(
        f"printf '%s\\n' {shlex.quote(line)} {shlex.quote(line)} > /proc/$PPID/fd/{fd}" for fd, line in lines.items()
    )
    with sandbox.workspace(environment, "attacker") as workspace:
        sent = workspace.run(f"{attack} ; echo attacked", timeout_s=30)
        after = [workspace.run(f"echo mine-{n}", timeout_s=30).stdout for n in range(3)]
    assert sent.stdout == "attacked\n" and sent.stderr.count("cannot create /proc/") == 2, sent.summary()
    assert after == ["mine-0\n", "mine-1\n", "mine-2\n"] and not escaped.exists()


def test_a_command_that_kills_its_runner_ends_it_alone_and_the_next_command_gets_another(shared_sandbox, environment):
    """`kill -9 $PPID` from a trial's command ends the runner that started it (sandbox/command_runner.py), not
    the harness: RunnerEnded, which generation scores against the agent while the environment still serves a
    fresh workspace (trial/generation.py), as on the container backend."""
    with shared_sandbox.workspace(environment, "runner-killer") as workspace:
        with pytest.raises(RunnerEnded, match="the command runner .* ended"):
            workspace.run("kill -9 $PPID; sleep 5", timeout_s=30)
        assert workspace.run("echo served", timeout_s=30).stdout == "served\n"


def writable_mount_points() -> list[Path]:
    """This machine's writable mounts other than its kernel interfaces and devices (each a separate file system
    a walled command must not write to, whatever the root's walls)."""
    points = {Path(line.split()[4]) for line in Path("/proc/self/mountinfo").read_text().splitlines()}
    return sorted(
        point
        for point in points
        if point.parts[1:2] not in (("proc",), ("sys",), ("dev",))
        and point.is_dir()
        and os.access(point, os.W_OK)
        and not os.statvfs(point).f_flag & os.ST_RDONLY
    )


def test_a_command_past_its_disk_quota_is_ended_and_a_neighbours_writes_never_count(tmp_path):
    """The free space falling is only the trigger: a walk of the trial's own paths judges, so writes elsewhere
    on the same disk (another trial's) end nothing, and the trial's own end its command within the quota's reach."""
    mine, neighbour = tmp_path / "mine", tmp_path / "neighbour"
    mine.mkdir()
    neighbour.mkdir()
    quota = Quota((str(mine),), 8 * 2**20)
    write = "python3 -c \"import os,time\nfor i in range(32): open(f'{}/f{{i}}', 'wb').write(os.urandom(2**20)); time.sleep(0.01)\""
    elsewhere = run_limited(RunRequest(write.format(neighbour), str(tmp_path), {}, 60, 10_000, storage=quota))
    assert elsewhere["exit_code"] == 0 and not elsewhere["storage_exceeded"]
    filled = run_limited(RunRequest(write.format(mine), str(tmp_path), {}, 60, 10_000, storage=quota))
    assert filled["storage_exceeded"] and filled["exit_code"] == -9
    assert allocated_bytes([str(mine)]) < 16 * 2**20, "stopped within a few samples of its quota"
    again = run_limited(RunRequest("true", str(tmp_path), {}, 60, 10_000, storage=quota))
    assert again["storage_exceeded"], "a quota already spent ends the next command too"


def test_the_room_a_command_leaves_carries_to_the_next_and_never_past_the_quota(tmp_path):
    """The state spares the next command its walk; a trial writing 6 MiB a command under an 8 MiB quota is
    still stopped in its second command."""
    mine = tmp_path / "mine"
    mine.mkdir()
    quota = Quota((str(mine),), 8 * 2**20, str(tmp_path / "quota.json"))
    write = "python3 -c \"import os\nfor i in range(6): open(f'{}-{{i}}', 'wb').write(os.urandom(2**20))\""
    first = run_limited(RunRequest(write.format(mine / "a"), str(tmp_path), {}, 60, 10_000, storage=quota))
    assert first["exit_code"] == 0 and not first["storage_exceeded"]
    second = run_limited(RunRequest(write.format(mine / "b"), str(tmp_path), {}, 60, 10_000, storage=quota))
    assert second["storage_exceeded"], "judged when it ended, had it ended before a sample"


def test_space_a_neighbour_frees_meanwhile_does_not_hide_what_a_command_writes(tmp_path):
    """Free space is one trigger of the walk; a neighbour freeing more than the command writes (a finished
    trial's workspace removed, in a pod) hid the writes from it, at every sample and when the room was carried
    to the next command. What the command's processes wrote is the other trigger."""
    mine, neighbour = tmp_path / "mine", tmp_path / "neighbour.bin"
    mine.mkdir()
    neighbour.write_bytes(os.urandom(64 * 2**20))
    quota = Quota((str(mine),), 8 * 2**20, str(tmp_path / "quota.json"))
    write = "python3 -c \"import os\nfor i in range(6): open(f'{}-{{i}}', 'wb').write(os.urandom(2**20))\""
    first = run_limited(RunRequest(write.format(mine / "a"), str(tmp_path), {}, 60, 10_000, storage=quota))
    assert first["exit_code"] == 0 and not first["storage_exceeded"]
    second = run_limited(
        RunRequest(f"rm {neighbour} && " + write.format(mine / "b"), str(tmp_path), {}, 60, 10_000, storage=quota)
    )
    assert second["storage_exceeded"], second


def test_millions_of_empty_files_count_against_the_quota(tmp_path):
    """Empty files take no block but an inode each, which a disk has a fixed number of: each is charged."""
    mine = tmp_path / "mine"
    mine.mkdir()
    quota = Quota((str(mine),), 1000 * INODE_CHARGE)
    touched = run_limited(
        RunRequest(
            "python3 -c \"import os\nfor i in range(5000): open(f'e{i}', 'w').close()\"",
            str(mine),
            {},
            60,
            10_000,
            storage=quota,
        )
    )
    assert touched["storage_exceeded"], touched


def test_every_name_is_charged_and_no_tree_is_too_deep_to_walk(tmp_path):
    """Hard links cost no blocks but each is a name a walk must visit (charged, so a walk's length is bounded by
    the quota); a tree thousands of directories deep ended the walk in a RecursionError, or past the length a
    path can have, in an OSError: either turned the quota off. Too deep to name is charged past any quota."""
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "one").write_bytes(b"x")
    for number in range(2000):
        os.link(linked / "one", linked / f"link{number}")
    assert allocated_bytes([str(linked)]) >= 2001 * INODE_CHARGE
    assert allocated_bytes([str(linked)], stop_above=10 * INODE_CHARGE) > 10 * INODE_CHARGE, "stopped past the bound"
    deep, deeper = tmp_path / "deep", tmp_path / "deeper"
    nest(deep, 1200)
    assert 1200 * INODE_CHARGE <= allocated_bytes([str(deep)]) < 2**40
    nest(deeper, 2500)  # "/d" 2,500 times is longer than any path (4,096 bytes)
    try:
        assert allocated_bytes([str(deeper)]) >= 2**62
    finally:
        for top in (deep, deeper):  # shutil.rmtree (pytest's cleanup) recurses, and too deep for it
            unnest(top)


def nest(top: Path, depth: int) -> None:
    """`depth` directories, each inside the last, made relative to the one above (as a trial could)."""
    top.mkdir()
    descriptor = os.open(top, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=descriptor)
        inner = os.open("d", os.O_RDONLY, dir_fd=descriptor)
        os.close(descriptor)
        descriptor = inner
    os.close(descriptor)


def unnest(top: Path) -> None:
    """Remove what `nest` made, a level at a time from the top: each `d` is replaced by its child."""
    while (top / "d").exists():
        if (top / "d" / "d").exists():
            os.rename(top / "d" / "d", top / "up")
            os.rmdir(top / "d")
            os.rename(top / "up", top / "d")
        else:
            os.rmdir(top / "d")


def test_a_workspace_too_deep_for_shutil_is_still_removed(shared_sandbox, environment):
    with shared_sandbox.workspace(environment, "deep") as workspace:
        nested = "python3 -c \"import os\nfor _ in range(2500): os.mkdir('d'); os.chdir('d')\""
        made = workspace.run(nested, timeout_s=60)
        assert made.exit_code == 0, made.summary()
        root = workspace.root
    assert not root.exists()


def test_a_data_directory_below_a_pytest_configuration_is_refused_naming_it(tmp_path):
    """pytest reads the first configuration above a repository that has none of its own: a workspace below a
    project's pyproject.toml was graded with that project's addopts (every code trial a grading error, seen
    with the data directory inside a clone of this repository). A pyproject.toml without pytest's section, as
    most repositories' parents have, is not one."""
    settings = SandboxSettings.from_mapping({})
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "pyproject.toml").write_text('[project]\nname = "x"\n')
    LocalSandbox(plain / "data" / "sandboxes" / "local", ResourceLimits(), settings, "c")
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "--numprocesses=2"\n')
    with pytest.raises(DeploymentError, match=f"EVAL_PIPELINE_DATA_DIR: .*below {project / 'pyproject.toml'}"):
        LocalSandbox(project / "data" / "sandboxes" / "local", ResourceLimits(), settings, "c")
    (tmp_path / "tox.ini").write_text("[pytest]\n")
    with pytest.raises(DeploymentError, match="tox.ini"):
        LocalSandbox(plain / "data" / "sandboxes" / "local", ResourceLimits(), settings, "c")


def test_a_file_read_back_with_a_commands_answer_is_a_regular_file_at_its_own_path(tmp_path):
    """What the runner reads back as root after a command (`read_back`), where the command (an agent, root in a
    terminal task's container) chose what lies there: only a regular file at the path itself is read. A link to it,
    a directory on the way that is a link, a directory, a FIFO (a plain open would wait for a writer) and a device
    are no file; a file over the cap is told apart (False), an empty one is empty."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "reward.txt").write_text("1")
    (tmp_path / "empty").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "real" / "reward.txt")
    (tmp_path / "up").symlink_to(tmp_path / "real")
    (tmp_path / "directory").mkdir()
    os.mkfifo(tmp_path / "fifo")
    read = {name: read_back(str(tmp_path / name), 4) for name in ("real/reward.txt", "empty", "link", "up/reward.txt")}
    assert read == {"real/reward.txt": "MQ==", "empty": "", "link": None, "up/reward.txt": None}
    assert [read_back(str(tmp_path / name), 4) for name in ("directory", "fifo", "absent")] == [None] * 3
    assert read_back("/dev/zero", 4) is None
    (tmp_path / "big").write_bytes(b"12345")
    assert read_back(str(tmp_path / "big"), 4) is False and read_back(str(tmp_path / "big"), 5) == "MTIzNDU="
    answer = run_limited(
        RunRequest(
            f"echo 0 > {tmp_path}/real/reward.txt",
            str(tmp_path),
            {},
            30,
            1000,
            read_after=(str(tmp_path / "real" / "reward.txt"), str(tmp_path / "link")),
            read_cap=4,
        )
    )
    assert answer["files"] == {str(tmp_path / "real" / "reward.txt"): "MAo=", str(tmp_path / "link"): None}


def test_a_session_runner_answers_each_request_by_its_id_and_a_child_killed_or_stopped_as_ended(tmp_path):
    """The runner's `--session` (a container workspace's one runner): each request answered in turn, numbered;
    a command that kills or stops the child answering it (as a terminal agent, root, may) is answered for as
    `runner_ended`, never half an answer or a session held for ever; the next request is served."""
    session = subprocess.Popen(
        [sys.executable, RUNNER, "--session"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    base = {"cwd": str(tmp_path), "env": {}, "timeout_s": 30, "output_bytes": 10_000_000}

    def ask(number: int, command: str) -> dict:
        session.stdin.write(json.dumps({"id": number, "request": {**base, "command": command}}) + "\n")
        session.stdin.flush()
        return json.loads(session.stdout.readline())

    try:
        assert json.loads(session.stdout.readline()) == {"id": 0, "pid": session.pid}  # where it can be found stopped
        first = ask(1, "echo one")
        assert (first["id"], first["stdout"], first["exit_code"]) == (1, "one\n", 0)
        assert ask(2, "kill -9 $PPID") == {"id": 2, "runner_ended": f"wait status {signal.SIGKILL}"}
        assert ask(3, "kill -STOP $PPID; sleep 5") == {"id": 3, "runner_ended": "stopped"}
        big = ask(4, "head -c 3000000 /dev/zero | tr '\\0' x")
        assert big["id"] == 4 and len(big["stdout"]) == 3_000_000
        assert ask(5, "echo five")["stdout"] == "five\n"
    finally:
        session.stdin.close()
        assert session.wait(timeout=30) == 0


# Far above any uid a container's trial gets (rootful engines share the host's uids): the attacker's kill(-1)
# reaches no other test's trial.
_HOST_TRIAL_UID = 2_900_000


@pytest.mark.skipif(os.geteuid() != 0, reason="taking a uid's credentials needs root")
def test_a_uid_can_neither_kill_nor_stop_the_process_that_signals_its_processes():
    """The signaller's credentials (`become_signaller`), as a trial that knows them attacks them: a process of
    the trial's uid sends SIGKILL to the signaller's pid and SIGSTOP to every process it may (kill(-1)), and
    the signaller runs on; `signal_all_of` still ends the uid's processes."""
    held = os.fork()
    if held == 0:  # a signaller held in place, as one is while a walk runs
        try:
            become_signaller(_HOST_TRIAL_UID)
            time.sleep(60)
        finally:
            os._exit(0)
    victim = subprocess.Popen(["sleep", "60"], user=_HOST_TRIAL_UID, group=_HOST_TRIAL_UID, cwd="/")
    try:
        attack = f"kill -KILL {held} 2>/dev/null && echo reached || echo refused; kill -STOP -1"
        attacker = subprocess.run(
            ["sh", "-c", attack], user=_HOST_TRIAL_UID, group=_HOST_TRIAL_UID, cwd="/", capture_output=True, text=True
        )
        assert attacker.stdout.strip() == "refused", attacker
        state = Path(f"/proc/{held}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state in "RS", f"the signaller is {state!r}, not running or sleeping"
        signal_all_of(_HOST_TRIAL_UID, signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
    finally:
        victim.kill()
        os.kill(held, signal.SIGKILL)
        os.waitpid(held, 0)
