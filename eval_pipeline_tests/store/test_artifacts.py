"""The artifact store's guarantees, the same on local disk and on a real S3-compatible server."""

import json
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import boto3
import pytest
from botocore.config import Config

from eval_pipeline.common.outcomes import StorageError
from eval_pipeline.store.artifacts import (
    UNVERSIONED,
    ArtifactStore,
    LocalArtifactStore,
    RecordError,
    Rejection,
    S3ArtifactStore,
    open_artifact_store,
)
from eval_pipeline.store.attempts import Attempt
from eval_pipeline.store.mac import RecordMac
from eval_pipeline.trial.generation import Generation
from eval_pipeline_tests.support.stored_records import overwrite, raw, rehashed


@pytest.fixture(params=["local", "s3"])
def any_store(request, tmp_path) -> ArtifactStore:
    return (
        LocalArtifactStore(tmp_path / "artifacts") if request.param == "local" else request.getfixturevalue("s3_store")
    )


def with_key(store: ArtifactStore, mac: RecordMac) -> ArtifactStore:
    """The same store (directory or bucket prefix) as a process holding another results key sees it."""
    if isinstance(store, LocalArtifactStore):
        return LocalArtifactStore(store.root, mac=mac)
    return S3ArtifactStore(store.bucket, store.prefix, client=store.client, mac=mac)


def rejections(store: ArtifactStore) -> list[tuple[str, Rejection]]:
    return [(r.key, r.reason) for r in store.rejected()]


def test_put_then_get(any_store):
    assert any_store.put("generation/a.json", {"patch": "x", "n": 1}) is True
    assert any_store.get("generation/a.json") == {"patch": "x", "n": 1}
    assert any_store.get("generation/missing.json") is None


def test_a_listing_gives_each_artifacts_fingerprint_and_shows_an_altered_one(any_store):
    payload = {"outcome": "unresolved", "n": 1}
    any_store.put("evaluation/a.json", payload)
    any_store.put("evaluation/b.json", {"outcome": "resolved"})
    assert any_store.fingerprints("evaluation")["evaluation/a.json"] == any_store.fingerprint(
        "evaluation/a.json", payload
    )
    overwrite(any_store, "evaluation/a.json", raw(any_store, "evaluation/a.json").replace("unresolved", "UNRESOLVED"))
    assert any_store.fingerprints("evaluation")["evaluation/a.json"] != any_store.fingerprint(
        "evaluation/a.json", payload
    )
    assert set(any_store.fingerprints("evaluation")) == {"evaluation/a.json", "evaluation/b.json"}


def test_artifacts_are_immutable_first_writer_wins(any_store):
    any_store.put("generation/a.json", {"v": 1})
    assert any_store.put("generation/a.json", {"v": 2}) is False
    assert any_store.get("generation/a.json") == {"v": 1}


def test_racing_writers_leave_exactly_one_whole_artifact(any_store):
    writers = 8
    start = Barrier(writers)

    def write(n: int) -> bool:
        start.wait()
        return any_store.put("evaluation/race.json", {"writer": n, "filler": "x" * 100_000})

    with ThreadPoolExecutor(writers) as pool:
        won = list(pool.map(write, range(writers)))
    assert won.count(True) == 1
    assert any_store.get("evaluation/race.json") == {"writer": won.index(True), "filler": "x" * 100_000}


def test_keys_list_what_is_stored_under_a_prefix(any_store):
    for key in ("generation/a.json", "generation/sub/b.json", "evaluation/c.json"):
        any_store.put(key, {})
    assert any_store.keys("generation") == ["generation/a.json", "generation/sub/b.json"]
    assert any_store.keys("generation/") == ["generation/a.json", "generation/sub/b.json"]
    assert any_store.keys("nothing") == []


def test_a_corrupt_artifact_is_quarantined_and_treated_as_absent(any_store):
    any_store.put("evaluation/e.json", {"outcome": "resolved"})
    envelope = json.loads(raw(any_store, "evaluation/e.json"))
    envelope["payload"]["outcome"] = "unresolved"  # tampered: checksum no longer matches
    overwrite(any_store, "evaluation/e.json", json.dumps(envelope))
    assert any_store.get("evaluation/e.json") is None
    assert any_store.keys("evaluation") == []
    (kept,) = any_store.keys("quarantine")
    assert kept.startswith("quarantine/evaluation/e.json.") and json.loads(raw(any_store, kept)) == envelope
    assert any_store.put("evaluation/e.json", {"outcome": "resolved"}) is True


