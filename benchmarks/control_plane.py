"""The control plane at the seeds' scale: a 200k-trial campaign's runs, events and artifacts written through the
real Dagster instance on PostgreSQL and the real artifact store on S3, and what reads them timed as it grows.

    PYTHONPATH=$PWD python benchmarks/control_plane.py [--instances 500] [--seeds 400] [--writers 8]
        [--checkpoints 10] [--batch-size 64] [--postgres URL] [--s3-endpoint URL] [--no-subset-planned-events]
        [--connections held|webserver|new]

Running 200k trials is out of reach (Dagster alone costs about 1.6 s a run and
50 ms a trial), so the sandbox does no work at all: what the trials' runs
write is recorded once from a real run and written again, at full scale, by
`--writers` processes standing in for parallel run workers.

- Recording: `eval-pipeline run` (this checkout, `--workers 1`) of the demo's
  first code issue x 2 seeds of the null agent on a scratch SQLite
  DAGSTER_HOME and local artifacts. Its environments run and its trials run
  give the templates: every event they logged but the planned events (which
  creating a run writes), and the first trial's generation, evaluation attempt
  and evaluation records as stored.
- The campaign: `--instances` synthetic SWE-bench rows x `--seeds` seeds of
  the null agent, `batches.size` `--batch-size`, with a `nightly:` section so
  that its nightly sensor exists. Dagster's instance is the repository's
  dagster.yaml on a fresh database on the PostgreSQL server at `--postgres`
  (scripts/start_postgres.sh when not given; dropped at the end); artifacts go
  to a fresh prefix of a bucket on the S3 server at `--s3-endpoint`
  (scripts/start_object_store.sh when not given; deleted at the end). The
  prepare job runs in process, tagged as a nightly cycle's, and registers the
  partitions.
- Replay, instance by instance, in the batches the CLI would request
  (`partitions.trial_batches`, spread over `--writers`): the instance's
  environments run, then one trials run per batch. Each run is created as the
  CLI's worker creates it (`create_run_for_job` of the job's in-process copy,
  with the cycle's request tags and, for a batch, its partition range tags,
  which writes the planned events), then its recorded events are stored
  through `DagsterInstance.handle_new_event` with the run id, partitions,
  seeds, artifact keys and data versions rewritten, so that Dagster indexes
  each materialization and check evaluation per partition and moves the run to
  STARTED and SUCCESS as a real run does. Per trial, before its events: its
  generation, its evaluation attempt, its evaluation and its scored marker are
  put into the S3 store under the keys `trial/spec.py` gives (4 PUTs), and its
  check evaluation names its materialization as `defs/verdicts.py` finds it
  (one query). The runs carry the nightly cycle's tags, so its sensor sees
  them as requested. DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS=1 is set
  as the CLI sets it (`--no-subset-planned-events`: unset, one planned event
  per asset and partition). Each writer holds `--connections`: `held` (two
  connections kept open, so that no query connects: the database's own cost),
  `webserver` (what `eval-pipeline run` holds in its own process and Dagster's
  webserver holds: `optimize_for_webserver`, one connection kept and others
  opened as needed) or `new` (Dagster's default, a connection per query: what
  the CLI's run workers and a run pod use).
- Not replayed: a run worker's reads at start (its run, the partition keys of
  its range, the inputs' records), the pool slot its step claims, its compute
  logs and its step outputs on S3 (a trials run stores none; an environments
  run two small pickles).

At every checkpoint (`--checkpoints` of them, at instance boundaries), with the
writers idle:

- `trials`, `runs`; in the interval since the last checkpoint, `runs_per_s`
  (created and finished), `trials_per_s`, `events_per_s` (event_logs rows) and
  `s3_puts_per_s`, and `cpu_share`: the share of the machine's cores the
  writers (the clients: Dagster's and boto3's Python), PostgreSQL and the S3
  server used, the machine's in all (busy: 1.0 is every core) and the rest of
  the machine's (`others`: on a shared machine the rates say less), and
  `cpu_ms_per_trial`, the CPU those three used per trial written;
- PostgreSQL: rows per table, `events_per_trial`, `rows_per_trial` and
  `bytes_per_trial` (`pg_total_relation_size` of every table);
- `scan_s` and `scan_s3_requests`: the pending scan `eval-pipeline run` makes
  (`trial/pending.py: pending_trials`, `verify=True`) over every trial;
- `materialized_partitions_s`: `instance.get_materialized_partitions` of the
  evaluation asset, as `defs/progress.py` reads it;
- `ui_*_s`: the GraphQL queries of the Dagster UI's Partitions tabs, against
  a `dagster-webserver` started once on the same instance:
  `PartitionHealthQuery` (the evaluation asset), `AssetCheckPartitionHealthQuery`
  (its check `resolved`) and `AssetPartitionDetailQuery` (the last partition);
  a query that took over 20 s is not timed again (`ui_retired` says when):
  the check's grows quadratically, and would take longer than the writing;
- `sensor_*_s`: one evaluation of each of the campaign's sensors
  (`defs/automation.py`), as a daemon tick evaluates it: the nightly cycle's
  (`next_step` over the whole campaign) and the infrastructure-retry run
  failure sensor (from the previous checkpoint's cursor).

`first_limit` names the first figure over its threshold (`thresholds`: a UI
query over 5 s, a sensor tick over 30 s, the scan over 60 s, the materialized
partitions over 5 s, the interval's trials a second below half the first
interval's while the rest of the machine is quiet, the CPU per trial written
over twice the first interval's), else the figure that grows fastest with the
trials if faster than linearly (`growth_exponents`: the slope of log seconds on
log trials over the checkpoints, over 1.3, and over 0.5 s at the end), else
null.

On 2 cores the writers, PostgreSQL and SeaweedFS share the machine: the writers
(Dagster's and boto3's Python, which run on run workers' own cores in a
deployment) take about 60% of it, so the rates are the machine's, not the
control plane's alone; `cpu_share` says how much each part took. At the 76
trials a second measured on 2 idle cores at 5,000 trials (2026-11-27), the
full 200k campaign writes for about 45 minutes, and its checkpoints and the
clean-up of its 800k objects add about ten.
"""

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import boto3
import psycopg2
import yaml
from backfill_scale import (  # benchmarks/, beside this script
    DagsterServer,
    fresh_database,
    running_server,
    write_campaign,
    write_instance_config,
)
from dagster import (
    AssetKey,
    BetaWarning,
    DagsterInstance,
    DagsterRunStatus,
    EventLogEntry,
    JobDefinition,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    build_sensor_context,
)
from dagster._core.definitions.job_base import InMemoryJob  # how execute_in_process wraps a job; not exported
from dagster._core.definitions.partitions.context import partition_loading_context
from dagster._core.execution.api import create_execution_plan
from dagster._core.execution.execute_in_process import merge_run_tags
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._record import copy
from dagster._serdes import deserialize_value, serialize_value

