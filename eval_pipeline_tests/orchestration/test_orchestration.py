"""The CLI's driver in process: a cycle requests each run once, resumes from Dagster's record and the store's."""

import os
import platform
import shutil
import subprocess
import sys
from collections import Counter, deque
from dataclasses import replace
from types import SimpleNamespace

import pytest
from dagster import AssetKey, DagsterRunStatus, RunRequest, instance_for_test

from eval_pipeline.common.settings import Paths
from eval_pipeline.config.campaign import parse_campaign
from eval_pipeline.defs.group import ENVIRONMENT_POOL, MODEL_API_POOL
from eval_pipeline.defs.partitions import RANGE_END_TAG, RANGE_START_TAG, PartitionBatch
from eval_pipeline.defs.progress import REQUEST_TAG, next_step
from eval_pipeline.defs.stages import CYCLE_TAG, STAGE_TAG
from eval_pipeline.orchestration import campaign_run
from eval_pipeline.orchestration.campaign_run import create_pools, run_campaign
from eval_pipeline.orchestration.driver import MaterializationPoller, _launchable, new_cycle, run_one, stage_limits
from eval_pipeline.orchestration.errors import CampaignRunError
from eval_pipeline.orchestration.launchers import WorkerPoolLauncher
from eval_pipeline.orchestration.run_workers import environment_lanes, start_run_workers, stop_run_workers
from eval_pipeline.sandbox import local
from eval_pipeline.sandbox.interpreters import Interpreter
from eval_pipeline.trial.selection import SelectionError, TrialSelection
from eval_pipeline_tests.support.terminal_tasks import write_terminal_task

KEPT = ["eval-pipeline-demo__calclib-1", "eval-pipeline-demo__textkit-1"]


@pytest.fixture
def campaign(demo_benchmark):
    others = [task.instance_id for task in demo_benchmark.instances if task.instance_id not in KEPT]
    return parse_campaign(
        {
            "name": "driven",
            "benchmark": {"kind": "demo"},
            "variants": [{"name": "oracle", "agent": "oracle"}, {"name": "null", "agent": "null"}],
            "exclude": {"instances": others},
        },
        "test",
    )


def drive_once(campaign, instance, paths: Paths):
    cycle = new_cycle(campaign)
    run = run_campaign(campaign, instance, WorkerPoolLauncher(campaign, paths, instance, 1), cycle, paths)
    runs = cycle.runs(instance)
    assert len({r.tags[REQUEST_TAG] for r in runs}) == len(runs), "each request launched once"
    assert {r.tags[CYCLE_TAG] for r in runs} == {cycle.id}
    return run, [r.tags[STAGE_TAG] for r in reversed(runs)]  # in the order they were launched


def test_a_cycle_runs_what_is_missing_and_the_next_only_what_the_store_lost(campaign, tmp_path, monkeypatch):
    monkeypatch.delenv("EVAL_PIPELINE_ARTIFACTS", raising=False)
    paths = Paths(tmp_path / "data")
    with instance_for_test() as instance:
        first, stages = drive_once(campaign, instance, paths)
        assert stages == ["prepare", "environments", "trials", "environments", "trials", "results"], (
            "a batch per instance, started as soon as its environment is ready, before the next is prepared"
        )
        assert first.report.variants["oracle"].resolved_rate == 1.0 and first.report.scored == 4
        assert (first.generation.computed, first.evaluation.computed) == (4, 4)

        again, stages = drive_once(campaign, instance, paths)
        assert stages == ["prepare", "results"], "Dagster's record and the store agree: nothing to run"

        shutil.rmtree(paths.artifacts / "evaluation")  # the store lost every final evaluation
        shutil.rmtree(paths.artifacts / "scored")
        regraded, stages = drive_once(campaign, instance, paths)
        assert stages == ["prepare", "trials", "trials", "results"], "Dagster's record alone is not trusted"
        assert (regraded.generation.reused, regraded.evaluation.computed) == (4, 4), "patches are never lost"
        rates = [{name: (v.resolved_rate, v.n) for name, v in run.report.variants.items()} for run in (first, regraded)]
        assert rates[0] == rates[1]
        assert len(instance.get_materialized_partitions(AssetKey(["driven", "evaluation"]))) == 4


