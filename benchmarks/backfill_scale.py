"""A backfill of every trial partition of a 16k-trial campaign through `dagster dev`: how fast its runs are
queued, how Dagster cuts it into runs, and how fast a cancel stops it.

    PYTHONPATH=$PWD python benchmarks/backfill_scale.py [--instances 500] [--seeds 32] [--batch-size 64]
        [--postgres URL] [--dagster-postgres-storage] [--planned-per-partition]

The campaign: `instances` synthetic SWE-bench rows (a JSONL file) x `seeds` seeds
of the null agent, `batches.size` = `batch-size`, on a fresh DAGSTER_HOME with
the repository's dagster.yaml, whose queued run coordinator dequeues at most
`--run-queue` runs at once (default 0: runs stay queued, as if they executed on
a cluster, so that the daemon does not share this machine's 2 cores with
them). The prepare job registers the partitions (run in process, before
`dagster dev` starts); environments are never built, so a trial run that
starts fails fast: only queueing and cancelling are measured.

Two backfills of all trial partitions (generation + evaluation), one after the
other, launched through GraphQL's `launchPartitionBackfill` as the UI does:

- The first is left to create every run. Figures: `launch_s` (the mutation
  itself), `first_run_s` and `all_runs_s` (from the mutation until the first
  and the last of its runs was created, from the runs' creation times),
  `runs` against `partitions`, and how Dagster cut the partitions into runs
  (`run_shapes`: runs by number of partitions, instances and trials each, and
  whether a run carries range tags or a single `dagster/partition` tag). The
  backfill counts as fully created when its requested subset covers its whole
  target. It is then cancelled, which cancels its queued runs:
  `cancel_queued_s` is the time until it is CANCELED.
- The second is cancelled as soon as its first run exists, mid-submission:
  the clean case of a cancel racing the daemon's submission. Figures:
  `runs_after_cancel` (created after the cancel mutation), `last_run_after_cancel_s`
  (from the cancel to the last run created), `canceled_s` (until its status is
  CANCELED), and `runs` in all. Its runs are counted until no new one appears
  for `--settle-s` seconds.

The instance is SQLite under the fresh DAGSTER_HOME, or a fresh database on
the PostgreSQL server at `--postgres` (a URL as scripts/start_postgres.sh
prints; the role may create databases), through the storage eval-pipeline
configures (orchestration/postgres_storage.py: one connection held per
process) or, with `--dagster-postgres-storage`, Dagster's own (a connection
per query). `dagster dev` runs with the
environment eval-pipeline sets for itself and k8s/values.yaml sets for the
daemon (`PROCESS_ENVIRONMENT`: one planned event per asset and run);
`--planned-per-partition` leaves it out, for Dagster's default of one per
asset and partition.

Issue 20's targets: every run of a 16k-partition backfill queued within 2
minutes (`all_runs_s` <= 120); a cancel stops new runs within 30 s
(`last_run_after_cancel_s` <= 30). Runs created by the instance's run retries
(tagged `dagster/parent_run_id`) are not counted.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import requests
import yaml
from dagster import DagsterInstance, RunRecord, RunsFilter
from dagster._core.execution.backfill import BulkActionStatus  # not exported by dagster itself

from eval_pipeline.common.settings import Paths
from eval_pipeline.config.campaign import load_campaign
from eval_pipeline.defs import build_definitions, stage_job_name
from eval_pipeline.orchestration.instance_config import PROCESS_ENVIRONMENT, pooled_postgres_storage

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[1]
CAMPAIGN = "backfill_scale"
BACKFILL_TAG, PARENT_RUN_TAG, PARTITION_TAG = "dagster/backfill", "dagster/parent_run_id", "dagster/partition"
RANGE_START_TAG, RANGE_END_TAG = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
LAUNCH_BACKFILL = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
CANCEL_BACKFILL = """mutation($id: String!) { cancelPartitionBackfill(backfillId: $id) {
  __typename ... on PythonError { message } } }"""
DIFF = "diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}\n"


def write_rows(path: Path, instances: int) -> None:
    """`instances` rows in SWE-bench's schema, all of one repository and version (never cloned)."""
    with path.open("w") as rows:
        for index in range(instances):
            row = {
                "instance_id": f"synthetic__calc-{index}",
                "repo": "synthetic/calc",
                "base_commit": f"{index:040x}",
                "environment_setup_commit": f"{index:040x}",
                "version": "1.0",
                "created_at": "2026-11-23T00:00:00Z",
                "problem_statement": f"add() is wrong for input {index}",
                "hints_text": "",
                "patch": DIFF.format(path="calc.py", old="return a - b", new="return a + b"),
                "test_patch": DIFF.format(
                    path="test_calc.py", old="pass", new=f"assert add({index}, 1) == {index + 1}"
                ),
                "FAIL_TO_PASS": json.dumps(["test_calc.py::test_add"]),
                "PASS_TO_PASS": json.dumps([]),
            }
            rows.write(json.dumps(row) + "\n")


