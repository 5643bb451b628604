import json

import pytest

from eval_pipeline.common.git import COMMIT_ENV, git
from eval_pipeline.tasks.dataset import InvalidDatasetError, InvalidInstanceError
from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource
from eval_pipeline.tasks.swebench.instance import Instance, benchmark_from_rows
from eval_pipeline.tasks.swebench.requirements import conda_requirements, requirements_text
from eval_pipeline.tasks.swebench.specs import UnsupportedSpecError
from eval_pipeline_tests.support.rows import row


def test_test_lists_accept_swebench_json_strings():
    instance = Instance.from_row(row(FAIL_TO_PASS=json.dumps(["a.py::t"]), PASS_TO_PASS="[]"))
    assert instance.FAIL_TO_PASS == ("a.py::t",)
    assert instance.PASS_TO_PASS == ()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"instance_id": ""}, "instance_id"),
        ({"patch": None}, "patch"),
        ({"FAIL_TO_PASS": "not json"}, "FAIL_TO_PASS"),
        ({"PASS_TO_PASS": [1, 2]}, "PASS_TO_PASS"),
        # Read as empty, a missing list would make gold fail for no reason the row shows.
        ({"FAIL_TO_PASS": None}, "FAIL_TO_PASS"),
        ({"PASS_TO_PASS": None}, "PASS_TO_PASS"),
        ({"FAIL_TO_PASS": "[]"}, "FAIL_TO_PASS"),
    ],
)
def test_bad_rows_are_reported_with_row_id_and_field(overrides, field):
    with pytest.raises(InvalidInstanceError) as error:
        Instance.from_row(row(**overrides), index=7)
    assert "row 7" in str(error.value)
    assert f"field {field}" in str(error.value)


def test_a_row_without_its_test_lists_is_refused_not_read_as_empty():
    missing = {name: value for name, value in row().items() if name != "PASS_TO_PASS"}
    with pytest.raises(InvalidDatasetError, match=r"row 1 \('octo__lib-1'\): field PASS_TO_PASS: missing"):
        benchmark_from_rows("rows", [row(instance_id="octo__lib-0"), missing])
    kept = benchmark_from_rows("rows", [row(instance_id="octo__lib-0"), missing], on_invalid="quarantine")
    assert [i.instance_id for i in kept.instances] == ["octo__lib-0"]


def test_duplicate_ids_are_rejected_naming_the_row():
    with pytest.raises(InvalidDatasetError, match=r"row 1 \('octo__lib-1'\): field instance_id: duplicate"):
        benchmark_from_rows("b", [row(), row()])


def test_a_dataset_with_bad_rows_is_rejected_listing_every_one():
    rows = [row(), row(instance_id="octo__lib-2", patch="just some text"), row(instance_id="", repo="x")]
    with pytest.raises(InvalidDatasetError) as error:
        benchmark_from_rows("mine", rows)
    message = str(error.value)
    assert "dataset 'mine': 2 invalid row(s)" in message
    assert "row 1 ('octo__lib-2'): field patch: not a unified diff" in message
    assert "row 2 (''): field instance_id: missing or empty" in message


def test_bad_rows_can_be_quarantined_instead():
    rows = [row(), row(instance_id="octo__lib-2", FAIL_TO_PASS="tests/x.py::t")]
    benchmark = benchmark_from_rows("mine", rows, on_invalid="quarantine")
    assert [i.instance_id for i in benchmark.instances] == ["octo__lib-1"]
    assert [str(p) for p in benchmark.quarantined] == [
        "row 1 ('octo__lib-2'): field FAIL_TO_PASS: not a JSON list (Expecting value: line 1 column 1 (char 0))"
    ]


def test_extra_fields_count_in_the_version_but_not_in_the_instance():
    plain = benchmark_from_rows("b", [row(difficulty="<15 min fix")])
    relabelled = benchmark_from_rows("b", [row(difficulty="1-4 hours")])
    assert plain.version != relabelled.version
    assert plain.instances[0].content_hash == relabelled.instances[0].content_hash


def test_dataset_version_is_stable_and_changes_with_any_field():
    first = benchmark_from_rows("b", [row(), row(instance_id="octo__lib-2")])
    again = benchmark_from_rows("b", [row(instance_id="octo__lib-2"), row()])
    changed = benchmark_from_rows("b", [row(), row(instance_id="octo__lib-2", hints_text="try harder")])
    assert first.version == again.version
    assert first.version != changed.version


def test_test_files_come_from_the_graded_test_ids():
    assert Instance.from_row(row()).test_files == ("tests/test_x.py", "tests/test_y.py")


def test_repo_source_prefers_a_mirror_over_the_url_template():
    assert RepoSource().location("octo/lib") == "https://github.com/octo/lib.git"
    assert (
        RepoSource(url_template="https://git.internal/{repo}").location("octo/lib") == "https://git.internal/octo/lib"
    )
    assert RepoSource(mirror_dir="/srv/mirror").location("octo/lib") == "/srv/mirror/octo/lib"


