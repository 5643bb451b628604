"""Terminal tasks in the Harbor task format: loading, validation, and grading on the real local sandbox."""

import shutil
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from eval_pipeline.agents import make_agent
from eval_pipeline.agents.base import agent_task
from eval_pipeline.common.git import git
from eval_pipeline.common.outcomes import ImageBuildFailed, Outcome
from eval_pipeline.common.settings import Paths
from eval_pipeline.datasets.sources import DatasetSourceError, load_benchmark
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.base import RunnerEnded
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline.sandbox.pods import workspace as workspace_module
from eval_pipeline.sandbox.pods.engine import engine_is_podman
from eval_pipeline.sandbox.pods.images import TASK_GIT_DIR
from eval_pipeline.tasks.dataset import InvalidDatasetError
from eval_pipeline.tasks.named_image import NamedImage
from eval_pipeline.tasks.terminal.task import DEMO_TASKS_DIR, load_terminal_tasks
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate
from eval_pipeline.trial.validation import Status, validate_task
from eval_pipeline_tests.support.engine import output_of
from eval_pipeline_tests.support.real_data import task_base_images

DETERMINISTIC = ("hello-file", "word-count", "fix-config", "csv-total", "sort-unique")


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return load_terminal_tasks(DEMO_TASKS_DIR, tmp_path_factory.mktemp("mirrors"))


def task_limits(task, multiplier=1.0):
    """The task's own resources, as a campaign gives them."""
    return ResourceLimits(memory_floor_mb=128).for_task(task.memory_mb, task.cpus).with_multiplier(multiplier)


def run_trial(
    tasks, task_id, agent, tmp_path, store, *, multiplier=1.0, timeout_multiplier=1.0, seed=0, params=None, sandbox=None
):
    """Generate and evaluate one trial under the task's own resources, as a campaign would: on the local backend,
    or on `sandbox` (made with those resources)."""
    task = tasks.instance(task_id)
    sandbox = sandbox or LocalSandbox(tmp_path / "sandbox", task_limits(task, multiplier), SandboxSettings(), "test")
    environment = sandbox.prepare(task, tasks.environment_for(task), tasks.source)
    timeout = task.verifier_timeout_s * timeout_multiplier
    agent = make_agent(agent, params)
    generation = generate(task, agent, seed, environment, sandbox, store, timeout_multiplier, test_timeout_s=timeout)
    return evaluate(task, tasks.environment_for(task), generation, environment, sandbox, store, timeout)


def flag_kinds(evaluation) -> set[str]:
    """The kinds of the audit flags an evaluation carries (`verifier_tools`, `verifier_exposed`, the patch audit's)."""
    return {flag["kind"] for flag in evaluation.audit}


def test_demo_tasks_load_with_their_settings_and_working_trees(tasks, tmp_path):
    assert len(tasks.instances) == 8
    build_index, slow = tasks.instance("build-index"), tasks.instance("slow-report")
    assert (build_index.memory_mb, build_index.cpus, build_index.workdir) == (256, 1.0, "/app")
    assert (slow.verifier_timeout_s, slow.agent_timeout_s) == (3.0, 60.0)
    assert tasks.instance("word-count").tests.keys() == {"test.sh", "test_outputs.py"}
    mirror = Path(tasks.source.mirror_dir)
    for task_id, path in (("word-count", "data/input.txt"), ("csv-total", "sales.csv"), ("fix-config", "config.json")):
        task = tasks.instance(task_id)
        listed = git(["ls-tree", "-r", "--name-only", task.base_commit], mirror / task.repo).split()
        assert listed == [path], f"{task_id}: what the Dockerfile COPYs into WORKDIR, relative or absolute"
    again = load_terminal_tasks(DEMO_TASKS_DIR, tmp_path / "elsewhere")
    assert [t.base_commit for t in again.instances] == [t.base_commit for t in tasks.instances]
    assert again.version == tasks.version


@pytest.mark.parametrize("task_id", DETERMINISTIC)
def test_oracle_passes_and_null_fails(tasks, task_id, tmp_path, store):
    oracle = run_trial(tasks, task_id, "oracle", tmp_path, store)
    null = run_trial(tasks, task_id, "null", tmp_path, store)
    assert oracle.outcome == Outcome.RESOLVED, oracle.steps
    assert null.outcome == Outcome.UNRESOLVED, null.steps


# Wrong answers made to look right by editing what the verifier reads: the input, or the test runner itself.
FORGERIES = {
    "csv-total": "printf 'region,amount\\nnorth,1.00\\n' > sales.csv; echo 1.00 > total.txt",
    "sort-unique": "echo zed > names.txt; echo zed > sorted.txt",
    "word-count": "echo one > data/input.txt; echo 1 > count.txt",
    "shuffle-deck": "printf 'king\\nace\\n' > deck.txt; printf 'print(\"ace\")\\nprint(\"king\")\\n' > shuffle.py",
    "fix-config": "echo 'raise SystemExit(0)' > pytest.py",
}


@pytest.mark.parametrize("task_id", sorted(FORGERIES))
def test_a_wrong_answer_cannot_pass_by_editing_what_the_verifier_reads(tasks, task_id, tmp_path, store):
    """The verifier knows its expected values (or brings its own input) and imports nothing from the workdir."""
    forged = run_trial(tasks, task_id, "command", tmp_path, store, params={"command": FORGERIES[task_id]})
    assert forged.outcome == Outcome.UNRESOLVED, forged.steps


