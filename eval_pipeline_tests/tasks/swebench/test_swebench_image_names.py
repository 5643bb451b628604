"""The images a SWE-bench row names, as SWE-bench's harness names them, and a slice's `images:` policy over them:
which environments are pulled, what a campaign must give for that, and what stays as it was under `build`."""

import pytest

from eval_pipeline.common.settings import Paths
from eval_pipeline.config.campaign import CampaignError, parse_campaign
from eval_pipeline.datasets.sources import DatasetSourceError, load_benchmark
from eval_pipeline.sandbox import SandboxSettings
from eval_pipeline.sandbox.pods.registry import pin_for, repository_of
from eval_pipeline.tasks.named_image import NamedImage, qualified_reference
from eval_pipeline.tasks.swebench.instance import Instance, benchmark_from_rows
from eval_pipeline.tasks.terminal.task import DEMO_TASKS_DIR
from eval_pipeline_tests.support.rows import row, write_jsonl

DIGEST = "sha256:" + "ab" * 32


def _row(instance_id: str) -> dict:
    return row(instance_id=instance_id, patch="diff --git a/x.py b/x.py\n--- a/x.py\n")


@pytest.mark.parametrize(
    ("instance_id", "namespace", "tag", "reference"),
    [
        # swebench 4.x, TestSpec.instance_image_key: f"{namespace}/sweb.eval.{arch}.{id.lower()}:{tag}", "__" -> "_1776_"
        ("psf__requests-1142", "swebench", "latest", "swebench/sweb.eval.x86_64.psf_1776_requests-1142:latest"),
        ("pallets__flask-5014", "swebench", "latest", "swebench/sweb.eval.x86_64.pallets_1776_flask-5014:latest"),
        ("Octo__Lib-7", "logicstar", "v2", "logicstar/sweb.eval.x86_64.octo_1776_lib-7:v2"),
        ("octo__lib-7", "123.dkr.ecr.us-east-1.amazonaws.com/sweb", "latest", None),
    ],
)
def test_a_row_names_the_image_swebench_s_harness_pulls(instance_id, namespace, tag, reference):
    instance = Instance.from_row(_row(instance_id), image_namespace=namespace, image_tag=tag)
    expected = reference or "123.dkr.ecr.us-east-1.amazonaws.com/sweb/sweb.eval.x86_64.octo_1776_lib-7:latest"
    assert instance.named_image == NamedImage(expected, "/testbed", "/opt/miniconda3/envs/testbed")


def test_the_image_s_settings_are_no_part_of_the_row():
    plain = Instance.from_row(_row("octo__lib-1"))
    named = Instance.from_row(_row("octo__lib-1"), image_namespace="swebench", image_tag="v9")
    assert plain.named_image is None, "a row loaded without a namespace (the demo's) names no image"
    assert named.to_row() == plain.to_row() and named.content_hash == plain.content_hash


def test_the_demo_names_no_image(demo_benchmark):
    assert all(instance.named_image is None for instance in demo_benchmark.instances)


@pytest.mark.parametrize(
    ("reference", "qualified"),
    [
        ("swebench/x:v1", "docker.io/swebench/x:v1"),
        ("swebench/x", "docker.io/swebench/x:latest"),
        ("ubuntu", "docker.io/library/ubuntu:latest"),
        ("ghcr.io/o/x", "ghcr.io/o/x:latest"),
        ("127.0.0.1:15000/o/x:t", "127.0.0.1:15000/o/x:t"),
        ("localhost/x:t", "localhost/x:t"),
        (f"o/x@{DIGEST}", f"docker.io/o/x@{DIGEST}"),
    ],
)
def test_references_are_read_as_docker_reads_them(reference, qualified):
    assert qualified_reference(reference) == qualified
    assert repository_of(reference) == qualified.partition("@")[0].rsplit(":", 1)[0]


def test_a_pin_is_found_by_the_name_as_written_or_as_qualified():
    pins = {"docker.io/swebench/x:latest": DIGEST}
    assert pin_for("swebench/x", pins) == pin_for("swebench/x:latest", pins) == DIGEST
    assert pin_for("swebench/y:latest", pins) == ""
    other = "sha256:" + "cd" * 32
    assert pin_for(f"swebench/y@{other}", pins) == other, "a reference by digest pins itself"


@pytest.mark.parametrize(
    ("images", "pulled"),
    [("build", False), ("auto", True), ("pull", True)],
)
def test_the_policy_decides_which_environments_are_pulled(tmp_path, images, pulled):
    path = write_jsonl(tmp_path / "rows.jsonl", [_row("octo__lib-1")])
    benchmark = load_benchmark({"kind": "swebench", "path": str(path), "images": images}, Paths(tmp_path))
    (instance,) = benchmark.instances
    spec = benchmark.environment_for(instance)
    assert spec.image == (instance.named_image if pulled else None)
    assert instance.named_image.reference == "swebench/sweb.eval.x86_64.octo_1776_lib-1:latest"
    built = benchmark_from_rows("rows", [_row("octo__lib-1")], swebench_specs=True)
    assert ("image" in spec.as_record()) == pulled
    if not pulled:
        assert spec.as_record() == built.environment_for(built.instances[0]).as_record(), "keys under build unchanged"


def test_pull_refuses_at_load_a_task_that_names_no_image(tmp_path):
    with pytest.raises(DatasetSourceError, match=r"benchmark.images: pull, but \d+ task\(s\) name no image") as raised:
        load_benchmark({"kind": "terminal", "path": str(DEMO_TASKS_DIR), "images": "pull"}, Paths(tmp_path))
    assert "hello-file" in str(raised.value) and "word-count" in str(raised.value)
    auto = load_benchmark({"kind": "terminal", "path": str(DEMO_TASKS_DIR), "images": "auto"}, Paths(tmp_path))
    assert all(auto.environment_for(task).image is None for task in auto.instances), "auto builds those"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"benchmark": {"kind": "demo", "images": "pull"}}, "field benchmark.images: unknown field"),
        ({"benchmark": {"kind": "swebench", "path": ".", "images": "always"}}, "field benchmark.images: Input should"),
        ({"benchmark": {"kind": "swebench", "path": ".", "image_tag": "a b"}}, "field benchmark.image_tag: String"),
        (
            {"benchmark": {"kind": "swebench", "path": ".", "images": "pull"}},
            "field benchmark.images: 'pull' runs tasks in the images they name, and the local backend runs no image",
        ),
        ({"sandbox": {"backend": "container", "image_digests": {"a/b": "sha256:12"}}}, "image_digests.a/b: String"),
    ],
)
def test_image_settings_are_checked_at_load(change, message):
    minimal = {"name": "named", "benchmark": {"kind": "demo"}, "variants": [{"name": "o", "agent": "oracle"}]}
    with pytest.raises(CampaignError, match=r"my\.yaml: .*" + message):
        parse_campaign({**minimal, **change}, "my.yaml")


def test_a_campaign_pins_digests_and_pulls_on_the_container_backend():
    campaign = parse_campaign(
        {
            "name": "named",
            "benchmark": {"kind": "swebench", "path": ".", "images": "auto", "image_namespace": "mirror.example/sweb"},
            "variants": [{"name": "o", "agent": "oracle"}],
            "sandbox": {"backend": "container", "image_digests": {"swebench/x:latest": DIGEST}},
        },
        "my.yaml",
    )
    assert campaign.sandbox.image_digests == {"swebench/x:latest": DIGEST}
    assert SandboxSettings().image_digests == {}
