"""Shared fixtures: the demo benchmark built once per session, local sandboxes, stores.

The clients of servers (docker, boto3, psycopg2) are imported by the fixtures that use them, so that a test
run that needs none of them does not pay for importing them.
"""

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.common.settings import RESULTS_KEY_VARIABLE
from eval_pipeline.results.warehouse import ResultRow
from eval_pipeline.sandbox import EnvironmentHandle, ResourceLimits, SandboxBackend, SandboxSettings, make_sandbox
from eval_pipeline.sandbox.container.removal import removals_done
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline.sandbox.pods.images import MANAGED_LABEL
from eval_pipeline.store.artifacts import LocalArtifactStore, S3ArtifactStore
from eval_pipeline.tasks.dataset import Benchmark
from eval_pipeline.tasks.demo import build_demo_benchmark
from eval_pipeline.tasks.swebench.instance import Instance

# One results key for the whole session, inherited by every subprocess (CLI, `dagster dev`), so records one
# process writes verify in another; tests of the key file itself unset it.
os.environ.setdefault(RESULTS_KEY_VARIABLE, f"tests-{uuid.uuid4().hex}")

# Test modules that share one server through a module-scoped fixture: their tests run on one worker, in order.
SERVER_MODULES = {"test_dagster_dev", "test_production_dagster_dev"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the groups into the node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`--dist loadgroup`), tests that use the container engine run on one worker, one after
    another, as they did before the suite ran in parallel: they count the engine's containers, stop its
    service, and check at the end that none was left behind. Tests sharing a server stay together too."""
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        if "engine" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("engine"))
        elif module in SERVER_MODULES:
            item.add_marker(pytest.mark.xdist_group(module))


@pytest.fixture(scope="session")
def demo_benchmark(tmp_path_factory: pytest.TempPathFactory) -> Benchmark:
    return build_demo_benchmark(tmp_path_factory.mktemp("mirrors"))


@pytest.fixture(scope="session")
def shared_sandbox(tmp_path_factory: pytest.TempPathFactory) -> LocalSandbox:
    """One sandbox for the session, so each demo environment is prepared once."""
    return LocalSandbox(
        tmp_path_factory.mktemp("sandbox"),
        ResourceLimits(memory_ceiling_mb=1024, output_bytes=200_000),
        SandboxSettings(),
        "test",
    )


@pytest.fixture
def prepare(demo_benchmark: Benchmark, shared_sandbox: LocalSandbox):
    """Prepare a demo instance's environment, on the shared sandbox unless another is given."""

    def prepare_environment(instance: Instance, sandbox: SandboxBackend = shared_sandbox) -> EnvironmentHandle:
        return sandbox.prepare(instance, demo_benchmark.environment_for(instance), demo_benchmark.source)

    return prepare_environment


@pytest.fixture
def store(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")


def eval_pipeline_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """The `eval-pipeline` console script as a user runs it, with `env` as its whole environment."""
    return subprocess.run(["eval-pipeline", *args], env=env, capture_output=True, text=True, timeout=900)


def ci_service(variable: str, script: str) -> str:
    """A server `.ci/run` started (its address in `variable`): required in CI, else the test is skipped."""
    value = os.environ.get(variable)
    if not value:
        if os.environ.get("CI"):
            pytest.fail(f"CI must set {variable} (see scripts/{script})")
        pytest.skip(f"{variable} is not set; start the server with scripts/{script}")
    return value


TEST_BUCKET = "eval-pipeline-test"


@pytest.fixture(scope="session")
def s3_endpoint() -> str:
    """A real S3-compatible server on loopback (SeaweedFS), with the tests' bucket in it."""
    import botocore.exceptions

    endpoint = ci_service("EVAL_PIPELINE_TEST_S3_ENDPOINT", "start_object_store.sh")
    client = s3_client(endpoint)
    deadline = time.monotonic() + 60
    while True:  # a fresh server answers before its filer can hold buckets
        try:
            client.head_bucket(Bucket=TEST_BUCKET)
            return endpoint
        except botocore.exceptions.ClientError:
            try:
                client.create_bucket(Bucket=TEST_BUCKET)
            except botocore.exceptions.ClientError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)