@pytest.mark.slow  # builds five task images
def test_a_wrong_answer_cannot_pass_by_editing_what_the_verifier_reads_in_a_container(
    tasks, tmp_path, container_sandbox, store
):
    for task_id, command in FORGERIES.items():
        pod = container_sandbox(task_limits(tasks.instance(task_id)), task_base_images=task_base_images())
        oracle = run_trial(tasks, task_id, "oracle", tmp_path, store, sandbox=pod)
        forged = run_trial(tasks, task_id, "command", tmp_path, store, params={"command": command}, sandbox=pod)
        pod.release()
        assert oracle.outcome == Outcome.RESOLVED or task_id == "shuffle-deck", (task_id, oracle.steps)  # flaky
        assert forged.outcome == Outcome.UNRESOLVED, (task_id, forged.steps)


def test_a_task_over_its_memory_is_oom_killed_at_1x_and_resolves_at_3x(tasks, tmp_path, store):
    at_1x = run_trial(tasks, "build-index", "oracle", tmp_path, store)
    at_3x = run_trial(tasks, "build-index", "oracle", tmp_path, store, multiplier=3)
    assert at_1x.outcome == Outcome.OOM_KILLED and not Outcome(at_1x.outcome).is_scored
    assert at_1x.resources["requested"]["effective_memory_ceiling_mb"] == 256
    assert at_3x.outcome == Outcome.RESOLVED and at_3x.resources["requested"]["effective_memory_ceiling_mb"] == 768


def test_a_slow_task_times_out_under_its_limit_and_passes_with_more_time(tasks, tmp_path, store):
    strict = run_trial(tasks, "slow-report", "oracle", tmp_path, store)
    relaxed = run_trial(tasks, "slow-report", "oracle", tmp_path, store, timeout_multiplier=2)
    assert strict.outcome == Outcome.TEST_TIMEOUT and strict.test_timeout_s == 3
    assert relaxed.outcome == Outcome.RESOLVED and relaxed.test_timeout_s == 6


def test_the_flaky_task_passes_about_half_the_time(tasks, tmp_path):
    task = tasks.instance("shuffle-deck")
    sandbox = LocalSandbox(tmp_path, ResourceLimits(), SandboxSettings(), "test")
    environment = sandbox.prepare(task, tasks.environment_for(task), tasks.source)
    with sandbox.workspace(environment, "flaky") as workspace:
        assert agent_task(task, 0).apply_reference(workspace).ok
        tests = workspace.write_harness_tree("tests", task.tests)
        env = {"EVAL_TESTS_DIR": tests, "EVAL_REWARD_FILE": workspace.harness_path("reward.txt")}
        rewards = set()
        for _ in range(16):
            assert workspace.run(f"bash {tests}/test.sh", timeout_s=30, env=env).ok
            rewards.add(workspace.read_harness_file("reward.txt").strip())
    # P(all 16 equal) = 2 / 2**16: a correct shuffle of two cards keeps their order half the time.
    assert rewards == {b"0", b"1"}


def write_task(root: Path, name: str, files: dict[str, str]) -> Path:
    for path, content in files.items():
        (root / name / path).parent.mkdir(parents=True, exist_ok=True)
        (root / name / path).write_text(content)
    return root / name


def test_a_harbor_task_with_yaml_config_system_steps_and_its_own_workdir(tmp_path, store):
    write_task(
        tmp_path / "tasks",
        "greet",
        {
            "task.yaml": "agent: {timeout_sec: 30}\nverifier: {timeout_sec: 20}\nenvironment: {memory: 2G, cpus: 2}\n",
            "instruction.md": "Make greet.sh print hi.\n",
            "environment/Dockerfile": (
                "FROM ubuntu:24.04\nRUN apt-get update && \\\n    apt-get install -y jq\nWORKDIR /srv\n"
                "COPY --chown=1000:1000 app/ ./\nCOPY tool.sh /usr/local/bin/tool\n"
            ),
            "environment/app/greet.sh": "echo bye\n",
            "environment/tool.sh": "true\n",
            "tests/test.sh": '[ "$(bash greet.sh)" = hi ]\n',
            "solution/solve.sh": "echo 'echo hi' > greet.sh\n",
        },
    )
    tasks = load_terminal_tasks(tmp_path / "tasks", tmp_path / "mirrors")
    task = tasks.instance("greet")
    assert (task.workdir, task.memory_mb, task.cpus, task.agent_timeout_s) == ("/srv", 2048, 2.0, 30.0)
    assert task.image_install == ("apt-get update && apt-get install -y jq",)
    listed = git(["ls-tree", "-r", "--name-only", task.base_commit], tmp_path / "mirrors" / task.repo).split()
    assert listed == ["greet.sh"], "files COPYed outside WORKDIR exist only in an image"
    assert "RUN steps" in task.local_problem
    sandbox = LocalSandbox(tmp_path / "sandbox", ResourceLimits(), SandboxSettings(), "test")
    with pytest.raises(ImageBuildFailed, match="RUN steps.*container backend"):
        sandbox.build(task, tasks.environment_for(task), tasks.source)


def test_a_verifier_that_writes_no_reward_is_a_grading_error_never_a_pass(tmp_path, store):
    """Harbor's test.sh exits 0 whatever the reward: a missing reward file must not grade the null agent resolved."""
    write_task(
        tmp_path / "tasks",
        "silent",
        {
            "task.toml": "[verifier]\ntimeout_sec = 20\n",
            "instruction.md": "Write done.txt.\n",
            "environment/Dockerfile": "FROM python:3.11-slim\nWORKDIR /app\n",
            "tests/test.sh": "exit 0\n",
        },
    )
    tasks = load_terminal_tasks(tmp_path / "tasks", tmp_path / "mirrors")
    task = tasks.instance("silent")
    sandbox = LocalSandbox(tmp_path / "sandbox", ResourceLimits(), SandboxSettings(), "test")
    environment = sandbox.prepare(task, tasks.environment_for(task), tasks.source)
    generation = generate(task, make_agent("null"), 0, environment, sandbox, store)
    verdict = evaluate(task, tasks.environment_for(task), generation, environment, sandbox, store, 20)
    assert verdict.outcome == Outcome.GRADING_ERROR and "no reward file" in verdict.detail