def test_an_environment_recorded_under_another_key_is_prepared_again_and_its_trials_scored(
    campaign, tmp_path, monkeypatch
):
    """The environment key the harness works out now decides, not Dagster's record that an environment was
    materialized: here the same interpreter is reached through another path (`python` where it was
    `python3.11`). Trusting the record, the trials ran in the old environment under keys no report reads, and
    a campaign of finished trials reported every one missing."""
    monkeypatch.delenv("EVAL_PIPELINE_ARTIFACTS", raising=False)
    paths = Paths(tmp_path / "data")
    with instance_for_test() as instance:
        first, _ = drive_once(campaign, instance, paths)
        link = tmp_path / "bin" / "python"
        link.parent.mkdir()
        link.symlink_to(sys.executable)
        monkeypatch.setattr(local, "find_interpreter", lambda version: Interpreter(link, platform.python_version()))

        again, stages = drive_once(campaign, instance, paths)
        assert stages == ["prepare", "environments", "trials", "environments", "trials", "results"]
        assert again.report.scored == first.report.scored == 4
        assert again.report.variants["oracle"].resolved_rate == 1.0

        _, stages = drive_once(campaign, instance, paths)
        assert stages == ["prepare", "results"], "prepared under the key expected, an environment is ready"


def test_an_environment_the_cycle_prepared_is_ready_whatever_key_it_recorded(campaign, tmp_path, monkeypatch):
    """The harness's view of the keys is worked out before the cycle, and an environment run can work out
    another later (a base image its instance's first build pulled changes the next ones' keys) or elsewhere (a
    Dagster server's run workers). Once the cycle has prepared an environment, its trials run there, rather
    than wait for a key no run of the cycle will record."""
    monkeypatch.delenv("EVAL_PIPELINE_ARTIFACTS", raising=False)
    worked_out = campaign_run.harness_view

    def never_recorded(specs, harness):
        view = worked_out(specs, harness)
        return replace(view, environment_keys=dict.fromkeys(view.environment_keys, "a key no run records"))

    monkeypatch.setattr(campaign_run, "harness_view", never_recorded)
    with instance_for_test() as instance:
        run, stages = drive_once(campaign, instance, Paths(tmp_path / "data"))
        assert stages == ["prepare", "environments", "trials", "environments", "trials", "results"]
        assert run.report.scored == 4 and run.report.variants["oracle"].resolved_rate == 1.0


def test_a_trial_that_fails_in_a_batch_fails_alone_and_only_it_runs_again(tmp_path, monkeypatch):
    """One run materializes a batch of 4 trials; the 2 whose grading fails are left unmaterialized, the others are
    materialized, and the next cycle runs exactly the 2 again, as one batch. (With the process environment the
    command sets, one planned event a run, Dagster shows the 2 as missing rather than failed: docs/OPERATIONS.md.) The oracle's gradings
    fail (its patch is the reference: a grading of it that judged nothing is the harness's, trial/evaluation.py)."""
    monkeypatch.delenv("EVAL_PIPELINE_ARTIFACTS", raising=False)
    monkeypatch.setenv(
        "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS", "1"
    )  # as the command runs, whatever ran before
    write_terminal_task(
        tmp_path / "tasks",
        "half",
        'if [ -f done ]; then echo "not a number"; else echo 0; fi > "$EVAL_REWARD_FILE"\n',
        solve_sh="touch done\n",
    )
    campaign = parse_campaign(
        {
            "name": "batched",
            "benchmark": {"kind": "terminal", "path": str(tmp_path / "tasks")},
            "variants": [{"name": "oracle", "agent": "oracle"}, {"name": "null", "agent": "null"}],
            "seeds": 2,
        },
        "test",
    )
    paths = Paths(tmp_path / "data")
    evaluation = AssetKey(["batched", "evaluation"])
    with instance_for_test() as instance:
        run, _ = drive_once(campaign, instance, paths)
        assert (run.evaluation.computed, run.evaluation.failed) == (2, 2)
        trial_runs = [run for run in instance.get_runs() if run.tags.get(STAGE_TAG) == "trials"]
        assert len(trial_runs) == 1 and trial_runs[0].tags[RANGE_START_TAG] == "half|oracle-s0"
        assert instance.get_materialized_partitions(evaluation) == {"half|null-s0", "half|null-s1"}

        cycle = new_cycle(campaign)
        run_one(instance, WorkerPoolLauncher(campaign, paths, instance, 1), cycle.request("prepare"))
        (again,) = next_step(instance, cycle).requests
        assert (again.tags[RANGE_START_TAG], again.tags[RANGE_END_TAG]) == ("half|oracle-s0", "half|oracle-s1")


