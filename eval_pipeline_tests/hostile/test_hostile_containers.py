"""Hostile agents in real containers: each is contained by the pod's isolation and limits, nothing else harmed."""

import shlex
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from eval_pipeline.agents import make_agent
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.sandbox import ResourceLimits
from eval_pipeline.trial.generation import generate
from eval_pipeline_tests.support.trials import prepare_on


@pytest.fixture
def pod(container_sandbox, demo_benchmark):
    sandbox = container_sandbox(limits=ResourceLimits(memory_floor_mb=64, memory_ceiling_mb=256, pids=128))
    instance = demo_benchmark.instances[0]
    return sandbox, instance, prepare_on(sandbox, demo_benchmark, instance)


def pod_with_quota(container_sandbox, demo_benchmark, storage_mb: int):
    """A pod for the demo's first instance whose trials each have `storage_mb` of disk."""
    sandbox = container_sandbox(limits=ResourceLimits(storage_mb=storage_mb))
    instance = demo_benchmark.instances[0]
    return sandbox, instance, prepare_on(sandbox, demo_benchmark, instance)


def run_agent(pod, store, command: str, timeout_s: float = 60):
    sandbox, instance, environment = pod
    agent = make_agent("command", {"command": command, "timeout_s": timeout_s})
    return generate(instance, agent, 0, environment, sandbox, store)


def still_works(pod) -> None:
    """The pod and its shared environment are unharmed: a fresh workspace runs, /testbed is clean."""
    sandbox, _, environment = pod
    with sandbox.workspace(environment, "after") as workspace:
        assert workspace.run("git status --porcelain && echo fine", timeout_s=30).stdout.strip() == "fine"
        assert workspace.run("ls /evil* 2>/dev/null | wc -l", timeout_s=30).stdout.strip() == "0"
    assert workspace.container.exec_run(["git", "-C", "/testbed", "status", "--porcelain"]).output == b""


def test_an_agent_writing_outside_its_workspace_harms_nothing(pod, store):
    command = (
        "echo x > /testbed/evil; echo x >> /opt/eval/tools/runner/run.py; echo x > /evil; "
        "mkdir -p /workspaces/slot1 && echo x > /workspaces/slot1/evil; echo x > README.md; true"
    )
    generation = run_agent(pod, store, command)
    assert generation.status == "completed"
    stderr = generation.trajectory[0]["stderr_tail"]
    assert stderr.count("Permission denied") >= 3, stderr
    assert "README.md" in generation.patch, "its own workspace is its to change"
    still_works(pod)


def test_a_fork_bomb_is_contained_by_the_pids_limit_and_the_time_limit(pod, store):
    # The agent's shell forks once, before any bomb, then becomes `sleep` (exec forks nothing): a fork of its own
    # after the bomb filled the pids limit would fail, ending the shell (dash exits on a failed fork) before its
    # time limit, which on a loaded machine the bomb sometimes won.
    command = "bomb() { bomb | bomb & }; (sleep 0.5; bomb) & exec sleep 60"
    generation = run_agent(pod, store, command, timeout_s=5)
    assert generation.status == Outcome.AGENT_TIMEOUT, generation.trajectory
    still_works(pod)


def test_gigabytes_of_output_are_capped_inside_the_container(pod, store):
    generation = run_agent(pod, store, "head -c 2000000000 /dev/zero; echo done >&2")
    assert generation.status == "completed"
    step = generation.trajectory[0]
    assert step["output_truncated"] is True and step["exit_code"] == 0
    assert len(step["stdout_tail"]) <= 2000
    still_works(pod)


def uids_running(container) -> set[int]:
    """The real uid of every process in the container, read by root from /proc."""
    listing = container.exec_run(["sh", "-c", "grep -h '^Uid:' /proc/[0-9]*/status 2>/dev/null | cut -f2"])
    return {int(uid) for uid in listing.output.split()}


def files_of(container, uid: int) -> list[str]:
    found = container.exec_run(["find", "/tmp", "/var/tmp", "/dev/shm", "-user", str(uid)])
    return found.output.decode().split()