BINARY = bytes(range(256)) * 800  # 200 KiB with no UTF-8 text in it (0x80-0xff alone), over a transfer chunk


def write_binary_task(root: Path, reference: bytes = BINARY) -> Path:
    """A task whose verifier compares what solve.sh writes with a binary reference file beside test.sh."""
    task = write_task(
        root,
        "render",
        {
            "task.toml": "[verifier]\ntimeout_sec = 30\n",
            "instruction.md": "Render the image to out.bin.\n",
            "environment/Dockerfile": "FROM python:3.11-slim\nWORKDIR /app\n",
            "tests/test.sh": "REWARD=${EVAL_REWARD_FILE:-/logs/verifier/reward.txt}\n"
            'cmp out.bin "${EVAL_TESTS_DIR:-/tests}/reference.bin" && echo 1 > "$REWARD" || echo 0 > "$REWARD"\n',
            "solution/solve.sh": 'cp "${EVAL_SOLUTION_DIR:-/solution}/rendered.bin" out.bin\n',
        },
    )
    (task / "tests" / "reference.bin").write_bytes(reference)
    (task / "solution" / "rendered.bin").write_bytes(BINARY)
    return task


def assert_oracle_resolves_and_null_does_not(tasks, sandbox, store) -> None:
    task = tasks.instance("render")
    environment = sandbox.prepare(task, tasks.environment_for(task), tasks.source)
    for agent, expected in (("oracle", Outcome.RESOLVED), ("null", Outcome.UNRESOLVED)):
        generation = generate(task, make_agent(agent), 0, environment, sandbox, store, test_timeout_s=30)
        verdict = evaluate(task, tasks.environment_for(task), generation, environment, sandbox, store, 30)
        assert verdict.outcome == expected, (agent, verdict.detail)


def test_a_task_whose_tests_and_solution_hold_binary_files_gets_them_byte_for_byte(tmp_path, store):
    """Five Terminal-Bench 2 tasks keep a reference image or video beside test.sh: such files are not UTF-8,
    reach the verifier and solve.sh unchanged, and are part of the task's content hash."""
    write_binary_task(tmp_path / "tasks")
    tasks = load_terminal_tasks(tmp_path / "tasks", tmp_path / "mirrors")
    task = tasks.instance("render")
    assert task.tests["reference.bin"] == BINARY
    assert_oracle_resolves_and_null_does_not(
        tasks, LocalSandbox(tmp_path / "sandbox", ResourceLimits(), SandboxSettings(), "test"), store
    )
    write_binary_task(tmp_path / "tasks", reference=BINARY[::-1])
    changed = load_terminal_tasks(tmp_path / "tasks", tmp_path / "mirrors").instance("render")
    assert changed.content_hash != task.content_hash


@pytest.mark.slow  # containers
def test_binary_task_files_reach_the_verifier_in_a_container_byte_for_byte(tmp_path, container_sandbox, store):
    """The same in a task's container, where the harness writes files through the engine in chunks."""
    write_binary_task(tmp_path / "tasks")
    tasks = load_terminal_tasks(tmp_path / "tasks", tmp_path / "mirrors")
    sandbox = container_sandbox(task_base_images=task_base_images(), mode="pod")
    assert_oracle_resolves_and_null_does_not(tasks, sandbox, store)


def test_scripts_that_need_the_image_s_absolute_paths_are_refused_locally(tmp_path):
    write_task(
        tmp_path / "tasks",
        "abs",
        {
            "task.toml": "",
            "instruction.md": "Fix it.\n",
            "environment/Dockerfile": "FROM python:3.11-slim\nWORKDIR /app\n",
            "tests/test.sh": "python3 /tests/test_outputs.py > /logs/verifier/reward.txt\n",
        },
    )
    task = load_terminal_tasks(tmp_path / "tasks", tmp_path / "mirrors").instance("abs")
    assert task.local_problem.startswith("tests/test.sh uses the absolute path /tests")


def test_an_edited_task_gets_a_new_commit_in_the_same_mirror(tmp_path):
    source = tmp_path / "tasks"
    shutil.copytree(DEMO_TASKS_DIR / "fix-config", source / "fix-config")
    first = load_terminal_tasks(source, tmp_path / "mirrors").instances[0]
    (source / "fix-config/environment/config.json").write_text('{"debug": true, "port": 80}\n')
    second = load_terminal_tasks(source, tmp_path / "mirrors").instances[0]
    assert first.base_commit != second.base_commit and first.content_hash != second.content_hash
    for task in (first, second):
        git(["cat-file", "-e", f"{task.base_commit}^{{commit}}"], tmp_path / "mirrors" / task.repo)


