"""Production configuration: chosen by environment variables, run for real on PostgreSQL and S3."""

import json
import shutil
from collections import Counter
from pathlib import Path

import psycopg2
import pytest
import yaml
from dagster import DagsterInstance

from eval_pipeline.common.settings import Deployment, DeploymentError
from eval_pipeline.config.campaign import BUILTIN_DIR
from eval_pipeline.defs.resources import EvalPipelineResource
from eval_pipeline.orchestration.instance_config import GENERATED_HEADER, ensure_instance_config, instance_config
from eval_pipeline_tests.support.cli import eval_pipeline_cli
from eval_pipeline_tests.support.services import S3_CLIENT_ENV, TEST_BUCKET, s3_client

REPOSITORY = Path(__file__).parents[2]
PRODUCTION = {
    "EVAL_PIPELINE_POSTGRES_URL": "postgresql+psycopg2://u:secret@db:5432/dagster",
    "EVAL_PIPELINE_ARTIFACTS": "s3://bucket/evals/",
}


def test_the_repositorys_dagster_yaml_is_the_embedded_default():
    assert yaml.safe_load((REPOSITORY / "dagster.yaml").read_text()) == instance_config(Deployment())
    assert Deployment.from_env({}) == Deployment()


def test_production_variables_choose_postgres_storage_and_s3_compute_logs_without_writing_secrets(tmp_path):
    deployment = Deployment.from_env(PRODUCTION)
    config = instance_config(deployment)
    storage = config["storage"]["custom"]
    assert (storage["module"], storage["class"]) == (
        "eval_pipeline.orchestration.postgres_storage",
        "PooledPostgresStorage",
    )
    assert storage["config"] == {"postgres_url": {"env": "EVAL_PIPELINE_POSTGRES_URL"}}
    assert config["compute_logs"]["class"] == "S3ComputeLogManager"
    assert config["compute_logs"]["config"] == {
        "bucket": "bucket",
        "prefix": "evals/compute-logs",
        "skip_empty_files": True,
    }
    assert (deployment.s3_bucket, deployment.s3_prefix("io")) == ("bucket", "evals/io")
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert config["run_retries"]["enabled"] and config["run_monitoring"]["enabled"]
    assert ensure_instance_config(tmp_path, deployment)
    assert "secret" not in (tmp_path / "dagster.yaml").read_text()


def test_the_instance_config_command_prints_what_the_variables_choose(campaign_env):
    result = eval_pipeline_cli({**campaign_env, **PRODUCTION}, "instance-config")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(GENERATED_HEADER)
    assert yaml.safe_load(result.stdout) == instance_config(Deployment.from_env(PRODUCTION))


def test_a_users_own_dagster_yaml_is_left_alone_and_a_generated_one_follows_the_variables(tmp_path):
    ensure_instance_config(tmp_path, Deployment())
    assert "custom" in yaml.safe_load((tmp_path / "dagster.yaml").read_text())["storage"]
    ensure_instance_config(tmp_path, Deployment.from_env(PRODUCTION))
    assert "Postgres" in yaml.safe_load((tmp_path / "dagster.yaml").read_text())["storage"]["custom"]["class"]
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: true\n")
    assert not ensure_instance_config(tmp_path, Deployment.from_env(PRODUCTION))
    assert (tmp_path / "dagster.yaml").read_text() == "telemetry:\n  enabled: true\n"
    assert not (tmp_path / "dagster.yaml").read_text().startswith(GENERATED_HEADER)


def test_the_embedded_default_loads_as_a_dagster_instance(tmp_path):
    ensure_instance_config(tmp_path, Deployment())
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert instance.run_retries_enabled and instance.run_monitoring_enabled
        assert type(instance.run_storage).__name__ == "HeldSqliteRunStorage"
        assert type(instance.event_log_storage).__name__ == "HeldSqliteEventLogStorage"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("EVAL_PIPELINE_POSTGRES_URL", "postgresql://u:p@db/dagster"),
        ("EVAL_PIPELINE_ARTIFACTS", "/data/artifacts"),
        ("EVAL_PIPELINE_EXECUTOR", "celery"),
        ("EVAL_PIPELINE_MAX_CONCURRENT_RUNS", "0"),
    ],
)
def test_a_bad_deployment_variable_is_a_clear_error_naming_it(campaign_env, variable, value):
    with pytest.raises(DeploymentError, match=variable):
        Deployment.from_env({variable: value})
    result = eval_pipeline_cli({**campaign_env, variable: value}, "run", "--campaign", "demo")
    assert result.returncode == 2 and variable in result.stderr and "Traceback" not in result.stderr
    assert not (Path(campaign_env["DAGSTER_HOME"]) / "dagster.yaml").exists()


def small_campaign(tmp_path: Path) -> Path:
    """Two terminal tasks x two reference agents x one seed: four trials, two resolved."""
    tasks = tmp_path / "tasks"
    for name in ("hello-file", "csv-total"):
        shutil.copytree(BUILTIN_DIR.parent / "demo_tasks" / name, tasks / name)
    path = tmp_path / "production.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "production",
                "slices": {"terminal": {"kind": "terminal", "path": str(tasks)}},
                "variants": [{"name": "oracle", "agent": "oracle"}, {"name": "null", "agent": "null"}],
                "seeds": 1,
            }
        )
    )
    return path