# Leaves a process in a session of its own (out of the command's process group), polling for the harness
# files of whatever trial comes next, and files in every world-writable place.
LINGER = (
    "setsid sh -c 'while :; do cat /workspaces/*/harness/*.patch >> /tmp/loot; sleep 0.2; done' "
    "</dev/null >/dev/null 2>&1 & "
    "for place in /tmp /var/tmp /dev/shm; do mkdir -p $place/left/deep && echo x > $place/left/deep/f; done"
)


def test_a_process_a_trial_leaves_behind_ends_with_its_command_and_its_files_with_the_trial(pod, engine):
    sandbox, _, environment = pod
    with sandbox.workspace(environment, "first") as first:
        assert first.run(LINGER, timeout_s=30).ok
        container, uid = first.container, first.uid
        assert uid not in uids_running(container), "the setsid process ended with the command"
        own = f"{first.root}/tmp/left/deep/f"  # what it saw as /tmp, /var/tmp and /dev/shm is its own tmp
        assert container.exec_run(["test", "-f", own]).exit_code == 0, "its files stay while the trial lasts"
        assert files_of(container, uid) == [], "none in the pod's own /tmp, /var/tmp or /dev/shm"
    assert container.exec_run(["test", "-e", own]).exit_code != 0, "the trial's files went with it"
    with sandbox.workspace(environment, "second") as second:
        assert second.root == "/workspaces/slot0" and second.uid != uid, "the same slot, another uid"
        assert second.run("ls /tmp/loot /tmp/left", timeout_s=30).exit_code != 0
    still_works(pod)


def test_a_trial_sees_no_secret_workspace_or_harness_file_of_a_trial_running_beside_it(
    container_sandbox, demo_benchmark, store, monkeypatch
):
    sandbox = container_sandbox(limits=ResourceLimits(memory_floor_mb=64, memory_ceiling_mb=256), pod_parallelism=2)
    instance = demo_benchmark.instances[0]
    environment = prepare_on(sandbox, demo_benchmark, instance)
    secret = f"sk-{uuid.uuid4().hex}"
    monkeypatch.setenv("EVAL_TEST_API_KEY", secret)
    agent = make_agent(
        "command",
        {
            # Running until the test has spied (a sleep could end first on a loaded machine).
            "command": 'test -n "$EVAL_TEST_API_KEY" && until [ -e spied ]; do sleep 0.1; done',
            "pass_env": ["EVAL_TEST_API_KEY"],
            "timeout_s": 120,
        },
    )
    with ThreadPoolExecutor(1) as pool:
        generation = pool.submit(generate, instance, agent, 0, environment, sandbox, store)
        pod = sandbox.client.containers.get(environment.location)
        environs = ["sh", "-c", "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'"]
        deadline = time.monotonic() + 30
        while secret not in pod.exec_run(environs).output.decode():  # root sees it: the agent has it
            assert time.monotonic() < deadline and not generation.done(), "the agent never got its secret"
            time.sleep(0.2)
        with sandbox.workspace(environment, "spy") as spy:
            (other,) = {"/workspaces/slot0", "/workspaces/slot1"} - {spy.root}
            everything = spy.run(
                "for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do cat $f; echo; done 2>/dev/null | tr '\\0' ' '",
                timeout_s=30,
            ).stdout
            peek = spy.run(
                f"ls {other}; cat {other}/harness/instruction.md {other}/repo/README.md; ls /workspaces", timeout_s=30
            )
        pod.exec_run(["touch", f"{other}/repo/spied"])
        assert "until [ -e spied ]" in everything, "the spy reads other processes' command lines, as any uid can"
        assert secret not in everything, "but no secret is in one, and no other uid's environment is readable"
        assert peek.stdout == "" and peek.stderr.count("Permission denied") == 4, peek.stderr
        assert generation.result().trajectory[0]["exit_code"] == 0


NETWORK_PROBE = (
    "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; python3 -c 'import socket; s = socket.socket(); "
    's.bind(("127.0.0.1", 0)); s.listen(); socket.create_connection(s.getsockname()); print("loopback works")\''
)


