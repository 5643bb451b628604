"""End to end through `dagster dev` and its GraphQL API, as a user works in the UI.

- A backfill of trial partitions runs while a real storage fault blocks one
  trial's generation artifact; that partition fails (storage_error, an
  infrastructure outcome), the others succeed; the fault is removed and
  "re-execute from failure" runs exactly the failed partition, regenerating
  nothing that finished.
- A run worker is SIGKILLed while its agent works; the instance's run retries
  (dagster.yaml) launch the run again, and the trial completes.
"""

import contextlib
import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, RunsFilter

from eval_pipeline.common.settings import Paths
from eval_pipeline.config.campaign import load_campaign
from eval_pipeline.datasets.sources import load_portfolio
from eval_pipeline.orchestration.launchers import partition_tags
from eval_pipeline.trial.spec import agent_timeout_s, generation_key
from eval_pipeline_tests.support.cli import eval_pipeline_cli
from eval_pipeline_tests.support.dagster_dev import LAUNCH, REPO, RUN_STATUS, running_dagster_dev

pytestmark = pytest.mark.slow  # end to end: `pytest -m "not slow"` leaves it out

DOOMED_SLEEP = "21.5"  # seconds: long enough to be found and killed, short enough for the retry to finish
CAMPAIGN = """
name: e2e
benchmark: {{kind: demo}}
variants:
  - {{name: oracle, agent: oracle}}
  # Each run of it waits a while (its `sleep` is how the test finds it): the first is killed with its worker.
  - {{name: doomed, agent: command, params: {{command: "sleep {doomed_sleep}"}}}}
seeds: 1
sandbox: {{allow_untrusted_agents_locally: true}}  # the command agent on the (default) local backend
retries: {{max_retries: 1, delay_s: 0, max_rerequests: 0}}
"""
# A campaign of one trial that the `eval-pipeline` command runs through the same server.
CLI_CAMPAIGN = """
name: cli
benchmark: {kind: demo}
variants: [{name: oracle, agent: oracle}]
exclude: {instances: [eval-pipeline-demo__calclib-2, eval-pipeline-demo__calclib-3, eval-pipeline-demo__calclib-4,
  eval-pipeline-demo__textkit-1, eval-pipeline-demo__textkit-2, eval-pipeline-demo__textkit-3,
  eval-pipeline-demo__textkit-4]}
"""
CLI_RUNS = """query { runsOrError(filter: {tags: [{key: "eval_pipeline/trigger", value: "cli"}]}) {
  ... on Runs { results { jobName status repositoryOrigin { repositoryLocationName } } } } }"""
INSTANCES = ["eval-pipeline-demo__calclib-1", "eval-pipeline-demo__calclib-2", "eval-pipeline-demo__textkit-1"]
TRIALS = [f"{instance}|oracle-s0" for instance in INSTANCES]
REEXECUTE = """mutation($params: ReexecutionParams!) { reexecutePartitionBackfill(reexecutionParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory):
    """One `dagster dev` for the module (it takes a while to start), on the repository's dagster.yaml."""
    tmp_path = tmp_path_factory.mktemp("dagster_dev")
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    campaign = tmp_path / "e2e.yaml"
    campaign.write_text(CAMPAIGN.format(doomed_sleep=DOOMED_SLEEP))
    (tmp_path / "cli.yaml").write_text(CLI_CAMPAIGN)
    campaigns = f"{campaign},{tmp_path / 'cli.yaml'}"
    env = {**os.environ, "DAGSTER_HOME": str(home), "EVAL_PIPELINE_CAMPAIGNS": campaigns}
    env.pop("EVAL_PIPELINE_DATA_DIR", None)
    with running_dagster_dev(env, tmp_path / "dagster_dev.log") as server:
        yield server, home, campaign


def run_partitions(run) -> list[str]:
    """The partition a run targets, or the ends of its partition range (a batch of trials)."""
    if "dagster/partition" in run.tags:
        return [run.tags["dagster/partition"]]
    ends = (run.tags["dagster/asset_partition_range_start"], run.tags["dagster/asset_partition_range_end"])
    return list(dict.fromkeys(ends))


def asset(name: str) -> list[dict]:
    return [{"path": ["e2e", name]}]


def test_backfill_fails_one_partition_on_a_fault_and_reexecution_runs_only_that_one(dagster_dev):
    server, home, campaign_path = dagster_dev
    data = Paths(home / "eval_pipeline")
    server.run_job("e2e__prepare_job")
    server.run_jobs("e2e__environments_job", [{"dagster/partition": instance} for instance in INSTANCES])

    # The fault: a directory where one trial's generation artifact must be written.
    campaign = load_campaign(str(campaign_path))
    portfolio = load_portfolio(campaign.slices, data)
    blocked_task = portfolio.instance(INSTANCES[1])
    blocked = data.artifacts / generation_key(
        blocked_task.content_hash, campaign.variants[0].make_agent().config, 0, agent_timeout_s(blocked_task)
    )
    blocked.mkdir(parents=True)

    trials = asset("generation") + asset("evaluation")
    first_id, status = server.backfill(LAUNCH, {"assetSelection": trials, "partitionNames": TRIALS})
    assert status == "COMPLETED_FAILED"
    with DagsterInstance.from_config(str(home)) as instance:
        evaluated = instance.get_materialized_partitions(AssetKey(["e2e", "evaluation"]))
        assert evaluated == {TRIALS[0], TRIALS[2]}, "the faulted partition failed, the others finished"
        failed_runs = instance.get_runs(RunsFilter(tags={"dagster/backfill": first_id}, statuses=[]))
        assert any(run.status.value == "FAILURE" for run in failed_runs)

    blocked.rmdir()
    second_id, status = server.backfill(REEXECUTE, {"parentRunId": first_id, "strategy": "FROM_FAILURE"})
    assert status == "COMPLETED_SUCCESS"
    with DagsterInstance.from_config(str(home)) as instance:
        rerun = instance.get_runs(RunsFilter(tags={"dagster/backfill": second_id}))
        assert [run_partitions(run) for run in rerun] == [[TRIALS[1]]], "only the failed partition ran"
        assert instance.get_materialized_partitions(AssetKey(["e2e", "evaluation"])) == set(TRIALS)
        generations = instance.fetch_materializations(AssetKey(["e2e", "generation"]), limit=100).records
        assert len(generations) == 3, "nothing that finished was generated again"