def test_a_truncated_artifact_is_treated_as_absent(any_store):
    any_store.put("evaluation/t.json", {"outcome": "resolved"})
    overwrite(any_store, "evaluation/t.json", raw(any_store, "evaluation/t.json")[:10])
    assert any_store.get("evaluation/t.json") is None


def test_writes_leave_no_temporary_files(store):
    store.put("generation/a.json", {"v": 1})
    store.put("generation/a.json", {"v": 2})
    assert [p.name for p in (store.root / "generation").iterdir()] == ["a.json"]


@pytest.mark.parametrize("key", ["../outside.json", "/etc/passwd", "a/../../b"])
def test_keys_cannot_escape_the_store(any_store, tmp_path, key):
    with pytest.raises(ValueError, match="relative path"):
        any_store.put(key, {})
    assert not (tmp_path / "outside.json").exists()


def test_a_location_names_a_local_directory_or_an_s3_prefix(tmp_path):
    assert open_artifact_store(str(tmp_path)).root == tmp_path
    s3 = open_artifact_store("s3://bucket/campaigns/nightly/")
    assert (s3.bucket, s3.prefix, s3.location) == ("bucket", "campaigns/nightly/", "s3://bucket/campaigns/nightly/")
    with pytest.raises(ValueError, match="names no bucket"):
        open_artifact_store("s3://")


def test_an_unreachable_s3_server_is_a_storage_error_naming_the_store():
    client = boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",  # the discard port: nothing listens
        aws_access_key_id="x",
        aws_secret_access_key="x",
        region_name="us-east-1",
        config=Config(connect_timeout=1, retries={"max_attempts": 1}),
    )
    store = S3ArtifactStore("eval-pipeline-test", "p", client=client)
    for operation in (lambda: store.get("g/a.json"), lambda: store.put("g/a.json", {}), lambda: store.keys("g")):
        with pytest.raises(StorageError, match="s3://eval-pipeline-test/p/"):
            operation()


def _stored_generation(**changes) -> dict:
    """A generation's payload as an older or newer harness might have stored it."""
    payload = {
        "key": "generation/g.json",
        "instance_id": "i",
        "agent_config": {"agent": "null"},
        "agent_config_hash": "h",
        "seed": 0,
        "status": "completed",
        "error": "",
        "patch": "",
        "patch_sha256": "s",
        "trajectory": [],
        "input_tokens": 0,
        "output_tokens": 0,
        "cost_usd": 0.0,
        "started_at": "2026-01-01T00:00:00+00:00",
        "duration_s": 1.0,
        "harness_version": "1",
        "generation_version": "1",
    }
    return {name: value for name, value in {**payload, **changes}.items() if value is not None}


def test_a_record_from_a_newer_harness_loads_without_its_unknown_fields():
    generation = Generation.from_payload(_stored_generation(record_version=9, rationale="new"), key="g", reused=True)
    assert generation.reused and generation.record_version == 9
    assert "rationale" not in generation.payload() and "reused" not in generation.payload()


def test_a_record_from_before_versions_is_version_one_and_new_records_carry_theirs():
    assert Generation.from_payload(_stored_generation(), key="g", reused=False).record_version == UNVERSIONED
    snapshot = {"image": "localhost/eval-pipeline-snapshot:x", "image_id": "sha256:x"}
    payload = _stored_generation(record_version=4, steps=4, stop_reason="completed", snapshot=snapshot)
    loaded = Generation.from_payload(payload, key="g", reused=False).payload()
    assert loaded == {**payload, "verification": None, "verified_resources": None}
    older = Generation.from_payload(_stored_generation(record_version=2), key="g", reused=False)
    assert (older.steps, older.stop_reason, older.snapshot) == (0, "", None), "fields added since take their defaults"


def test_a_record_missing_a_defaulted_field_loads():
    attempt = Attempt.from_payload(
        {"stage": "environment", "outcome": "engine_error", "started_at": "t"}, key="a", reused=True
    )
    assert (attempt.duration_s, attempt.detail, attempt.keys, attempt.record) == (None, "", {}, None)


