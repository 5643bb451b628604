"""The `eval-pipeline` console script as a user runs it, and the fresh DAGSTER_HOME it runs in (the
`campaign_env` fixture, listed in the root conftest's `pytest_plugins`)."""

import os
import subprocess
from pathlib import Path

import pytest


def eval_pipeline_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """The `eval-pipeline` console script as a user runs it, with `env` as its whole environment."""
    return subprocess.run(["eval-pipeline", *args], env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture
def campaign_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A fresh DAGSTER_HOME and data directory, set for this process and returned for subprocesses."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.delenv("EVAL_PIPELINE_DATA_DIR", raising=False)
    return {**os.environ, "DAGSTER_HOME": str(home)}
