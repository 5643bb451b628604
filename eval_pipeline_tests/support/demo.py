"""The demo benchmark built once per session, the local sandbox its environments are prepared on, and a store:
fixtures for tests in every directory (listed in the root conftest's `pytest_plugins`)."""

from pathlib import Path

import pytest

from eval_pipeline.sandbox import EnvironmentHandle, ResourceLimits, SandboxBackend, SandboxSettings
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline.store.artifacts import LocalArtifactStore
from eval_pipeline.tasks.dataset import Benchmark
from eval_pipeline.tasks.demo import build_demo_benchmark
from eval_pipeline.tasks.swebench.instance import Instance


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
