"""The servers `.ci/run` starts for the production deployment's tests: a real S3-compatible server and a real
PostgreSQL server on loopback, required in CI and skipped without elsewhere (fixtures listed in the root
conftest's `pytest_plugins`). The clients (boto3, psycopg2) are imported by the fixtures that use them, so
that a test run that needs neither does not pay for importing them."""

import os
import time
import uuid

import pytest

from eval_pipeline.store.artifacts import S3ArtifactStore


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
