"""Real SWE-bench rows run in their instance images, pulled by the names SWE-bench's harness forms.

The images are made here as SWE-bench's are shaped: each row's environment, built by the pipeline, re-shaped
with its Python at /opt/miniconda3/envs/testbed and its repository at /testbed holding the history SWE-bench's
images keep (a later commit, a tag on it, a branch and a remote-tracking ref), pushed to the engine's mirror of
docker.io as `swebench/sweb.eval.x86_64.<instance>:latest`. A slice with `images: pull` then grades gold 100% and
the empty patch 0% on pod and strict, builds no layer but the harness's, records the digest it graded, and no
workspace reaches the later commit; a tag pushed anew is a new environment, and a pin holds the old one.
"""

import json
import os
import subprocess
import urllib.request
from dataclasses import replace
from pathlib import Path

import kubernetes_validate
import pytest

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.kubernetes.sandbox import KubernetesSandbox
from eval_pipeline.sandbox.pods.images import ENV_VENV, TESTBED
from eval_pipeline.tasks.environment import RepoSource
from eval_pipeline.tasks.swebench.grading import grade
from eval_pipeline.tasks.swebench.instance import benchmark_from_rows
from eval_pipeline_tests.support.cli import eval_pipeline_cli
from eval_pipeline_tests.support.real_data import swebench_mirror, swebench_rows, write_rows
from eval_pipeline_tests.support.shaped_images import reshaped_image
from eval_pipeline_tests.support.trials import prepare_on

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

ROWS = ("pallets__flask-5014", "psf__requests-1142")
CONDA_ENV = "/opt/miniconda3/envs/testbed"
MANIFESTS = ", ".join(
    (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    )
)


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """The rows as a user has them (a JSONL file and a mirror directory), and the rows themselves."""
    rows = swebench_rows(ROWS)
    directory = tmp_path_factory.mktemp("pulled_rows")
    return write_rows(rows, directory / "verified.jsonl"), swebench_mirror(rows, directory / "mirrors"), rows


def _benchmark(rows, images: str):
    _, mirrors, loaded = rows
    built = benchmark_from_rows(
        "verified",
        loaded,
        source=RepoSource(mirror_dir=str(mirrors)),
        swebench_specs=True,
        image_namespace="swebench",
    )
    return replace(built, images=images)


def _shaped(engine, tmp_path: Path, built_tag: str, instance, mirror: Path, variant: str) -> str:
    """The pipeline's environment image `built_tag` re-shaped as SWE-bench ships its instance images: its Python
    at CONDA_ENV, no /opt/env, and /testbed on branch main at the base commit with the install's changes
    uncommitted, holding a later commit (the row's environment setup commit) under a tag, a branch and a
    remote-tracking ref. `variant` goes into a file, so that two variants are two images."""
    context = tmp_path / f"shape-{instance.instance_id}-{variant}"
    context.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(mirror), str(context / "history")], check=True)
    later, base = instance.environment_setup_commit, instance.base_commit
    steps = [
        "COPY history /tmp/history",
        f"RUN cd {TESTBED} && git fetch -q /tmp/history '+refs/heads/*:refs/remotes/origin/*'"
        f" && git tag later-release {later} && git branch upstream {later}"
        f" && git checkout -q -B main && git reset -q --soft {base} && rm -rf /tmp/history"
        f" && echo {variant} > /etc/shaped-variant",
    ]
    tag = f"localhost/swebench-shaped:{instance.instance_id.lower()}-{variant}"
    return reshaped_image(engine, context, built_tag, CONDA_ENV, steps, tag)


