"""SWE-bench Pro's and SWE-rebench's population tables: a stratified sample of each public set, each row valid or
explained by name.

    python benchmarks/dataset_population.py [--again]     # the engine of `.ci/run` (DOCKER_HOST) for the pulls
    python benchmarks/population.py --render              # writes every table into docs/POPULATION.md

SWE-bench Pro: its public set is the 731 instances whose Dockerfiles scaleapi/SWE-bench_Pro-os publishes
(dockerfiles/base_dockerfile/<instance>/), cut with git at the commit the tests use. The sample is one row of each
(repository, base image) stratum, chosen by the hash of the instance id (reproducible, blind to how easy a row
is): the base image (`FROM`) says the language and toolchain a row's environment is built on. A row's image is the
one Pro's harness pulls, `jefzda/sweap-images:<tag>` (the tag as helper_code/image_uri.py forms it from the
instance id and repository, as the rows' `dockerhub_tag` column holds it).

One Pro row has every source public: qutebrowser's `8f46ba3f` fix, whose patches are the upstream commits' diff
(their hash is the dataset's) and whose image the tests build here from public sources and push to the local
registry under its Pro name (eval_pipeline_tests/support/swebench_pro.py). It is measured besides the sample as a
campaign grades a Pro row: loaded by the `swebench_pro` kind, its image pulled by its Pro name through the
engine's mirror, then gold and the empty patch graded once each (as population.py validates SWE-bench's rows).

SWE-rebench: its public set (nebius/SWE-rebench, 21,336 rows of 3,468 repositories) is published on Hugging Face
only; the sample would be one row per repository by the same hash. The rows reachable from this machine are those
a public GitHub repository vendors (eval_pipeline_tests/tasks/swebench/test_rebench_rows.py cuts them).

Each sampled row is measured as a campaign would take it: loaded as `eval-pipeline` loads it (SWE-rebench's rows:
their install_config read as the row's environment, tasks/swebench/rebench.py), and its image pulled through the
engine exactly as a slice with `images: pull` pulls it (sandbox/pods/registry.py: the engine's mirrors, then the
image's registry); what failed is recorded in the harness's and the engine's words. A row whose image pulls and
whose rows hold their patches is graded as population.py grades SWE-bench's (gold, then empty). Each result is
appended to docs/validation/datasets.jsonl with the harness commit that measured it; a row already measured is
skipped unless --again.
"""

import argparse
import hashlib
import re
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import docker
from validation_log import ROOT, append_result, harness_commit, read_results, table, why_not_valid  # beside

from eval_pipeline.common.outcomes import ImagePullFailed
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings, make_sandbox
from eval_pipeline.sandbox.pods.registry import pull_image
from eval_pipeline.tasks.dataset import InvalidDatasetError
from eval_pipeline.tasks.swebench.instance import benchmark_from_rows
from eval_pipeline.tasks.swebench.pro import benchmark_from_pro_rows
from eval_pipeline.tasks.swebench.rebench import row_image
from eval_pipeline.trial.validation import environment_failure, validate_task
from eval_pipeline_tests.support.real_data import FilesFixture, provide
from eval_pipeline_tests.support.rebench import published_rebench_row
from eval_pipeline_tests.support.swebench_pro import PRO_OS_COMMIT, pro_row, provide_row_sources

