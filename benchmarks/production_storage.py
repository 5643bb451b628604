"""Measure the production storage: the artifact store on local disk vs S3, and a campaign on each configuration.

    EVAL_PIPELINE_TEST_POSTGRES_URL=$(bash scripts/start_postgres.sh) \\
    EVAL_PIPELINE_TEST_S3_ENDPOINT=$(bash scripts/start_object_store.sh) \\
    python benchmarks/production_storage.py [--artifacts 2000] [--seeds 2]

Artifact store: put, get and list of N artifacts of about 2 KB (a generation's
size for a small patch), one thread and 8 threads. Campaign: four demo terminal
tasks x oracle and null x seeds, through the CLI, embedded (SQLite, local
files), with Dagster on PostgreSQL, with artifacts on S3, and with both.
Every measurement starts from a fresh DAGSTER_HOME, database and S3 prefix.
"""

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import psycopg2
import yaml

from eval_pipeline.config.campaign import BUILTIN_DIR
from eval_pipeline.store.artifacts import ArtifactStore, LocalArtifactStore, S3ArtifactStore

BUCKET = "eval-pipeline-bench"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}


def s3_client(endpoint: str):
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=CREDENTIALS["AWS_REGION"],
    )
    try:
        client.create_bucket(Bucket=BUCKET)
    except (client.exceptions.BucketAlreadyOwnedByYou, client.exceptions.BucketAlreadyExists):
        pass
    return client


def store_rates(store: ArtifactStore, count: int, threads: int) -> dict[str, float]:
    """Operations per second for put, get (all present) and one listing of everything."""
    payload = {"patch": "x" * 2000, "status": "completed"}
    keys = [f"generation/{uuid.uuid4().hex}.json" for _ in range(count)]
    rates = {}
    with ThreadPoolExecutor(threads) as pool:
        for name, operation in (("put", lambda k: store.put(k, payload)), ("get", store.get)):
            started = time.perf_counter()
            list(pool.map(operation, keys))
            rates[f"{name}_per_s"] = round(count / (time.perf_counter() - started))
    started = time.perf_counter()
    assert len(store.keys("generation")) == count
    rates["list_s"] = round(time.perf_counter() - started, 2)
    return rates


def campaign_file(root: Path, seeds: int) -> Path:
    for name in ("hello-file", "csv-total", "word-count", "sort-unique"):
        shutil.copytree(BUILTIN_DIR.parent / "demo_tasks" / name, root / "tasks" / name)
    path = root / "bench.yaml"
    variants = [{"name": "oracle", "agent": "oracle"}, {"name": "null", "agent": "null"}]
    path.write_text(
        yaml.safe_dump(
            {
                "name": "bench",
                "slices": {"t": {"kind": "terminal", "path": str(root / "tasks")}},
                "variants": variants,
                "seeds": seeds,
            }
        )
    )
    return path


def campaign_seconds(campaign: Path, root: Path, env: dict[str, str]) -> float:
    home = root / f"home-{uuid.uuid4().hex[:8]}"
    home.mkdir()
    started = time.perf_counter()
    result = subprocess.run(
        ["eval-pipeline", "run", "--campaign", str(campaign), "--json", "--workers", "2"],
        env={**os.environ, **env, "DAGSTER_HOME": str(home)},
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return round(elapsed, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--artifacts", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    postgres = os.environ["EVAL_PIPELINE_TEST_POSTGRES_URL"]
    endpoint = os.environ["EVAL_PIPELINE_TEST_S3_ENDPOINT"]
    client = s3_client(endpoint)
    admin = psycopg2.connect(postgres.replace("+psycopg2", ""))
    admin.autocommit = True

    databases: list[str] = []

    def database() -> str:
        databases.append(f"bench_{uuid.uuid4().hex[:12]}")
        admin.cursor().execute(f"CREATE DATABASE {databases[-1]}")
        return f"{postgres.rsplit('/', 1)[0]}/{databases[-1]}"

    def s3_prefix() -> str:
        return f"bench-{uuid.uuid4().hex[:12]}"

    figures: dict = {"artifact_store": {}, "campaign_s": {}}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for threads in (1, 8):
            figures["artifact_store"][f"local_{threads}_threads"] = store_rates(
                LocalArtifactStore(root / f"local-{threads}"), args.artifacts, threads
            )
            figures["artifact_store"][f"s3_{threads}_threads"] = store_rates(
                S3ArtifactStore(BUCKET, s3_prefix(), client=client), args.artifacts, threads
            )
        campaign = campaign_file(root, args.seeds)
        s3 = {**CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}
        configurations = {
            "embedded": lambda: {},
            "postgres": lambda: {"EVAL_PIPELINE_POSTGRES_URL": database()},
            "s3": lambda: {**s3, "EVAL_PIPELINE_ARTIFACTS": f"s3://{BUCKET}/{s3_prefix()}"},
            "postgres_and_s3": lambda: {
                **s3,
                "EVAL_PIPELINE_POSTGRES_URL": database(),
                "EVAL_PIPELINE_ARTIFACTS": f"s3://{BUCKET}/{s3_prefix()}",
            },
        }
        for name, env in configurations.items():
            figures["campaign_s"][name] = campaign_seconds(campaign, root, env())
        figures["campaign_trials"] = 4 * 2 * args.seeds
    for name in databases:
        admin.cursor().execute(f"DROP DATABASE {name} WITH (FORCE)")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
