"""Interrupt a campaign mid-way, run it again: no finished trial runs twice, results match a clean run.

SIGKILL is a crash; SIGINT to the process group is a user's Ctrl-C, which must stop cleanly and say how to
resume.
"""

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

pytestmark = pytest.mark.slow  # end to end: `pytest -m "not slow"` leaves it out

VARIANTS = """
name: interrupted
benchmark: {kind: demo}
variants:
  - {name: oracle, agent: oracle}
  - {name: flaky, agent: flaky, params: {p: 0.5}}
seeds: 1
"""
# Six instances of the demo's eight (12 trials): enough to be killed mid-way and resumed.
CAMPAIGN = VARIANTS + "exclude: {instances: [eval-pipeline-demo__calclib-4, eval-pipeline-demo__textkit-4]}\n"
PLANNED = 12
# Two instances: what Ctrl-C must show needs only a few trials.
SMALL = (
    VARIANTS
    + """exclude: {instances: [eval-pipeline-demo__calclib-2, eval-pipeline-demo__calclib-3,
  eval-pipeline-demo__calclib-4, eval-pipeline-demo__textkit-2, eval-pipeline-demo__textkit-3,
  eval-pipeline-demo__textkit-4]}
"""
)


def start(env: dict[str, str], campaign: Path) -> subprocess.Popen:
    return subprocess.Popen(
        ["eval-pipeline", "run", "--campaign", str(campaign), "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(process: subprocess.Popen) -> dict:
    stdout, stderr = process.communicate(timeout=900)
    assert process.returncode == 0, stderr[-3000:]
    return json.loads(stdout)


def stored(artifacts: Path, kind: str) -> dict[str, tuple[str, int]]:
    """Each stored artifact's content hash and modification time."""
    directory = artifacts / kind
    if not directory.is_dir():
        return {}
    return {
        path.name: (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
        for path in directory.iterdir()
        if not path.name.startswith(".tmp-")
    }


def count(artifacts: Path, kind: str) -> int:
    """How many artifacts are stored: a listing, cheap enough to poll without letting a fast campaign finish
    between two looks (`stored` reads and hashes every file)."""
    directory = artifacts / kind
    return sum(not name.startswith(".tmp-") for name in os.listdir(directory)) if directory.is_dir() else 0


def results(home: Path) -> list[tuple]:
    with duckdb.connect(str(home / "eval_pipeline" / "results" / "interrupted.duckdb"), read_only=True) as db:
        return db.execute(
            "SELECT instance_id, trial, outcome, resolved, patch_sha256 FROM trials ORDER BY 1, 2"
        ).fetchall()


def _parents() -> dict[int, int]:
    """Every live process's parent, from /proc (state Z, a zombie, is not alive)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(stat.parent.name)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    parents, found = _parents(), [pid]
    for candidate in found:
        found += [child for child, parent in parents.items() if parent == candidate]
    return found[1:]


def alive(pid: int) -> bool:
    return pid in _parents()


def test_sigkill_mid_campaign_then_resume(tmp_path):
    campaign = tmp_path / "interrupted.yaml"
    campaign.write_text(CAMPAIGN)
    homes = {name: tmp_path / name for name in ("clean", "killed")}
    envs = {name: {**os.environ, "DAGSTER_HOME": str(home)} for name, home in homes.items()}
    for env in envs.values():
        env.pop("EVAL_PIPELINE_DATA_DIR", None)
    artifacts = homes["killed"] / "eval_pipeline" / "artifacts"

    clean = start(envs["clean"], campaign)
    killed = start(envs["killed"], campaign)
    deadline = time.monotonic() + 600
    while count(artifacts, "evaluation") < 4:
        assert killed.poll() is None, "the campaign finished before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)  # the command, its workers and any test process they started
    killed.wait()

    generations_before = stored(artifacts, "generation")
    evaluations_before = stored(artifacts, "evaluation")
    assert 4 <= len(evaluations_before) < PLANNED

    resumed = finish(start(envs["killed"], campaign))
    assert resumed["generation"]["computed"] == PLANNED - len(generations_before), "a finished generation ran again"
    assert resumed["evaluation"]["computed"] == PLANNED - len(evaluations_before), "a finished evaluation ran again"
    assert resumed["scored"] == resumed["planned"] == PLANNED
    generations_after = stored(artifacts, "generation")
    evaluations_after = stored(artifacts, "evaluation")
    assert all(generations_after[name] == before for name, before in generations_before.items()), (
        "an artifact was rewritten"
    )
    assert all(evaluations_after[name] == before for name, before in evaluations_before.items()), (
        "an artifact was rewritten"
    )
    assert len(generations_after) == len(evaluations_after) == PLANNED

    uninterrupted = finish(clean)
    assert uninterrupted["variants"] == resumed["variants"]
    assert results(homes["clean"]) == results(homes["killed"])


def test_ctrl_c_stops_at_once_without_a_traceback_and_says_how_to_resume(tmp_path):
    campaign = tmp_path / "interrupted.yaml"
    campaign.write_text(SMALL)
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home")}
    env.pop("EVAL_PIPELINE_DATA_DIR", None)
    artifacts = tmp_path / "home" / "eval_pipeline" / "artifacts"
    running = start(env, campaign)
    deadline = time.monotonic() + 600
    while count(artifacts, "generation") < 1:  # the first trial's first half: the run has most of its way to go
        assert running.poll() is None and time.monotonic() < deadline, "finished before it could be interrupted"
        time.sleep(0.05)
    workers = descendants(running.pid)
    assert workers, "the command runs its trials in worker processes"
    os.killpg(running.pid, signal.SIGINT)  # what a terminal sends on Ctrl-C to its foreground process group
    _, stderr = running.communicate(timeout=60)
    assert running.returncode == 130
    assert "Traceback" not in stderr
    assert stderr.rstrip().splitlines()[-1].endswith("Run the same command again to resume."), stderr[-2000:]
    deadline = time.monotonic() + 10  # a killed worker's running trial command ends at its next write or exit
    while (outliving := [pid for pid in workers if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert outliving == [], "no worker outlives the command"
    with DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        canceled = instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.CANCELED]))
        assert canceled and not any(run.status == DagsterRunStatus.STARTED for run in instance.get_runs())
        assert instance.event_log_storage.get_concurrency_run_ids() == set(), "no pool slot is left held"

    resumed = finish(start(env, campaign))
    assert resumed["scored"] == resumed["planned"] == 4