def test_invalid_tasks_name_their_directory_and_field_and_can_be_quarantined(tmp_path):
    good = {
        "task.toml": "",
        "instruction.md": "Do it.\n",
        "environment/Dockerfile": "FROM x\n",
        "tests/test.sh": "true\n",
    }
    root = tmp_path / "tasks"
    write_task(root, "fine", good)
    write_task(root, "no-tests", {k: v for k, v in good.items() if k != "tests/test.sh"} | {"tests/x.py": ""})
    write_task(root, "bad-timeout", good | {"task.toml": "[verifier]\ntimeout_sec = -5\n"})
    write_task(root, "no-instruction", {k: v for k, v in good.items() if k != "instruction.md"})
    write_task(root, "bad-copy", good | {"environment/Dockerfile": "FROM x\nCOPY missing.txt .\n"})
    with pytest.raises(InvalidDatasetError) as error:
        load_terminal_tasks(root, tmp_path / "mirrors")
    message = str(error.value)
    assert f"task {root / 'no-tests'} ('no-tests'): field tests/test.sh: missing" in message
    assert "('bad-timeout'): field verifier.timeout_sec: expected a positive number, got -5" in message
    assert "('no-instruction'): field instruction.md: missing or empty" in message
    assert "('bad-copy'): field environment/Dockerfile: COPY source 'missing.txt' is not in environment/" in message
    kept = load_terminal_tasks(root, tmp_path / "mirrors", on_invalid="quarantine")
    assert [t.instance_id for t in kept.instances] == ["fine"] and len(kept.quarantined) == 4


def test_a_task_s_docker_image_is_its_named_image_as_docker_reads_it_and_pull_refuses_a_task_naming_none(tmp_path):
    """Terminal-Bench 2's task.toml names its prebuilt image (`[environment] docker_image`): the task's named image,
    qualified as Docker reads it, its working tree at the Dockerfile's WORKDIR; one that is no image reference is
    refused naming the field. A slice with `images: pull` refuses, at load, a task that names none, by name; `auto`
    builds that one and pulls the other. The task's row and hash are the same with or without it."""
    good = {"instruction.md": "Do it.\n", "environment/Dockerfile": "FROM x\nWORKDIR /srv\n", "tests/test.sh": "true\n"}
    root = tmp_path / "tasks"
    named = '[environment]\ndocker_image = "alexgshaw/regex-log:20251031"\n'
    write_task(root, "named", good | {"task.toml": named})
    write_task(root, "unnamed", good | {"task.toml": ""})
    loaded = load_terminal_tasks(root, tmp_path / "mirrors")
    assert loaded.instance("named").named_image == NamedImage("docker.io/alexgshaw/regex-log:20251031", "/srv")
    assert loaded.instance("unnamed").named_image is None
    assert loaded.instance("named").to_row() == replace(loaded.instance("named"), docker_image="").to_row()
    source = {"kind": "terminal", "path": str(root), "mirror_dir": str(tmp_path / "mirrors")}
    with pytest.raises(DatasetSourceError, match=r"images: pull, but 1 task\(s\) name no image to pull: unnamed \("):
        load_benchmark({**source, "images": "pull"}, Paths(tmp_path))
    auto = load_benchmark({**source, "images": "auto"}, Paths(tmp_path))
    assert [auto.environment_for(task).image for task in auto.instances] == [
        loaded.instance("named").named_image,
        None,
    ]
    write_task(root, "bad-image", good | {"task.toml": '[environment]\ndocker_image = "Alex G/x"\n'})
    with pytest.raises(
        InvalidDatasetError, match=r"\('bad-image'\): field environment.docker_image: expected an image"
    ):
        load_terminal_tasks(root, tmp_path / "mirrors")


def test_a_task_that_forbids_the_internet_runs_without_a_network(tmp_path, container_sandbox, store):
    """`allow_internet = false`: its containers have loopback only, for the agent and the verifier alike."""
    write_task(
        tmp_path / "tasks",
        "offline",
        {
            "task.toml": '[environment]\nallow_internet = false\nstorage = "10G"\n',
            "instruction.md": "Nothing to do.\n",
            "environment/Dockerfile": "FROM python:3.11-slim\nWORKDIR /app\nRUN echo made > /app/notes.txt\n",
            "tests/test.sh": (
                'if [ "$(ls /sys/class/net)" = lo ] && [ "$(cat /app/notes.txt)" = made ]; '
                "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
            ),
        },
    )
    tasks = load_terminal_tasks(tmp_path / "tasks", tmp_path / "mirrors")
    task = tasks.instance("offline")
    assert (task.allow_internet, task.storage_mb) == (False, 10240)
    sandbox = container_sandbox(task_base_images=task_base_images())
    environment = sandbox.prepare(task, tasks.environment_for(task), tasks.source)
    assert environment.details["network"] == "none"
    generation = generate(task, make_agent("null"), 0, environment, sandbox, store, test_timeout_s=60)
    verdict = evaluate(task, tasks.environment_for(task), generation, environment, sandbox, store, 60)
    assert (verdict.outcome, verdict.grading_mode) == (Outcome.RESOLVED, "in_container"), (
        verdict.detail,
        verdict.steps,
    )
    assert [step["network"] for step in verdict.steps if step["step"] == "run_tests"] == [False], "recorded"