def doomed_agents() -> dict[int, int]:
    """Each running `sleep` of the doomed agent, with the run worker above it (found through /proc: the agent
    may write nowhere outside its workspace, so it cannot tell the test where it is)."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if (entry / "cmdline").read_bytes() == f"sleep\0{DOOMED_SLEEP}\0".encode():
                found[int(entry.name)] = worker_above(int(entry.name))
    return found


def worker_above(pid: int) -> int:
    """The nearest process above `pid` that is neither the command's own shell nor the runner that started it
    (sandbox/command_runner.py): the run worker whose trial ran the agent's command."""
    while pid > 1:
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if not cmdline.startswith((b"/bin/sh\0", b"sh\0", b"sleep\0")) and b"--serve" not in cmdline.split(b"\0"):
            return pid
    raise AssertionError("no run worker above the agent")


# Dagster's run-retry daemon keeps a cursor into the event log per event type, and on its first look sets it
# past every event already stored: a failure before that look is never retried. Under CI's load the daemon
# once took over 3 minutes to look first, and the crash below went unretried.
RETRY_DAEMON_CURSOR = "EVENT_LOG_CONSUMER_CURSOR-PIPELINE_FAILURE"


def wait_for_the_retry_daemon(home: Path) -> None:
    with DagsterInstance.from_config(str(home)) as instance:
        deadline = time.monotonic() + 300
        while not instance.daemon_cursor_storage.get_cursor_values({RETRY_DAEMON_CURSOR}):
            assert time.monotonic() < deadline, "the run-retry daemon never looked at the event log"
            time.sleep(1)


def test_a_sigkilled_run_worker_is_launched_again_and_its_trial_completes(dagster_dev):
    server, home, _ = dagster_dev
    wait_for_the_retry_daemon(home)
    server.run_job("e2e__prepare_job")
    server.run_job("e2e__environments_job", {"dagster/partition": INSTANCES[0]})

    crashed = server.launch_run("e2e__trials_job", partition_tags(f"{INSTANCES[0]}|doomed-s0"))
    deadline = time.monotonic() + 300
    while not (first := doomed_agents()):
        assert time.monotonic() < deadline, "the agent never started"
        time.sleep(0.05)
    ((first_agent, worker),) = first.items()
    os.kill(worker, signal.SIGKILL)
    server.wait(RUN_STATUS, lambda d: d["runOrError"]["status"] == "FAILURE", id=crashed)

    with DagsterInstance.from_config(str(home)) as instance:
        deadline = time.monotonic() + 300
        while not (retries := instance.get_runs(RunsFilter(tags={"dagster/parent_run_id": crashed}))):
            assert time.monotonic() < deadline, "the crashed run was not launched again"
            time.sleep(1)
        while not [pid for pid in doomed_agents() if pid != first_agent]:
            assert time.monotonic() < deadline, "the agent that never finished did not run again in the retry"
            time.sleep(0.05)
        assert server.finished(retries[0].run_id) == "SUCCESS"
        assert retries[0].tags.get("dagster/retry_number") == "1"
        key = f"{INSTANCES[0]}|doomed-s0"
        assert key in instance.get_materialized_partitions(AssetKey(["e2e", "evaluation"]))


def test_the_command_launches_through_the_server_so_its_runs_are_the_code_locations(dagster_dev):
    """With EVAL_PIPELINE_DAGSTER_URL, `eval-pipeline run` launches as the UI does: each run carries the code
    location's origin, which the Overview timeline and the Jobs page need."""
    server, home, campaign = dagster_dev
    env = {**os.environ, "DAGSTER_HOME": str(home), "EVAL_PIPELINE_DAGSTER_URL": server.url}
    env.pop("EVAL_PIPELINE_DATA_DIR", None)
    result = eval_pipeline_cli(env, "run", "--campaign", str(campaign.parent / "cli.yaml"), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (json.loads(result.stdout)["planned"], json.loads(result.stdout)["scored"]) == (1, 1)
    runs = server.query(CLI_RUNS)["runsOrError"]["results"]
    assert sorted(run["jobName"] for run in runs) == [
        "cli__environments_job",
        "cli__prepare_job",
        "cli__results_job",
        "cli__trials_job",
    ]
    assert {run["repositoryOrigin"]["repositoryLocationName"] for run in runs} == {"eval_pipeline"}
    assert {run["status"] for run in runs} == {"SUCCESS"}
