"""`dagster dev` started as a user starts it, and its GraphQL API as the UI calls it."""

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[2]

LAUNCH = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""

STATUS = """query($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill { status } } }"""

LAUNCH_RUN = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""

RUN_STATUS = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DagsterDev:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, text: str, **variables) -> dict:
        response = requests.post(f"{self.url}/graphql", json={"query": text, "variables": variables}, timeout=60)
        response.raise_for_status()
        body = response.json()
        assert "errors" not in body, body["errors"]
        return body["data"]

    def wait(self, text: str, done, timeout_s: float = 300, **variables) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            data = self.query(text, **variables)
            if done(data):
                return data
            time.sleep(1)
        raise AssertionError(f"timed out: {data}")

    def launch_run(self, job: str, tags: dict[str, str] | None = None) -> str:
        selector = {"repositoryLocationName": "eval_pipeline", "repositoryName": "__repository__", "jobName": job}
        metadata = {"tags": [{"key": key, "value": value} for key, value in (tags or {}).items()]}
        launched = self.query(LAUNCH_RUN, params={"selector": selector, "executionMetadata": metadata})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        return launched["run"]["runId"]

    def finished(self, run_id: str) -> str:
        """The run's final status, once it has one."""
        ended = self.wait(RUN_STATUS, lambda d: d["runOrError"]["status"] in ("SUCCESS", "FAILURE"), id=run_id)
        return ended["runOrError"]["status"]

    def run_jobs(self, job: str, tags: list[dict[str, str]]) -> None:
        """Launch one run of `job` per set of tags, all at once, and wait for every one to succeed."""
        runs = [self.launch_run(job, run_tags) for run_tags in tags]
        assert [self.finished(run_id) for run_id in runs] == ["SUCCESS"] * len(runs)

    def run_job(self, job: str, tags: dict[str, str] | None = None) -> None:
        self.run_jobs(job, [tags or {}])

    def backfill(self, mutation: str, params: dict) -> tuple[str, str]:
        """Launch (or re-execute) a backfill and wait for it to end: (backfill id, final status)."""
        result = next(iter(self.query(mutation, params=params).values()))
        assert result["__typename"] == "LaunchBackfillSuccess", result
        ended = self.wait(
            STATUS,
            lambda d: (
                d["partitionBackfillOrError"]["status"].startswith("COMPLETED")
                or d["partitionBackfillOrError"]["status"] in ("FAILED", "CANCELED")
            ),
            id=result["backfillId"],
        )
        return result["backfillId"], ended["partitionBackfillOrError"]["status"]


@contextmanager
def running_dagster_dev(env: dict[str, str], log: Path) -> Iterator[DagsterDev]:
    """`dagster dev` from the repository root with `env`, until the block ends."""
    port = free_port()
    process = subprocess.Popen(
        ["dagster", "dev", "-p", str(port), "-h", "127.0.0.1"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "w"),  # noqa: SIM115 - closed with the process
        start_new_session=True,
    )
    server = DagsterDev(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if requests.get(f"{server.url}/server_info", timeout=5).ok:
                    break
            except requests.ConnectionError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(1)
        yield server
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=60)