# A task whose product is its container's state, as kv-store-grpc's is: a file outside the WORKDIR and a server
# left running. The verifier reports what it found on stderr and rewards only both.
STATEFUL_TASK = {
    "task.toml": "[verifier]\ntimeout_sec = 60\n",
    "instruction.md": "Serve /etc/served (holding 'ready') over HTTP on port 8123, and leave the server running.\n",
    "environment/Dockerfile": "FROM python:3.11-slim\nWORKDIR /app\n",
    "solution/solve.sh": (
        "echo ready > /etc/served\ncd /etc && setsid python3 -m http.server 8123 >/dev/null 2>&1 &\nsleep 1\n"
    ),
    "tests/test.sh": (
        "rm -f /app/attacker-alive; sleep 1\n"  # time for a process the agent left to act, were it able to
        "python3 - <<'EOF' > /logs/verifier/reward.txt\n"
        "import pathlib, sys, urllib.request\n"
        "try:\n"
        "    served = urllib.request.urlopen('http://127.0.0.1:8123/served', timeout=5).read() == b'ready\\n'\n"
        "except OSError:\n"
        "    served = False\n"
        "found = pathlib.Path('/etc/served').exists()\n"
        "app = pathlib.Path('/app')\n"
        "print(f'file {found} server {served} attacker saw tests {(app / \"saw-tests\").exists()}'"
        " f' attacker alive {(app / \"attacker-alive\").exists()}', file=sys.stderr)\n"
        "print(1 if found and served else 0)\n"
        "EOF\n"
    ),
}
# What a hostile agent leaves behind, knowing the verifier runs in its container: a process that tries to uncover
# the verifier's directories (unmount, move aside, unmount from a namespace of its own) and writes 1 to the reward
# file, at Harbor's path and through every process's root, noting whether it ever saw the tests.
REWARD_WRITER = (
    "setsid sh -c 'while true; do umount /logs /tests; mv /logs /logs.aside;"
    ' unshare -rm sh -c "umount -l /logs; echo 1 > /logs/verifier/reward.txt";'
    " mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt;"
    " for root in /proc/[0-9]*/root; do echo 1 > $root/logs/verifier/reward.txt;"
    " [ -e $root/tests/test.sh ] && touch /app/saw-tests; done;"
    " [ -e /tests/test.sh ] && touch /app/saw-tests; touch /app/attacker-alive; sleep 0.02; done 2>/dev/null'"
    " >/dev/null 2>&1 &"
)


@pytest.fixture
def stateful(tmp_path, container_sandbox):
    """The stateful task, its container sandbox and environment."""
    write_task(tmp_path / "tasks", "serve", STATEFUL_TASK)
    tasks = load_terminal_tasks(tmp_path / "tasks", tmp_path / "mirrors")
    task = tasks.instance("serve")
    sandbox = container_sandbox(task_base_images=task_base_images(), network=True)
    return task, sandbox, sandbox.prepare(task, tasks.environment_for(task), tasks.source)


@pytest.mark.slow  # containers
def test_a_task_whose_product_is_state_is_verified_in_the_agent_s_container_and_regraded_from_its_snapshot(
    stateful, store
):
    """Harbor's way: the verifier runs in the agent's container right after it, its server still running; a
    re-grade (here under another test time limit) starts from the snapshot: the file is there, the server is not.
    The server ran beside the verifier, so the in-container run is flagged exposed (what a process left running
    changes after the check is unseen), and counts as no violation; the re-grade, without it, is not."""
    task, sandbox, environment = stateful
    oracle = generate(task, make_agent("oracle"), 0, environment, sandbox, store, test_timeout_s=60)
    assert oracle.snapshot and oracle.verification, oracle.error
    in_container = evaluate(task, task.environment, oracle, environment, sandbox, store, 60)
    assert (in_container.outcome, in_container.grading_mode) == (Outcome.RESOLVED, "in_container"), in_container.steps
    assert flag_kinds(in_container) == {"verifier_exposed"}, in_container.audit
    regraded = evaluate(task, task.environment, oracle, environment, sandbox, store, 61)
    assert (regraded.outcome, regraded.grading_mode) == (Outcome.UNRESOLVED, "snapshot"), regraded.steps
    assert "file True server False" in regraded.steps[-1]["stderr_tail"]
    assert regraded.audit == [], regraded.audit
    null = generate(task, make_agent("null"), 0, environment, sandbox, store, test_timeout_s=60)
    verdict = evaluate(task, task.environment, null, environment, sandbox, store, 60)
    assert (verdict.outcome, verdict.grading_mode) == (Outcome.UNRESOLVED, "in_container"), verdict.steps
    assert verdict.audit == [], verdict.audit


@pytest.mark.slow  # containers
def test_the_working_tree_s_commit_is_read_in_each_trial_s_container_and_never_in_a_snapshot_s(stateful, engine):
    """A trial reads the commit its patch is taken against in its own fresh container; a handle stored by an
    earlier version (which held the commit) works the same. A re-grade's container starts from the agent's
    snapshot, whose git directory the agent may have removed: it is not read there, so that cannot make the
    re-grade the harness's error."""
    task, sandbox, environment = stateful
    commit = output_of(engine, environment.details["image"], ["git", f"--git-dir={TASK_GIT_DIR}", "rev-parse", "HEAD"])
    older = {**environment.details, "task": {**environment.details["task"], "base_commit": "0" * 40}}
    with sandbox.workspace(replace(environment, details=older), "older") as workspace:
        assert workspace.base_revision == commit.decode().strip()
    broken = engine.containers.run(environment.details["image"], ["rm", "-rf", TASK_GIT_DIR], detach=True)
    try:
        broken.wait()
        image = broken.commit(repository="localhost/eval-pipeline-snapshot", tag=f"broken-{uuid.uuid4().hex[:8]}")
    finally:
        broken.remove(force=True)
    try:
        regrade = sandbox.snapshot_environment(environment, {"image": image.tags[0], "image_id": image.id})
        with sandbox.workspace(regrade, "regrade") as workspace:
            assert workspace.base_revision is None
            assert workspace.verify(f"test ! -e {TASK_GIT_DIR}", timeout_s=60).ok
    finally:
        engine.images.remove(image.id, force=True)


@pytest.mark.slow  # containers
def test_a_task_container_s_set_up_and_commands_share_one_exec(stateful, monkeypatch):
    """The set-up (the verifier's directories, which the agent's hiding mounts need, and the commit read) is the
    first request of the workspace's one runner, not an exec of its own."""
    task, sandbox, environment = stateful
    execs, exec_create = [], sandbox.client.api.exec_create
    monkeypatch.setattr(sandbox.client.api, "exec_create", lambda *a, **k: execs.append(a) or exec_create(*a, **k))
    with sandbox.workspace(environment, "first") as workspace:
        read = workspace.run(f"git --git-dir={TASK_GIT_DIR} rev-parse HEAD", timeout_s=60).stdout.strip()
        assert workspace.base_revision == read and len(read) == 40
        assert workspace.run("test -d /tests && test -d /logs", timeout_s=60).ok
        assert len(execs) == 1, execs


