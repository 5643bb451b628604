"""Faults injected for real into a campaign on the container engine.

Nothing here is mocked: a pod is killed through the engine while an agent
works in it, the engine's API service is stopped and started again, and
stored artifacts are truncated and corrupted on disk. After the automatic
retries and one resume, the campaign's results equal a clean run's, and no
generation that finished ran again.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

from eval_pipeline.common.outcomes import Outcome

pytestmark = pytest.mark.slow  # end to end: `pytest -m "not slow"` leaves it out

REPO = Path(__file__).resolve().parents[2]
CAMPAIGN = """
name: {name}
slices:
  code-issues: {{kind: demo}}
variants:
  - {{name: oracle, agent: oracle}}
  - {{name: sleepy, agent: command, params: {{command: "{agent_command}"}}}}
seeds: 1
sandbox: {{backend: {backend}{opt_in}}}
resources: {{memory_floor_mb: 128, memory_ceiling_mb: 512, cpu_ceiling: 1}}
retries: {{max_retries: 4, delay_s: 1, max_rerequests: 0}}
"""
PLANNED = 16
AGENT_COMMAND = "sleep 4"
# The clean run on the local backend takes the opt-in that untrusted agents (`command`) need there.
LOCAL_OPT_IN = {"local": ", allow_untrusted_agents_locally: true"}


def start_campaign(tmp_path: Path, backend: str) -> tuple[subprocess.Popen, Path]:
    """Run (or resume) the campaign on `backend` under its own DAGSTER_HOME."""
    home = tmp_path / backend
    campaign = tmp_path / f"{backend}.yaml"
    campaign.write_text(
        CAMPAIGN.format(
            name="faults", backend=backend, opt_in=LOCAL_OPT_IN.get(backend, ""), agent_command=AGENT_COMMAND
        )
    )
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    env.pop("EVAL_PIPELINE_DATA_DIR", None)
    process = subprocess.Popen(
        ["eval-pipeline", "run", "--campaign", str(campaign), "--json", "--workers", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / f"{backend}.log", "a"),  # noqa: SIM115 - a file, so a full pipe never blocks it
        text=True,
    )
    return process, home


def summary_of(process: subprocess.Popen, tmp_path: Path, backend: str) -> dict:
    stdout, _ = process.communicate(timeout=1200)
    assert process.returncode == 0, (tmp_path / f"{backend}.log").read_text()[-3000:]
    return json.loads(stdout)


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


def forged(envelope: dict) -> dict:
    """The stored evaluation with its verdict flipped and its checksum left as it was."""
    payload = envelope["payload"]
    payload["outcome"] = Outcome.UNRESOLVED if payload["outcome"] == Outcome.RESOLVED else Outcome.RESOLVED
    return envelope


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


def wait_for(condition, what: str, campaign: subprocess.Popen, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert campaign.poll() is None, f"the campaign ended while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def running_agent_pod(engine):
    """A pod of the campaign in which an agent's `sleep` runs now, if any.

    Read from /proc inside the pod: the engine's `top` needs a `ps` that a minimal base image lacks.
    """
    for pod in engine.containers.list(filters={"label": "eval_pipeline.campaign=faults"}):
        try:
            listing = pod.exec_run(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"]).output
        except Exception:  # noqa: BLE001 - a pod starting or stopping right now has no process list
            continue
        if AGENT_COMMAND.encode() in listing:
            return pod
    return None


def test_a_campaign_survives_a_killed_pod_an_engine_outage_and_corrupt_artifacts(engine, tmp_path):
    if podman_service_pid() is None:
        pytest.skip("stopping the engine needs Podman's API service (scripts/start_container_engine.sh)")
    clean, clean_home = start_campaign(tmp_path, "local")
    faulted, home = start_campaign(tmp_path, "container")
    evaluations = home / "eval_pipeline" / "artifacts" / "evaluation"

    def finished_trials() -> int:
        return len(list(evaluations.glob("*.json"))) if evaluations.is_dir() else 0

    try:
        busy_pods = []

        def agent_at_work() -> None:
            wait_for(lambda: busy_pods.append(running_agent_pod(engine)) or busy_pods[-1], "an agent at work", faulted)

        agent_at_work()
        busy_pods[-1].kill()  # mid-trial: the agent's command runs in it
        wait_for(lambda: finished_trials() >= 10, "trials after the pod kill", faulted)
        agent_at_work()
        stop_engine_briefly(3)  # mid-trial too: the agent's command stream is cut
        summary = summary_of(faulted, tmp_path, "container")
        assert summary_of(clean, tmp_path, "local")["scored"] == PLANNED

        assert summary["scored"] == summary["planned"] == PLANNED, "after the retries, nothing is lost"
        assert summary["generation"] == {"computed": PLANNED, "reused": 0, "failed": 0}, "no generation ran twice"
        assert results(home) == results(clean_home), "the final results equal a clean run's"
        kept = kept_attempt_outcomes(home)
        assert Outcome.SANDBOX_LOST in kept, f"the killed pod's attempt is kept: {sorted(set(kept))}"
        assert Outcome.ENGINE_ERROR in kept, f"the outage's attempt is kept: {sorted(set(kept))}"

        truncated, corrupted = sorted(evaluations.glob("*.json"))[:2]
        truncated.write_bytes(truncated.read_bytes()[:100])
        corrupted.write_text(json.dumps(forged(json.loads(corrupted.read_text()))))
        resumed = summary_of(start_campaign(tmp_path, "container")[0], tmp_path, "container")
    finally:
        for process in (faulted, clean):
            process.kill()
        for container in engine.containers.list(all=True, filters={"label": "eval_pipeline.campaign=faults"}):
            container.remove(force=True)
    assert resumed["evaluation"]["computed"] == 2, (
        "both damaged evaluations failed their checksum and were graded again"
    )
    assert resumed["generation"] == {"computed": 0, "reused": 2, "failed": 0}, "without regenerating"
    assert len(list((home / "eval_pipeline" / "artifacts" / "quarantine").rglob("*.json.*"))) == 2
    assert results(home) == results(clean_home)