RESULTS = ROOT / "docs" / "validation" / "datasets.jsonl"
LIMITS = ResourceLimits(memory_ceiling_mb=4096, output_bytes=200_000)
CAMPAIGN = "dataset-population"
REBUILT = "rebuilt here"  # the base column of the Pro row whose image is built here from public sources
PRO = "SWE-bench Pro"
REBENCH = "SWE-rebench"
PRO_DOCKERFILES = FilesFixture("scaleapi/SWE-bench_Pro-os", PRO_OS_COMMIT, ("/dockerfiles/base_dockerfile/",))
PRO_REGISTRY = "jefzda/sweap-images"  # the Docker Hub repository Pro's harness pulls (swe_bench_pro_eval.py)
MAX_TAG = 128  # a tag's length limit, which image_uri.py cuts tags to
_PRO_ID = re.compile(r"instance_(?P<owner>.+?)__(?P<name>.+?)-(?P<commit>[0-9a-f]{40})(?P<version>-v.*)?")
_FROM = re.compile(r"^FROM\s+(\S+)", re.MULTILINE)
_MIRRORED_DOCKER_HUB = re.compile(r"^\d+\.dkr\.ecr\.[\w-]+\.amazonaws\.com/docker-hub/(library/)?")
# Each repository's language, as the rows' `repo_language` column says it.
LANGUAGES = {
    **dict.fromkeys(("ansible/ansible", "internetarchive/openlibrary", "qutebrowser/qutebrowser"), "Python"),
    **dict.fromkeys(("flipt-io/flipt", "future-architect/vuls", "gravitational/teleport", "navidrome/navidrome"), "Go"),
    "NodeBB/NodeBB": "JavaScript",
    **dict.fromkeys(("element-hq/element-web", "protonmail/webclients", "tutao/tutanota"), "TypeScript"),
}


def _draw(instance_id: str) -> str:
    return hashlib.sha256(instance_id.encode()).hexdigest()


def pro_repository(instance_id: str) -> str:
    """`owner/name` of a Pro instance id (`instance_<owner>__<name>-<commit>-v<...>`)."""
    match = _PRO_ID.fullmatch(instance_id)
    if not match:
        raise ValueError(f"{instance_id!r} is not a SWE-bench Pro instance id")
    return f"{match['owner']}/{match['name']}"


def pro_image(instance_id: str, repo: str) -> str:
    """The image Pro's harness pulls for the instance, its tag as helper_code/image_uri.py forms it: the lower-cased
    repository as `owner.name`, then the id without `instance_` (and without a `-vnan` suffix), at most 128
    characters; element-web is `element` but for the one instance the dataset names in full."""
    owner, name = repo.lower().split("/")
    tail = instance_id.removeprefix("instance_")
    if instance_id == "instance_element-hq__element-web-ec0f940ef0e8e3b61078f145f34dc40d1938e6c5-vnan":
        name = "element-web"
    elif repo.lower() == "element-hq/element-web":
        name = "element"
    tail = tail.removesuffix("-vnan")
    return f"{PRO_REGISTRY}:{f'{owner}.{name}-{tail}'[:MAX_TAG]}"


def base_image(dockerfile: str) -> str:
    """A base Dockerfile's first `FROM`, Docker Hub's images as Docker Hub names them (Pro's Dockerfiles name some
    through its own ECR copy of Docker Hub)."""
    match = _FROM.search(dockerfile)
    return _MIRRORED_DOCKER_HUB.sub("", match[1]) if match else ""


def pro_public_set() -> list[dict]:
    """Every public Pro instance: its id, repository, language and base image."""
    root = provide(PRO_DOCKERFILES) / "dockerfiles" / "base_dockerfile"
    rows = []
    for directory in sorted(root.iterdir()):
        base = base_image((directory / "Dockerfile").read_text())
        repo = pro_repository(directory.name)
        rows.append({"instance_id": directory.name, "repo": repo, "base": base, "language": LANGUAGES[repo]})
    return rows


def sample(rows: Iterable[dict], stratum: tuple[str, ...]) -> list[dict]:
    """One row per value of the `stratum` fields: the lowest hash of its instance id wins."""
    chosen: dict[tuple, dict] = {}
    for row in rows:
        key = tuple(row[name] for name in stratum)
        if key not in chosen or _draw(row["instance_id"]) < _draw(chosen[key]["instance_id"]):
            chosen[key] = row
    return [chosen[key] for key in sorted(chosen)]