def test_a_record_missing_a_required_field_names_the_artifact_and_the_field():
    with pytest.raises(RecordError, match=r"generation/old\.json.*'patch_sha256'.*required") as raised:
        Generation.from_payload(_stored_generation(patch_sha256=None), key="generation/old.json", reused=True)
    assert not isinstance(raised.value, TypeError)
    with pytest.raises(RecordError, match="'seed'"):
        Generation.from_payload(_stored_generation(seed="zero"), key="generation/bad.json", reused=True)


VERDICT = {"outcome": "unresolved", "tests_passed": 0, "tests_failed": 1}


def test_a_record_edited_by_one_byte_is_rejected_and_its_neighbour_still_counts(any_store):
    any_store.put("evaluation/a.json", VERDICT)
    any_store.put("evaluation/b.json", {"outcome": "resolved"})
    text = raw(any_store, "evaluation/a.json")
    edited = text.replace('"tests_passed": 0', '"tests_passed": 1')
    assert edited != text and len(edited) == len(text)
    overwrite(any_store, "evaluation/a.json", edited)
    assert any_store.get("evaluation/a.json") is None
    assert rejections(any_store) == [("evaluation/a.json", Rejection.ALTERED)]
    assert any_store.get("evaluation/b.json") == {"outcome": "resolved"}, "the record next to it still counts"
    assert any_store.keys("evaluation") == ["evaluation/b.json"]


def test_a_rewritten_result_with_its_checksum_fixed_up_is_rejected_as_forged(any_store):
    any_store.put("evaluation/a.json", VERDICT)
    overwrite(any_store, "evaluation/a.json", rehashed(raw(any_store, "evaluation/a.json"), outcome="resolved"))
    assert any_store.get("evaluation/a.json") is None
    assert rejections(any_store) == [("evaluation/a.json", Rejection.FORGED)]
    assert any_store.put("evaluation/a.json", VERDICT) is True, "out of the way: the trial is graded again"
    assert any_store.get("evaluation/a.json") == VERDICT


def test_a_record_without_a_mac_is_rejected_as_unauthenticated(any_store):
    """A record written before records carried a MAC, or one whose MAC a forger stripped: the two look alike,
    so neither counts."""
    any_store.put("evaluation/a.json", VERDICT)
    envelope = json.loads(rehashed(raw(any_store, "evaluation/a.json"), outcome="resolved"))
    del envelope["mac"]
    overwrite(any_store, "evaluation/a.json", json.dumps(envelope))
    assert any_store.get("evaluation/a.json") is None
    assert rejections(any_store) == [("evaluation/a.json", Rejection.UNAUTHENTICATED)]


def test_a_record_written_with_another_key_is_rejected(any_store):
    with_key(any_store, RecordMac(b"another installation's results key")).put("evaluation/a.json", VERDICT)
    assert any_store.get("evaluation/a.json") is None
    assert rejections(any_store) == [("evaluation/a.json", Rejection.FORGED)]


def test_a_reader_with_another_key_quarantines_nothing_and_says_its_key_looks_wrong(any_store):
    """A read-only command run with another results key refuses every record; were they quarantined, the next
    run would pay for every generation again."""
    any_store.put("evaluation/a.json", VERDICT)
    any_store.put("evaluation/b.json", VERDICT)
    reader = with_key(any_store, RecordMac(b"another installation's results key")).reading_only()
    assert [reader.get("evaluation/a.json"), reader.get("evaluation/b.json")] == [None, None]
    assert "wrong results key?" in reader.wrong_key_suspected() and "(2)" in reader.wrong_key_suspected()
    assert rejections(any_store) == [] and any_store.get("evaluation/a.json") == VERDICT, "left in place"
    rightful = any_store.reading_only()
    assert rightful.get("evaluation/a.json") == VERDICT and rightful.wrong_key_suspected() == ""


def test_a_valid_record_copied_to_another_key_is_rejected(any_store):
    """The MAC covers the artifact key: one trial's verdict cannot be planted as another's."""
    any_store.put("evaluation/resolved.json", {"outcome": "resolved"})
    overwrite(any_store, "evaluation/other.json", raw(any_store, "evaluation/resolved.json"))
    assert any_store.get("evaluation/other.json") is None
    assert any_store.get("evaluation/resolved.json") == {"outcome": "resolved"}
    assert rejections(any_store) == [("evaluation/other.json", Rejection.FORGED)]
