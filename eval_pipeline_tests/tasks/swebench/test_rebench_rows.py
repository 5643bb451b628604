"""Rows that carry their own environment (tasks/swebench/rebench.py): SWE-rebench's install_config is the row's
EnvironmentSpec, its docker_image the row's named image; an install_config this harness cannot honour is refused
at load naming the instance and the field (SWE-smith's rows: test_smith_rows.py).

Public rows, cut at test time (nothing committed): SWE-rebench's `0b01001001__spectree-64` as the one public copy
reachable here publishes it (animaios/animamunchmcp's benchmark vendors it, without its patch, test patch and
install_config.test_cmd; Hugging Face, where nebius/SWE-rebench lives, is out of reach), and SWE-bench Verified's
flask row written as SWE-rebench writes a row (its environment in install_config, from SWE-bench's own table).
"""

import json
from dataclasses import asdict, replace

import pytest
from swebench.harness.constants.python import (
    MAP_REPO_TO_ENV_YML_PATHS,
    MAP_REPO_TO_REQS_PATHS,
    MAP_REPO_VERSION_TO_SPECS_PY,
)
from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

from eval_pipeline.sandbox import ResourceLimits
from eval_pipeline.tasks.dataset import InvalidDatasetError
from eval_pipeline.tasks.environment import RepoSource
from eval_pipeline.tasks.named_image import NamedImage
from eval_pipeline.tasks.swebench.instance import benchmark_from_rows, swebench_image_reference
from eval_pipeline.tasks.swebench.rebench import InstallConfigError, canonical_install_config, environment_spec
from eval_pipeline.tasks.swebench.specs import AMENDMENTS, builtin_spec
from eval_pipeline.trial.validation import validate_task
from eval_pipeline_tests.support.real_data import swebench_mirror, swebench_rows
from eval_pipeline_tests.support.rebench import published_rebench_row

FLASK_ROW = "pallets__flask-5014"
# Fields of SWE-bench's table that say how to run a container, not how to install: no install_config has them.
CONTAINER_FIELDS = ("docker_specs", "execute_test_as_nonroot", "nano_cpus")


def as_install_config(repo: str, version: str) -> dict:
    """SWE-bench's own spec of (repo, version) written as SWE-rebench writes a row's install_config: the same
    fields, plus where its requirements are read and the name of its log parser."""
    config = {k: v for k, v in MAP_REPO_VERSION_TO_SPECS_PY[repo][version].items() if k not in CONTAINER_FIELDS}
    if config.get("packages") == "requirements.txt":
        config["reqs_path"] = MAP_REPO_TO_REQS_PATHS[repo]
    if config.get("packages") == "environment.yml":
        config["env_yml_path"] = MAP_REPO_TO_ENV_YML_PATHS[repo]
    return {**config, "log_parser": MAP_REPO_TO_PARSER[repo].__name__}


def rebench_flask_row() -> dict:
    """The Verified flask row as SWE-rebench ships rows: its environment in install_config (SWE-bench's spec of
    flask 2.3), its image in docker_image, and a version SWE-bench's table does not know, so that nothing but the
    row's own install_config can make its environment."""
    (row,) = swebench_rows((FLASK_ROW,))
    return {
        **row,
        "version": "rebench",
        "install_config": as_install_config(row["repo"], row["version"]),
        "docker_image": "swerebench/sweb.eval.x86_64.pallets_1776_flask-5014",
    }


def test_swebench_own_specs_written_as_install_configs_are_the_same_environments():
    """Every (repository, version) SWE-bench specifies, written as a row's install_config, is the environment
    SWE-bench's table gives it, save what SWE-rebench's harness does otherwise: a Python below 3.6 is 3.6, and the
    table's amendments (pins of dependencies that moved) are the table's, not a row's."""
    compared = 0
    for repo, versions in MAP_REPO_VERSION_TO_SPECS_PY.items():
        if repo not in MAP_REPO_TO_PARSER:
            continue
        for version in versions:
            own = environment_spec(canonical_install_config(as_install_config(repo, version)), repo)
            table = builtin_spec(repo, version)
            assert table is not None
            amended = [
                pins for (name, prefix), pins in AMENDMENTS.items() if name == repo and version.startswith(prefix)
            ]
            pins = {pin for group in amended for pin in group}
            python = "3.6" if table.python == "3.5" else table.python
            expected = replace(table, python=python, packages=tuple(p for p in table.packages if p not in pins))
            assert asdict(own) == asdict(expected), f"{repo}@{version}"
            compared += 1
    assert compared > 250, compared


