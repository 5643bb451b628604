"""SWE-bench datasets through `datasets`: formats, pinning, validation, partitions that follow the data."""

import json
import os
import subprocess

import pandas
import pytest
from dagster import AssetKey, instance_for_test

from eval_pipeline.common.settings import Paths
from eval_pipeline.config.campaign import load_campaign, parse_campaign
from eval_pipeline.datasets.sources import DatasetSourceError, load_benchmark
from eval_pipeline.defs import build_definitions, stage_job_name
from eval_pipeline.tasks.dataset import InvalidDatasetError
from eval_pipeline_tests.support.rows import swebench_rows, write_jsonl


@pytest.fixture
def mirror(demo_benchmark):
    return demo_benchmark.source.mirror_dir


@pytest.mark.slow
def test_an_unseen_parquet_dataset_evaluates_through_configuration_alone(demo_benchmark, mirror, tmp_path):
    pandas.DataFrame(swebench_rows(demo_benchmark)[:3]).to_parquet(tmp_path / "verified.parquet")
    campaign = tmp_path / "mine.yaml"
    campaign.write_text(
        "name: mine\n"
        f"benchmark: {{kind: swebench, path: verified.parquet, mirror_dir: {mirror}}}\n"
        "variants: [{name: gold, agent: oracle}, {name: empty, agent: 'null'}]\n"
    )
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home")}
    completed = subprocess.run(
        ["eval-pipeline", "run", "--campaign", str(campaign), "--json"], env=env, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    summary = json.loads(completed.stdout)
    assert summary["planned"] == summary["scored"] == 6
    assert summary["variants"]["gold"]["resolved_rate"] == 1.0
    assert summary["variants"]["empty"]["resolved_rate"] == 0.0


def test_json_jsonl_parquet_and_saved_folders_load_the_same_instances(demo_benchmark, tmp_path):
    import datasets

    rows = swebench_rows(demo_benchmark)
    write_jsonl(tmp_path / "rows.jsonl", rows)
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    pandas.DataFrame(rows).to_parquet(tmp_path / "rows.parquet")
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "saved"))
    paths = Paths(tmp_path / "data")
    loaded = [
        load_benchmark({"kind": "swebench", "path": str(tmp_path / name)}, paths)
        for name in ("rows.jsonl", "rows.json", "rows.parquet", "saved")
    ]
    for benchmark in loaded:
        assert [i.content_hash for i in benchmark.instances] == [i.content_hash for i in demo_benchmark.instances]
    assert len({benchmark.version for benchmark in loaded}) == 1


def test_the_version_is_stable_across_reloads_and_follows_one_changed_field(demo_benchmark, tmp_path):
    rows = swebench_rows(demo_benchmark)
    paths = Paths(tmp_path / "data")
    source = {"kind": "swebench", "path": str(write_jsonl(tmp_path / "rows.jsonl", rows))}
    first, again = load_benchmark(source, paths), load_benchmark(source, paths)
    rows[5]["hints_text"] = "look at the second half"
    write_jsonl(tmp_path / "rows.jsonl", rows)
    changed = load_benchmark(source, paths)
    assert first.version == again.version != changed.version


def test_malformed_rows_name_row_id_and_field_and_can_be_quarantined(demo_benchmark, tmp_path):
    rows = swebench_rows(demo_benchmark)
    rows[1]["FAIL_TO_PASS"] = "tests/test_arith.py::test_clamp"  # not a list
    rows[2]["patch"] = "replace line 4 with the fix"  # not a diff
    rows[3]["instance_id"] = rows[0]["instance_id"]  # duplicate
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    paths = Paths(tmp_path / "data")
    with pytest.raises(InvalidDatasetError) as error:
        load_benchmark({"kind": "swebench", "path": str(path)}, paths)
    message = str(error.value)
    assert f"row 1 ({rows[1]['instance_id']!r}): field FAIL_TO_PASS: not a JSON list" in message
    assert f"row 2 ({rows[2]['instance_id']!r}): field patch: not a unified diff" in message
    assert f"row 3 ({rows[0]['instance_id']!r}): field instance_id: duplicate id" in message
    kept = load_benchmark({"kind": "swebench", "path": str(path), "on_invalid": "quarantine"}, paths)
    assert len(kept.instances) == len(rows) - 3 and len(kept.quarantined) == 3


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"hf_name": "princeton-nlp/SWE-bench_Lite"}, "benchmark.revision: required with hf_name"),
        ({"path": "/nonexistent/rows.parquet"}, "benchmark.path: '/nonexistent/rows.parquet' does not exist"),
        ({"path": "rows.csv", "typo": 1}, r"benchmark.typo: unknown field; allowed: kind, path, hf_name, revision"),
        ({"path": "rows.csv", "hf_name": "x/y", "revision": "1"}, "benchmark: give path .* or hf_name .*: exactly one"),
    ],
)
def test_bad_sources_name_the_field(tmp_path, source, message):
    with pytest.raises(DatasetSourceError, match=message):
        load_benchmark({"kind": "swebench", **source}, Paths(tmp_path))


