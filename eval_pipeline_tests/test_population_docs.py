"""docs/POPULATION.md says why a row is not valid in public terms: the reasons the harness gives name places of the
machine that measured them (its scratch directories, its mirrors, its home), and the table, rendered by
benchmarks/population.py from docs/validation/*.jsonl, names the cause instead (the repository whose mirror lacks
a commit, the repository a mirror directory has no clone of) and no such place."""

import importlib
import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from eval_pipeline.common.git import GitError, clone_at
from eval_pipeline.tasks.swebench.requirements import requirements_text
from eval_pipeline.tasks.swebench.specs import UnsupportedSpecError

ROOT = Path(__file__).resolve().parents[1]
# Places of a measuring machine: tempfile's and pytest's scratch directories, the mirrors and copies under /work,
# a home directory.
MACHINE_PATH = re.compile(r"/tmp/tmp\w{8}|pytest-of-|/work/|\.mirror/|/root/|/home/\w+/")
SETUP_COMMIT = "419a78300f7cd27611196e1e464d50fd0385ff27"  # django__django-11740's environment_setup_commit


@pytest.fixture
def benchmarks(monkeypatch) -> dict[str, ModuleType]:
    """The population scripts, imported as `python benchmarks/population.py` imports them (beside each other)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    names = ("validation_log", "population", "terminal_population", "dataset_population")
    return {name: importlib.import_module(name) for name in names}


def _failure(call) -> str:
    with pytest.raises((GitError, UnsupportedSpecError)) as raised:
        call()
    return str(raised.value)


def test_a_rows_reason_names_the_repository_not_the_machines_mirror_or_scratch(benchmarks, tmp_path):
    """The harness's own messages for a mirror that lacks a setup commit, a mirror directory with no clone of the
    repository and a build whose log stayed behind, each naming tmp_path: the table's cell names the repository and
    the commit, and no path of this machine."""
    repo = tmp_path / "checkouts" / "django"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    missing_commit = _failure(lambda: requirements_text(repo, SETUP_COMMIT, ("requirements.txt",)))
    no_mirror = _failure(lambda: clone_at(str(tmp_path / "mirrors" / "django" / "django"), "HEAD", tmp_path / "repo"))
    log = tmp_path / "container" / "build_logs" / "localhost_eval-pipeline-env_0123.log"
    build = f"building env image localhost/eval-pipeline-env:0123 failed: exit status 1\n; log: {log}"
    cells = {}
    for name, detail in {"commit": missing_commit, "mirror": no_mirror, "build": build}.items():
        assert str(tmp_path) in detail, "the harness's message names the place (the table is what leaves it out)"
        record = {"status": "environment_failed", "repo": "django/django", "detail": detail}
        cells[name] = benchmarks["validation_log"].why_not_valid(record, "explained")
    for name, cell in cells.items():
        assert str(tmp_path) not in cell and not MACHINE_PATH.search(cell), (name, cell)
    assert f"the environment_setup_commit {SETUP_COMMIT} is not in the mirror of django/django" in cells["commit"]
    assert "the mirror directory holds no clone of django/django" in cells["mirror"]
    assert cells["build"] == "**explained**; building env image localhost/eval-pipeline-env:0123 failed: exit status 1"


def test_the_population_table_is_what_render_writes_and_names_no_place_of_the_measuring_machine(benchmarks):
    """docs/POPULATION.md as `python benchmarks/population.py --render` writes it from the committed results, and
    neither the results' details nor the table name a scratch directory, mirror or home of the machine."""
    population, terminal, datasets = (
        benchmarks[name] for name in ("population", "terminal_population", "dataset_population")
    )
    assert population.TABLE.read_text() == population.render_all(), (
        "docs/POPULATION.md: run `python benchmarks/population.py --render`"
    )
    for path in (population.RESULTS, terminal.RESULTS, datasets.RESULTS, population.TABLE):
        found = sorted({match.group(0) for match in MACHINE_PATH.finditer(path.read_text())})
        assert found == [], f"{path.relative_to(ROOT)} names places of the measuring machine: {found}"


def test_every_stratum_of_pro_and_the_rebench_rows_is_measured_valid_or_explained_naming_its_image(benchmarks):
    """SWE-bench Pro's sample (one row per repository and base image of its public set, cut from its public
    Dockerfiles) and SWE-rebench's reachable rows: each has a result, and each result that is not valid has an
    explanation and names the image that could not be pulled, as the engine named it."""
    datasets = benchmarks["dataset_population"]
    latest = {(r["dataset"], r["instance_id"]): r for r in benchmarks["validation_log"].read_results(datasets.RESULTS)}
    public = datasets.pro_public_set()
    assert len(public) == 731 and len({row["repo"] for row in public}) == 11
    strata = {(datasets.PRO, row["instance_id"]) for row in datasets.sample(public, ("repo", "base"))}
    assert strata <= set(latest), f"strata not measured: {sorted(strata - set(latest))}"
    assert {dataset for dataset, _ in latest} == {datasets.PRO, datasets.REBENCH}
    for (dataset, instance_id), record in latest.items():
        if record["status"] != "valid":
            assert (dataset, record["status"]) in datasets.EXPLAINED, instance_id
            assert f"the image {record['image']}" in record["detail"], instance_id


def test_a_pro_rows_image_is_the_one_its_dataset_names(benchmarks):
    """The image of a Pro row as helper_code/image_uri.py forms it: for the row the tests build, the tag its
    public row's `dockerhub_tag` holds (cut at 128 characters)."""
    from eval_pipeline_tests.support import swebench_pro

    image = benchmarks["dataset_population"].pro_image(swebench_pro.INSTANCE_ID, "qutebrowser/qutebrowser")
    assert image == f"jefzda/sweap-images:{swebench_pro.DOCKERHUB_TAG}"