from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.common.settings import RESULTS_KEY_VARIABLE, Paths
from eval_pipeline.config.campaign import Campaign, load_campaign
from eval_pipeline.datasets.sources import load_portfolio
from eval_pipeline.defs import build_definitions, stage_job_name
from eval_pipeline.defs.automation import NIGHTLY
from eval_pipeline.defs.partitions import CampaignPartitions, PartitionBatch, trial_batches, trial_run_key
from eval_pipeline.defs.progress import Cycle
from eval_pipeline.defs.stages import CYCLE_TAG, TRIGGER_TAG
from eval_pipeline.defs.verdicts import _target  # the query a trials step makes for each verdict's target
from eval_pipeline.orchestration.instance_config import PROCESS_ENVIRONMENT
from eval_pipeline.orchestration.run_workers import QUIET_RUN_CONFIG, hold_connections
from eval_pipeline.store.artifacts import LocalArtifactStore, S3ArtifactStore, attempts_prefix
from eval_pipeline.store.attempts import Attempt, keep_attempt, now
from eval_pipeline.tasks.demo import build_demo_benchmark
from eval_pipeline.trial.evaluation import mark_scored
from eval_pipeline.trial.harness import Harness
from eval_pipeline.trial.pending import pending_trials
from eval_pipeline.trial.spec import TrialSpec, trial_specs

REPO = Path(__file__).resolve().parents[1]
CAMPAIGN = "control_plane"  # the recording's campaign and the replayed one: same asset keys and job names
BUCKET = "eval-pipeline-bench"
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}
RESULTS_KEY = "0123456789abcdef" * 4  # the recording's and the replay's records are sealed with one key
EVALUATION = AssetKey([CAMPAIGN, "evaluation"])
Unit = tuple[str, tuple[tuple[str, ...], ...]]  # an instance and its batches' trials: what a writer is given
PLANNED = frozenset({"ASSET_MATERIALIZATION_PLANNED", "ASSET_CHECK_EVALUATION_PLANNED"})
PER_TRIAL = frozenset({"ASSET_MATERIALIZATION", "ASSET_CHECK_EVALUATION"})
RETIRE_AFTER_S = 20.0  # a UI query over 4 x its threshold is not timed again (Webserver)
THRESHOLDS = {
    "ui_s": 5.0,  # any one Partitions-tab query
    "sensor_s": 30.0,  # one tick of a sensor (the daemon's interval is 30 s: SENSOR_INTERVAL_S)
    "scan_s": 60.0,
    "materialized_partitions_s": 5.0,
    "trials_per_s_drop": 0.5,  # an interval's write rate below this share of the first interval's, ...
    "quiet_machine": 0.25,  # ... while the rest of the machine used less than this share of it
    "cpu_per_trial_rise": 2.0,  # the benchmark's CPU per trial written above this many times the first's
    "superlinear_exponent": 1.3,  # a figure growing as trials ** exponent, and ...
    "superlinear_floor_s": 0.5,  # ... at least this long at the last checkpoint
}

PARTITION_HEALTH = """query PartitionHealthQuery($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) { ... on AssetNode { id
    partitionKeysByDimension { name type partitionKeys }
    assetPartitionStatuses {
      ... on DefaultPartitionStatuses { materializedPartitions materializingPartitions failedPartitions }
      ... on MultiPartitionStatuses { primaryDimensionName ranges { primaryDimStartKey primaryDimEndKey
        secondaryDim { ... on DefaultPartitionStatuses {
          materializedPartitions materializingPartitions failedPartitions } } } } } } } }"""
CHECK_PARTITION_HEALTH = """query AssetCheckPartitionHealthQuery($assetKey: AssetKeyInput!, $checkName: String!) {
  assetNodeOrError(assetKey: $assetKey) { ... on AssetNode { id
    assetCheckOrError(checkName: $checkName) { ... on AssetCheck { name
      partitionKeysByDimension { name type partitionKeys }
      partitionStatuses {
        ... on AssetCheckDefaultPartitionStatuses { succeededPartitions failedPartitions inProgressPartitions
          skippedPartitions executionFailedPartitions }
        ... on AssetCheckMultiPartitionStatuses { primaryDimensionName ranges { primaryDimStartKey primaryDimEndKey
          secondaryDim { ... on AssetCheckDefaultPartitionStatuses { succeededPartitions failedPartitions
            inProgressPartitions skippedPartitions executionFailedPartitions } } } } } } } } } }"""
PARTITION_DETAIL = """query AssetPartitionDetailQuery($assetKey: AssetKeyInput!, $partitionKey: String!) {
  assetOrError(assetKey: $assetKey) { ... on Asset { id
    definition { id opNames latestRunForPartition(partition: $partitionKey) { id status endTime } }
    assetEventHistory(partitions: [$partitionKey], limit: 1000,
                      eventTypeSelectors: [MATERIALIZATION, OBSERVATION, FAILED_TO_MATERIALIZE]) {
      results { ... on MaterializationEvent { runId timestamp } ... on FailedToMaterializeEvent { runId } } } } } }"""


# ---------------------------------------------------------------------------------------------------------------
# The recording: what one real environments run and one real trials run write.


@dataclass(frozen=True)
class RunTemplate:
    """A recorded run's events (serialized), less the planned events, which creating a run writes itself.
    `per_trial` is the first trial's (event type, entry) in order; `head` and `tail` come before and after the
    trials (an environments run has only a head)."""

    run_id: str
    head: tuple[str, ...]
    per_trial: tuple[tuple[str, str], ...] = ()
    tail: tuple[str, ...] = ()


@dataclass(frozen=True)
class Recording:
    """The templates, and the tokens of the recorded trial that the replay rewrites."""

    instance_id: str
    partition: str
    seed: int
    artifacts_uri: str  # the prefix of the recorded store's links (a generation's trajectory)
    environments: RunTemplate
    trials: RunTemplate
    generation: dict[str, Any]
    evaluation: dict[str, Any]
    attempt: dict[str, Any]
    seconds: float


def recording_campaign(directory: Path) -> Path:
    """The demo's first code issue x 2 seeds of the null agent, named as the replayed campaign."""
    ids = [task.instance_id for task in build_demo_benchmark(directory / "mirrors").instances]
    campaign = {
        "name": CAMPAIGN,
        "benchmark": {"kind": "demo"},
        "variants": [{"name": "null", "agent": "null"}],
        "seeds": 2,
        "exclude": {"instances": ids[1:]},
    }
    path = directory / "recording.yaml"
    path.write_text(yaml.safe_dump(campaign))
    return path