def test_the_poller_gives_each_materialization_of_the_cycles_trials_once_and_none_of_another_cycles(
    campaign, tmp_path, monkeypatch
):
    """What lets the CLI tell a trial when it ends, not when its batch does."""
    monkeypatch.delenv("EVAL_PIPELINE_ARTIFACTS", raising=False)
    paths = Paths(tmp_path / "data")
    with instance_for_test() as instance:
        launcher = WorkerPoolLauncher(campaign, paths, instance, 1)
        cycle, other = new_cycle(campaign), new_cycle(campaign)
        run_one(instance, launcher, cycle.request("prepare"))
        run_one(instance, launcher, cycle.request("environments", KEPT[0]))
        poller = MaterializationPoller(instance, cycle)
        run_one(instance, launcher, other.request_trials(PartitionBatch(KEPT[0], ("oracle-s0",))))
        assert poller.poll() == {}, "another cycle's trials are not this one's to tell"
        run_one(instance, launcher, cycle.request_trials(PartitionBatch(KEPT[0], ("oracle-s0", "null-s0"))))
        told = poller.poll()
        assert {partition for _, partition in told} == {f"{KEPT[0]}|oracle-s0", f"{KEPT[0]}|null-s0"}
        assert told[("evaluation", f"{KEPT[0]}|null-s0")]["outcome"] == "unresolved"
        assert told[("generation", f"{KEPT[0]}|oracle-s0")]["reused"] is True, "the other cycle made the patch"
        assert poller.poll() == {}


@pytest.mark.slow
def test_the_worker_pool_starts_every_worker_at_once_and_leaves_none_behind(campaign, tmp_path, monkeypatch):
    """The workers import Dagster side by side from the start, not the second when the first trials are
    launched; closing the idle pool stops every one of them, rather than waiting on their teardown."""
    monkeypatch.delenv("EVAL_PIPELINE_ARTIFACTS", raising=False)
    with instance_for_test() as instance:
        launcher = WorkerPoolLauncher(campaign, Paths(tmp_path / "data"), instance, 2)
        workers = list(launcher._pool._processes.values())
        assert len(workers) == 2, "both workers were started before any run was launched"
        prepared = run_one(instance, launcher, new_cycle(campaign).request("prepare"))
        assert prepared.status == DagsterRunStatus.SUCCESS
        launcher.close()
        assert not [worker.pid for worker in workers if worker.is_alive()]
        assert instance.get_run_by_id(prepared.run_id).status == DagsterRunStatus.SUCCESS, "its record stays"

        starting = start_run_workers(campaign, Paths(tmp_path / "data"), 2, instance.get_ref())
        workers = list(starting._processes.values())
        stop_run_workers(starting)  # the command failed, or Ctrl-C came, while they were still importing
        assert not [worker.pid for worker in workers if worker.is_alive()], "not left to finish starting"


