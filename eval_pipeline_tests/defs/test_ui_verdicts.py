"""Verdicts at a glance in the Dagster UI, read back through the webserver's GraphQL API as the UI reads them.

A small demo campaign (a code issue and the demo's OOM task, two of its three variants run; a third instance
and the third variant left unrun) is run by the command, then served by `dagster-webserver`:

- the results asset's materialization holds every planned trial's verdict (`verdicts`, a table) and each
  variant's counts (`variants`), equal to the stored results: a resolved, an unresolved, an unscored
  (`oom_killed`) and a never-run (`missing`) trial each say so;
- an unscored trial's evaluation partition carries its outcome as an observation, while it stays
  unmaterialized (a materialized evaluation is a scored one);
- `dagster asset materialize --select ui/evaluation` alone works: it grades the stored generation, running
  no agent; a partition with no stored generation fails with one sentence naming what to select.

A campaign larger than VERDICT_ROWS trials has its first VERDICT_ROWS in the table and the count of the rest.
"""

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from eval_pipeline.common.settings import Paths
from eval_pipeline.defs.verdicts import VERDICT_ROWS, verdict_metadata
from eval_pipeline.results.warehouse import MISSING, read_results_table
from eval_pipeline_tests.support.cli import eval_pipeline_cli
from eval_pipeline_tests.support.dagster_dev import DagsterDev, free_port
from eval_pipeline_tests.support.result_rows import trial

REPO = Path(__file__).resolve().parents[2]
CODE, OOM, UNRUN = "eval-pipeline-demo__calclib-1", "build-index", "hello-file"
DEMO_INSTANCES = [
    *(f"eval-pipeline-demo__{repo}-{n}" for repo in ("calclib", "textkit") for n in range(1, 5)),
    *("build-index csv-total fix-config hello-file shuffle-deck slow-report sort-unique word-count".split()),
]
CAMPAIGN = {
    "name": "ui",
    "slices": {"code-issues": {"kind": "demo"}, "terminal": {"kind": "terminal", "path": "builtin:demo_tasks"}},
    "variants": [
        {"name": "oracle", "agent": "oracle"},
        {"name": "none", "agent": "null"},
        {"name": "flaky", "agent": "flaky"},
    ],
    "seeds": 1,
    "exclude": {"instances": [i for i in DEMO_INSTANCES if i not in (CODE, OOM, UNRUN)]},
    "retries": {"max_retries": 0, "delay_s": 0, "max_rerequests": 0},
}
LATEST_MATERIALIZATION = """query($path: [String!]!) { assetOrError(assetKey: {path: $path}) { ... on Asset {
  assetMaterializations(limit: 1) { metadataEntries { label __typename
    ... on TableMetadataEntry { table { records } } } } } } }"""
PARTITION_EVENTS = """query($path: [String!]!, $partition: String!) { assetOrError(assetKey: {path: $path}) {
  ... on Asset {
    assetMaterializations(partitions: [$partition]) { runId }
    assetObservations(partitions: [$partition]) { description metadataEntries { label
      ... on TextMetadataEntry { text } ... on BoolMetadataEntry { boolValue } } } } } }"""


class Webserver(DagsterDev):
    def table(self, asset: str, label: str) -> list[dict]:
        """The rows of a table in the asset's latest materialization's metadata."""
        [entry] = [e for e in self._entries(asset) if e["label"] == label]
        assert entry["__typename"] == "TableMetadataEntry", entry
        return [json.loads(record) for record in entry["table"]["records"]]

    def _entries(self, asset: str) -> list[dict]:
        found = self.query(LATEST_MATERIALIZATION, path=["ui", asset])["assetOrError"]
        return found["assetMaterializations"][0]["metadataEntries"]

    def partition_events(self, asset: str, partition: str) -> dict:
        return self.query(PARTITION_EVENTS, path=["ui", asset], partition=partition)["assetOrError"]


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[Webserver, dict[str, str]]]:
    """The campaign run by the command (two instances, two variants), then one webserver on its instance."""
    tmp_path = tmp_path_factory.mktemp("ui_verdicts")
    campaign = tmp_path / "ui.yaml"
    campaign.write_text(json.dumps(CAMPAIGN))
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "EVAL_PIPELINE_CAMPAIGNS": str(campaign)}
    env.pop("EVAL_PIPELINE_DATA_DIR", None)
    selection = ["--instance", CODE, "--instance", OOM, "--variant", "oracle", "--variant", "none"]
    result = eval_pipeline_cli(env, "run", "--campaign", str(campaign), *selection, "--json")
    assert json.loads(result.stdout)["planned"] == 9, result.stderr[-3000:]  # 4 of them selected
    port = free_port()
    log = tmp_path / "webserver.log"
    process = subprocess.Popen(
        ["dagster-webserver", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "w"),  # noqa: SIM115 - closed with the process
        start_new_session=True,
    )
    server = Webserver(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 180
        while not _serving(server):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(1)
        yield server, env
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=60)