def run_recording(directory: Path) -> tuple[Path, Path]:
    """`eval-pipeline run` of this checkout on SQLite and local artifacts; its DAGSTER_HOME and data directory."""
    home, data = directory / "home", directory / "data"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("EVAL_PIPELINE_", "DAGSTER_"))},
        "DAGSTER_HOME": str(home),
        "EVAL_PIPELINE_DATA_DIR": str(data),
        RESULTS_KEY_VARIABLE: RESULTS_KEY,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "eval_pipeline.cli", "run", "--campaign", str(recording_campaign(directory))]
    result = subprocess.run([*command, "--workers", "1", "--json"], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"the recording run failed:\n{result.stderr[-3000:]}")
    return home, data


def partition_of(entry: EventLogEntry) -> str | None:
    """The partition a materialization or a check evaluation is about."""
    event = entry.dagster_event
    if event is None or event.event_type_value not in PER_TRIAL:
        return None
    data = event.event_specific_data
    return getattr(data, "materialization", data).partition


def run_template(instance: DagsterInstance, run_id: str, trial_partition: str | None) -> RunTemplate:
    """The run's events as a template; `trial_partition` names the trial whose events are the per-trial ones."""
    entries = [
        e for e in instance.all_logs(run_id) if not e.dagster_event or e.dagster_event.event_type_value not in PLANNED
    ]
    if trial_partition is None:
        return RunTemplate(run_id, tuple(serialize_value(e) for e in entries))
    partitioned = [index for index, entry in enumerate(entries) if partition_of(entry)]
    first, last = partitioned[0], partitioned[-1]
    per_trial = tuple(
        (entry.dagster_event.event_type_value, serialize_value(entry))
        for entry in entries
        if partition_of(entry) == trial_partition
    )
    head, tail = (tuple(serialize_value(e) for e in part) for part in (entries[:first], entries[last + 1 :]))
    return RunTemplate(run_id, head, per_trial, tail)


def record(directory: Path) -> Recording:
    """Run the recording and read its templates back from its instance and its artifact store."""
    started = time.perf_counter()
    home, data = run_recording(directory)
    store = LocalArtifactStore(Paths(data).artifacts)
    with DagsterInstance.from_config(str(home)) as instance:
        runs = {run.job_name: run for run in instance.get_runs()}
        trials_run = runs[recorded_job_name("trials")]
        materializations = [
            e.asset_materialization for e in instance.all_logs(trials_run.run_id) if e.asset_materialization is not None
        ]
        first = {m.asset_key.path[-1]: m for m in materializations if m.partition == materializations[0].partition}
        partition = str(first["generation"].partition)
        environments = run_template(instance, runs[recorded_job_name("environments")].run_id, None)
        trials = run_template(instance, trials_run.run_id, partition)
    generation = store.get(first["generation"].metadata["artifact"].value)
    evaluation = store.get(first["evaluation"].metadata["artifact"].value)
    [attempt_key] = store.keys(attempts_prefix(evaluation["key"]))
    uri = store.uri(generation["key"]).removesuffix(generation["key"])
    return Recording(
        instance_id=partition.split("|", 1)[0],
        partition=partition,
        seed=generation["seed"],
        artifacts_uri=uri,
        environments=environments,
        trials=trials,
        generation=generation,
        evaluation=evaluation,
        attempt=store.get(attempt_key),
        seconds=round(time.perf_counter() - started, 1),
    )


def recorded_job_name(stage: str) -> str:
    """A stage's job in the recording (its campaign is not loaded here: its dataset is another machine's)."""
    return f"{CAMPAIGN}__{stage}_job"


# ---------------------------------------------------------------------------------------------------------------
# Rewriting the recorded events for another run and trial.


def seed_token(seed: int) -> str:
    """How a materialization's `seed` metadata entry ends in a serialized event."""
    return f'"value": {seed}}}, "label": "seed"'


def evaluation_data_version(evaluation_key: str, outcome: str) -> str:
    """The data version a trial's evaluation materialization records (defs/trials.py)."""
    return stable_hash([evaluation_key, outcome])


class Rewriter:
    """Replaces every recorded token in a serialized event at once (one regular expression, longest first)."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self.pattern = re.compile("|".join(re.escape(t) for t in sorted(set(tokens), key=len, reverse=True)))

    def __call__(self, text: str, values: Mapping[str, str]) -> EventLogEntry:
        entry = deserialize_value(self.pattern.sub(lambda match: values[match.group(0)], text), EventLogEntry)
        return entry._replace(timestamp=time.time())


def trial_tokens(recording: Recording) -> dict[str, str]:
    """The recorded trial's identifying strings, by what they are."""
    generation, evaluation = recording.generation, recording.evaluation
    return {
        "partition": recording.partition,
        "instance": recording.instance_id,
        "run": recording.trials.run_id,
        "generation": generation["key"],
        "evaluation": evaluation["key"],
        "attempt": evaluation["attempt_id"],
        "data_version": evaluation_data_version(evaluation["key"], evaluation["outcome"]),
        "seed": seed_token(recording.seed),
        "uri": recording.artifacts_uri,
    }


def check_tokens(recording: Recording) -> None:
    """Every token must occur in the per-trial events, or the replay would copy the recorded trial's value."""
    text = "".join(entry for _, entry in recording.trials.per_trial)
    missing = [name for name, token in trial_tokens(recording).items() if token not in text and name != "instance"]
    if missing:
        raise RuntimeError(f"the recorded trial's events lack {missing}: the recording changed shape")


# ---------------------------------------------------------------------------------------------------------------
# The writers: one process each, like a run worker.


@dataclass(frozen=True)
class WriterSettings:
    instance_ref: Any
    campaign_path: str
    data_dir: str
    cycle_id: str
    endpoint: str
    prefix: str
    connections: str
    recording: Recording


@dataclass
class Written:
    """What a writer wrote for one unit of work (an instance's runs)."""

    runs: int = 0
    trials: int = 0
    events: int = 0
    puts: int = 0
    cpu_s: float = 0.0  # the writer's own CPU time: the clients' share of the machine (Dagster's, boto3's)

    def add(self, other: "Written") -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def s3_client(endpoint: str) -> Any:
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=S3_CREDENTIALS["AWS_REGION"],
        config=Config(max_pool_connections=16, retries={"mode": "standard", "max_attempts": 3}),
    )