@pytest.mark.slow  # containers
def test_a_container_s_commands_share_one_runner_and_an_agent_that_kills_it_loses_its_command(stateful, monkeypatch):
    """One exec serves a workspace's commands (runner/serve.py: serve_session), each answered by a child of its
    own. A command that kills that runner (root, as a task's agent is) ends with it, the agent's doing
    (RunnerEnded, which a trial scores), and the next command gets another runner; a runner killed between
    two commands loses the next one the same way, never as the engine's failure (which is retried, unscored)."""
    task, sandbox, environment = stateful
    execs, exec_create = [], sandbox.client.api.exec_create
    monkeypatch.setattr(sandbox.client.api, "exec_create", lambda *a, **k: execs.append(a) or exec_create(*a, **k))
    with sandbox.workspace(environment, "session") as workspace:
        assert [workspace.run(f"echo {n}", timeout_s=60).stdout for n in range(3)] == ["0\n", "1\n", "2\n"]
        assert len(execs) == 1
        with pytest.raises(RunnerEnded):
            workspace.run('read -r _ _ _ runner _ < /proc/$PPID/stat && kill -9 "$runner"; sleep 1', timeout_s=60)
        assert workspace.run("echo again", timeout_s=60).stdout == "again\n"
        assert len(execs) == 2
        # Killed between two commands, by a process the agent left running: the next command is the one lost.
        later = 'read -r _ _ _ runner _ < /proc/$PPID/stat; (sleep 3; kill -9 "$runner") >/dev/null 2>&1 &'
        assert workspace.run(later, timeout_s=60).ok  # answered at once: what it left runs on
        time.sleep(5)
        with pytest.raises(RunnerEnded):
            workspace.run("true", timeout_s=60)
        assert workspace.run("echo third", timeout_s=60).stdout == "third\n"
        # Stopped rather than killed, the child answering or the runner above it: the command is lost all the same.
        with pytest.raises(RunnerEnded):
            workspace.run("kill -STOP $PPID; sleep 5", timeout_s=60)
        monkeypatch.setattr(workspace_module, "EXEC_MARGIN_S", 1.0)  # the runner's silence is waited out sooner
        with pytest.raises(RunnerEnded):
            workspace.run('read -r _ _ _ runner _ < /proc/$PPID/stat && kill -STOP "$runner"', timeout_s=3)
        assert workspace.run("echo fourth", timeout_s=60).stdout == "fourth\n"


@pytest.mark.slow  # containers
def test_a_command_timed_out_beside_a_process_it_set_free_holding_its_output_is_answered_and_the_process_runs_on(
    stateful, monkeypatch
):
    """At its deadline a terminal command's group is killed; a process it set free (setsid) that floods the
    command's output runs on, as Harbor leaves it, neither blocked nor killed (the runner's drainer reads what it
    writes), and the command is answered, timed out, at once. At d828262 the runner waited for that process to let
    go of the output, past the command's time: the transport's failure, retried and never scored."""
    task, sandbox, environment = stateful
    monkeypatch.setattr(workspace_module, "EXEC_MARGIN_S", 10.0)  # a runner silent past the command's time fails
    flood = "setsid sh -c 'while :; do head -c 1000000 /dev/zero; date +%s%N > /tmp/beat; sleep 0.05; done' &"
    beat = "cat /tmp/beat; sleep 1; cat /tmp/beat"
    with sandbox.workspace(environment, "free") as workspace:
        result = workspace.run(f"{flood} sleep 600", timeout_s=2)
        assert result.timed_out and result.duration_s < 5, result.summary()
        first, second = workspace.run(beat, timeout_s=30).stdout.split()
        assert int(second) > int(first), "the process set free writes on"


@pytest.mark.slow  # containers
def test_no_process_of_the_agent_can_write_answers_where_the_runner_writes_them(stateful):
    """The runner's answers carry the verdict (the verifier's reward comes back in one). Root in its container,
    an agent that knows the design opens the runner's output (/proc/<pid>/fd/1) to queue a forged answer for
    the verifier's request, both at the child answering its command and at the session runner above it:
    refused (neither is dumpable, and root in a container holds no CAP_SYS_PTRACE)."""
    task, sandbox, environment = stateful
    forge = (
        "read -r _ _ _ session _ < /proc/$PPID/stat; for pid in $PPID $session; do"
        ' (echo "{}" > /proc/$pid/fd/1) 2>/dev/null && echo "wrote $pid" || echo refused; done'
    )
    with sandbox.workspace(environment, "forge") as workspace:
        assert workspace.run(forge, timeout_s=60).stdout == "refused\nrefused\n"
        assert workspace.run("echo served", timeout_s=60).stdout == "served\n"


@pytest.mark.slow  # containers
def test_validation_judges_a_stateful_task_s_reference_in_its_container(stateful):
    task, sandbox, environment = stateful
    validation = validate_task("t", task, task.environment, environment, sandbox, repeats=1, test_timeout_s=60)
    assert validation.status == Status.VALID, validation


