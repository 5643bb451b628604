"""A real public SWE-bench Pro row, its image pulled by its Pro name from the engine's mirror, graded in a pod.

The row (qutebrowser's `--untrusted-args` fix) and its image are cut and built by
eval_pipeline_tests/support/swebench_pro.py; the image is pushed to the local registry as
`jefzda/sweap-images:<dockerhub_tag>` and the slice pulls it as `docker.io/jefzda/sweap-images:<tag>`, as a user
behind a pull-through cache of Docker Hub would.

The forgery test runs the same patches through Pro's own harness steps first (swe_bench_pro_eval.py's entry
script, in a container of the same image: the patch applied, the test files checked out from the fix commit,
`bash run_script.sh`, `python parser.py` on the files it wrote), where each forgery resolves the row, then through
the harness, where neither does.
"""

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.grading.verdict import graded
from eval_pipeline.tasks.swebench.pro import benchmark_from_pro_rows
from eval_pipeline_tests.support.forgeries import REPORT_REWRITE, appended
from eval_pipeline_tests.support.swebench_pro import (
    DOCKERHUB_TAG,
    FIX_COMMIT,
    INSTANCE_ID,
    build_image,
    pro_row,
    provide_row_sources,
)

pytestmark = pytest.mark.slow
TEST_TIMEOUT_S = 600
MODULE = "qutebrowser/qutebrowser.py"  # the module the fix changes, which the graded test file imports

# Code the patch adds to that module, so that it runs in the test process as the tests import it, written by
# someone who has read the harness and Pro's: it plants, wherever it can write, what Pro's parser would run
# (`sitecustomize`, `usercustomize`, a `.pth`, a `json.py`, a `parser.py`) and a finished `output.json`, in the
# image's site directories, the user site, /workspace (Pro's), /app, its working directory and every harness `out/`
# it finds; leaves a process that keeps writing the report where the harness reads the parser's; and, where told,
# prints a PASSED line for every graded test once pytest is done, after pytest's own.
PLANTER = """

import atexit as _atexit
import glob as _glob
import json as _json
import os as _os
import site as _site
import sys as _sys
import time as _time

_NAMES = %(names)r
_PRINT_LINES = %(print_lines)r
_REPORT = _json.dumps({"tests": [{"name": name, "status": "PASSED"} for name in _NAMES]})
_HOOK = (
    "import atexit, sys\\n"
    "def _forge():\\n"
    "    if len(sys.argv) == 4:\\n"
    "        open(sys.argv[3], 'w').write(%%r)\\n"
    "atexit.register(_forge)\\n"
) %% _REPORT
_PLANTS = {
    "sitecustomize.py": _HOOK, "usercustomize.py": _HOOK, "json.py": _HOOK, "parser.py": _HOOK,
    "output.json": _REPORT, "pro_output.json": _REPORT, "zz_forge.pth": "import sitecustomize\\n",
}


def _plant():
    places = {"/workspace", "/app", _os.getcwd(), _site.getusersitepackages(), *_sys.path}
    places |= set(_glob.glob("/opt/eval/**/harness/out", recursive=True)) | set(_glob.glob("/opt/eval/**/pro", recursive=True))
    for place in places:
        for name, text in _PLANTS.items():
            try:
                _os.makedirs(place, exist_ok=True)
                with open(_os.path.join(place, name), "w") as planted:
                    planted.write(text)
            except OSError:
                pass


def _keep_writing():
    if _os.fork() == 0:
        _os.setsid()
        for _ in range(600):
            _plant()
            _time.sleep(0.2)
        _os._exit(0)


def _lie():
    for name in _NAMES:
        print(name + " PASSED", flush=True)


_plant()
_keep_writing()
if _PRINT_LINES:
    _atexit.register(_lie)
"""


def _pro_entry_script(row: dict, exports: str, patch_file: str) -> str:
    """swe_bench_pro_eval.py's `create_entryscript`, as it runs in the instance's container: `exports` are its
    Dockerfiles' ENV lines."""
    tests = ",".join(json.loads(row["selected_test_files_to_run"]))
    return (
        f"{exports}\ncd /app && git reset -q --hard {row['base_commit']} && git checkout -q {row['base_commit']}"
        f" && git apply -v {patch_file}\n{row['before_repo_set_cmd'].strip().splitlines()[-1]}\n"
        f"bash /workspace/run_script.sh {tests} > /workspace/stdout.log 2> /workspace/stderr.log\n"
        "python /workspace/parser.py /workspace/stdout.log /workspace/stderr.log /workspace/output.json\n"
    )


def _resolved_by_pro(engine, image: str, row: dict, exports: str, patch: str, scripts: Path, workspace: Path) -> bool:
    """Whether Pro's own harness steps resolve the row with `patch` (its rule: every graded test PASSED)."""
    workspace.mkdir()
    for name in ("run_script.sh", "parser.py"):
        (workspace / name).write_text((scripts / name).read_text())
    (workspace / "patch.diff").write_text(patch)
    (workspace / "entryscript.sh").write_text(_pro_entry_script(row, exports, "/workspace/patch.diff"))
    engine.containers.run(
        image,
        ["-c", "bash /workspace/entryscript.sh"],
        entrypoint="/bin/bash",
        volumes={str(workspace): {"bind": "/workspace", "mode": "rw"}},
        network_mode="none",
        remove=True,
    )
    passed = {
        test["name"]
        for test in json.loads((workspace / "output.json").read_text())["tests"]
        if test["status"] == "PASSED"
    }
    return set(json.loads(row["fail_to_pass"]) + json.loads(row["pass_to_pass"])) <= passed


