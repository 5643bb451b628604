"""The agents' fixtures: the scripted model serving the demo's solutions."""

import pytest

from eval_pipeline.tasks.dataset import Benchmark


@pytest.fixture
def model(demo_benchmark: Benchmark, monkeypatch: pytest.MonkeyPatch):
    """The scripted model (the only stand-in for a model) serving the demo's solutions, its key set."""
    from eval_pipeline.testing.scripted_model import ScriptedModelServer, solutions_from_tasks

    monkeypatch.setenv("SCRIPTED_KEY", "sk-test")
    with ScriptedModelServer(solutions_from_tasks(demo_benchmark.instances), api_key="sk-test") as server:
        yield server