def _registry_digest(mirror: str, name: str) -> str:
    """The mirror registry's own digest of `name` (`repository:tag`), asked of its API."""
    repository, _, tag = name.rpartition(":")
    request = urllib.request.Request(
        f"http://{mirror}/v2/{repository}/manifests/{tag}", method="HEAD", headers={"Accept": MANIFESTS}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.headers["Docker-Content-Digest"]


def _publish(image_registry, local: str, instance) -> str:
    """`local` in the mirror under the name SWE-bench's harness pulls the row's image by, and gone from the
    engine, so that the campaign pulls it; returns that name."""
    reference = instance.named_image.reference
    image_registry.push(local, reference)
    image_registry.remove_local(local)
    image_registry.remove_local(f"docker.io/{reference}")
    return reference


def _unreachable_later_commit(workspace, instance) -> None:
    """The workspace's history is the base commit (and the baseline over it): the later commit, its tag and
    every ref SWE-bench's image held are gone, objects and all."""
    later = instance.environment_setup_commit
    history = workspace.run("git log --all --format=%H; git for-each-ref; git tag; git stash list", timeout_s=60)
    assert set(history.stdout.split()) <= {instance.base_commit, workspace.base_revision}, history.stdout
    assert instance.base_commit in history.stdout.split()
    looked = workspace.run(f"git cat-file -e {later}^{{commit}} || git cat-file -e {later}", timeout_s=60)
    assert not looked.ok, f"{later} is readable in the workspace"
    found = workspace.run(f"grep -rl {later} .git 2>/dev/null | head -3", timeout_s=60)
    assert found.stdout.strip() == "", found.stdout


def test_swebench_images_pulled_by_name_grade_as_built(
    engine, image_registry, container_sandbox, rows, tmp_path, monkeypatch
):
    _, mirrors, _ = rows
    built = _benchmark(rows, "build")
    pulled = _benchmark(rows, "pull")
    builder = container_sandbox()
    references = {}
    for instance in built.instances:
        record = builder.build(instance, built.environment_for(instance), built.source)
        local = _shaped(engine, tmp_path, record["tag"], instance, mirrors / instance.repo, "first")
        references[instance.instance_id] = _publish(image_registry, local, instance)
    assert references["psf__requests-1142"] == "swebench/sweb.eval.x86_64.psf_1776_requests-1142:latest"

    keys = {}
    for mode in ("pod", "strict"):
        sandbox = container_sandbox(mode=mode)
        for instance in pulled.instances:
            spec = pulled.environment_for(instance)
            record = sandbox.build(instance, spec, pulled.source)
            digest = _registry_digest(image_registry.mirror, references[instance.instance_id])
            assert record["pulled_image"]["digest"] == digest
            assert record["pulled_image"]["reference"] == references[instance.instance_id]
            assert record["built"] in ([record["tag"]], []), "no layer of the spec is built: only the harness's"
            assert record["tag"].startswith("localhost/eval-pipeline-harness:")
            assert sandbox.environment_key(instance, spec) == record["tag"]
            keys[instance.instance_id] = record["tag"]
            environment = prepare_on(sandbox, pulled, instance)
            assert environment.details["pulled_image"]["digest"] == digest
            with sandbox.workspace(environment, "agent") as workspace:
                _unreachable_later_commit(workspace, instance)
                python = workspace.run(f"readlink -f {ENV_VENV} && readlink -f {CONDA_ENV}", timeout_s=60)
                first, second = python.stdout.split()
                assert first == second, "ENV_VENV is the image's conda environment"
            for patch, expected in ((instance.patch, Outcome.RESOLVED), ("", Outcome.UNRESOLVED)):
                with sandbox.workspace(environment, "grade") as workspace:
                    verdict = grade(instance, spec, patch, workspace, 600)
                assert verdict.outcome is expected, (mode, instance.instance_id, verdict.detail)

    # Kubernetes: the pod runs the same harness layer (pushed, where the backend has an `image_registry`, as
    # every environment image is), so the named image's own registry need not be reachable from the cluster.
    instance = pulled.instance("psf__requests-1142")
    settings = SandboxSettings.from_mapping({"backend": "kubernetes"})
    cluster = KubernetesSandbox(tmp_path / "k8s", ResourceLimits(), settings, "pulled")
    record = cluster.build(instance, pulled.environment_for(instance), pulled.source)
    assert record["environment_key"] == record["image"] == keys[instance.instance_id], "one key on both backends"
    manifest = cluster.pod_manifest(instance.instance_id, record["image"], record["tools_image"])
    kubernetes_validate.validate(manifest, "1.31", strict=True)
    assert record["image"] in {container["image"] for container in manifest["spec"]["containers"]}

    # A predictions file graded as SWE-bench's harness grades it with its instance images (`grade --images pull`):
    # one row's gold patch and the other's empty one.
    rows_file = rows[0]
    patches = {
        row["instance_id"]: row["patch"] if row["instance_id"] == "pallets__flask-5014" else ""
        for row in map(json.loads, filter(str.strip, rows_file.read_text().splitlines()))
    }
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text(
        "".join(
            json.dumps({"instance_id": instance_id, "model_name_or_path": "model", "model_patch": patch}) + "\n"
            for instance_id, patch in patches.items()
        )
    )
    data = tmp_path / "data"
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "EVAL_PIPELINE_DATA_DIR": str(data)}
    graded_run = eval_pipeline_cli(
        env, "grade", "--predictions", str(predictions), "--dataset", str(rows_file), "--mirror-dir", str(mirrors),
        "--images", "pull", "--json",
    )  # fmt: skip
    assert graded_run.returncode == 0, graded_run.stderr[-3000:]
    lists = json.loads(graded_run.stdout)["variants"]["model"]
    assert (lists["resolved_ids"], lists["empty_patch_ids"]) == (["pallets__flask-5014"], ["psf__requests-1142"])
    stored = [json.loads(path.read_text()) for path in data.rglob("*.json") if "pulled_image" in path.read_text()]
    graded = [record.get("payload", {}) for record in stored]  # the artifact store's envelopes
    evaluations = {record["instance_id"]: record for record in graded if "environment_key" in record}
    assert set(evaluations) == set(ROWS), "every evaluation records the digest its environment was pulled at"
    for instance_id, record in evaluations.items():
        assert record["environment_key"] == keys[instance_id], (instance_id, record["environment"], keys)
        assert record["environment"]["pulled_image"]["digest"].startswith("sha256:")

    # The same name pushed anew: a new digest, a new environment; pinned, the old one still.
    instance = pulled.instance("psf__requests-1142")
    sandbox = container_sandbox()
    spec = pulled.environment_for(instance)
    first_digest = _registry_digest(image_registry.mirror, references[instance.instance_id])
    record = builder.build(instance, built.environment_for(instance), built.source)
    changed = _shaped(engine, tmp_path, record["tag"], instance, mirrors / instance.repo, "second")
    _publish(image_registry, changed, instance)
    assert _registry_digest(image_registry.mirror, references[instance.instance_id]) != first_digest
    moved = sandbox.environment_key(instance, spec)
    assert moved != keys[instance.instance_id]
    pinned = container_sandbox(image_digests={references[instance.instance_id]: first_digest})
    assert pinned.environment_key(instance, spec) == keys[instance.instance_id]
    environment = prepare_on(pinned, pulled, instance)
    with pinned.workspace(environment, "look") as workspace:
        assert workspace.run("cat /etc/shaped-variant", timeout_s=60).stdout.strip() == "first"