def pulled(client: docker.DockerClient, reference: str, instance_id: str) -> str:
    """'' when the image pulls; else the harness's typed failure, in its and the engine's words."""
    try:
        pull_image(client, reference, instance_id=instance_id)
    except ImagePullFailed as failure:
        return f"{type(failure).__name__}: {failure}"
    return ""


def measure_pro(client: docker.DockerClient, row: dict) -> dict:
    """A Pro row: its image pulled. Its gold patch and test lists are in the Hugging Face rows, which are out of
    reach here, so a row whose image pulls is `not_run`, its reason recorded."""
    image = pro_image(row["instance_id"], row["repo"])
    failure = pulled(client, image, row["instance_id"])
    if failure:
        return {"image": image, "status": "image_unavailable", "detail": failure}
    return {"image": image, "status": "not_run", "detail": "the image pulled; the row's patches are not here"}


def measure_rebench(client: docker.DockerClient, row: dict) -> dict:
    """A SWE-rebench row: loaded as a campaign loads it, and its image pulled."""
    image = row_image(row)
    failure = pulled(client, image, row["instance_id"]) if image else "the row names no image"
    try:
        benchmark_from_rows(REBENCH, [row], swebench_specs=True)
    except InvalidDatasetError as error:
        detail = str(error).split("\n", 1)[-1].strip()
        return {"image": image, "status": "refused_at_load", "detail": f"{detail}; its image: {failure or 'pulled'}"}
    status = "image_unavailable" if failure else "not_run"
    return {"image": image, "status": status, "detail": failure or "the image pulled; not graded in this part"}


def measure_pro_rebuilt(client: docker.DockerClient, row: dict) -> dict:
    """The Pro row rebuilt from public sources: pulled by its Pro name as a `swebench_pro` slice pulls it (the
    engine's mirror first), then validated on the container backend (gold, then empty, each in a fresh workspace).
    `environment_s` is the pull and the harness's layer on it."""
    scripts_root, _ = provide_row_sources()
    benchmark = benchmark_from_pro_rows(PRO, [row], scripts_root / "run_scripts")
    instance = benchmark.instances[0]
    spec = benchmark.environment_for(instance)
    figures: dict = {"image": spec.image.reference if spec.image else ""}
    with tempfile.TemporaryDirectory() as scratch:
        settings = SandboxSettings.from_mapping({"backend": "container"})
        sandbox = make_sandbox(settings, Path(scratch), LIMITS, CAMPAIGN)
        try:
            started = time.perf_counter()
            try:
                environment = sandbox.prepare(instance, spec, benchmark.source)
            except Exception as error:  # noqa: BLE001 - a pull that fails is this row's result
                validation = environment_failure(PRO, instance, 1, error)
            else:
                figures["environment_s"] = round(time.perf_counter() - started, 1)
                validation = validate_task(PRO, instance, spec, environment, sandbox, repeats=1, test_timeout_s=1800)
        finally:
            sandbox.release()
    verdicts = {"status": validation.status, "gold": validation.gold, "empty": validation.empty}
    return {**figures, **verdicts, "detail": validation.detail}


def run(again: bool) -> None:
    latest = {(r["dataset"], r["instance_id"]): r["status"] for r in read_results(RESULTS)}
    client = docker.from_env(timeout=600)
    harness = harness_commit()
    work = [(PRO, row, measure_pro) for row in sample(pro_public_set(), ("repo", "base"))]
    scripts_root, repository = provide_row_sources()
    rebuilt = {**pro_row(scripts_root, repository), "language": LANGUAGES["qutebrowser/qutebrowser"]}
    work += [(PRO, {**rebuilt, "base": f"{REBUILT} (Pro's: python:3.9-slim)"}, measure_pro_rebuilt)]
    work += [(REBENCH, {**published_rebench_row(), "language": "Python"}, measure_rebench)]
    pending = [(d, row, how) for d, row, how in work if again or (d, row["instance_id"]) not in latest]
    for number, (dataset, row, how) in enumerate(pending, 1):
        record = append_result(
            RESULTS,
            harness,
            {
                "dataset": dataset,
                "instance_id": row["instance_id"],
                "repo": row["repo"],
                "language": row["language"],
                "base": row.get("base", ""),
                **how(client, row),
            },
        )
        print(f"[{number}/{len(pending)}] {dataset} {row['instance_id']}: {record['status']}", flush=True)