def test_a_row_with_its_own_install_config_loads_with_it_and_names_its_image():
    """The row's environment is its install_config's (a version SWE-bench's table lacks would otherwise be refused
    at load), installed at its base commit as SWE-rebench's harness installs it; its docker_image is its named
    image, pulled under `images: auto`; the evaluated rows' snapshot (`to_row`) loads to the same row; and a row
    without these columns hashes as it did."""
    row = rebench_flask_row()
    benchmark = benchmark_from_rows("swe-rebench", [row], swebench_specs=True, images="auto")
    instance = benchmark.instances[0]
    own = environment_spec(canonical_install_config(row["install_config"]), row["repo"])
    assert benchmark.environment_for(instance) == replace(own, image=instance.named_image)
    assert own == builtin_spec("pallets/flask", "2.3"), "the spec the table gives the row's real version"
    assert instance.environment_setup_commit == row["base_commit"] != row["environment_setup_commit"]
    assert instance.named_image is not None and instance.named_image.reference == row["docker_image"]
    assert instance.named_image.qualified == "docker.io/swerebench/sweb.eval.x86_64.pallets_1776_flask-5014:latest"
    snapshot = benchmark_from_rows("snapshot", [json.loads(json.dumps(instance.to_row()))], swebench_specs=True)
    assert snapshot.instances[0].content_hash == instance.content_hash
    assert snapshot.environment_for(snapshot.instances[0]) == own
    (plain,) = swebench_rows((FLASK_ROW,))
    assert not {"install_config", "docker_image"} & set(benchmark_from_rows("verified", [plain]).instances[0].to_row())


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"python": "three", "test_cmd": "pytest"}, "install_config.python"),
        ({"python": "3.9", "packages": "requirements.txt", "test_cmd": "pytest"}, "install_config.reqs_path"),
        ({"python": "3.9", "test_cmd": "pytest", "log_parser": "parse_log_nose"}, "install_config.log_parser"),
        (
            {"python": "3.9", "test_cmd": "ctest --test-dir build", "log_parser": "parse_log_googletest"},
            "install_config.log_parser",
        ),
        ({"python": "3.9", "test_cmd": "pytest", "eval_commands": ["make fixtures"]}, "install_config.eval_commands"),
        ({"python": "3.9", "test_cmd": "pytest", "conda_channel": "bioconda"}, "install_config.conda_channel"),
        ({"python": "3.9", "install": 7, "test_cmd": "pytest"}, "install_config.install"),
        ({"python": "3.9", "test_cmd": "pytest", "env_vars": {"A=B; rm -rf /": "1"}}, "install_config.env_vars"),
        ({"python": "3.9", "install": "pip install -e ."}, "install_config.test_cmd"),
        (["pip install -e ."], "install_config"),
    ],
)
def test_an_install_config_this_harness_cannot_honour_is_refused_naming_instance_and_field(config, field):
    row = {**rebench_flask_row(), "install_config": config}
    with pytest.raises(InvalidDatasetError) as refused:
        benchmark_from_rows("swe-rebench", [row], swebench_specs=True)
    assert f"row 0 ('{FLASK_ROW}'): field {field}: " in str(refused.value)


@pytest.mark.parametrize("image", ["--pull=always", "Swebench/UPPER:latest", "a b", "x:tag@sha256:12"])
def test_a_row_naming_something_that_is_no_image_is_refused_naming_the_field(image):
    row = {**rebench_flask_row(), "docker_image": image}
    with pytest.raises(InvalidDatasetError) as refused:
        benchmark_from_rows("swe-rebench", [row], swebench_specs=True)
    assert f"row 0 ('{FLASK_ROW}'): field docker_image: {image!r} is not an image reference" in str(refused.value)


def test_the_published_swe_rebench_row_is_read_with_its_install_config_and_image():
    """The public copy of SWE-rebench's spectree row lacks install_config.test_cmd (and its patches): its
    install_config is refused naming that field; what it has maps as SWE-rebench's harness reads it."""
    row = published_rebench_row()
    config = canonical_install_config(row["install_config"])
    assert "env_vars" not in json.loads(config), "None values are absent fields"
    with pytest.raises(InstallConfigError) as refused:
        environment_spec(config, row["repo"])
    assert refused.value.field == "install_config.test_cmd"
    spec = environment_spec(canonical_install_config({**row["install_config"], "test_cmd": "pytest"}), row["repo"])
    assert (spec.python, spec.requirements, spec.packages) == ("3.9", ("requirements.txt",), ("pytest",))
    assert (spec.install, spec.log_parser) == (("pip install -e .[flask,falcon,starlette]",), "parse_log_pytest")
    with pytest.raises(InvalidDatasetError) as missing:
        benchmark_from_rows("swe-rebench", [row], swebench_specs=True)
    assert "row 0 ('0b01001001__spectree-64'): field patch: missing or empty" in str(missing.value)
    named = swebench_image_reference(row["instance_id"], "swerebench", "latest")
    assert NamedImage(named, "/testbed").qualified == NamedImage(row["docker_image"], "/testbed").qualified, (
        "SWE-rebench's images are SWE-bench's instance images under the namespace swerebench"
    )


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.xdist_group("engine")
def test_a_row_with_its_own_install_config_validates_on_the_container_backend(container_sandbox, tmp_path):
    """The flask row as SWE-rebench ships it, built from nothing but its install_config in a container: gold
    resolves, the empty patch does not (its docker_image is not pulled: `images` is `build`, the default)."""
    row = rebench_flask_row()
    mirrors = swebench_mirror([row], tmp_path / "mirrors")
    benchmark = benchmark_from_rows(
        "swe-rebench", [row], swebench_specs=True, source=RepoSource(mirror_dir=str(mirrors))
    )
    instance = benchmark.instances[0]
    spec = benchmark.environment_for(instance)
    assert spec.image is None
    sandbox = container_sandbox(limits=ResourceLimits(memory_ceiling_mb=2048, output_bytes=200_000))
    environment = sandbox.prepare(instance, spec, benchmark.source)
    validation = validate_task("swe-rebench", instance, spec, environment, sandbox, repeats=1, test_timeout_s=600)
    assert (validation.status, validation.gold, validation.empty) == (
        "valid",
        {"resolved": 1},
        {"unresolved": 1},
    ), validation.detail