CONNECTIONS = ("held", "webserver", "new")


def hold_writer_connections(instance: DagsterInstance, connections: str) -> None:
    """Keep the instance's PostgreSQL connections open as `connections` says (CONNECTIONS).

    `webserver` is what the CLI and its run workers hold (`run_workers.hold_connections`: Dagster's `optimize_for_webserver`),
    a pool of one, so that a query made while another holds the connection (the event log's `has_table` inside
    each asset event's index transaction) connects anew. `held` is the same with a pool of two, so that no query
    connects (Dagster has no setting for it: the storages' engines are replaced). `new` leaves Dagster's
    default, a connection per query."""
    if connections == "new":
        return
    hold_connections(instance)
    if connections == "webserver":
        return
    from dagster_postgres.utils import create_pg_engine

    for storage in (instance.run_storage, instance.event_log_storage, instance.schedule_storage):
        kwargs = {"isolation_level": "AUTOCOMMIT", "pool_size": 2, "pool_recycle": 3600, "max_overflow": 4}
        storage._engine = create_pg_engine(storage.postgres_url, storage._token_provider, **kwargs)


class Writer:
    """Creates a campaign's runs and writes what their real runs write: events through the instance, records
    into the S3 store."""

    def __init__(self, settings: WriterSettings) -> None:
        self.recording = settings.recording
        self.campaign = load_campaign(settings.campaign_path)
        paths = Paths(Path(settings.data_dir))
        definitions = build_definitions([self.campaign], paths)
        self.instance = DagsterInstance.from_ref(settings.instance_ref)
        hold_writer_connections(self.instance, settings.connections)
        self.store = S3ArtifactStore(BUCKET, settings.prefix, client=s3_client(settings.endpoint))
        self.cycle = Cycle(self.campaign, settings.cycle_id, NIGHTLY)
        self.jobs = {stage: self._in_process(definitions, stage) for stage in ("environments", "trials")}
        self.portfolio = load_portfolio(self.campaign.slices, paths).excluding(self.campaign.exclude)
        self.sandbox_for = Harness(paths).sandbox_for(self.campaign)
        self.tokens = trial_tokens(self.recording)
        self.trial_rewriter = Rewriter(list(self.tokens.values()))
        self.run_rewriter = Rewriter([self.recording.trials.run_id, self.recording.instance_id])
        self.environment_rewriter = Rewriter([self.recording.environments.run_id, self.recording.instance_id])

    def _in_process(self, definitions: Any, stage: str) -> tuple[JobDefinition, JobDefinition, ExecutionPlan]:
        """The job, its in-process copy and that copy's plan, as `execute_in_process` makes them (the plan is
        the same for every run of the job, so it is made once)."""
        job = definitions.resolve_job_def(stage_job_name(self.campaign, stage))
        ephemeral = job.as_ephemeral_job(resource_defs={}, input_values={})
        plan = create_execution_plan(
            InMemoryJob(ephemeral), run_config=QUIET_RUN_CONFIG, instance_ref=self.instance.get_ref()
        )
        return job, ephemeral, plan

    def create_run(self, stage: str, request: RunRequest) -> str:
        """Create the run as the CLI's worker does (run_workers.execute_request): its planned events included."""
        job, ephemeral, plan = self.jobs[stage]
        tags = merge_run_tags(job, request.partition_key, request.tags, None, self.instance, QUIET_RUN_CONFIG)
        run = self.instance.create_run_for_job(
            job_def=ephemeral,
            run_config=QUIET_RUN_CONFIG,
            tags={**ephemeral.run_tags, **tags},
            asset_selection=frozenset(),
            execution_plan=plan,
        )
        return run.run_id

    def write(self, rewriter: Rewriter, texts: Sequence[str], values: Mapping[str, str]) -> int:
        for text in texts:
            self.instance.handle_new_event(rewriter(text, values))
        return len(texts)

    def environments_run(self, instance_id: str) -> Written:
        run_id = self.create_run("environments", self.cycle.request("environments", instance_id))
        template = self.recording.environments
        values = {template.run_id: run_id, self.recording.instance_id: instance_id}
        return Written(runs=1, events=self.write(self.environment_rewriter, template.head, values))

    def trials_run(self, specs: Sequence[TrialSpec]) -> Written:
        batch = PartitionBatch(specs[0].instance_id, tuple(spec.trial for spec in specs))
        run_id = self.create_run("trials", self.cycle.request_trials(batch))
        template = self.recording.trials
        values = {template.run_id: run_id, self.recording.instance_id: batch.instance_id}
        written = Written(runs=1, events=self.write(self.run_rewriter, template.head, values))
        for spec in specs:
            written.add(self.trial(run_id, spec))
        written.events += self.write(self.run_rewriter, template.tail, values)
        return written

    def trial(self, run_id: str, spec: TrialSpec) -> Written:
        """One trial: its records into the store (as generate and evaluate put them), then its events."""
        partition = str(trial_run_key(spec.instance_id, spec.trial))
        generation, evaluation = self.put_records(spec)
        new = {
            "partition": partition,
            "instance": spec.instance_id,
            "run": run_id,
            "generation": generation["key"],
            "evaluation": evaluation["key"],
            "attempt": evaluation["attempt_id"],
            "data_version": evaluation_data_version(evaluation["key"], evaluation["outcome"]),
            "seed": seed_token(spec.seed),
            "uri": self.store.location,
        }
        values = {self.tokens[name]: value for name, value in new.items()}
        for event_type, text in self.recording.trials.per_trial:
            entry = self.trial_rewriter(text, values)
            if event_type == "ASSET_CHECK_EVALUATION":
                entry = with_target(entry, _target(self.instance, EVALUATION, partition))
            self.instance.handle_new_event(entry)
        return Written(trials=1, events=len(self.recording.trials.per_trial), puts=4)

    def put_records(self, spec: TrialSpec) -> tuple[dict[str, Any], dict[str, Any]]:
        """The trial's generation, evaluation attempt, evaluation and scored marker, as the recorded trial's."""
        generation = {
            **self.recording.generation,
            "key": spec.generation_key,
            "instance_id": spec.instance_id,
            "seed": spec.seed,
            "started_at": now(),
        }
        key = spec.evaluation_key(generation["patch_sha256"])
        evaluation = {
            **self.recording.evaluation,
            "key": key,
            "attempt_id": uuid.uuid4().hex,
            "generation_key": spec.generation_key,
            "instance_id": spec.instance_id,
            "seed": spec.seed,
            "environment_key": spec.environment_key,
            "resources": spec.resources,
            "test_timeout_s": spec.test_timeout_s,
            "started_at": now(),
        }
        self.store.put(spec.generation_key, generation)
        keys = {"artifact": key, "generation": spec.generation_key, "attempt_id": evaluation["attempt_id"]}
        attempt = {**self.recording.attempt, "keys": keys, "record": evaluation, "started_at": evaluation["started_at"]}
        keep_attempt(self.store, key, Attempt.from_payload(attempt, key=key, reused=False))
        self.store.put(key, evaluation)
        mark_scored(self.store, spec.scored_id, key, evaluation)
        return generation, evaluation

    def unit(self, instance_id: str, batches: Sequence[Sequence[str]]) -> Written:
        """An instance's environments run, then its trials runs."""
        cpu = time.process_time()
        specs = {spec.trial: spec for spec in trial_specs(self.campaign, self.portfolio, self.sandbox_for, instance_id)}
        written = self.environments_run(instance_id)
        for batch in batches:
            written.add(self.trials_run([specs[trial] for trial in batch]))
        written.cpu_s = time.process_time() - cpu
        return written


