"""Hostile agents in real containers: each is contained by the pod's isolation and limits, nothing else harmed."""

import pytest

from eval_pipeline.agents import make_agent
from eval_pipeline.generation import generate
from eval_pipeline.outcomes import Outcome
from eval_pipeline.sandbox import ResourceLimits
from eval_pipeline_tests.conftest import prepare_on


@pytest.fixture
def pod(container_sandbox, demo_benchmark):
    sandbox = container_sandbox(limits=ResourceLimits(memory_floor_mb=64, memory_ceiling_mb=256, pids=128))
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
        "echo x > /testbed/evil; echo x >> /opt/eval/limited_exec.py; echo x > /evil; "
        "mkdir -p /workspaces/slot1 && echo x > /workspaces/slot1/evil; echo x > README.md; true"
    )
    generation = run_agent(pod, store, command)
    assert generation.status == "completed"
    stderr = generation.trajectory[0]["stderr_tail"]
    assert stderr.count("Permission denied") >= 3, stderr
    assert "README.md" in generation.patch, "its own workspace is its to change"
    still_works(pod)


def test_a_fork_bomb_is_contained_by_the_pids_limit_and_the_time_limit(pod, store):
    generation = run_agent(pod, store, "bomb() { bomb | bomb & }; bomb; sleep 60", timeout_s=5)
    assert generation.status == Outcome.AGENT_TIMEOUT
    still_works(pod)


def test_gigabytes_of_output_are_capped_inside_the_container(pod, store):
    generation = run_agent(pod, store, "head -c 2000000000 /dev/zero; echo done >&2")
    assert generation.status == "completed"
    step = generation.trajectory[0]
    assert step["output_truncated"] is True and step["exit_code"] == 0
    assert len(step["stdout_tail"]) <= 2000
    still_works(pod)