S3_CLIENT_ENV = {
    "AWS_ACCESS_KEY_ID": "eval-pipeline",
    "AWS_SECRET_ACCESS_KEY": "eval-pipeline",
    "AWS_REGION": "us-east-1",
}


def s3_client(endpoint: str):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=S3_CLIENT_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_CLIENT_ENV["AWS_SECRET_ACCESS_KEY"],
        region_name=S3_CLIENT_ENV["AWS_REGION"],
    )


@pytest.fixture
def s3_store(s3_endpoint: str) -> S3ArtifactStore:
    """An artifact store under a prefix of its own in the tests' bucket."""
    return S3ArtifactStore(TEST_BUCKET, f"test-{uuid.uuid4().hex[:12]}", client=s3_client(s3_endpoint))


@pytest.fixture
def postgres_database():
    """Makes fresh databases on a real PostgreSQL server (scripts/start_postgres.sh); drops them after the test."""
    import psycopg2

    server = ci_service("EVAL_PIPELINE_TEST_POSTGRES_URL", "start_postgres.sh")
    admin = psycopg2.connect(server.replace("+psycopg2", ""))
    admin.autocommit = True
    made = []

    def make() -> str:
        made.append(f"eval_test_{uuid.uuid4().hex[:12]}")
        admin.cursor().execute(f"CREATE DATABASE {made[-1]}")
        return f"{server.rsplit('/', 1)[0]}/{made[-1]}"

    yield make
    for database in made:
        admin.cursor().execute(f"DROP DATABASE {database} WITH (FORCE)")
    admin.close()


@pytest.fixture
def campaign_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A fresh DAGSTER_HOME and data directory, set for this process and returned for subprocesses."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.delenv("EVAL_PIPELINE_DATA_DIR", raising=False)
    return {**os.environ, "DAGSTER_HOME": str(home)}