def with_target(entry: EventLogEntry, target: Any) -> EventLogEntry:
    """The check evaluation, about the materialization `target` (the replayed one, not the recorded one)."""
    event = entry.dagster_event
    data = copy(event.event_specific_data, target_materialization_data=target)  # a @record, not a tuple
    return entry._replace(dagster_event=event._replace(event_specific_data=data))


_writer: Writer | None = None


def start_writer(settings: WriterSettings) -> None:
    global _writer
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops its writers
    warnings.filterwarnings("ignore", category=BetaWarning)
    _writer = Writer(settings)


def writer_ready(_: int) -> int:
    """A writer's pid, once it has started (and held on a moment, so that the next one starts too)."""
    time.sleep(1)
    return os.getpid()


def start_writers(pool: ProcessPoolExecutor, writers: int) -> None:
    """Start every writer before the clock does: each imports Dagster and builds the definitions first."""
    started: set[int] = set()
    while len(started) < writers:
        started.update(pool.map(writer_ready, range(writers)))


def write_unit(unit: Unit) -> Written:
    assert _writer is not None
    return _writer.unit(*unit)


# ---------------------------------------------------------------------------------------------------------------
# The campaign, its instance and its storage.


def service_url(given: str | None, script: str) -> str:
    """The URL given, else the one the repository's script prints after starting its server."""
    if given:
        return given
    result = subprocess.run(["bash", str(REPO / "scripts" / script)], capture_output=True, text=True, check=True)
    return result.stdout.strip().splitlines()[-1]


@contextmanager
def fresh_prefix(endpoint: str) -> Iterator[str]:
    """A new prefix in the benchmark's bucket, its objects deleted afterwards."""
    client = s3_client(endpoint)
    try:
        client.create_bucket(Bucket=BUCKET)
    except (client.exceptions.BucketAlreadyOwnedByYou, client.exceptions.BucketAlreadyExists):
        pass
    prefix = f"control-plane-{uuid.uuid4().hex[:12]}"
    try:
        yield prefix
    finally:
        started, deleted = time.perf_counter(), 0
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/"):
            if objects := [{"Key": item["Key"]} for item in page.get("Contents", [])]:
                client.delete_objects(Bucket=BUCKET, Delete={"Objects": objects, "Quiet": True})
                deleted += len(objects)
        say(f"deleted {deleted} objects under s3://{BUCKET}/{prefix}/ in {time.perf_counter() - started:.1f} s")


def prepare(campaign: Campaign, paths: Paths, instance: DagsterInstance, cycle_id: str) -> float:
    """The prepare job in this process, as the nightly schedule requests it (it registers the partitions)."""
    definitions = build_definitions([campaign], paths)
    job = definitions.resolve_job_def(stage_job_name(campaign, "prepare"))
    started = time.perf_counter()
    tags = {TRIGGER_TAG: NIGHTLY, CYCLE_TAG: cycle_id}
    result = job.execute_in_process(run_config=QUIET_RUN_CONFIG, instance=instance, tags=tags, raise_on_error=False)
    if not result.success:
        raise RuntimeError("the prepare job failed")
    return round(time.perf_counter() - started, 2)


def work_units(campaign: Campaign, instance: DagsterInstance, writers: int) -> list[Unit]:
    """Each instance with the batches the CLI would request once every environment is ready."""
    partitions = CampaignPartitions.for_campaign(campaign)
    instances = instance.get_dynamic_partitions(partitions.instances.name)
    trials = tuple(instance.get_dynamic_partitions(partitions.trials.name))
    keys = (str(trial_run_key(i, t)) for i in instances for t in trials)
    by_instance: dict[str, list[tuple[str, ...]]] = {i: [] for i in instances}
    for batch in trial_batches(keys, trials, campaign.batches.size, writers):
        by_instance[batch.instance_id].append(batch.trials)
    return [(i, tuple(batches)) for i, batches in by_instance.items()]


def checkpoint_bounds(units: int, checkpoints: int) -> list[int]:
    """Instance counts at which to measure: `checkpoints` even steps, at least one instance apart."""
    return sorted({max(1, round(units * k / checkpoints)) for k in range(1, checkpoints + 1)})


# ---------------------------------------------------------------------------------------------------------------
# What is measured at each checkpoint.