def _serving(server: Webserver) -> bool:
    """Whether the webserver answers with the code location loaded."""
    try:
        found = server.query(LATEST_MATERIALIZATION, path=["ui", "results"])["assetOrError"]
    except (requests.ConnectionError, requests.HTTPError, AssertionError):
        return False
    return bool(found and found.get("assetMaterializations"))


@pytest.mark.slow  # a campaign and a webserver
def test_the_results_show_every_trials_verdict_as_stored(served):
    server, env = served
    table = server.table("results", "verdicts")
    stored = read_results_table(Paths(Path(env["DAGSTER_HOME"]) / "eval_pipeline").results / "ui.duckdb")
    assert {(r["instance"], r["variant"], r["seed"]): (r["outcome"], r["scored"], r["resolved"]) for r in table} == {
        (row.instance_id, row.variant, row.seed): (row.outcome, row.scored, row.resolved) for row in stored
    }
    verdict = {(r["instance"], r["variant"]): (r["outcome"], r["scored"], r["resolved"]) for r in table}
    assert len(table) == 9, "every planned trial, run or not"
    assert verdict[CODE, "oracle"] == ("resolved", True, True)
    assert verdict[CODE, "none"] == ("unresolved", True, False)
    assert verdict[OOM, "oracle"] == ("oom_killed", False, False), "unscored: its outcome, no verdict"
    assert verdict[UNRUN, "oracle"] == (MISSING, False, False), "never run: missing"
    variants = {row.pop("variant"): row for row in server.table("results", "variants")}
    assert variants["oracle"] == {"planned": 3, "scored": 1, "resolved": 1, "unscored": 1, "missing": 1}
    assert variants["flaky"] == {"planned": 3, "scored": 0, "resolved": 0, "unscored": 0, "missing": 3}


@pytest.mark.slow  # a campaign and a webserver
def test_an_unscored_trial_is_observed_on_its_evaluation_partition_not_materialized(served):
    server, _ = served
    events = server.partition_events("evaluation", f"{OOM}|oracle-s0")
    assert events["assetMaterializations"] == [], "a materialized evaluation is a scored one"
    [observation] = events["assetObservations"]
    assert observation["description"].startswith("oom_killed")
    metadata = {e["label"]: e.get("text", e.get("boolValue")) for e in observation["metadataEntries"]}
    assert (metadata["outcome"], metadata["scored"]) == ("oom_killed", False)
    assert server.partition_events("evaluation", f"{UNRUN}|oracle-s0")["assetObservations"] == []


def materialize(env: dict[str, str], selection: str, partition: str) -> subprocess.CompletedProcess:
    """`dagster asset materialize` from the repository root, as a user runs it."""
    command = ["dagster", "asset", "materialize", "-m", "eval_pipeline.definitions", "--select", selection]
    return subprocess.run(
        [*command, "--partition", partition], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow  # a campaign and a webserver
def test_evaluation_alone_grades_the_stored_generation_or_says_what_to_select(served):
    server, env = served
    graded = f"{CODE}|oracle-s0"
    before = len(server.partition_events("evaluation", graded)["assetMaterializations"])
    alone = materialize(env, "ui/evaluation", graded)
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert "Traceback" not in alone.stdout + alone.stderr
    assert len(server.partition_events("evaluation", graded)["assetMaterializations"]) == before + 1
    assert len(server.partition_events("generation", graded)["assetMaterializations"]) == 1, "nothing generated"

    ungenerated = materialize(env, "ui/evaluation", f"{CODE}|flaky-s0")
    assert ungenerated.returncode != 0
    said = ungenerated.stdout + ungenerated.stderr
    assert f"{CODE}|flaky-s0: no stored generation to grade: select ui/generation with ui/evaluation." in said
    assert "DagsterInvalidSubsetError" not in said
    assert server.partition_events("generation", f"{CODE}|flaky-s0")["assetMaterializations"] == [], "no agent ran"


def test_a_large_campaigns_verdicts_keep_every_variants_count_and_say_how_many_rows_are_left_out():
    rows = [
        trial(f"i{n:05}", variant, 0, outcome)
        for n in range(VERDICT_ROWS)
        for variant, outcome in (("a", "resolved"), ("b", "oom_killed"))
    ]
    metadata = verdict_metadata(rows)
    assert len(metadata["verdicts"].records) == VERDICT_ROWS and metadata["verdicts_omitted"] == VERDICT_ROWS
    assert metadata["verdicts"].records[-1].data["instance"] == f"i{VERDICT_ROWS // 2 - 1:05}", "by instance"
    counts = {
        r.data["variant"]: (r.data["planned"], r.data["resolved"], r.data["unscored"])
        for r in metadata["variants"].records
    }
    assert counts == {"a": (VERDICT_ROWS, VERDICT_ROWS, 0), "b": (VERDICT_ROWS, 0, VERDICT_ROWS)}