def write_campaign(
    directory: Path, instances: int, seeds: int, batch_size: int, name: str = CAMPAIGN, **settings: Any
) -> Path:
    """`instances` synthetic rows x `seeds` seeds of the null agent, batches of `batch_size`, and `settings`
    (by default none of the retry sensor's own runs, which would add runs as trials fail)."""
    rows = directory / "rows.jsonl"
    write_rows(rows, instances)
    campaign = {
        "name": name,
        "benchmark": {
            "kind": "swebench",
            "path": str(rows),
            "environments": {"synthetic/calc@1.0": {"python": "3.11"}},  # SWE-bench has no spec for this repo
        },
        "variants": [{"name": "null", "agent": "null"}],
        "seeds": seeds,
        "batches": {"size": batch_size},
        **(settings or {"retries": {"max_rerequests": 0}}),
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(campaign))
    return path


def trial_partitions(campaign_path: Path, instances: int) -> list[str]:
    """Every trial partition key, instance by instance in the dataset's order."""
    trials = [trial.key for trial in load_campaign(str(campaign_path)).trials]
    return [f"synthetic__calc-{index}|{trial}" for index in range(instances) for trial in trials]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DagsterServer:
    """A Dagster webserver's GraphQL API, as the UI calls it."""

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, text: str, **variables: Any) -> dict:
        response = requests.post(f"{self.url}/graphql", json={"query": text, "variables": variables}, timeout=900)
        response.raise_for_status()
        body = response.json()
        if "errors" in body:
            raise RuntimeError(f"GraphQL errors: {body['errors']}")
        return body["data"]


class DagsterDev(DagsterServer):
    def launch_backfill(self, assets: list[str], partitions: list[str]) -> str:
        selection = [{"path": [CAMPAIGN, name]} for name in assets]
        params = {"assetSelection": selection, "partitionNames": partitions, "title": "backfill_scale"}
        launched = self.query(LAUNCH_BACKFILL, params=params)["launchPartitionBackfill"]
        if launched["__typename"] != "LaunchBackfillSuccess":
            raise RuntimeError(f"launchPartitionBackfill: {launched}")
        return launched["backfillId"]

    def cancel_backfill(self, backfill_id: str) -> None:
        cancelled = self.query(CANCEL_BACKFILL, id=backfill_id)["cancelPartitionBackfill"]
        if cancelled["__typename"] != "CancelBackfillSuccess":
            raise RuntimeError(f"cancelPartitionBackfill: {cancelled}")