def timed(call: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """`call(*args)`'s seconds and value."""
    started = time.perf_counter()
    value = call(*args)
    return round(time.perf_counter() - started, 3), value


def table_figures(postgres_url: str) -> dict[str, Any]:
    """Rows and bytes (with indexes and TOAST) of every table of Dagster's database."""
    connection = psycopg2.connect(postgres_url.replace("+psycopg2", ""))
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
        rows, size = {}, 0
        for (table,) in cursor.fetchall():
            cursor.execute(f'SELECT count(*), pg_total_relation_size(\'"{table}"\') FROM "{table}"')
            count, table_bytes = cursor.fetchone()
            size += table_bytes
            if count:
                rows[table] = count
        return {"rows": rows, "bytes": size}
    finally:
        connection.close()


class CountedStore(S3ArtifactStore):
    """The S3 store, counting the requests its client makes (a listing page is one)."""

    def __init__(self, endpoint: str, prefix: str) -> None:
        super().__init__(BUCKET, prefix, client=s3_client(endpoint))
        self.requests = 0
        self.client.meta.events.register("before-call.s3", self._count)

    def _count(self, **_: Any) -> None:
        self.requests += 1


def scan(specs: list[TrialSpec], store: CountedStore) -> dict[str, Any]:
    """The pending scan `eval-pipeline run` makes: its seconds, S3 requests, and the trials it finds pending."""
    fresh = [replace(spec) for spec in specs]  # no scored id cached by the last scan: each scan hashes its own
    store.requests = 0
    seconds, pending = timed(lambda: pending_trials(fresh, store, verify=True))
    return {"scan_s": seconds, "scan_s3_requests": store.requests, "scan_pending": len(pending)}


class Webserver(DagsterServer):
    """`dagster-webserver` on the campaign's instance, queried as the UI's Partitions tabs query it. A query that
    took over RETIRE_AFTER_S is not timed again: its limit is found, and at 200k trials the check's page alone
    (quadratic in the trials) would take longer than the rest of the run."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.retired: dict[str, str] = {}  # figure -> why it is no longer timed

    def figures(self, last_partition: str, trials: int) -> dict[str, Any]:
        key = {"path": EVALUATION.path}
        detail_s, _ = timed(lambda: self.query(PARTITION_DETAIL, assetKey=key, partitionKey=last_partition))
        figures: dict[str, Any] = {"ui_partition_detail_s": detail_s}
        for name, query, variables, counted in (
            ("ui_partition_health_s", PARTITION_HEALTH, {}, "ui_materialized"),
            ("ui_check_partition_health_s", CHECK_PARTITION_HEALTH, {"checkName": "resolved"}, "ui_check_evaluated"),
        ):
            if name in self.retired:
                continue
            seconds, answer = timed(lambda q=query, v=variables: self.query(q, assetKey=key, **v))
            node = answer["assetNodeOrError"]
            node = node["assetCheckOrError"] if "checkName" in variables else node
            statuses = node["partitionStatuses"] if "checkName" in variables else node["assetPartitionStatuses"]
            figures |= {name: seconds, counted: counted_partitions(node["partitionKeysByDimension"], statuses)}
            if seconds > RETIRE_AFTER_S:
                self.retired[name] = f"{seconds} s at {trials} trials: not timed again"
        return figures | ({"ui_retired": dict(self.retired)} if self.retired else {})


def counted_partitions(dimensions: list[dict[str, Any]], statuses: dict[str, Any]) -> int:
    """How many partitions the UI shows materialized (or, for a check, evaluated), from its multi-partition
    ranges: each range of primary keys times the secondary dimension's keys in that status."""
    primary = next(d for d in dimensions if d["name"] == statuses["primaryDimensionName"])["partitionKeys"]
    position = {key: index for index, key in enumerate(primary)}
    total = 0
    for span in statuses["ranges"]:
        width = position[span["primaryDimEndKey"]] - position[span["primaryDimStartKey"]] + 1
        secondary = span["secondaryDim"]
        done = [
            name for name in ("materializedPartitions", "succeededPartitions", "failedPartitions") if name in secondary
        ]
        total += width * sum(len(secondary[name]) for name in done)
    return total


@contextmanager
def running_webserver(env: dict[str, str], log: Path) -> Iterator[Webserver]:
    """`dagster-webserver` from the repository root (its workspace.yaml); stopped when the block ends."""
    with running_server([sys.executable, "-m", "dagster_webserver"], env, log) as url:
        yield Webserver(url)


@dataclass
class SensorTicks:
    """The campaign's sensors, each evaluated as a daemon tick evaluates it; the run failure sensor's cursor is
    kept from tick to tick."""

    definitions: Any
    cursors: dict[str, str | None] = field(default_factory=dict)

    def figures(self, instance: DagsterInstance) -> dict[str, Any]:
        figures: dict[str, Any] = {}
        for sensor in self.definitions.sensors:
            short = sensor.name.removeprefix(f"{CAMPAIGN}__")
            seconds, result = timed(self.tick, instance, sensor)
            self.cursors[sensor.name] = result.cursor
            figures[f"sensor_{short}_s"] = seconds
            figures[f"sensor_{short}_requests"] = len(result.run_requests or [])
        return figures

    def tick(self, instance: DagsterInstance, sensor: SensorDefinition) -> Any:
        """One evaluation, with the instance loading dynamic partitions as the daemon's tick does."""
        cursor = self.cursors.get(sensor.name)
        context = build_sensor_context(instance=instance, cursor=cursor, definitions=self.definitions)
        with partition_loading_context(dynamic_partitions_store=instance):
            return sensor.evaluate_tick(context)


@dataclass
class Measurer:
    """Everything timed at a checkpoint, with the writers idle."""

    instance: DagsterInstance
    postgres_url: str
    specs: list[TrialSpec]
    store: CountedStore
    webserver: Webserver
    sensors: SensorTicks

    def figures(self, trials: int, last_partition: str) -> dict[str, Any]:
        tables = table_figures(self.postgres_url)
        rows = tables["rows"]
        materialized_s, materialized = timed(lambda: self.instance.get_materialized_partitions(EVALUATION))
        return {
            "events_per_trial": round(rows.get("event_logs", 0) / trials, 2),
            "rows_per_trial": round(sum(rows.values()) / trials, 2),
            "bytes_per_trial": round(tables["bytes"] / trials),
            "database_bytes": tables["bytes"],
            "materialized_partitions_s": materialized_s,
            "materialized_partitions": len(materialized),
            **scan(self.specs, self.store),
            **self.webserver.figures(last_partition, trials),
            **self.sensors.figures(self.instance),
            "rows": rows,
        }


# ---------------------------------------------------------------------------------------------------------------
# Limits.


def timed_figures(row: Mapping[str, Any]) -> dict[str, float]:
    """The seconds something took at a checkpoint (not the rates, nor the checkpoint's own bookkeeping)."""
    return {
        name: value
        for name, value in row.items()
        if name.endswith("_s") and not name.endswith("_per_s") and name not in ("interval_s", "measure_s")
    }


def threshold_of(name: str) -> float | None:
    if name.startswith("ui_"):
        return THRESHOLDS["ui_s"]
    if name.startswith("sensor_"):
        return THRESHOLDS["sensor_s"]
    return THRESHOLDS.get(name)


def first_limit(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The first figure over its threshold, checkpoint by checkpoint; else the figure growing fastest with the
    trials, if faster than linearly; else None."""
    for row in rows:
        for name, value in timed_figures(row).items():
            if (limit := threshold_of(name)) is not None and value > limit:
                return {"figure": name, "trials": row["trials"], "value": value, "why": f"over {limit} s"}
        if slowed := write_slowdown(rows[0], row):
            return slowed
    growth = growth_exponents(rows)
    fastest = max(growth.items(), key=lambda item: item[1], default=None)
    if fastest and fastest[1] > THRESHOLDS["superlinear_exponent"]:
        name, exponent = fastest
        why = f"grows as trials ** {exponent} from the first checkpoint to the last"
        return {"figure": name, "trials": rows[-1]["trials"], "value": rows[-1][name], "why": why}
    return None


def write_slowdown(first: Mapping[str, Any], row: Mapping[str, Any]) -> dict[str, Any] | None:
    """Writing got costlier as the campaign grew: the interval's trials a second fell below the share
    `trials_per_s_drop` of the first interval's while the rest of the machine was quiet (`others` under
    `quiet_machine`), or the benchmark's CPU per trial rose above `cpu_per_trial_rise` times the first's."""
    drop, rise = THRESHOLDS["trials_per_s_drop"], THRESHOLDS["cpu_per_trial_rise"]
    quiet = row["cpu_share"]["others"] < THRESHOLDS["quiet_machine"]
    if quiet and row["trials_per_s"] < drop * first["trials_per_s"]:
        why = f"below {drop} x the first interval's {first['trials_per_s']}, the machine otherwise quiet"
        return {"figure": "trials_per_s", "trials": row["trials"], "value": row["trials_per_s"], "why": why}
    if row["cpu_ms_per_trial"] > rise * first["cpu_ms_per_trial"]:
        why = f"over {rise} x the first interval's {first['cpu_ms_per_trial']}"
        return {"figure": "cpu_ms_per_trial", "trials": row["trials"], "value": row["cpu_ms_per_trial"], "why": why}
    return None


def growth_exponents(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """For each timed figure long enough to matter at the last checkpoint, the exponent of its growth with the
    trials: the slope of log(seconds) on log(trials) over every checkpoint (least squares, so that one noisy
    checkpoint on a shared machine moves it less than a ratio of two would)."""
    if len(rows) < 3:
        return {}
    exponents = {}
    for name, value in timed_figures(rows[-1]).items():
        points = [(math.log(row["trials"]), math.log(row[name])) for row in rows if row[name] > 0]
        if value >= THRESHOLDS["superlinear_floor_s"] and len(points) >= 3:
            exponents[name] = round(slope(points), 2)
    return exponents


def slope(points: Sequence[tuple[float, float]]) -> float:
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0


# ---------------------------------------------------------------------------------------------------------------
# The benchmark.


def process_environment(args: argparse.Namespace) -> None:
    """What Dagster and the harness read from the environment, set before the writers are spawned."""
    for name in PROCESS_ENVIRONMENT:
        os.environ.pop(name, None)
    if not args.no_subset_planned_events:
        os.environ.update(PROCESS_ENVIRONMENT)
    os.environ[RESULTS_KEY_VARIABLE] = RESULTS_KEY
    warnings.filterwarnings("ignore", category=BetaWarning)  # data versions and partition mappings are beta
    for name in ("EVAL_PIPELINE_ARTIFACTS", "EVAL_PIPELINE_POSTGRES_URL", "EVAL_PIPELINE_DAGSTER_URL"):
        os.environ.pop(name, None)


def webserver_env(home: Path, campaign_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "EVAL_PIPELINE_CAMPAIGNS": str(campaign_path),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }


def server_cpu() -> dict[str, float]:
    """CPU seconds used so far by the machine (all processes, busy time) and by the PostgreSQL and SeaweedFS
    processes alive now (a backend that has exited is not counted: with `--connections new` most are missed)."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as stat:
        fields = [int(field) for field in stat.readline().split()[1:]]
    used = {"machine": (sum(fields) - fields[3] - fields[4]) / ticks, "postgres": 0.0, "s3_server": 0.0}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                line = stat.read()
        except OSError:
            continue
        name = {"postgres": "postgres", "weed": "s3_server"}.get(line[line.index("(") + 1 : line.rindex(")")])
        if name:
            times = line[line.rindex(")") + 2 :].split()
            used[name] += (int(times[11]) + int(times[12])) / ticks
    return used


def cpu_figures(seconds: float, trials: int, used: Mapping[str, float]) -> dict[str, Any]:
    """Each CPU time as a share of the machine's cores over the interval, `others` being what the rest of the
    machine used (a shared machine: then the rates say less); and the benchmark's own CPU per trial written."""
    cores = os.cpu_count() or 1
    ours = sum(value for name, value in used.items() if name != "machine")
    shares = {name: round(value / (seconds * cores), 2) for name, value in used.items()}
    shares["others"] = round(max(0.0, used["machine"] - ours) / (seconds * cores), 2)
    return {"cpu_share": shares, "cpu_ms_per_trial": round(1000 * ours / max(1, trials), 1)}


def replay(
    pool: ProcessPoolExecutor, units: list[Unit], bounds: list[int], measurer: Measurer
) -> tuple[list[dict[str, Any]], Written]:
    """Write the units interval by interval, measuring at each bound."""
    rows, total, done = [], Written(), 0
    events_before = 0
    for bound in bounds:
        started, cpu_before = time.perf_counter(), server_cpu()
        interval = Written()
        for written in pool.map(write_unit, units[done:bound]):
            interval.add(written)
        seconds = time.perf_counter() - started
        cpu = {name: max(0.0, value - cpu_before[name]) for name, value in server_cpu().items()}
        total.add(interval)
        done = bound
        last_partition = str(trial_run_key(units[bound - 1][0], units[bound - 1][1][-1][-1]))
        measure_s, figures = timed(measurer.figures, total.trials, last_partition)
        events = figures["rows"].get("event_logs", 0)
        row = {
            "instances": bound,
            "trials": total.trials,
            "runs": total.runs,
            "interval_s": round(seconds, 1),
            "runs_per_s": round(interval.runs / seconds, 2),
            "trials_per_s": round(interval.trials / seconds, 1),
            "events_per_s": round((events - events_before) / seconds),
            "s3_puts_per_s": round(interval.puts / seconds),
            **cpu_figures(seconds, interval.trials, {"writers": interval.cpu_s, **cpu}),
            **figures,
            "measure_s": measure_s,
        }
        events_before = events
        rows.append(row)
        say(json.dumps({k: v for k, v in row.items() if k != "rows"}))
    return rows, total


@dataclass(frozen=True)
class Campaigned:
    """The campaign on its fresh instance, prepared: what the replay writes and the scan looks for."""

    home: Path
    paths: Paths
    campaign_path: Path
    campaign: Campaign
    cycle_id: str
    units: list[Unit]
    specs: list[TrialSpec]
    prepare_s: float
    identities_s: float


def set_up(root: Path, args: argparse.Namespace, postgres_url: str) -> Campaigned:
    """Write the campaign and its instance's dagster.yaml, run its prepare job, plan its runs and its trials."""
    home, paths = root / "home", Paths(root / "data")
    home.mkdir()
    # Dagster's own PostgreSQL storage: `--connections` chooses how the writers hold theirs (hold_writer_connections)
    write_instance_config(home, None, postgres_url, dagster_postgres_storage=True)
    # a nightly schedule, so that its sensor exists to be timed
    campaign_path = write_campaign(
        root, args.instances, args.seeds, args.batch_size, name=CAMPAIGN, nightly={"cron": "0 2 * * *"}
    )
    campaign = load_campaign(str(campaign_path))
    cycle_id = f"{NIGHTLY}-{uuid.uuid4().hex[:8]}"
    with DagsterInstance.from_config(str(home)) as instance:
        prepare_s = prepare(campaign, paths, instance, cycle_id)
        units = work_units(campaign, instance, args.writers)
    portfolio = load_portfolio(campaign.slices, paths).excluding(campaign.exclude)
    identities_s, specs = timed(lambda: trial_specs(campaign, portfolio, Harness(paths).sandbox_for(campaign)))
    return Campaigned(home, paths, campaign_path, campaign, cycle_id, units, specs, prepare_s, identities_s)


@dataclass
class Replayed:
    rows: list[dict[str, Any]]
    total: Written
    seconds: float
    succeeded: int  # runs that ended in SUCCESS, the prepare run's included


def run_replay(
    root: Path, args: argparse.Namespace, setup: Campaigned, settings: WriterSettings, postgres_url: str
) -> Replayed:
    """The writers and the webserver started, the campaign written and measured at each checkpoint."""
    log = root / "webserver.log"
    with DagsterInstance.from_config(str(setup.home)) as instance:
        instance.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=4)
        try:
            with (
                running_webserver(webserver_env(setup.home, setup.campaign_path), log) as webserver,
                ProcessPoolExecutor(
                    args.writers, get_context("spawn"), initializer=start_writer, initargs=(settings,)
                ) as pool,
            ):
                store = CountedStore(settings.endpoint, settings.prefix)
                sensors = SensorTicks(build_definitions([setup.campaign], setup.paths))
                measurer = Measurer(instance, postgres_url, setup.specs, store, webserver, sensors)
                start_writers(pool, args.writers)
                started = time.perf_counter()
                bounds = checkpoint_bounds(len(setup.units), args.checkpoints)
                rows, total = replay(pool, setup.units, bounds, measurer)
                seconds = time.perf_counter() - started
        except Exception:
            say(log.read_text()[-5000:])
            raise
        succeeded = instance.get_runs_count(RunsFilter(statuses=[DagsterRunStatus.SUCCESS]))
    return Replayed(rows, total, seconds, succeeded)


