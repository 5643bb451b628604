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
    return {name: importlib.import_module(name) for name in ("validation_log", "population", "terminal_population")}


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
    population, terminal = benchmarks["population"], benchmarks["terminal_population"]
    read_results = benchmarks["validation_log"].read_results
    rendered = population.render(read_results(population.RESULTS))
    rendered += "\n" + "\n".join(terminal.render(read_results(terminal.RESULTS))) + "\n"
    assert population.TABLE.read_text() == rendered, (
        "docs/POPULATION.md: run `python benchmarks/population.py --render`"
    )
    for path in (population.RESULTS, terminal.RESULTS, population.TABLE):
        found = sorted({match.group(0) for match in MACHINE_PATH.finditer(path.read_text())})
        assert found == [], f"{path.relative_to(ROOT)} names places of the measuring machine: {found}"