def write_terminal_task(tasks_dir: Path, name: str, test_sh: str, solve_sh: str = "true\n") -> Path:
    """A minimal Harbor-format task directory (empty working tree) whose verifier is `test_sh`."""
    task = tasks_dir / name
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True, exist_ok=True)
    (task / "instruction.md").write_text(f"Task {name}.\n")
    (task / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 30.0\n')
    (task / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    (task / "tests" / "test.sh").write_text(f"#!/bin/bash\n{test_sh}")
    (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve_sh}")
    return task


TRIAL_LIMITS = ResourceLimits(memory_floor_mb=128, memory_ceiling_mb=512, cpu_ceiling=1)


@pytest.fixture(scope="session")
def engine():
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as error:  # noqa: BLE001 - any failure to reach the engine
        if os.environ.get("CI"):
            pytest.fail(f"CI must provide a container engine (see scripts/start_container_engine.sh): {error}")
        pytest.skip(f"no container engine reachable: {error}")
    yield client
    removals_done()  # trial containers this process is removing behind its trials
    leftovers = client.containers.list(all=True, filters={"label": [f"{MANAGED_LABEL}=true"]})
    assert not leftovers, f"tests left containers behind: {[c.name for c in leftovers]}"


def output_of(engine, image: str, command: list[str], **options) -> bytes:
    """What `command` prints in a fresh container of `image`, read from its logs once it has exited: docker-py's
    `containers.run` reads an attached stream, which Podman has left open under load until the test's timeout
    (600 s) after the command had long ended."""
    container = engine.containers.create(image=image, command=command, **options)  # by name: see the tool test
    try:
        container.start()
        container.wait(timeout=120)
        return container.logs(stdout=True, stderr=False)
    finally:
        container.remove(force=True)


@pytest.fixture
def container_sandbox(engine, tmp_path):
    """A factory of container sandboxes for a unique test campaign, removing its containers after the test."""
    campaign = f"test-{uuid.uuid4().hex[:8]}"
    made = []

    def make(limits=TRIAL_LIMITS, network=False, **settings):
        sandbox = make_sandbox(
            SandboxSettings.from_mapping({"backend": "container", **settings}),
            tmp_path / "sb",
            limits,
            campaign,
            network,
        )
        made.append(sandbox)
        return sandbox

    yield make
    for sandbox in made:
        sandbox.release()
    snapshots = {
        "label": [f"{MANAGED_LABEL}=true", "eval_pipeline.layer=snapshot", f"eval_pipeline.campaign={campaign}"]
    }
    for image in listed_images(engine, snapshots):  # a terminal trial's snapshot outlives its campaign's run
        engine.images.remove(image.id, force=True)


def listed_images(engine, filters, attempts: int = 5):
    """The engine's images matching `filters`; Podman fails a listing when another test removes an image during
    it ("image not known"), so a failed listing is tried again."""
    import docker

    for _ in range(attempts - 1):
        try:
            return engine.images.list(filters=filters)
        except docker.errors.APIError:
            time.sleep(1)
    return engine.images.list(filters=filters)


def prepare_on(sandbox, benchmark, instance):
    return sandbox.prepare(instance, benchmark.environment_for(instance), benchmark.source)


def trial(instance_id: str, variant: str, seed: int, outcome: str, **fields) -> ResultRow:
    """One results row; only what the report reads is given, the rest is lineage it passes over."""
    kind = Outcome(outcome).kind.value
    row = {
        "campaign": "c",
        "slice": "code",
        "instance_id": instance_id,
        "repo": f"owner/{instance_id[0]}",
        "trial": f"{variant}-s{seed}",
        "variant": variant,
        "seed": seed,
        "agent": variant,
        "agent_config_hash": variant,
        "outcome": outcome,
        "outcome_kind": kind,
        "scored": kind == "agent",
        "resolved": outcome == "resolved",
        "attempts": 1,
        "generation_key": None,
        "evaluation_key": None,
        "patch_sha256": None,
        "generation_duration_s": 1.0,
        "evaluation_duration_s": 1.0,
        "peak_memory_mb": None,
        "oom_killed": outcome == "oom_killed",
        "test_infrastructure_changes": 0,
        "audit_flags": "",
        "input_tokens": 100,
        "output_tokens": 50,
        "cost_usd": 0.5,
        "steps": 3,
        "stop_reason": "completed",
        "harness_version": "h",
        "dataset_version": "d",
        "sandbox_backend": "local",
        "sandbox_mode": "pod",
        "environment_image": None,
        "memory_floor_mb": 1,
        "memory_ceiling_mb": 2,
        "cpu_floor": 1.0,
        "cpu_ceiling": 1.0,
        "resource_multiplier": 1.0,
        "effective_memory_ceiling_mb": 2,
        "pids_limit": 1,
        "enforced_limits": "{}",
        "limit_evidence": None,
    }
    return ResultRow(**{**row, **fields})


@pytest.fixture
def model(demo_benchmark: Benchmark, monkeypatch: pytest.MonkeyPatch):
    """The scripted model (the only stand-in for a model) serving the demo's solutions, its key set."""
    from eval_pipeline.testing.scripted_model import ScriptedModelServer, solutions_from_tasks

    monkeypatch.setenv("SCRIPTED_KEY", "sk-test")
    with ScriptedModelServer(solutions_from_tasks(demo_benchmark.instances), api_key="sk-test") as server:
        yield server


def resolve_trial(instance, agent, seed, environment, sandbox, store, benchmark):
    """A trial's generation and its evaluation (tests at most 300 s), as a campaign runs them."""
    from eval_pipeline.trial.evaluation import evaluate
    from eval_pipeline.trial.generation import generate

    generation = generate(instance, agent, seed, environment, sandbox, store)
    evaluation = evaluate(instance, benchmark.environment_for(instance), generation, environment, sandbox, store, 300)
    return generation, evaluation
