"""`dagster dev` on the production instance: PostgreSQL storage, artifacts, step outputs and compute logs
on S3, runs through the queued run coordinator, as the daemon and run workers of a deployment use them."""

import os
from pathlib import Path

import psycopg2
import pytest
from dagster import AssetKey, DagsterInstance

from eval_pipeline.common.settings import Deployment
from eval_pipeline.orchestration.instance_config import ensure_instance_config
from eval_pipeline_tests.support.dagster_dev import LAUNCH, running_dagster_dev
from eval_pipeline_tests.support.services import S3_CLIENT_ENV, TEST_BUCKET, s3_client

pytestmark = pytest.mark.slow  # end to end: `pytest -m "not slow"` leaves it out

CAMPAIGN = """
name: prod
benchmark: {kind: demo}
variants: [{name: oracle, agent: oracle}]
seeds: 1
"""
INSTANCES = ["eval-pipeline-demo__calclib-1", "eval-pipeline-demo__textkit-1"]


def test_ui_runs_and_a_backfill_on_postgres_and_s3(tmp_path, monkeypatch, postgres_database, s3_endpoint, s3_store):
    postgres_url = postgres_database()
    monkeypatch.setenv("EVAL_PIPELINE_POSTGRES_URL", postgres_url)  # this process reads the instance too
    env = {
        **os.environ,
        **S3_CLIENT_ENV,
        "AWS_ENDPOINT_URL": s3_endpoint,
        "DAGSTER_HOME": str(tmp_path / "home"),
        "EVAL_PIPELINE_CAMPAIGNS": str(tmp_path / "prod.yaml"),
        "EVAL_PIPELINE_POSTGRES_URL": postgres_url,
        "EVAL_PIPELINE_ARTIFACTS": s3_store.location,
    }
    env.pop("EVAL_PIPELINE_DATA_DIR", None)
    (tmp_path / "prod.yaml").write_text(CAMPAIGN)
    Path(env["DAGSTER_HOME"]).mkdir()
    ensure_instance_config(Path(env["DAGSTER_HOME"]), Deployment.from_env(env))

    with running_dagster_dev(env, tmp_path / "dagster_dev.log") as server:
        server.run_job("prod__prepare_job")
        server.run_jobs("prod__environments_job", [{"dagster/partition": instance} for instance in INSTANCES])
        trials = [f"{instance}|oracle-s0" for instance in INSTANCES]
        assets = [{"path": ["prod", "generation"]}, {"path": ["prod", "evaluation"]}]
        _, status = server.backfill(LAUNCH, {"assetSelection": assets, "partitionNames": trials})
        assert status == "COMPLETED_SUCCESS", (tmp_path / "dagster_dev.log").read_text()[-3000:]

    db = psycopg2.connect(postgres_url.replace("+psycopg2", ""))
    with db, db.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM event_logs WHERE dagster_event_type = 'PIPELINE_ENQUEUED'")
        (queued,) = cursor.fetchone()
        cursor.execute("SELECT count(*) FROM runs WHERE status = 'SUCCESS'")
        (succeeded,) = cursor.fetchone()
    db.close()
    assert succeeded == 1 + 2 + 2 and queued == succeeded, "every run went through the run queue, in PostgreSQL"
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert instance.get_materialized_partitions(AssetKey(["prod", "evaluation"])) == set(trials)

    objects = s3_client(s3_endpoint).list_objects_v2(Bucket=TEST_BUCKET, Prefix=s3_store.prefix)["Contents"]
    areas = {item["Key"].removeprefix(s3_store.prefix).split("/")[0] for item in objects}
    assert {"generation", "evaluation", "io", "compute-logs"} <= areas, "run workers wrote to S3"
    assert not (Path(env["DAGSTER_HOME"]) / "storage").exists(), "no step output or log on local disk"