def interfaces(workspace) -> list[str]:
    lines = workspace.run(NETWORK_PROBE, timeout_s=30).stdout.split("\n")
    assert "loopback works" in lines, "a trial's own servers on localhost work with or without network"
    return sorted(line for line in lines if line and line != "loopback works")


@pytest.mark.parametrize("mode", ["pod", "strict"])
def test_no_trial_has_a_network_unless_its_variant_opted_in(container_sandbox, demo_benchmark, engine, mode):
    instance = demo_benchmark.instances[0]
    closed = container_sandbox(mode=mode)
    environment = prepare_on(closed, demo_benchmark, instance)
    with closed.workspace(environment, "closed") as workspace:
        assert interfaces(workspace) == ["lo"]
        assert workspace.container.attrs["HostConfig"]["NetworkMode"] == "none"
    with pytest.raises(ValueError, match="no variant opted in"):
        with closed.workspace(environment, "asks", network=True):
            pass
    opened = container_sandbox(mode=mode, network=True, pod_parallelism=2)
    environment = prepare_on(opened, demo_benchmark, instance)
    with opened.workspace(environment, "opted-in", network=True) as online, opened.workspace(environment, "not") as off:
        assert len(interfaces(online)) > 1, "the variant that opted in has the engine's network"
        assert interfaces(off) == ["lo"], "a trial that did not opt in has none, even in a pod that has one"


def test_a_trial_writes_nothing_of_the_harness_but_its_outputs(pod):
    sandbox, _, environment = pod
    with sandbox.workspace(environment, "t") as workspace:
        patch = workspace.write_harness_file("model.patch", "original\n")
        junit, log = workspace.harness_path("out/junit.xml"), workspace.harness_path("out/tests.log")
        root = workspace.root
        attack = (
            f"echo forged >> {patch}; rm -f {patch}; mv {root} {root}.moved; mv {root}/harness {root}/h; "
            f"chmod 777 {root}/harness; ln -s /opt/eval/tools/runner/run.py {junit}; echo tests ran > {log}"
        )
        result = workspace.run(attack, timeout_s=30)
        assert result.stderr.count("Permission denied") + result.stderr.count("Operation not permitted") == 5
        assert workspace.read_harness_file("model.patch") == b"original\n"
        assert workspace.read_harness_file("out/tests.log") == b"tests ran\n", "outputs are the uid's to write"
        assert workspace.read_harness_file("out/junit.xml") is None, "a link planted in out/ is never followed"
        with pytest.raises(ValueError, match="out/"):
            workspace.write_harness_file("out/junit.xml", "<testsuite/>")  # as root, it would follow that link
    still_works(pod)


def test_files_read_back_with_a_commands_answer_follow_no_link_and_wait_for_no_writer(pod):
    """`run_then_read` reads the named harness files as root in the runner, right after the command: an attack
    that knows it plants, where the harness reads, a link to a file only root may read and a FIFO (which a plain
    open would wait on for ever) and leaves a directory in a third place; each is read as no file, and a real
    output is read. A name that would go through a directory of the uid's (`out/up/...`) is refused before the
    command runs."""
    sandbox, _, environment = pod
    with sandbox.workspace(environment, "t") as workspace:
        out = workspace.harness_path("out")
        attack = (
            f"ln -s /etc/shadow {out}/junit.xml; mkfifo {out}/report.json; mkdir {out}/workspace.diff; "
            f"ln -s / {out}/up; echo tests ran > {out}/tests.log"
        )
        names = ("out/junit.xml", "out/report.json", "out/workspace.diff", "out/tests.log", "out/absent")
        result, files = workspace.run_then_read(attack, names, timeout_s=30)
        assert result.ok, result.stderr
        assert files == dict.fromkeys(names) | {"out/tests.log": b"tests ran\n"}
        with pytest.raises(ValueError, match="flat"):
            workspace.run_then_read("true", ("out/up/etc/shadow",), timeout_s=30)
    still_works(pod)


