"""Real SWE-bench Verified rows, graded with SWE-bench's own specs and parsers and no per-repository settings.

The rows (real_data.py) cover a src-layout editable install (flask, Python 3.11),
Python 3.9 with a plain install (requests), Python 3.9 with an editable install
and requirements read at the setup commit (pylint), and, on the local backend,
sympy's own test runner read by SWE-bench's sympy parser and pytest's own
repository, graded by the pytest it installs. Gold must resolve and the empty
patch must not, on the local and the container backend; and no workspace can
reach a later commit, the gold patch or the test patch.
"""

import base64
import json
import os
import shlex
import subprocess
from pathlib import Path

import duckdb
import pytest
import yaml

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.grading.verdict import FAILED, Verdict
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline.sandbox.patches import workspace_diff
from eval_pipeline.tasks.dataset import Benchmark
from eval_pipeline.tasks.environment import RepoSource
from eval_pipeline.tasks.swebench.canaries import original_ids
from eval_pipeline.tasks.swebench.grading import LOG_NAME, grade
from eval_pipeline.tasks.swebench.instance import Instance, benchmark_from_rows
from eval_pipeline.tasks.swebench.specs import log_parser
from eval_pipeline_tests.support.cli import eval_pipeline_cli
from eval_pipeline_tests.support.forgeries import appended_to_fixed
from eval_pipeline_tests.support.real_data import (
    PY36_ROW,
    PYTEST_ROW,
    SPHINX_ROW,
    SWEBENCH_LOCAL_ROWS,
    SWEBENCH_ROWS,
    swebench_mirror,
    swebench_rows,
    write_rows,
)
from eval_pipeline_tests.support.trials import prepare_on

pytestmark = pytest.mark.slow  # end to end: `pytest -m "not slow"` leaves it out

LIMITS = ResourceLimits(memory_ceiling_mb=2048, output_bytes=200_000)


@pytest.fixture(scope="module")
def real_rows(tmp_path_factory):
    """The rows as a user has them: a JSONL file and a mirror directory, nothing else."""
    rows = swebench_rows(SWEBENCH_LOCAL_ROWS)
    directory = tmp_path_factory.mktemp("real_swebench")
    return write_rows(rows, directory / "verified.jsonl"), swebench_mirror(rows, directory / "mirrors"), rows


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """One data directory for the module, so the CLI's environments are the ones later tests reuse."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def real_benchmark(real_rows):
    _, mirrors, rows = real_rows
    return benchmark_from_rows("verified", rows, source=RepoSource(mirror_dir=str(mirrors)), swebench_specs=True)


def _new_line(patch: str, mirror: Path, commit: str) -> str:
    """The longest line the patch adds that the base commit has nowhere: found only where the patch is."""
    added = {line[1:].strip() for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")}
    for line in sorted(added, key=len, reverse=True):
        if subprocess.run(["git", "-C", str(mirror), "grep", "-qF", line, commit], check=False).returncode == 1:
            return line
    raise AssertionError("the patch adds no line of its own")


def assert_answer_unreachable(workspace, instance, mirrors: Path) -> None:
    """History ends at the base commit (under the environment's commit of what its install steps changed, if
    they changed anything), and neither the fix, the gold patch nor the test patch can be read."""
    expected = list(dict.fromkeys([workspace.base_revision or instance.base_commit, instance.base_commit]))
    history = workspace.run("git log --all --format=%H && git for-each-ref && git stash list", timeout_s=60)
    assert history.ok and history.stdout.split() == expected, history.stdout
    later = workspace.run(f"git cat-file -e {instance.environment_setup_commit}^{{commit}}", timeout_s=60)
    assert later.ok == (instance.environment_setup_commit == instance.base_commit)
    objects = workspace.run("git cat-file --batch-all-objects --batch-check | grep -c commit", timeout_s=60)
    assert objects.stdout.strip() == str(len(expected)), "only the base commit's (and the baseline's) objects"
    for patch in (instance.patch, instance.test_patch):
        needle = shlex.quote(_new_line(patch, mirrors / instance.repo, instance.base_commit))
        found = workspace.run(f"grep -rIlF -- {needle} . $HOME $TMPDIR 2>/dev/null | head -3", timeout_s=300)
        assert found.stdout == "", found.stdout


def test_swebench_specs_come_from_swebench_itself(real_benchmark):
    specs = {i.instance_id: real_benchmark.environment_for(i) for i in real_benchmark.instances}
    assert specs["psf__requests-1142"].python == "3.9"
    assert specs["pallets__flask-5014"].install == ("python -m pip install -e .",)
    assert specs["pallets__flask-5014"].requirements == ("requirements/dev.txt",)
    assert {spec.log_parser for spec in specs.values()} >= {"parse_log_pytest", "parse_log_pytest_options"}
    assert specs["sympy__sympy-24443"].log_parser == "parse_log_sympy", "sympy's runner is not pytest"


def run_campaign(rows_file: Path, mirrors: Path, tmp_path: Path, env: dict[str, str], sandbox: str = "") -> dict:
    """What a user writes: kind, path and mirror_dir (and the backend). Returns the run's JSON summary."""
    campaign = tmp_path / "verified.yaml"
    campaign.write_text(
        "name: verified\n"
        f"benchmark: {{kind: swebench, path: {rows_file}, mirror_dir: {mirrors}}}\n"
        "variants: [{name: gold, agent: oracle}, {name: empty, agent: 'null'}]\n" + sandbox
    )
    completed = eval_pipeline_cli(
        {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), **env}, "run", "--campaign", str(campaign), "--json"
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout)