@pytest.fixture(scope="module")
def pro(engine, image_registry, tmp_path_factory):
    """The row's benchmark (images: pull), its row, scripts and the reference its image is pulled by."""
    scripts_root, repository = provide_row_sources()
    row = pro_row(scripts_root, repository)
    local = f"localhost/eval-pipeline-test/pro-qutebrowser:{uuid.uuid4().hex[:8]}"
    base = os.environ.get("EVAL_PIPELINE_BASE_IMAGE", "localhost/eval-base:bookworm")
    ca_bundle = os.environ.get("EVAL_PIPELINE_EXTRA_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    build_image(repository, local, base, ca_bundle, tmp_path_factory.mktemp("pro-image"))
    reference = image_registry.push(local, f"jefzda/sweap-images:{DOCKERHUB_TAG}")
    engine.images.remove(local)
    image_registry.remove_local(reference)  # what the sandbox uses is pulled from the mirror
    benchmark = benchmark_from_pro_rows("pro", [row], scripts_root)
    return benchmark, row, scripts_root / "run_scripts" / INSTANCE_ID, reference


def _grade(sandbox, benchmark, patch: str):
    instance = benchmark.instances[0]
    spec = benchmark.environment_for(instance)
    environment = sandbox.prepare(instance, spec, benchmark.source)
    with sandbox.workspace(environment, f"grade-{uuid.uuid4().hex[:6]}") as workspace:
        return graded(lambda: instance.grade(spec, patch, workspace, TEST_TIMEOUT_S))


@pytest.mark.parametrize("mode", ["pod", "strict"])
def test_a_pro_row_pulled_by_its_pro_name_grades_gold_resolved_and_empty_not(engine, container_sandbox, pro, mode):
    benchmark, row, _, reference = pro
    instance = benchmark.instances[0]
    assert instance.named_image.qualified == reference
    sandbox = container_sandbox(mode=mode)
    gold = _grade(sandbox, benchmark, row["patch"])
    assert gold.outcome is Outcome.RESOLVED, gold.detail
    assert set(gold.tests) == set(instance.fail_to_pass + instance.pass_to_pass)
    run = next(step for step in gold.steps if step["step"] == "run_tests")
    assert run["canary_status"] == "FAILED"
    empty = _grade(sandbox, benchmark, "")
    assert empty.outcome is Outcome.UNRESOLVED, empty.detail
    assert {empty.tests[test] for test in instance.fail_to_pass} == {"FAILED"}
    empty_run = next(step for step in empty.steps if step["step"] == "run_tests")
    assert " rerun in " in empty_run["stdout_tail"]  # the Dockerfiles' PYTEST_ADDOPTS (--reruns=3) reached pytest
    environment = sandbox.prepare(instance, benchmark.environment_for(instance), benchmark.source)
    assert environment.details.get("pulled_image", {}).get("digest", "").startswith("sha256:")
    with sandbox.workspace(environment, "reader") as workspace:  # the image's later commits are gone
        found = workspace.run(f"git cat-file -t {FIX_COMMIT}; git log --all --format=%H | head -3", timeout_s=60)
        assert FIX_COMMIT not in found.stdout and "commit" not in found.stdout.split("\n")[0]


def test_a_patch_that_knows_the_design_forges_pros_own_grading_and_not_this_one(
    engine, container_sandbox, pro, tmp_path
):
    """Forgeries that fix nothing: the planter (its files for Pro's parser and a process left writing the report;
    then also PASSED lines printed after pytest's own) and an in-process rewrite of pytest's reports to passed.
    Pro's own steps resolve the row with each. Here nothing planted reaches the parser (it exits 0, silent, and
    the report the harness reads holds the canary): the files alone leave the row unresolved, the lines are
    `report_forged` (the log reports the graded tests both ways), the rewrite is, by the canary."""
    benchmark, row, scripts, reference = pro
    instance = benchmark.instances[0]
    original = subprocess.run(
        ["git", "-C", str(provide_row_sources()[1]), "show", f"{row['base_commit']}:{MODULE}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    names = list(instance.fail_to_pass + instance.pass_to_pass)
    forgeries = {  # each with its verdict here and the canary's status in the report the harness read
        "planted files": (PLANTER % {"names": names, "print_lines": False}, Outcome.UNRESOLVED, "FAILED"),
        "planted files and lines": (PLANTER % {"names": names, "print_lines": True}, Outcome.REPORT_FORGED, "FAILED"),
        "report rewrite": (REPORT_REWRITE, Outcome.REPORT_FORGED, "PASSED"),
    }
    sandbox = container_sandbox(mode="pod")
    for name, (addition, outcome, canary_status) in forgeries.items():
        patch = appended(MODULE, original, addition)
        assert _resolved_by_pro(
            engine, reference, row, instance.env_exports, patch, scripts, tmp_path / name.replace(" ", "-")
        ), name
        verdict = _grade(sandbox, benchmark, patch)
        assert verdict.outcome is outcome, (name, verdict.outcome, verdict.detail)
        parsed = next(step for step in verdict.steps if step["step"] == "parse_results")
        assert parsed["exit_code"] == 0 and not parsed["stderr_tail"], parsed  # nothing planted ran in the parser
        run = next(step for step in verdict.steps if step["step"] == "run_tests")
        assert run["canary_status"] == canary_status, (name, run)
