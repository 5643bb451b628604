import json

import pytest

from eval_pipeline.artifacts import LocalArtifactStore


def test_put_then_get(store):
    assert store.put("generation/a.json", {"patch": "x", "n": 1}) is True
    assert store.get("generation/a.json") == {"patch": "x", "n": 1}
    assert store.get("generation/missing.json") is None


def test_artifacts_are_immutable_first_writer_wins(store):
    store.put("generation/a.json", {"v": 1})
    assert store.put("generation/a.json", {"v": 2}) is False
    assert store.get("generation/a.json") == {"v": 1}


def test_writes_leave_no_temporary_files(store):
    store.put("generation/a.json", {"v": 1})
    store.put("generation/a.json", {"v": 2})
    assert [p.name for p in (store.root / "generation").iterdir()] == ["a.json"]
    assert store.keys("generation") == ["generation/a.json"]


def test_a_corrupt_artifact_is_quarantined_and_treated_as_absent(store):
    store.put("evaluation/e.json", {"outcome": "resolved"})
    path = store.root / "evaluation/e.json"
    envelope = json.loads(path.read_text())
    envelope["payload"]["outcome"] = "unresolved"  # tampered: checksum no longer matches
    path.write_text(json.dumps(envelope))
    assert store.get("evaluation/e.json") is None
    assert not path.exists()
    assert len(list((store.root / "quarantine").rglob("*"))) >= 1
    assert store.put("evaluation/e.json", {"outcome": "resolved"}) is True


def test_a_truncated_artifact_is_treated_as_absent(store):
    store.put("evaluation/t.json", {"outcome": "resolved"})
    path = store.root / "evaluation/t.json"
    path.write_text(path.read_text()[:10])
    assert store.get("evaluation/t.json") is None


@pytest.mark.parametrize("key", ["../outside.json", "/etc/passwd", "a/../../b"])
def test_keys_cannot_escape_the_store(tmp_path, key):
    with pytest.raises(ValueError, match="relative path"):
        LocalArtifactStore(tmp_path / "store").put(key, {})
    assert not (tmp_path / "outside.json").exists()