def assert_gold_resolves_every_row_and_empty_none(summary: dict, rows: list[dict]) -> None:
    assert summary["planned"] == summary["scored"] == 2 * len(rows), summary
    rates = {variant: numbers["resolved_rate"] for variant, numbers in summary["variants"].items()}
    assert rates == {"gold": 1.0, "empty": 0.0}, summary


def test_real_rows_on_the_local_backend_with_no_environment_settings(real_rows, data_dir, tmp_path):
    rows_file, mirrors, rows = real_rows
    summary = run_campaign(rows_file, mirrors, tmp_path, {"EVAL_PIPELINE_DATA_DIR": str(data_dir)})
    assert_gold_resolves_every_row_and_empty_none(summary, rows)


def test_local_workspaces_cannot_reach_the_answer(real_benchmark, data_dir):
    mirrors = Path(real_benchmark.source.mirror_dir)
    sandbox = LocalSandbox(data_dir / "sandboxes" / "local", LIMITS, SandboxSettings(), "hostile")
    for instance in real_benchmark.instances:
        environment = prepare_on(sandbox, real_benchmark, instance)
        assert environment.details["python"].startswith(real_benchmark.environment_for(instance).python + ".")
        with sandbox.workspace(environment, "agent") as workspace:
            assert_answer_unreachable(workspace, instance, mirrors)
            assert workspace_diff(workspace, instance.base_commit) == "", "the null agent's patch is 0 bytes"