# Left by one trial in every directory all trials of a pod can write, and in System V shared memory: the hidden
# tests a grading ran with, for the next seed's agent to read.
LEAVE_BEHIND = (
    "for d in /tmp /var/tmp /dev/shm /run/lock; do echo hidden-tests > $d/left-for-next-seed; done; "
    "touch /dev/mqueue/hidden-tests; "
    "ipcmk -M 4096 >/dev/null; ls /run/lock /tmp; ipcs -m | grep -c '^0x'"
)
LOOK_FOR_IT = (
    "cat /tmp/left-for-next-seed /var/tmp/left-for-next-seed /dev/shm/left-for-next-seed "
    "/run/lock/left-for-next-seed 2>/dev/null; ls /dev/mqueue; ipcs -m 2>/dev/null | grep -c '^0x' ; true"
)


def test_nothing_a_trial_leaves_in_shared_directories_or_ipc_reaches_the_next_trial_in_its_pod(pod):
    """The door: seed 0's code, run by the grader, copied the test patch into /run/lock (world-writable, never
    cleaned; SysV shared memory survived too), and seed 1's agent read it. Each trial now sees its own tmp at
    every world-writable directory and has IPC namespaces of its own."""
    sandbox, _, environment = pod
    with sandbox.workspace(environment, "seed-0") as first:
        left = first.run(LEAVE_BEHIND, timeout_s=30)
        assert "left-for-next-seed" in left.stdout and left.stdout.split()[-1] == "1", left.summary()
    with sandbox.workspace(environment, "seed-1") as second:
        found = second.run(LOOK_FOR_IT, timeout_s=30)
    assert "hidden-tests" not in found.stdout and found.stdout.split()[-1] == "0", found.summary()


# 64 MiB of random bytes in 1 MiB files: what no single-file limit stops and no file system compresses away.
FILL_DISK = "python3 -c \"import os\nfor i in range(64): open(f'fill{i}', 'wb').write(os.urandom(2**20))\""


@pytest.mark.parametrize("mode", ["pod", "strict"])
def test_an_agent_filling_the_disk_is_stopped_at_its_quota_and_an_honest_trial_beside_it_resolves(
    container_sandbox, demo_benchmark, store, mode
):
    """Before the quota, a disk fill ended honest trials as the agent's error and stopped the run's storage."""
    sandbox = container_sandbox(mode=mode, limits=ResourceLimits(storage_mb=16))
    instance = demo_benchmark.instances[0]
    environment = prepare_on(sandbox, demo_benchmark, instance)
    filler = make_agent("command", {"command": f"{FILL_DISK} & {FILL_DISK} > /dev/null; wait"})
    generation = generate(instance, filler, 0, environment, sandbox, store)
    assert generation.status == Outcome.AGENT_ERROR and "quota" in generation.error, generation.error
    honest = generate(instance, make_agent("oracle"), 1, environment, sandbox, store)
    assert honest.status == "completed" and honest.patch


def test_a_long_command_is_the_commands_own_business_never_the_engines(pod):
    """The request travels on the runner's stdin. In the exec's environment, a command of 130 KB with its
    request's JSON passed the 128 KiB a variable holds: the engine's error, unscored. Now it runs; one of
    300 KB fails as any `sh -c` of it would on Linux, the command's own failure (scored when the agent's)."""
    sandbox, _, environment = pod
    with sandbox.workspace(environment, "long") as workspace:
        runs = workspace.run(f"printf '%s' {'x' * 130_000} | wc -c", timeout_s=60)
        too_long = workspace.run(f"printf '%s' {'x' * 300_000} | wc -c", timeout_s=60)
    assert runs.exit_code == 0 and runs.stdout.strip() == "130000", runs.stderr
    assert too_long.exit_code == 127 and "Argument list too long" in too_long.stderr


def test_the_engine_storage_shared_with_the_harness_is_named_at_start(container_sandbox, engine):
    sandbox = container_sandbox()
    root = engine.info()["DockerRootDir"]
    if not Path(root).exists():
        pytest.skip(f"the engine stores containers on another machine ({root})")
    warned = sandbox.disks_shared_with({"the data directory": Path(root) / "not-made-yet", "proc": Path("/proc")})
    assert len(warned) == 1 and warned[0].startswith(f"the container engine's storage ({root})"), warned
    assert "the data directory" in warned[0] and "storage_mb" in warned[0]