def say(line: str) -> None:
    """Progress, on stderr: the JSON on stdout is the result."""
    print(line, file=sys.stderr, flush=True)


def summary(
    args: argparse.Namespace, recording: Recording, setup: Campaigned, replayed: Replayed, wall_s: float
) -> dict[str, Any]:
    rows, total = replayed.rows, replayed.total
    written_s = sum(row["interval_s"] for row in rows)
    return {
        "campaign": {"instances": args.instances, "seeds": args.seeds, "batch_size": args.batch_size},
        "settings": {
            "writers": args.writers,
            "planned_events": "per asset and partition" if args.no_subset_planned_events else "per asset and run",
            "connections": args.connections,
            "storage": "postgres",
            "artifacts": "s3",
        },
        "recording": {
            "seconds": recording.seconds,
            "trials_run_events": {
                "head": len(recording.trials.head),
                "per_trial": len(recording.trials.per_trial),
                "tail": len(recording.trials.tail),
            },
            "environments_run_events": len(recording.environments.head),
            "s3_puts_per_trial": 4,
        },
        "prepare_s": setup.prepare_s,
        "identities_s": setup.identities_s,
        "checkpoints": rows,
        "totals": {
            "trials": total.trials,
            "runs": total.runs,
            "runs_succeeded": replayed.succeeded - 1,  # less the prepare run
            "events_written": total.events,
            "s3_puts": total.puts,
            "write_s": round(written_s, 1),
            "measure_s": round(sum(row["measure_s"] for row in rows), 1),
            "replay_s": round(replayed.seconds, 1),
            "trials_per_s": round(total.trials / written_s, 1),
            "runs_per_s": round(total.runs / written_s, 2),
            "wall_s": round(wall_s, 1),
        },
        "thresholds": THRESHOLDS,
        "growth_exponents": growth_exponents(rows),
        "first_limit": first_limit(rows),
    }