def wait_for(probe: Callable[[], T], done: Callable[[T], bool], timeout_s: float, what: str, every_s: float = 1) -> T:
    """Call `probe` every `every_s` seconds until `done` holds for its value."""
    deadline = time.monotonic() + timeout_s
    while not done(value := probe()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: still {value!r} after {timeout_s} s")
        time.sleep(every_s)
    return value


@contextmanager
def running_server(command: list[str], env: dict[str, str], log: Path) -> Iterator[str]:
    """`command` (a Dagster server taking -h and -p) from the repository root with `env`, until it serves; its
    URL. Its process group is killed when the block ends, however it ends."""
    port = free_port()
    with log.open("w") as log_file:
        process = subprocess.Popen(
            [*command, "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: serving(url, process, command), bool, 300, f"{command[-1]} to serve")
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def serving(url: str, process: subprocess.Popen, command: list[str]) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"{' '.join(command)} exited with code {process.returncode}")
    try:
        return requests.get(f"{url}/server_info", timeout=5).ok
    except requests.ConnectionError:
        return False


def backfill_runs(instance: DagsterInstance, backfill_id: str) -> list[RunRecord]:
    """The backfill's own runs, in creation order (the run retries' runs left out)."""
    records = instance.get_run_records(RunsFilter(tags={BACKFILL_TAG: backfill_id}))
    return sorted((r for r in records if PARENT_RUN_TAG not in r.dagster_run.tags), key=lambda r: r.create_timestamp)


def fully_requested(instance: DagsterInstance, backfill_id: str) -> bool:
    backfill = instance.get_backfill(backfill_id)
    data = backfill.asset_backfill_data if backfill else None
    if data is None:
        return False
    requested = data.requested_subset.num_partitions_and_non_partitioned_assets
    return requested >= data.target_subset.num_partitions_and_non_partitioned_assets


def backfill_status(instance: DagsterInstance, backfill_id: str) -> BulkActionStatus:
    backfill = instance.get_backfill(backfill_id)
    assert backfill is not None, backfill_id
    return backfill.status


def run_shape(tags: dict[str, str]) -> str:
    """How a run names its partitions, and how many instances x trials it covers."""
    if RANGE_START_TAG in tags:
        (first_instance, first_trial), (last_instance, last_trial) = (
            tags[tag].split("|", 1) for tag in (RANGE_START_TAG, RANGE_END_TAG)
        )
        instances = "1 instance" if first_instance == last_instance else "instances"
        trials = "1 trial" if first_trial == last_trial else "trials"
        return f"range tags: {instances} x {trials}"
    return "dagster/partition tag" if PARTITION_TAG in tags else "no partition tags"


def partitions_per_run(tags: dict[str, str], order: dict[str, int], instance_count: int) -> int:
    """The partitions of the rectangle a run's range spans, in the instances x trials grid."""
    if RANGE_START_TAG not in tags:
        return 1
    start, end = (order[tags[tag]] for tag in (RANGE_START_TAG, RANGE_END_TAG))
    trials = len(order) // instance_count
    rows = end // trials - start // trials + 1
    columns = abs(end % trials - start % trials) + 1
    return rows * columns


def measure_creation(
    server: DagsterDev, instance: DagsterInstance, partitions: list[str], instances: int, timeout_s: float
) -> tuple[str, dict[str, Any]]:
    """Launch a backfill of every trial partition and wait until it has created every run."""
    started = time.time()
    backfill_id = server.launch_backfill(["generation", "evaluation"], partitions)
    launch_s = time.time() - started
    wait_for(lambda: fully_requested(instance, backfill_id), bool, timeout_s, "every run of the backfill created")
    runs = backfill_runs(instance, backfill_id)
    order = {key: index for index, key in enumerate(partitions)}
    sizes = Counter(partitions_per_run(r.dagster_run.tags, order, instances) for r in runs)
    figures = {
        "partitions": len(partitions),
        "runs": len(runs),
        "launch_s": round(launch_s, 2),
        "first_run_s": round(runs[0].create_timestamp.timestamp() - started, 2),
        "all_runs_s": round(runs[-1].create_timestamp.timestamp() - started, 2),
        "run_shapes": dict(Counter(run_shape(r.dagster_run.tags) for r in runs)),
        "runs_by_partitions": {str(size): count for size, count in sorted(sizes.items())},
        "example_run_tags": {
            tag: value for tag, value in runs[0].dagster_run.tags.items() if "partition" in tag or tag == BACKFILL_TAG
        },
    }
    return backfill_id, figures


def cancel_and_wait(server: DagsterDev, instance: DagsterInstance, backfill_id: str, timeout_s: float) -> float:
    """Cancel the backfill: seconds until its status is CANCELED."""
    cancelled = time.time()
    server.cancel_backfill(backfill_id)
    canceled = BulkActionStatus.CANCELED
    wait_for(lambda: backfill_status(instance, backfill_id), lambda s: s == canceled, timeout_s, "CANCELED", 0.5)
    return round(time.time() - cancelled, 2)


def measure_cancel(
    server: DagsterDev, instance: DagsterInstance, partitions: list[str], settle_s: float, timeout_s: float
) -> dict[str, Any]:
    """Launch a backfill, cancel it as soon as its first run exists, and follow it until it is CANCELED and
    no new run has appeared for `settle_s` seconds."""
    backfill_id = server.launch_backfill(["generation", "evaluation"], partitions)
    backfill_filter = RunsFilter(tags={BACKFILL_TAG: backfill_id})
    wait_for(lambda: instance.get_runs_count(backfill_filter), bool, timeout_s, "the first run", 0.2)
    cancelled = time.time()
    server.cancel_backfill(backfill_id)
    canceled_s = None
    counts: list[tuple[float, int]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now, count = time.time(), instance.get_runs_count(backfill_filter)
        if canceled_s is None and backfill_status(instance, backfill_id) == BulkActionStatus.CANCELED:
            canceled_s = round(now - cancelled, 2)
        if counts and count != counts[-1][1]:
            counts.clear()
        counts.append((now, count))
        if canceled_s is not None and now - counts[0][0] >= settle_s:
            break
        time.sleep(0.5)
    runs = backfill_runs(instance, backfill_id)
    after = [r.create_timestamp.timestamp() - cancelled for r in runs if r.create_timestamp.timestamp() > cancelled]
    return {
        "runs": len(runs),
        "runs_after_cancel": len(after),
        "last_run_after_cancel_s": round(max(after, default=0.0), 2),
        "canceled_s": canceled_s,
        "settled": canceled_s is not None and time.monotonic() < deadline,
    }


def write_instance_config(
    home: Path, run_queue: int | None, postgres_url: str | None, dagster_postgres_storage: bool = False
) -> None:
    """The repository's dagster.yaml, with at most `run_queue` runs dequeued at once (0: none, as when runs
    execute on a cluster rather than on the daemon's own 2 cores; -1: no limit; None: as it is), on PostgreSQL
    if given: through the storage eval-pipeline configures (one connection held per process), or Dagster's own
    (a connection per query)."""
    config = yaml.safe_load((REPO / "dagster.yaml").read_text())
    if run_queue is not None:
        config["concurrency"]["runs"]["max_concurrent_runs"] = run_queue
    if postgres_url and dagster_postgres_storage:
        config["storage"] = {"postgres": {"postgres_url": postgres_url}}
    elif postgres_url:
        config["storage"] = pooled_postgres_storage()
        config["storage"]["custom"]["config"]["postgres_url"] = postgres_url
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))


@contextmanager
def fresh_database(server_url: str | None) -> Iterator[str | None]:
    """A new database on the PostgreSQL server at `server_url` (dropped afterwards), or None for SQLite."""
    if not server_url:
        yield None
        return
    import psycopg2

    name = f"benchmark_{os.getpid()}_{int(time.time())}"
    admin = psycopg2.connect(server_url.replace("+psycopg2", ""))
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {name}")
    try:
        yield f"{server_url.rsplit('/', 1)[0]}/{name}"
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def prepare(campaign_path: Path, home: Path) -> float:
    """Run the campaign's prepare job in this process (it registers the partitions); its seconds."""
    campaign = load_campaign(str(campaign_path))
    definitions = build_definitions([campaign], Paths(home / "eval_pipeline"))
    started = time.time()
    with DagsterInstance.from_config(str(home)) as instance:
        job = definitions.resolve_job_def(stage_job_name(campaign, "prepare"))
        if not job.execute_in_process(instance=instance, raise_on_error=False).success:
            raise RuntimeError("the prepare job failed")
    return round(time.time() - started, 2)


def benchmark(root: Path, args: argparse.Namespace, postgres_url: str | None) -> dict[str, Any]:
    home = root / "dagster_home"
    home.mkdir()
    write_instance_config(home, args.run_queue, postgres_url, args.dagster_postgres_storage)
    campaign = write_campaign(root, args.instances, args.seeds, args.batch_size)
    partitions = trial_partitions(campaign, args.instances)
    prepare_s = prepare(campaign, home)
    env = {
        **{name: value for name, value in os.environ.items() if name not in PROCESS_ENVIRONMENT},
        **({} if args.planned_per_partition else PROCESS_ENVIRONMENT),
        "DAGSTER_HOME": str(home),
        "EVAL_PIPELINE_CAMPAIGNS": str(campaign),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    env.pop("EVAL_PIPELINE_DATA_DIR", None)
    log = root / "dagster_dev.log"
    try:
        with running_server(["dagster", "dev"], env, log) as url, DagsterInstance.from_config(str(home)) as instance:
            server = DagsterDev(url)
            first_id, creation = measure_creation(server, instance, partitions, args.instances, args.timeout_s)
            creation["cancel_queued_s"] = cancel_and_wait(server, instance, first_id, args.timeout_s)
            cancel = measure_cancel(server, instance, partitions, args.settle_s, args.timeout_s)
    except Exception:
        print(log.read_text()[-5000:], file=sys.stderr)
        raise
    return {
        "storage": ("dagster's postgres" if args.dagster_postgres_storage else "postgres")
        if postgres_url
        else "sqlite",
        "planned_events": "per asset and partition" if args.planned_per_partition else "per asset and run",
        "instances": args.instances,
        "seeds": args.seeds,
        "batch_size": args.batch_size,
        "run_queue": args.run_queue,
        "prepare_s": prepare_s,
        "backfill": creation,
        "cancelled_backfill": cancel,
    }


def main() -> None:
    # A shell starts a background job with SIGINT ignored, and dagster dev (which inherits that) handles SIGTERM
    # as SIGINT: raising KeyboardInterrupt on both lets an interrupted benchmark, and then dagster dev, stop.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, default=500)
    parser.add_argument("--seeds", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--settle-s", type=float, default=10.0)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--run-queue", type=int, default=0, help="runs dequeued at once (0: none; -1: no limit)")
    parser.add_argument("--postgres", help="a PostgreSQL server's URL: the instance on a new database there")
    parser.add_argument(
        "--dagster-postgres-storage", action="store_true", help="Dagster's PostgreSQL storage, a connection per query"
    )
    parser.add_argument("--planned-per-partition", action="store_true", help="Dagster's default planned events")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, fresh_database(args.postgres) as postgres_url:
        figures = benchmark(Path(scratch), args, postgres_url)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