@pytest.mark.slow  # containers
def test_a_process_the_agent_leaves_cannot_write_the_reward_of_the_verifier_in_its_container(stateful, store):
    """The agent's commands see /tests and /logs/verifier covered by mounts of their own, which nothing they
    start can remove or look beneath, and hold no capability where the verifier runs (runner/namespaces.py)."""
    task, sandbox, environment = stateful
    agent = make_agent("command", {"command": REWARD_WRITER})
    generation = generate(task, agent, 0, environment, sandbox, store, network=True, test_timeout_s=60)
    verdict = evaluate(task, task.environment, generation, environment, sandbox, store, 60)
    assert (verdict.outcome, verdict.detail) == (Outcome.UNRESOLVED, "reward 0"), verdict.steps
    assert "attacker saw tests False attacker alive True" in verdict.steps[-1]["stderr_tail"]


# Left behind to kill the verifier, so that it writes no reward and the trial goes unscored (its pattern does not
# match its own command line).
VERIFIER_KILLER = (
    "setsid sh -c 'while true; do for p in /proc/[0-9]*; do"
    ' grep -qs "/tests/test\\.sh" $p/cmdline && kill -9 ${p#/proc/}; done; sleep 0.02; done\' >/dev/null 2>&1 &'
)


@pytest.mark.slow  # containers
def test_a_verifier_killed_by_a_process_the_agent_left_is_scored_against_the_agent(stateful, store):
    """Only the agent's processes can signal the verifier in its container (the time limit and the OOM killer
    are told apart): with the reference passing at once, the agent's doing, never an unscored grading error."""
    task, sandbox, environment = stateful
    agent = make_agent("command", {"command": VERIFIER_KILLER})
    generation = generate(task, agent, 0, environment, sandbox, store, network=True, test_timeout_s=60)
    verdict = evaluate(task, task.environment, generation, environment, sandbox, store, 60)
    assert verdict.outcome == Outcome.PATCH_BROKE_TEST_RUN and "ended by signal 9" in verdict.detail, verdict.steps


@pytest.mark.slow  # containers
def test_a_terminal_agent_that_kills_its_own_command_runner_loses_its_trial(stateful, store):
    """Root in its container, the agent may signal the harness's runner that started it: the runner's own end,
    with the container serving a fresh workspace on, is the agent's doing (trial/generation.py), never an unscored
    engine error."""
    task, sandbox, environment = stateful
    agent = make_agent("command", {"command": "kill -9 $PPID; sleep 5"})
    generation = generate(task, agent, 0, environment, sandbox, store, network=True, test_timeout_s=60)
    assert generation.status == Outcome.AGENT_ERROR.value and "runner ended" in generation.error, generation.error
    assert store.get(generation.key) is not None, "final: never retried"


# Left by an agent that knows where the harness works in its container: a process that waits until the harness has
# taken the diff, then leaves a file where the harness's trial directory goes, for the snapshot to keep and the
# re-grade's container (started from it) to find.
HARNESS_PLACE_TAKER = (
    STATEFUL_TASK["solution/solve.sh"]
    + "setsid sh -c 'until [ -e /opt/eval/trial/harness/out/workspace.diff ]; do sleep 0.01; done;"
    " rm -rf /opt/eval/trial && echo taken > /opt/eval/trial' >/dev/null 2>&1 &"
)


@pytest.mark.slow  # containers
def test_an_agent_that_takes_the_harness_s_places_in_its_container_is_still_graded_in_place_and_on_re_grade(
    stateful, store
):
    """Root in its container, the agent may leave a file where the harness makes its directories: the verifier
    still runs, in the agent's container and in a re-grade's from its snapshot, and the trial is scored, never
    retried as the harness's error. In the re-grade's container the harness's directory stands where the
    snapshot has the agent's file, and Podman cannot list that container's changes: its tools unjudged, the
    re-grade is judged by the reference (intention to treat), which passes, so it is scored against the agent."""
    task, sandbox, environment = stateful
    agent = make_agent("command", {"command": HARNESS_PLACE_TAKER})
    generation = generate(task, agent, 0, environment, sandbox, store, network=True, test_timeout_s=60)
    assert generation.snapshot and generation.verification, generation.error
    in_container = evaluate(task, task.environment, generation, environment, sandbox, store, 60)
    assert (in_container.outcome, in_container.grading_mode) == (Outcome.RESOLVED, "in_container"), in_container.steps
    regraded = evaluate(task, task.environment, generation, environment, sandbox, store, 61)
    unjudged = Outcome.PATCH_BROKE_TEST_RUN if engine_is_podman() else Outcome.UNRESOLVED
    assert (regraded.outcome, regraded.grading_mode) == (unjudged, "snapshot"), regraded.detail
    assert "file True server False" in regraded.steps[-1]["stderr_tail"]


@pytest.mark.slow  # containers
def test_a_snapshot_the_agent_broke_for_the_harness_is_scored_when_the_reference_passes(stateful, store, engine):
    """A re-grade's container is the agent's product: a snapshot in which the harness cannot even make the
    verifier's directories (here: no shell left) is judged by intention to treat, scored against the agent when
    the reference, graded at once in a fresh container of the environment, resolves. The agent's process removes
    the shell once the harness has written the workspace's diff, racing the snapshot: under load the snapshot can
    come first, so the agent tries again (another seed) until its snapshot has no shell."""
    task, sandbox, environment = stateful
    shell_remover = HARNESS_PLACE_TAKER.replace(
        "rm -rf /opt/eval/trial && echo taken > /opt/eval/trial", "rm -f /usr/bin/sh /usr/bin/dash"
    )
    agent = make_agent("command", {"command": shell_remover})
    for seed in range(3):
        generation = generate(task, agent, seed, environment, sandbox, store, network=True, test_timeout_s=60)
        assert generation.snapshot, generation.error
        if not has_a_shell(engine, generation.snapshot["image_id"]):
            break
    assert not has_a_shell(engine, generation.snapshot["image_id"]), "the agent's process never won the race in 3 tries"
    regraded = evaluate(task, task.environment, generation, environment, sandbox, store, 61)
    assert regraded.outcome == Outcome.PATCH_BROKE_TEST_RUN.value, regraded.detail
    assert "scored: the reference" in regraded.detail and "setting the verifier up failed" in regraded.detail


