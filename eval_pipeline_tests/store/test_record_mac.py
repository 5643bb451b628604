"""The results key: where it comes from, how its file is made, and what a key nobody should use is refused as."""

import os
import stat
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest

from eval_pipeline.common.settings import RESULTS_KEY_VARIABLE, Deployment, DeploymentError
from eval_pipeline.store.artifacts import LocalArtifactStore
from eval_pipeline.store.mac import KEY_FILE_NAME, RecordMac, ResultsKeyError, key_file, results_key


@pytest.fixture
def no_configured_key(tmp_path, monkeypatch):
    """A DAGSTER_HOME of its own and no key in the environment: the key file is used."""
    monkeypatch.delenv(RESULTS_KEY_VARIABLE)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / KEY_FILE_NAME


def test_the_key_file_is_made_once_mode_0600_and_reused(no_configured_key, tmp_path):
    previous = os.umask(0)  # a permissive umask must not widen the file
    try:
        first = results_key()
    finally:
        os.umask(previous)
    assert stat.S_IMODE(no_configured_key.stat().st_mode) == 0o600
    assert len(first) == 64 and int(first, 16), "256 random bits, as hex"
    assert results_key() == first, "reused, not made again"
    written = LocalArtifactStore(tmp_path / "artifacts")
    written.put("evaluation/a.json", {"outcome": "resolved"})
    assert LocalArtifactStore(tmp_path / "artifacts").get("evaluation/a.json") == {"outcome": "resolved"}, (
        "a later process reads with the same key"
    )


def test_processes_racing_to_make_the_key_file_agree_on_one_key(tmp_path):
    racers = 8
    start = Barrier(racers)

    def make(_: int) -> bytes:
        start.wait()
        return key_file(tmp_path / KEY_FILE_NAME)

    with ThreadPoolExecutor(racers) as pool:
        keys = set(pool.map(make, range(racers)))
    assert len(keys) == 1 and [p.name for p in tmp_path.iterdir()] == [KEY_FILE_NAME], "no scratch file left"


def test_a_key_file_other_users_can_read_is_refused(no_configured_key):
    results_key()
    no_configured_key.chmod(0o640)
    with pytest.raises(ResultsKeyError, match="mode 640"):
        results_key()


def test_the_configured_key_wins_over_the_file_and_must_be_long_enough(no_configured_key, monkeypatch):
    monkeypatch.setenv(RESULTS_KEY_VARIABLE, "k" * 40)
    assert results_key() == b"k" * 40 and not no_configured_key.exists()
    monkeypatch.setenv(RESULTS_KEY_VARIABLE, "replace-me")
    with pytest.raises(ResultsKeyError, match="10 characters"):
        RecordMac.from_environment()


def test_a_kubernetes_deployment_without_a_results_key_is_refused():
    """Pods do not share DAGSTER_HOME: each would make its own key file and reject the others' results."""
    pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    with pytest.raises(DeploymentError, match=RESULTS_KEY_VARIABLE):
        Deployment.from_env(pod)
    assert Deployment.from_env({**pod, RESULTS_KEY_VARIABLE: "k" * 64}).on_kubernetes