def test_a_file_removed_but_held_open_counts_against_the_quota(container_sandbox, demo_benchmark, store):
    """No walk finds a removed file a process still writes to; what the trial's processes hold open counts."""
    sandbox, instance, environment = pod_with_quota(container_sandbox, demo_benchmark, storage_mb=16)
    held = (
        "python3 -c \"import os, time\nf = open('hidden', 'wb')\nos.unlink('hidden')\n"
        'for _ in range(64): f.write(os.urandom(2**20)); f.flush()\ntime.sleep(60)"'
    )
    generation = generate(instance, make_agent("command", {"command": held}), 0, environment, sandbox, store)
    assert generation.status == Outcome.AGENT_ERROR and "quota" in generation.error, generation.error


def test_space_freed_beside_a_pod_trial_does_not_hide_what_it_writes(container_sandbox, demo_benchmark):
    """In a pod, a finished trial's workspace is removed while others run, freeing more than a trial writes. The
    quota's walk is then triggered by what the trial's processes wrote (their /proc/<pid>/io, which the runner
    reads as root for the trial's uid), not only by the free space falling, which here rises."""
    sandbox, _, environment = pod_with_quota(container_sandbox, demo_benchmark, storage_mb=8)
    write = "python3 -c \"import os\nfor i in range(6): open(f'w{i}', 'wb').write(os.urandom(2**21))\""
    # The trial says it has started (so the runner has noted the free space), then waits for the neighbour's
    # removal, which the harness signals with a file of its own in the trial's working tree.
    command = f"touch started && until [ -e removed ]; do sleep 0.05; done && {write}"
    with sandbox.workspace(environment, "beside") as workspace:
        neighbour = f"{workspace.root}.neighbour"  # root's, on the pod's file system, outside the trial's quota
        workspace.pod.run(["sh", "-c", f"head -c {64 * 2**20} /dev/urandom > {neighbour}"])
        remove = f"until [ -e {workspace.repo}/started ]; do sleep 0.05; done; rm {neighbour} && touch {workspace.repo}/removed"
        with ThreadPoolExecutor(1) as remover:
            removed = remover.submit(workspace.pod.run, ["sh", "-c", remove], 120)
            result = workspace.run(command, timeout_s=60)
            assert removed.result()[0] == 0
    assert result.storage_exceeded, result.summary()


def test_a_trial_signalling_all_it_may_neither_kills_nor_freezes_the_quotas_walk(container_sandbox, demo_benchmark):
    """The attack knows the design: the quota's walk stops the trial's processes from a forked child that the
    runner gives the trial's uid, and its command's end kills them so. A thread of the trial's own process
    then sends SIGKILL, or SIGSTOP, to every process it may (kill(-1) spares only its own process), as fast
    as it can, while the process writes past its quota. The signaller's real uid is not the trial's, so
    neither signal reaches it: the walk runs, and the command ends `storage_exceeded`, where it had ended
    with the quota unwatched (the walk's thread killed) or hung (the walk's child stopped)."""
    sandbox, _, environment = pod_with_quota(container_sandbox, demo_benchmark, storage_mb=8)
    attack = (
        "import os, signal, sys, threading, time\n"
        "def signal_all(number):\n"
        "    while True:\n"
        "        try: os.kill(-1, number)\n"
        "        except OSError: pass\n"
        "threading.Thread(target=signal_all, args=(getattr(signal, sys.argv[1]),), daemon=True).start()\n"
        "for i in range(6):\n"
        "    open(f'w{i}', 'wb').write(os.urandom(2**21)); time.sleep(0.1)\n"
    )
    for signal in ("SIGKILL", "SIGSTOP"):
        with sandbox.workspace(environment, f"signals-{signal}") as workspace:
            result = workspace.run(f"exec python3 -c {shlex.quote(attack)} {signal}", timeout_s=60)
            assert result.storage_exceeded and not result.timed_out, (signal, result.summary())