def has_a_shell(engine, image: str) -> bool:
    """Whether `image` holds /usr/bin/sh, read from a container created (never started) from it."""
    import docker

    container = engine.containers.create(image, command=["true"])
    try:
        container.get_archive("/usr/bin/sh")
        return True
    except docker.errors.NotFound:
        return False
    finally:
        container.remove(force=True)


# A wrong answer, and the tool test.sh reads it with made to say the right one: hello-file's test.sh compares
# `$(cat hello.txt)` with "Hello, world!". First on PATH (the red team's attack), or in place of the image's own.
LYING_CAT = "printf '#!/bin/sh\\necho \"Hello, world!\"\\n' > {path} && chmod +x {path} && echo wrong > hello.txt"
# word-count's test.sh runs pytest on the image's python3: a sitecustomize in its site-packages ends every
# interpreter at once with exit 0, so pytest "passes" without running a test.
EXITING_INTERPRETER = (
    "echo 0 > count.txt && echo 'import os; os._exit(0)' > /usr/local/lib/python3.11/site-packages/sitecustomize.py"
)
TOOL_ATTACKS = {
    "cat first on PATH": ("hello-file", LYING_CAT.format(path="/usr/local/bin/cat"), "/usr/local/bin/cat"),
    "cat replaced in place": ("hello-file", LYING_CAT.format(path="/usr/bin/cat"), "/usr/bin/cat"),
    "sitecustomize": ("word-count", EXITING_INTERPRETER, "/usr/local/lib/python3.11/site-packages/sitecustomize.py"),
}


@pytest.mark.slow  # containers
@pytest.mark.parametrize("attack", sorted(TOOL_ATTACKS))
def test_a_wrong_answer_that_replaces_a_tool_the_verifier_runs_is_forged_in_place_and_on_re_grade(
    tasks, container_sandbox, store, attack
):
    """Root in its container, the agent changes what test.sh runs so that it reports a pass: the engine's record
    of the container's changes (verifier_tools.py) names the tool, the trial is flagged and its reward of 1 is
    `report_forged`, in the agent's container and on a re-grade from its snapshot (another test time limit)."""
    task_id, command, tool = TOOL_ATTACKS[attack]
    task = tasks.instance(task_id)
    sandbox = container_sandbox(task_base_images=task_base_images())
    environment = sandbox.prepare(task, tasks.environment_for(task), tasks.source)
    generation = generate(
        task, make_agent("command", {"command": command}), 0, environment, sandbox, store, test_timeout_s=60
    )
    assert generation.verification and generation.verification["reward_txt"].strip() == "1", "the tool lied"
    for timeout, mode in ((60, "in_container"), (61, "snapshot")):
        verdict = evaluate(task, tasks.environment_for(task), generation, environment, sandbox, store, timeout)
        assert (verdict.outcome, verdict.grading_mode) == (Outcome.REPORT_FORGED, mode), verdict.detail
        assert tool in {flag["path"] for flag in verdict.audit if flag["kind"] == "verifier_tools"}, verdict.audit


@pytest.mark.slow  # containers
def test_the_oracle_raises_no_flag_on_any_demo_task_in_a_container(tasks, tmp_path, container_sandbox, store):
    """Honest work changes none of the verifier's tools: every demo task's reference solution, verified in its
    container, leaves no finding and no exposure (its outcome aside: slow-report's verifier outlasts its time)."""
    sandbox = container_sandbox(task_base_images=task_base_images())
    for task in tasks.instances:
        evaluation = run_trial(tasks, task.instance_id, "oracle", tmp_path, store, sandbox=sandbox)
        assert evaluation.grading_mode == "in_container", evaluation.steps
        assert evaluation.audit == [], (task.instance_id, evaluation.audit)


# The cat first on PATH, and a directory where the image has a file: Podman then fails to list the container's
# changes (it stats the image's file as a directory), which would leave the tools unjudged.
UNLISTED_CAT = "rm /etc/debian_version && mkdir /etc/debian_version && touch /etc/debian_version/x && " + (
    LYING_CAT.format(path="/usr/local/bin/cat")
)


@pytest.mark.slow  # containers
def test_an_agent_that_keeps_the_engine_from_listing_its_changes_is_scored_against_it(tasks, container_sandbox, store):
    """Where the engine cannot tell what the agent changed of the verifier's tools, a pass is no verdict: a
    grading error, which the reference, graded at once, tells the agent's doing (`patch_broke_test_run`), in the
    agent's container and on a re-grade from its snapshot (whose own container lists only the re-grade's changes)."""
    task = tasks.instance("hello-file")
    sandbox = container_sandbox(task_base_images=task_base_images())
    environment = sandbox.prepare(task, tasks.environment_for(task), tasks.source)
    agent = make_agent("command", {"command": UNLISTED_CAT})
    generation = generate(task, agent, 0, environment, sandbox, store, test_timeout_s=60)
    assert generation.verification and generation.verification["reward_txt"].strip() == "1", "the tool lied"
    for timeout, mode in ((60, "in_container"), (61, "snapshot")):
        verdict = evaluate(task, tasks.environment_for(task), generation, environment, sandbox, store, timeout)
        assert (verdict.outcome, verdict.grading_mode) == (Outcome.PATCH_BROKE_TEST_RUN, mode), verdict.detail
        assert "the engine could not tell what the agent changed" in verdict.detail