SYMPY_ROW = "sympy__sympy-24443"
# Appended to the module sympy's fix touches, code its tests import: each knows sympy's runner is read from its
# log, line by line ("test_x ok", "test_x F"), by SWE-bench's parser.
LOG_FORGERIES = {
    # Every failure and error written as sympy writes a pass: each graded test reported once, as passed.
    "failures reported as passes": (
        "\n\ndef _every_failure_a_pass():\n"  # once the runner's module is whole (it imports sympy, and so this)
        "    import sys, threading, time\n\n"
        "    def patched():\n"
        "        while not hasattr(sys.modules.get('sympy.testing.runtests'), 'PyTestReporter'):\n"
        "            time.sleep(0.001)\n"
        "        reporter = sys.modules['sympy.testing.runtests'].PyTestReporter\n"
        "        reporter.test_fail = lambda self, exc_info: self.test_pass()\n"
        "        reporter.test_exception = lambda self, exc_info: self.test_pass()\n\n"
        "    threading.Thread(target=patched, daemon=True).start()\n\n\n"
        "_every_failure_a_pass()\n"
    ),
    # At exit, a pass line for every test of the module's own test file (tests/test_<module>.py beside it; the
    # runner runs the tests in a child process, whose command line names no file), after the runner's lines.
    "passes printed at exit": (
        "\n\ndef _passes_at_exit():\n"
        "    import atexit, os, re, sys\n\n"
        "    tests = os.path.join(os.path.dirname(__file__), 'tests', 'test_' + os.path.basename(__file__))\n\n"
        "    def printed():\n"
        "        for name in re.findall(r'^def (test_\\w+)', open(tests).read(), re.M):\n"
        "            sys.stdout.write(f'\\n{name} ok\\n')\n"
        "        sys.stdout.flush()\n\n"
        "    atexit.register(printed)\n\n\n"
        "_passes_at_exit()\n"
    ),
}


@pytest.mark.parametrize("forgery", LOG_FORGERIES)
def test_a_runner_read_from_its_log_cannot_be_told_that_a_failing_test_passed(real_benchmark, data_dir, forgery):
    """sympy's runner (and django's) is graded from its log: before, code under test that printed `test_x ok`
    resolved the row with no fix. Twins of the graded test, planted in its file, are reported passed too, and a
    test reported both ways is forged."""
    instance = real_benchmark.instance(SYMPY_ROW)
    sandbox = LocalSandbox(data_dir / "sandboxes" / "local", LIMITS, SandboxSettings(), "forged-logs")
    environment = prepare_on(sandbox, real_benchmark, instance)
    patch = appended_to_fixed(real_benchmark, instance, LOG_FORGERIES[forgery])
    spec = real_benchmark.environment_for(instance)
    with sandbox.workspace(environment, "forger") as workspace:
        verdict = grade(instance, spec, patch, workspace, 900)
        log = workspace.read_harness_file(LOG_NAME).decode()
    (step,) = [step for step in verdict.steps if step["step"] == "run_tests"]
    run_names = {group["renamed"]: group["original"] for group in step["twins"]}  # the originals run renamed
    swebench_reading = original_ids(log_parser(spec.log_parser)(log), run_names)
    assert all(swebench_reading[test] == "PASSED" for test in instance.FAIL_TO_PASS), "the forgery works there"
    assert verdict.outcome is Outcome.REPORT_FORGED, (verdict.detail, verdict.tests, verdict.steps[-1].get("log_tail"))


def test_an_editable_install_puts_the_repository_on_sys_path_as_swebench_did(real_benchmark, data_dir):
    """pylint 2.x has no pyproject.toml: SWE-bench's pip ran `setup.py develop`, which puts the repository on
    sys.path, and pylint finds its own modules by path there (pip 25.3's import hook would not: a row of pylint
    2.14 then fails its config tests with "Unable to find module for .../pylint/reporters/...")."""
    sandbox = LocalSandbox(data_dir / "sandboxes" / "local", LIMITS, SandboxSettings(), "editable")
    environment = prepare_on(sandbox, real_benchmark, real_benchmark.instance("pylint-dev__pylint-4970"))
    with sandbox.workspace(environment, "look") as workspace:
        look = "import os, sys; print(*[p for p in sys.path if os.path.isfile(p + '/pylint/__init__.py')])"
        found = workspace.run(f"pwd && cd / && python -c {shlex.quote(look)}", timeout_s=120)
    assert found.ok, found.stderr
    repository, on_path = found.stdout.splitlines()
    assert on_path == repository, found.stdout


