"""Faults injected for real into a campaign on the container engine, and hostile agents in containers.

Nothing here is mocked: pods are killed through the engine, the engine's API
service is stopped and started again, and agents run their hostile commands
inside real containers under the pod's limits.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

from eval_pipeline.agents import make_agent
from eval_pipeline.generation import generate
from eval_pipeline.outcomes import Outcome
from eval_pipeline.sandbox import ResourceLimits
from eval_pipeline_tests.conftest import prepare_on

REPO = Path(__file__).resolve().parents[1]
CAMPAIGN = """
name: {name}
slices:
  code-issues: {{kind: demo}}
variants:
  - {{name: oracle, agent: oracle}}
  - {{name: sleepy, agent: command, params: {{command: "sleep 2"}}}}
seeds: 1
sandbox: {{backend: {backend}}}
resources: {{memory_floor_mb: 128, memory_ceiling_mb: 512, cpu_ceiling: 1}}
retries: {{max_retries: 4, delay_s: 1, max_rerequests: 0}}
"""
PLANNED = 16


def start_campaign(tmp_path: Path, backend: str) -> tuple[subprocess.Popen, Path]:
    home = tmp_path / backend
    campaign = tmp_path / f"{backend}.yaml"
    campaign.write_text(CAMPAIGN.format(name="faults", backend=backend))
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    env.pop("EVAL_PIPELINE_DATA_DIR", None)
    process = subprocess.Popen(
        ["eval-pipeline", "run", "--campaign", str(campaign), "--json", "--workers", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, home


def results(home: Path) -> list[tuple]:
    with duckdb.connect(str(home / "eval_pipeline" / "results" / "faults.duckdb"), read_only=True) as db:
        return db.execute(
            "SELECT instance_id, trial, outcome, resolved, patch_sha256 FROM trials ORDER BY 1, 2"
        ).fetchall()


def kept_attempt_outcomes(home: Path) -> list[str]:
    """The outcome of every attempt kept under attempts/ (generation and evaluation alike)."""
    outcomes = []
    for path in (home / "eval_pipeline" / "artifacts" / "attempts").rglob("*.json"):
        payload = json.loads(path.read_text())["payload"]
        outcomes.append(payload.get("outcome") or payload.get("status"))
    return outcomes


def podman_service_pid() -> int | None:
    found = subprocess.run(["pgrep", "-f", "podman system service"], capture_output=True, text=True).stdout.split()
    return int(found[0]) if found else None


def stop_engine_briefly(seconds: float) -> None:
    """Stop Podman's API service (containers keep running under conmon), then start it again."""
    os.kill(podman_service_pid(), signal.SIGKILL)
    try:
        time.sleep(seconds)
    finally:
        subprocess.run(["bash", str(REPO / "scripts" / "start_container_engine.sh")], check=True, capture_output=True)


def wait_for(condition, what: str, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def running_agent_pod(engine):
    """A pod of the campaign in which an agent's `sleep` runs now, if any."""
    for pod in engine.containers.list(filters={"label": "eval_pipeline.campaign=faults"}):
        try:
            processes = pod.top()["Processes"]
        except Exception:  # noqa: BLE001 - a pod starting or stopping right now has no process list
            continue
        if any("sleep" in " ".join(process) for process in processes):
            return pod
    return None


def test_a_campaign_survives_a_killed_pod_and_an_engine_outage_with_clean_results(engine, tmp_path):
    if podman_service_pid() is None:
        pytest.skip("stopping the engine needs Podman's API service (scripts/start_container_engine.sh)")
    clean, clean_home = start_campaign(tmp_path, "local")
    faulted, home = start_campaign(tmp_path, "container")
    evaluations = home / "eval_pipeline" / "artifacts" / "evaluation"

    def finished_trials() -> int:
        return len(list(evaluations.glob("*.json"))) if evaluations.is_dir() else 0

    try:
        wait_for(lambda: finished_trials() >= 2 and running_agent_pod(engine) is not None, "a trial in progress")
        running_agent_pod(engine).kill()  # mid-trial: the agent's `sleep 2` runs in it
        wait_for(lambda: finished_trials() >= 6, "trials after the pod kill")
        stop_engine_briefly(3)
        stdout, stderr = faulted.communicate(timeout=1200)
        clean_stdout, clean_stderr = clean.communicate(timeout=1200)
    finally:
        for process in (faulted, clean):
            process.kill()
        for container in engine.containers.list(all=True, filters={"label": "eval_pipeline.campaign=faults"}):
            container.remove(force=True)
    assert faulted.returncode == 0, stderr[-3000:]
    assert clean.returncode == 0, clean_stderr[-3000:]
    summary = json.loads(stdout)

    assert summary["scored"] == summary["planned"] == PLANNED, "after the retries, nothing is lost"
    assert summary["generation"] == {"computed": PLANNED, "reused": 0, "failed": 0}, "no generation ran twice"
    assert results(home) == results(clean_home), "the final results equal a clean run's"
    kept = kept_attempt_outcomes(home)
    assert Outcome.SANDBOX_LOST in kept, f"the killed pod's attempt is kept: {sorted(set(kept))}"
    assert Outcome.ENGINE_ERROR in kept, f"the outage's attempt is kept: {sorted(set(kept))}"


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