def run(env: dict[str, str], campaign: Path) -> dict:
    result = eval_pipeline_cli(env, "run", "--campaign", str(campaign), "--json", "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.mark.slow
def test_a_campaign_runs_with_dagster_on_postgres_and_artifacts_on_s3(
    tmp_path, campaign_env, postgres_database, s3_endpoint, s3_store
):
    campaign = small_campaign(tmp_path)
    postgres_url = postgres_database()
    env = {
        **campaign_env,
        **S3_CLIENT_ENV,
        "AWS_ENDPOINT_URL": s3_endpoint,
        "EVAL_PIPELINE_POSTGRES_URL": postgres_url,
        "EVAL_PIPELINE_ARTIFACTS": s3_store.location,
    }
    summary = run(env, campaign)
    assert (summary["planned"], summary["scored"]) == (4, 4)
    assert summary["variants"]["oracle"]["resolved_rate"] == 1.0 and summary["variants"]["null"]["resolved_rate"] == 0.0
    assert summary["generation"] == {"computed": 4, "reused": 0, "failed": 0}

    # Dagster's runs and events are in PostgreSQL, and nothing in SQLite.
    db = psycopg2.connect(postgres_url.replace("+psycopg2", ""))
    with db, db.cursor() as cursor:
        cursor.execute("SELECT status, count(*) FROM runs GROUP BY status")
        statuses = dict(cursor.fetchall())
        cursor.execute(
            "SELECT count(DISTINCT partition) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'"
            " AND asset_key LIKE '%evaluation%'"
        )
        (evaluated_partitions,) = cursor.fetchone()
    db.close()
    assert statuses == {"SUCCESS": 1 + 2 + 2 + 1}, "prepare, 2 environments, a batch of 2 trials each, results"
    assert evaluated_partitions == 4
    home = Path(campaign_env["DAGSTER_HOME"])
    assert not list(home.rglob("*.db")), "no SQLite storage beside PostgreSQL"

    # Artifacts, step outputs and published files are on S3; none on local disk. (In-process runs capture
    # no step output, so there are no compute logs to upload: the UI's run workers' logs are tested there.)
    stored = Counter(key.split("/")[0] for key in s3_store.keys(""))
    assert stored["generation"] == 4 and stored["evaluation"] == 4
    objects = s3_client(s3_endpoint).list_objects_v2(Bucket=TEST_BUCKET, Prefix=s3_store.prefix)["Contents"]
    areas = {item["Key"].removeprefix(s3_store.prefix).split("/")[0] for item in objects}
    assert {"generation", "evaluation", "io", "files"} <= areas  # compute logs: see test_production_dagster_dev
    assert not (home / "eval_pipeline" / "artifacts").exists()
    published = {key.removeprefix("files/") for key in s3_store.keys("files")}
    assert {
        "results/production.duckdb",
        "reports/production/report.html",
        "reports/production/report.json",
    } <= published
    assert any(key.startswith("snapshots/") and key.endswith(".parquet") for key in published)

    # A new Dagster instance on another database with the same artifacts: everything is reused, nothing rerun.
    fresh_home = tmp_path / "fresh_home"
    fresh_home.mkdir()
    again = run({**env, "DAGSTER_HOME": str(fresh_home), "EVAL_PIPELINE_POSTGRES_URL": postgres_database()}, campaign)
    assert again["generation"] == {"computed": 0, "reused": 4, "failed": 0}
    assert again["evaluation"] == {"computed": 0, "reused": 4, "failed": 0}
    assert again["variants"] == summary["variants"]


def test_files_outlive_a_pods_scratch_directory_on_s3(tmp_path, monkeypatch, s3_endpoint, s3_store):
    """A warehouse written in one pod is published beside the artifacts and fetched in another."""
    for variable, value in {**S3_CLIENT_ENV, "AWS_ENDPOINT_URL": s3_endpoint}.items():
        monkeypatch.setenv(variable, value)
    writer = EvalPipelineResource(data_dir=str(tmp_path / "pod-a"), artifacts=s3_store.location).harness
    reader = EvalPipelineResource(data_dir=str(tmp_path / "pod-b"), artifacts=s3_store.location).harness
    written = writer.paths.results / "c.duckdb"
    written.parent.mkdir(parents=True)
    written.write_bytes(b"warehouse")
    assert writer.publish(written) == f"{s3_store.location}files/results/c.duckdb"
    fetched = reader.fetch(reader.paths.results / "c.duckdb")
    assert fetched.read_bytes() == b"warehouse"
    assert not reader.fetch(reader.paths.results / "never-published.duckdb").exists()
    local = EvalPipelineResource(data_dir=str(tmp_path / "local")).harness
    assert local.publish(written) == str(written), "on the embedded default a file stays where it is"


def test_a_command_home_captures_a_runs_output_to_dagsters_files_without_tail_processes(tmp_path, monkeypatch):
    """The embedded home's compute logs: what a run prints lands in Dagster's files, where the UI reads it,
    and no `tail -F` or watcher process is started to copy it back (orchestration/compute_logs.py)."""
    from dagster import job, op
    from dagster._core.execution import compute_logs

    def no_tail(*args, **kwargs):
        raise AssertionError("a tail process was started")

    monkeypatch.setattr(compute_logs, "execute_posix_tail", no_tail)
    ensure_instance_config(tmp_path, Deployment())

    @op
    def talks() -> None:
        print("to stdout from the op")

    @job
    def talking():
        talks()

    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert type(instance.compute_log_manager).__name__ == "FileComputeLogManager"
        result = talking.execute_in_process(instance=instance)
        assert result.success
        outputs = list((tmp_path / "storage" / result.run_id / "compute_logs").glob("*.out"))
        assert [path.read_text() for path in outputs] == ["to stdout from the op\n"]
        assert list((tmp_path / "storage" / result.run_id / "compute_logs").glob("*.complete"))