def _graded_with_canary(
    sandbox: LocalSandbox, benchmark: Benchmark, instance: Instance, patch: str
) -> tuple[Verdict, str]:
    """The verdict on `patch`, and the status the run reported of its canary (which must be FAILED)."""
    environment = prepare_on(sandbox, benchmark, instance)
    with sandbox.workspace(environment, "grade") as workspace:
        verdict = grade(instance, benchmark.environment_for(instance), patch, workspace, test_timeout_s=600)
    return verdict, next(step["canary_status"] for step in verdict.steps if step["step"] == "run_tests")


def test_pytest_graded_by_the_pytest_it_installs(real_benchmark, data_dir):
    """The launcher imports the code under test as the runner (pytest 4.6, older than Item.from_parent): gold
    resolves with no audit flag, the empty patch does not, and neither run is taken for a forged report."""
    sandbox = LocalSandbox(data_dir / "sandboxes" / "local", LIMITS, SandboxSettings(), "pytest-row")
    instance = real_benchmark.instance(PYTEST_ROW)
    gold, gold_canary = _graded_with_canary(sandbox, real_benchmark, instance, instance.patch)
    empty, empty_canary = _graded_with_canary(sandbox, real_benchmark, instance, "")
    assert (gold.outcome, gold.audit, gold_canary) == (Outcome.RESOLVED, [], FAILED), gold.detail
    assert (empty.outcome, empty_canary) == (Outcome.UNRESOLVED, FAILED), empty.detail


def test_real_rows_on_the_container_backend(engine, real_rows, real_benchmark, container_sandbox, tmp_path):
    """The same campaign in containers: one pod per instance, where each trial sees its own /testbed."""
    _, mirrors, rows = real_rows
    rows = [row for row in rows if row["instance_id"] in SWEBENCH_ROWS]
    rows_file = write_rows(rows, tmp_path / "verified.jsonl")
    summary = run_campaign(rows_file, mirrors, tmp_path, {}, "sandbox: {backend: container, pod_parallelism: 2}\n")
    assert_gold_resolves_every_row_and_empty_none(summary, rows)
    sandbox = container_sandbox(pod_parallelism=2)  # the images the campaign built
    for instance in (real_benchmark.instance(instance_id) for instance_id in SWEBENCH_ROWS):
        environment = prepare_on(sandbox, real_benchmark, instance)
        assert environment.details["python"] == real_benchmark.environment_for(instance).python
        with sandbox.workspace(environment, "agent") as workspace:
            assert_answer_unreachable(workspace, instance, mirrors)
            assert workspace_diff(workspace, instance.base_commit) == "", "the null agent's patch is 0 bytes"