def test_relative_paths_are_relative_to_the_campaign_file(tmp_path):
    (tmp_path / "c.yaml").write_text(
        "name: c\nbenchmark: {kind: swebench, path: data/rows.jsonl, mirror_dir: mirrors}\n"
        "variants: [{name: o, agent: oracle}]\n"
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "data/rows.jsonl").write_text("")
    benchmark = load_campaign(str(tmp_path / "c.yaml")).slices["default"]
    assert benchmark.path == str(tmp_path.resolve() / "data/rows.jsonl")
    assert benchmark.mirror_dir == str(tmp_path.resolve() / "mirrors"), "a mirror to be made may not exist yet"


def test_instance_partitions_follow_the_dataset_and_retired_ones_keep_their_history(demo_benchmark, mirror, tmp_path):
    rows = swebench_rows(demo_benchmark)[:3]
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    campaign = parse_campaign(
        {
            "name": "follow",
            "benchmark": {"kind": "swebench", "path": str(path), "mirror_dir": mirror},
            "variants": [{"name": "o", "agent": "oracle"}],
        },
        "test",
    )
    defs = build_definitions([campaign], Paths(tmp_path / "data"))

    def run(stage, **kwargs):
        return defs.resolve_job_def(stage_job_name(campaign, stage)).execute_in_process(instance=instance, **kwargs)

    with instance_for_test() as instance:
        assert run("prepare").success
        retired = rows[2]["instance_id"]
        assert run("environments", partition_key=retired).success
        write_jsonl(path, rows[:2] + [{**swebench_rows(demo_benchmark)[3]}])
        snapshot = run("prepare").asset_materializations_for_node("follow__dataset_snapshot")[0]
        assert snapshot.metadata["retired_partitions"].value == 1 and snapshot.metadata["new_partitions"].value == 1
        registered = instance.get_dynamic_partitions("follow__instances")
        assert retired not in registered and rows[0]["instance_id"] in registered and len(registered) == 3
        history = instance.fetch_materializations(AssetKey(["follow", "environment"]), limit=10).records
        assert [record.partition_key for record in history] == [retired]
        assert pandas.read_parquet(snapshot.metadata["snapshots"].value["default"])["instance_id"].tolist() == [
            *(row["instance_id"] for row in rows[:2]),
            swebench_rows(demo_benchmark)[3]["instance_id"],
        ]


def test_the_cli_shows_which_rows_are_invalid(demo_benchmark, mirror, tmp_path):
    rows = swebench_rows(demo_benchmark)[:2]
    rows[1]["test_patch"] = ""
    del rows[0]["PASS_TO_PASS"]
    write_jsonl(tmp_path / "rows.jsonl", rows)
    campaign = tmp_path / "bad.yaml"
    campaign.write_text(
        f"name: bad\nbenchmark: {{kind: swebench, path: rows.jsonl, mirror_dir: {mirror}}}\n"
        "variants: [{name: o, agent: oracle}]\n"
    )
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home")}
    completed = subprocess.run(
        ["eval-pipeline", "run", "--campaign", str(campaign)], env=env, capture_output=True, text=True
    )
    assert completed.returncode == 1
    assert f"row 0 ({rows[0]['instance_id']!r}): field PASS_TO_PASS: missing" in completed.stderr
    assert f"row 1 ({rows[1]['instance_id']!r}): field test_patch: missing or empty" in completed.stderr
    assert "Traceback" not in completed.stderr