def test_environment_spec_is_chosen_by_repo_and_version():
    special = EnvironmentSpec(packages=("numpy",))
    benchmark = benchmark_from_rows(
        "b", [row(), row(instance_id="octo__lib-2", version="2.0")], environments={"octo/lib@1.0": special}
    )
    assert benchmark.environment_for(benchmark.instance("octo__lib-1")) == special
    assert benchmark.environment_for(benchmark.instance("octo__lib-2")) == EnvironmentSpec()


def test_a_swebench_row_no_spec_covers_fails_at_load_naming_it():
    """psf/requests has no version 9.9 in SWE-bench's specs: refused when the dataset loads, not at its build;
    `on_invalid: quarantine` leaves it out, and the campaign's own `environments:` entry makes it loadable."""
    unknown = row(instance_id="psf__requests-1", repo="psf/requests", version="9.9")
    with pytest.raises(InvalidDatasetError, match=r"row 1 \('psf__requests-1'\): field version: .*'9.9' .*2\.0"):
        benchmark_from_rows("lite", [row(), unknown], swebench_specs=True)
    quarantined = benchmark_from_rows("lite", [row(), unknown], swebench_specs=True, on_invalid="quarantine")
    assert [i.instance_id for i in quarantined.instances] == ["octo__lib-1"]
    given = {"psf/requests@9.9": EnvironmentSpec(python="3.8")}
    loaded = benchmark_from_rows("lite", [row(), unknown], swebench_specs=True, environments=given)
    assert loaded.environment_for(loaded.instance("psf__requests-1")).python == "3.8"


def test_a_conda_environment_yml_spec_becomes_pip_requirements_resolved_with_its_pins():
    """xarray's specs are an environment.yml plus pinned pip packages: conda names become PyPI's, what PyPI lacks
    is left out, the `pip:` list is kept, and the pins come last and win over the same package unpinned."""
    conda = row(instance_id="pydata__xarray-1", repo="pydata/xarray", version="0.12")
    benchmark = benchmark_from_rows("verified", [conda], swebench_specs=True)
    spec = benchmark.environment_for(benchmark.instances[0])
    assert spec.requirements == ("ci/requirements/environment.yml", "environment.yml")
    assert "numpy==1.23.0" in spec.packages
    environment_yml = (
        "name: t\nchannels: [conda-forge]\ndependencies:\n  - python=3.10\n  - hdf5\n  - cdms2\n"
        "  - matplotlib-base>=3.3\n  - iris\n  - conda-forge::zarr 2.12.*\n  - netcdf4=1.5\n"
        "  - pandas=1.4.2=py310_0\n  - dask-core\n  - numpy  # pinned below\n  - pip\n  - pip:\n      - numbagg\n"
    )
    assert conda_requirements(environment_yml, ("numpy==1.23.0", "pytest==7.4.0")).splitlines() == [
        "matplotlib>=3.3",
        "scitools-iris",
        "zarr==2.12.*",
        "netcdf4==1.5.*",
        "pandas==1.4.2",
        "dask",
        "numbagg",
        "numpy==1.23.0",
        "pytest==7.4.0",
    ]


def test_a_spec_whose_unbounded_dependency_dropped_an_import_gets_the_pin_swebench_built_with():
    """sphinx 3.x (and 4.x at commits merged from it) leaves docutils unbounded and imports docutils.utils.roman,
    gone since docutils 0.22: the pin is one of the spec's packages (so in its environment key); 5.x bounds
    docutils itself and gets none."""
    rows = [
        row(instance_id="sphinx-doc__sphinx-1", repo="sphinx-doc/sphinx", version="3.1"),
        row(instance_id="sphinx-doc__sphinx-2", repo="sphinx-doc/sphinx", version="5.1"),
    ]
    benchmark = benchmark_from_rows("verified", rows, swebench_specs=True)
    old, new = (benchmark.environment_for(instance) for instance in benchmark.instances)
    assert "docutils<0.22" in old.packages and "pygments<2.19" in old.packages
    assert not any(package.startswith("docutils") for package in new.packages)
    assert "pygments<2.19" in new.packages, "every sphinx SWE-bench specifies predates Pygments 2.19"
    swebench = ("tox==4.16.0", "tox-current-env==0.0.11", "Jinja2==3.0.3")
    assert old.packages[:3] == new.packages[:3] == swebench, "pins are added to SWE-bench's packages, nothing else"


def test_a_setup_commit_missing_from_the_mirror_is_named_not_taken_for_a_missing_file(tmp_path):
    """A mirror cut short (a fork, a shallow copy) lacks the row's environment_setup_commit: the build says so."""
    git(["init", "-q", str(tmp_path)], tmp_path)
    (tmp_path / "requirements.txt").write_text("numpy\n")
    git(["add", "-A"], tmp_path)
    git(["commit", "-q", "-m", "one"], tmp_path, env=COMMIT_ENV)
    head = git(["rev-parse", "HEAD"], tmp_path).strip()
    assert requirements_text(tmp_path, head, ("requirements.txt",)) == "numpy"
    with pytest.raises(UnsupportedSpecError, match=f"environment_setup_commit {'f' * 40} is not in the repository"):
        requirements_text(tmp_path, "f" * 40, ("requirements.txt",))