# Why a row is not valid, by dataset and status (the evidence is each row's detail, in the engine's words).
EXPLAINED = {
    (PRO, "image_unavailable"): "its image is on Docker Hub, which this machine cannot reach (registry-1.docker.io "
    "does not resolve), and the local registry mirror holds no copy; building it here instead needs its base image "
    "from Docker Hub too (column `base`), and its gold patch and test lists are in the Hugging Face rows "
    "(ScaleAI/SWE-bench_Pro), also out of reach (the copy in SWE-bench_Pro-os, helper_code/"
    "sweap_eval_full_v2.jsonl, is a file this machine's snapshot of the repository does not hold)",
    (PRO, "environment_failed"): "the row rebuilt from public sources: its image is built by the tests and pushed to "
    "the local registry under its Pro name (eval_pipeline_tests/end_to_end/test_swebench_pro.py); without that "
    "push, its pull fails as every Pro image's does here",
    (REBENCH, "refused_at_load"): "the only public copy of a SWE-rebench row reachable here (vendored by "
    "animaios/animamunchmcp) lacks its patch, its test patch and install_config.test_cmd, so it is refused at load, "
    "the field named; nebius/SWE-rebench itself is on Hugging Face and its images on Docker Hub, neither reachable",
}

HEADER = (
    "## SWE-bench Pro and SWE-rebench: samples of their public sets",
    "",
    "Written by `python benchmarks/population.py --render` from `docs/validation/datasets.jsonl`; the samples and",
    "the method are in benchmarks/dataset_population.py's docstring. SWE-bench Pro: one row per (repository, base",
    "image) of its 731 public instances. SWE-rebench: the rows a public GitHub repository vendors (its public set is",
    "on Hugging Face only). A row is loaded as a campaign loads it and its image pulled through the engine as",
    "`images: pull` pulls it (the engine's mirror, then the image's registry); `image_unavailable`: the pull failed,",
    "in the engine's words; `refused_at_load`: the row cannot be evaluated as published, the field named. The Pro",
    "row whose base image is `rebuilt here` has every source public: its image is built here and pushed to the",
    "local registry under its Pro name, pulled from there, and gold and the empty patch graded in it.",
    "",
)


def render(results: list[dict]) -> list[str]:
    """The section's lines: totals per dataset, then the latest result of each row."""
    latest = {(r["dataset"], r["instance_id"]): r for r in results}
    rows = sorted(latest.values(), key=lambda r: (r["dataset"], r["repo"], r["base"], r["instance_id"]))
    lines = list(HEADER)
    for dataset in sorted({r["dataset"] for r in rows}):
        mine = [r for r in rows if r["dataset"] == dataset]
        valid = sum(r["status"] == "valid" for r in mine)
        explained = sum(r["status"] != "valid" and (dataset, r["status"]) in EXPLAINED for r in mine)
        lines.append(f"- **{dataset}**: {valid} of {len(mine)} rows valid, {explained} of the rest explained.")
    columns = ["dataset", "repository", "language", "base image", "row", "image", "status", "environment s"]
    columns += ["date", "harness"]
    cells = [
        [
            r["dataset"],
            r["repo"],
            r["language"],
            r["base"],
            r["instance_id"],
            r["image"],
            r["status"],
            r.get("environment_s"),
            r["date"],
            r["harness"],
            why_not_valid(r, EXPLAINED.get((r["dataset"], r["status"]))),
        ]
        for r in rows
    ]
    return [*lines, "", *table([*columns, "why not valid"], cells)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--again", action="store_true", help="measure every sampled row again")
    run(parser.parse_args().again)


if __name__ == "__main__":
    main()