def test_pool_slots_held_by_runs_that_are_over_or_gone_are_freed_at_start():
    """A run whose worker was killed keeps its pool slots; every later run of that pool would wait forever."""
    with instance_for_test() as instance:
        create_pools(instance)
        instance.event_log_storage.claim_concurrency_slot(ENVIRONMENT_POOL, "a-run-killed-long-ago", "environment")
        assert instance.event_log_storage.get_concurrency_run_ids() == {"a-run-killed-long-ago"}
        create_pools(instance)
        assert instance.event_log_storage.get_concurrency_run_ids() == set()


def test_a_selection_runs_exactly_its_trials_and_the_whole_campaign_then_only_the_rest(campaign, tmp_path, monkeypatch):
    """`run --instance X --variant Y`: the very partitions of the whole campaign, so the next whole run finds them
    done and runs only the others; the results and the report stay the whole campaign's."""
    monkeypatch.delenv("EVAL_PIPELINE_ARTIFACTS", raising=False)
    paths = Paths(tmp_path / "data")
    selection = TrialSelection(instances=(KEPT[1],), variants=("oracle",))
    with instance_for_test() as instance:
        cycle = new_cycle(campaign)
        launcher = WorkerPoolLauncher(campaign, paths, instance, 1)
        said, shown = [], []
        subset = run_campaign(campaign, instance, launcher, cycle, paths, said.append, selection, shown.append)
        assert len(shown) == 2, "the tally is handed over at once and again as its one trial ends"
        assert shown[-1]().startswith("1/1 done · 1 resolved · "), shown[-1]()
        assert not [line for line in said if line.startswith("[")], "a scored trial is shown, not said"
        assert any("(selected: 1)" in line for line in said)
        evaluated = instance.get_materialized_partitions(AssetKey(["driven", "evaluation"]))
        assert evaluated == {f"{KEPT[1]}|oracle-s0"}
        assert (subset.generation.computed, subset.evaluation.computed) == (1, 1)
        stages = [r.tags[STAGE_TAG] for r in reversed(cycle.runs(instance))]
        assert stages == ["prepare", "environments", "trials", "results"], "only the selected instance's environment"
        assert subset.report.planned == 4 and subset.report.scored == 1, "the report is the whole campaign's"

        whole, stages = drive_once(campaign, instance, paths)
        assert (whole.generation.computed, whole.evaluation.computed) == (3, 3), "the selected trial is not run again"
        assert whole.report.scored == 4


def test_a_selection_naming_what_the_campaign_lacks_is_refused_before_anything_runs(campaign, tmp_path, monkeypatch):
    monkeypatch.delenv("EVAL_PIPELINE_ARTIFACTS", raising=False)
    paths = Paths(tmp_path / "data")
    with instance_for_test() as instance:
        cycle = new_cycle(campaign)
        launcher = WorkerPoolLauncher(campaign, paths, instance, 1)
        with pytest.raises(SelectionError, match="--variant nope: not in the campaign .*oracle"):
            run_campaign(campaign, instance, launcher, cycle, paths, selection=TrialSelection(variants=("nope",)))
        assert [r.tags[STAGE_TAG] for r in cycle.runs(instance)] == ["prepare"]


def _request(stage: str, name: str) -> RunRequest:
    """A request as the driver gets it from `next_step` (a cycle's)."""
    campaign = parse_campaign(
        {"name": "lanes", "benchmark": {"kind": "demo"}, "variants": [{"name": "n", "agent": "null"}]}, "lanes.yaml"
    )
    return new_cycle(campaign).request(stage, name)


