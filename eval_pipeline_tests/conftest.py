"""What every test needs: the session's results key, the scheduling of tests that share a server or the container
engine, and the fixtures shared across directories (the support modules in `pytest_plugins`, one per concern).

A directory's own fixtures are in its conftest.py; helpers that are not fixtures are imported from
eval_pipeline_tests/support/ by the tests that use them."""

import os
import uuid

import pytest

from eval_pipeline.common.settings import RESULTS_KEY_VARIABLE

# Helpers in support modules keep pytest's assertion messages, as they had in the test files they came from.
pytest.register_assert_rewrite("eval_pipeline_tests.support")

# The fixtures shared by tests in several directories, one module per concern.
pytest_plugins = [
    "eval_pipeline_tests.support.demo",
    "eval_pipeline_tests.support.demo_trials",
    "eval_pipeline_tests.support.engine",
    "eval_pipeline_tests.support.services",
    "eval_pipeline_tests.support.registry",
    "eval_pipeline_tests.support.cli",
]


# One results key for the whole session, inherited by every subprocess (CLI, `dagster dev`), so records one
# process writes verify in another; tests of the key file itself unset it.
os.environ.setdefault(RESULTS_KEY_VARIABLE, f"tests-{uuid.uuid4().hex}")

# Test modules that share one server through a module-scoped fixture: their tests run on one worker, in order.
SERVER_MODULES = {"test_dagster_dev", "test_production_dagster_dev"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the groups into the node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`--dist loadgroup`), tests that use the container engine run on one worker, one after
    another: they count the engine's containers, stop its service, and check at the end that none was left
    behind. Tests sharing a server stay together too."""
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        if "engine" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("engine"))
        elif module in SERVER_MODULES:
            item.add_marker(pytest.mark.xdist_group(module))