def test_a_predictions_file_of_real_rows_grades_with_one_command(engine, real_rows, tmp_path):
    """SWE-bench's `run_evaluation --predictions_path`, here: `grade` on real rows in containers. The gold patch
    as a prediction grades as the same patch applied by a `command` agent does; a malformed prediction and a
    missing one are their agent's error, each counted and named in its trial's record, never dropped."""
    _, mirrors, rows = real_rows
    rows = [row for row in rows if row["instance_id"] in SWEBENCH_ROWS]
    rows_file = write_rows(rows, tmp_path / "verified.jsonl")
    flask, requests, pylint = SWEBENCH_ROWS
    gold = next(row["patch"] for row in rows if row["instance_id"] == flask)
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(
        "".join(
            json.dumps({"instance_id": i, "model_name_or_path": "someone/model-1", "model_patch": patch}) + "\n"
            for i, patch in ((flask, gold), (requests, 5))  # requests' is malformed; pylint has none
        )
    )
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home")}
    args = ("--predictions", str(predictions), "--dataset", str(rows_file), "--mirror-dir", str(mirrors), "--json")
    graded = eval_pipeline_cli(env, "grade", *args)
    assert graded.returncode == 0, graded.stderr[-3000:]
    summary = json.loads(graded.stdout)
    assert summary["campaign"].startswith("grade_preds_") and (summary["planned"], summary["scored"]) == (3, 3)
    assert summary["variants"]["model_1"]["outcomes"] == {"resolved": 1, "agent_error": 2}
    trials, why = warehouse_trials(tmp_path / "home", summary["campaign"])
    assert {i: outcome for i, (outcome, _) in trials.items()} == {
        flask: "resolved",
        requests: "agent_error",
        pylint: "agent_error",
    }
    assert f"has no prediction for {pylint!r}" in why[pylint] and str(predictions) in why[pylint]
    assert "model_patch is not a string" in why[requests]

    applying = tmp_path / "applied.yaml"
    command = f'[ "$EVAL_INSTANCE_ID" != {flask} ] || printf %s "$GOLD" | base64 -d | git apply'
    applying.write_text(
        yaml.safe_dump(
            {
                "name": "applied",
                "benchmark": {"kind": "swebench", "path": str(rows_file), "mirror_dir": str(mirrors)},
                "variants": [
                    {
                        "name": "command",
                        "agent": "command",
                        "params": {"command": command, "env": {"GOLD": base64.b64encode(gold.encode()).decode()}},
                    }
                ],
                "seeds": [0],
                "sandbox": {"backend": "container"},
            }
        )
    )
    applied = eval_pipeline_cli(env, "run", "--campaign", str(applying), "--instance", flask, "--json")
    assert applied.returncode == 0, applied.stderr[-3000:]
    by_command, _ = warehouse_trials(tmp_path / "home", "applied")
    assert by_command[flask] == trials[flask], "the same patch (by its hash), the same verdict"


def warehouse_trials(home: Path, campaign: str) -> tuple[dict[str, tuple], dict[str, str]]:
    """By instance, the campaign's trials' (outcome, patch hash), and their generation's error."""
    with duckdb.connect(str(home / "eval_pipeline" / "results" / f"{campaign}.duckdb"), read_only=True) as db:
        trials = db.execute("SELECT instance_id, outcome, patch_sha256 FROM trials WHERE scored").fetchall()
        errors = db.execute("SELECT instance_id, detail FROM attempts WHERE stage = 'generation'").fetchall()
    return {i: (outcome, sha) for i, outcome, sha in trials}, dict(errors)


@pytest.mark.timeout(3600)  # a first run builds SWE-bench's system layer and the rows' requirements
@pytest.mark.parametrize(
    ("row", "backend"),
    [
        # On the engine's worker, as every test of the engine: others there count its containers and images.
        pytest.param(PY36_ROW, "container", marks=pytest.mark.xdist_group("engine")),
        (PY36_ROW, "local"),
        pytest.param(SPHINX_ROW, "container", marks=pytest.mark.xdist_group("engine")),
    ],
)
def test_a_row_that_needs_its_own_python_resolves_on_it(request, row, backend, tmp_path):
    """django 3.1 on Python 3.6 (born with pip 18.1), as SWE-bench's spec says: the harness's runner and claims
    run on its own interpreter (3.6 has no os.waitstatus_to_exitcode), and the requirements compile C (pywatchman).
    sphinx under `tox --current-env`, which re-executes the environment's Python through a link: the image's
    environment is that Python's whole installation, not a virtualenv (locally, it runs with the other rows)."""
    if backend == "container":
        request.getfixturevalue("engine")
    rows = swebench_rows((row,))
    rows_file, mirrors = write_rows(rows, tmp_path / "verified.jsonl"), swebench_mirror(rows, tmp_path / "mirrors")
    sandbox = "sandbox: {backend: container}\n" if backend == "container" else ""
    summary = run_campaign(rows_file, mirrors, tmp_path, {"EVAL_PIPELINE_DATA_DIR": str(tmp_path / "data")}, sandbox)
    assert_gold_resolves_every_row_and_empty_none(summary, rows)