@pytest.mark.parametrize(
    ("capacity", "lanes", "running", "queue", "expected"),
    [
        # one trial at a time in containers: the next environment is prepared while a trial runs ...
        (1, 1, {"trials": 1}, ["trials:b", "environments:c"], "environments:c"),
        # ... but one at a time, and the next trials wait for the trial slot
        (1, 1, {"trials": 1, "environments": 1}, ["trials:b", "environments:d"], None),
        # with nothing to run yet, environments take the lane, then the trial slots
        (1, 1, {}, ["environments:a", "environments:b"], "environments:a"),
        (1, 1, {"environments": 1}, ["environments:b", "environments:c"], "environments:b"),
        (1, 1, {"environments": 2}, ["trials:a", "environments:c"], None),
        # trials whose environment is ready come first where there is no lane (the local backend)
        (2, 0, {"trials": 1}, ["trials:b", "environments:c"], "trials:b"),
        (2, 0, {"trials": 1, "environments": 1}, ["trials:b"], None),
        # never past a stage's pool (here 2 of each): a run launched there would only spin, waiting for a slot
        (4, 1, {"environments": 2}, ["environments:c", "trials:a"], "trials:a"),
        (4, 1, {"environments": 2}, ["environments:c", "environments:d"], None),
        (4, 0, {"trials": 2}, ["trials:b", "environments:c"], "environments:c"),
    ],
)
def test_the_driver_prepares_environments_in_their_lane_while_trials_run(capacity, lanes, running, queue, expected):
    launcher = SimpleNamespace(capacity=capacity, environment_lanes=lanes)
    requests = deque(_request(*name.split(":")) for name in queue)
    chosen = _launchable(requests, launcher, Counter(running), {"environments": 2, "trials": 2})
    assert (chosen and f"{chosen.tags[STAGE_TAG]}:{chosen.run_key.rsplit(':', 1)[1]}") == expected


def test_only_a_campaign_in_containers_has_an_environment_lane():
    local = parse_campaign(
        {"name": "local", "benchmark": {"kind": "demo"}, "variants": [{"name": "n", "agent": "null"}]}, "local.yaml"
    )
    pods = parse_campaign(
        {
            "name": "pods",
            "benchmark": {"kind": "demo"},
            "variants": [{"name": "n", "agent": "null"}],
            "sandbox": {"backend": "container", "mode": "pod"},
        },
        "pods.yaml",
    )
    assert (environment_lanes(local), environment_lanes(pods)) == (0, 1)


FORKED_OR_SPAWNED = """
import sys
from pathlib import Path
from eval_pipeline.common.settings import Paths
from eval_pipeline.config.campaign import load_campaign
from eval_pipeline.orchestration import run_workers
campaign, paths = load_campaign("demo"), Paths(Path(sys.argv[1]))
for _ in range(2):  # as calibrate does, a session per multiplier
    pool = run_workers.embedded_run_workers(campaign, paths, 2)
    print(pool._mp_context.get_start_method())
    run_workers.stop_run_workers(pool)
    run_workers.open_dagster_instance()
"""


def test_the_command_forks_its_workers_only_until_it_has_opened_an_instance(tmp_path):
    """Forked workers would share what their parent holds open (database connections, cached store and engine
    clients): the command forks them while it has opened no instance; once it has (calibrate's next multiplier),
    they are spawned."""
    env = {key: value for key, value in os.environ.items() if key != "EVAL_PIPELINE_DAGSTER_URL"}
    (home := tmp_path / "home").mkdir()
    code = [sys.executable, "-c", FORKED_OR_SPAWNED, str(tmp_path / "data")]
    started = subprocess.run(code, capture_output=True, text=True, env={**env, "DAGSTER_HOME": str(home)})
    assert started.stdout.split() == ["fork", "spawn"], started.stderr[-2000:]


def test_the_driver_takes_each_stage_s_pool_limit_and_refuses_a_pool_with_no_slot():
    with instance_for_test() as instance:
        assert stage_limits(instance) == {}  # no pool, no limit
        instance.event_log_storage.set_concurrency_slots(ENVIRONMENT_POOL, 3)
        instance.event_log_storage.set_concurrency_slots(MODEL_API_POOL, 5)
        assert stage_limits(instance) == {"environments": 3, "trials": 5}
        instance.event_log_storage.set_concurrency_slots(ENVIRONMENT_POOL, 0)
        with pytest.raises(CampaignRunError, match=f"{ENVIRONMENT_POOL} has a limit of 0"):
            stage_limits(instance)