def benchmark(root: Path, args: argparse.Namespace, postgres_url: str, endpoint: str, prefix: str) -> dict[str, Any]:
    started = time.perf_counter()
    recording = record(root / "recording")
    check_tokens(recording)
    say(f"recorded in {recording.seconds} s")
    setup = set_up(root, args, postgres_url)
    say(f"prepared in {setup.prepare_s} s; {len(setup.units)} instances, {len(setup.specs)} trials")
    with DagsterInstance.from_config(str(setup.home)) as instance:
        ref = instance.get_ref()
    data_dir, campaign_path = str(setup.paths.data_dir), str(setup.campaign_path)
    settings = WriterSettings(
        ref, campaign_path, data_dir, setup.cycle_id, endpoint, prefix, args.connections, recording
    )
    replayed = run_replay(root, args, setup, settings, postgres_url)
    return summary(args, recording, setup, replayed, time.perf_counter() - started)


def main() -> None:
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # so that the webserver and the database are cleaned
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=500)
    parser.add_argument("--seeds", type=int, default=400)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--checkpoints", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--postgres", help="a PostgreSQL server's URL (default: scripts/start_postgres.sh's)")
    parser.add_argument("--s3-endpoint", help="an S3 server's endpoint (default: scripts/start_object_store.sh's)")
    parser.add_argument("--no-subset-planned-events", action="store_true", help="one planned event per partition")
    parser.add_argument("--connections", choices=CONNECTIONS, default="held", help="what each writer holds")
    args = parser.parse_args()
    process_environment(args)
    postgres = service_url(args.postgres, "start_postgres.sh")
    endpoint = service_url(args.s3_endpoint, "start_object_store.sh")
    with (
        tempfile.TemporaryDirectory() as scratch,
        fresh_database(postgres) as postgres_url,
        fresh_prefix(endpoint) as prefix,
    ):
        figures = benchmark(Path(scratch), args, postgres_url, endpoint, prefix)
        print(json.dumps(figures, indent=2), flush=True)  # before the clean-up: 800k objects take minutes


if __name__ == "__main__":
    main()
