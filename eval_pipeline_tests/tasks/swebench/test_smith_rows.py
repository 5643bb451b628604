"""SWE-smith rows (tasks/swebench/smith.py) load under `kind: swebench` as tasks of their own: run in the image their
profile names, starting from that image's tree with the row's bug applied as the repository's only commit, the
reference the bug reversed, graded by the profile's command on the FAIL_TO_PASS tests' files; a row this harness
cannot run as SWE-smith runs it is refused at load naming the row and why.

The row is SWE-smith's own `pandas-dev__pandas.95280573.pr_53652` (cut from SWE-smith's tests at test time).
"""

import json
import subprocess
from pathlib import Path

import pytest

from eval_pipeline.common.settings import Paths
from eval_pipeline.common.start_patch import START_PATCH_FILE, start_from_patch
from eval_pipeline.datasets.sources import DatasetSourceError, load_benchmark
from eval_pipeline.sandbox.pods.images import pulled_code_layer
from eval_pipeline.tasks.dataset import InvalidDatasetError
from eval_pipeline.tasks.swebench import specs
from eval_pipeline.tasks.swebench.instance import benchmark_from_rows
from eval_pipeline.tasks.swebench.smith import SmithInstance, reverse_patch
from eval_pipeline.tasks.swebench.specs import graded_files
from eval_pipeline_tests.support.smith import published_smith_row

ROW_ID = "pandas-dev__pandas.95280573.pr_53652"
DIGEST = "sha256:" + "0" * 64


def _git(directory: Path, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(directory), *args], capture_output=True, text=True, input=stdin, check=check
    )


def _repository(directory: Path) -> Path:
    """A repository with a file, a test file, a tag, a later commit on a branch and a remote: what an image's
    clone may hold."""
    _git(directory.parent, "init", "-q", "-b", "main", str(directory))
    _git(directory, "config", "user.email", "t@t")
    _git(directory, "config", "user.name", "t")
    (directory / "calc.py").write_text("def add(a, b):\n    return a + b\n\n\ndef neg(a):\n    return -a\n")
    (directory / "tests").mkdir()
    (directory / "tests" / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    )
    (directory / "gone.txt").write_text("removed by the bug\n")
    _git(directory, "add", "-A")
    _git(directory, "commit", "-q", "-m", "the tree")
    _git(directory, "tag", "v1")
    _git(directory, "remote", "add", "origin", "https://github.com/swesmith/o__calc.0123abcd")
    _git(directory, "checkout", "-q", "-b", "later")
    (directory / "later.txt").write_text("a later commit\n")
    _git(directory, "add", "-A")
    _git(directory, "commit", "-q", "-m", "later")
    _git(directory, "checkout", "-q", "main")
    return directory


def _bug(directory: Path) -> str:
    """A bug as SWE-smith writes one (`git diff` of the broken tree): a changed line, a file added and one removed;
    the repository is left as it was."""
    (directory / "calc.py").write_text("def add(a, b):\n    return a - b\n\n\ndef neg(a):\n    return -a\n")
    (directory / "helper.py").write_text("HELP = 1\n")
    (directory / "gone.txt").unlink()
    _git(directory, "add", "-A")
    bug = _git(directory, "diff", "--cached").stdout
    _git(directory, "reset", "-q", "--hard")
    return bug


def test_a_swesmith_row_is_its_own_task_run_in_the_image_its_profile_names():
    row = published_smith_row()
    benchmark = benchmark_from_rows("swe-smith", [row], swebench_specs=True, images="pull")
    (instance,) = benchmark.instances
    assert isinstance(instance, SmithInstance)
    image = instance.named_image
    assert image.reference == "swebench/swesmith.x86_64.pandas-dev_1776_pandas.95280573", (
        "the row's image_name names no namespace: the name SWE-smith's profile forms"
    )
    assert (image.workdir, image.python_prefix, image.start_patch) == (
        "/testbed",
        "/opt/miniconda3/envs/testbed",
        row["patch"],
    )
    spec = benchmark.environment_for(instance)
    assert spec.image == image
    assert (spec.test_cmd, spec.log_parser) == (
        "pytest --disable-warnings --color=no --tb=no --verbose",
        "parse_log_pytest",
    )
    assert instance.local_problem and instance.test_patch == ""
    # The grading runs the FAIL_TO_PASS tests' files, as SWE-smith's harness appends them, and grades what is in them.
    assert graded_files(instance) == ["pandas/tests/indexing/test_datetime.py"]
    assert specs.test_directives(instance, spec) == ["pandas/tests/indexing/test_datetime.py"]
    assert instance.PASS_TO_PASS == tuple(row["PASS_TO_PASS"])
    named = {**row, "image_name": "jyangballin/swesmith.x86_64.pandas-dev_1776_pandas.95280573"}
    renamed = benchmark_from_rows("swe-smith", [named], images="auto").instances[0]
    assert renamed.named_image.reference == named["image_name"], "a row's image_name with a namespace is used as is"
    # The evaluated rows' snapshot loads to the same task.
    snapshot = benchmark_from_rows("snapshot", [json.loads(json.dumps(instance.to_row()))], images="pull")
    assert snapshot.instances[0].content_hash == instance.content_hash
    assert snapshot.instances[0].to_row() == {**row, "FAIL_TO_PASS": row["FAIL_TO_PASS"]}


def test_pass_to_pass_tests_outside_the_failing_tests_files_are_not_graded():
    """SWE-smith's harness runs the FAIL_TO_PASS tests' files and grades the listed tests in them."""
    row = published_smith_row()
    elsewhere = "pandas/tests/indexing/test_loc.py::TestLoc::test_loc_getitem_int"
    (instance,) = benchmark_from_rows(
        "s", [{**row, "PASS_TO_PASS": [*row["PASS_TO_PASS"], elsewhere]}], images="pull"
    ).instances
    assert elsewhere in instance.to_row()["PASS_TO_PASS"] and elsewhere not in instance.PASS_TO_PASS


def test_the_reference_is_the_bug_reversed(tmp_path):
    """`reverse_patch` undoes a bug exactly as `git apply --reverse` does (a changed line, a file added, a file
    removed); the real row's reference restores the line its bug replaced."""
    repository = _repository(tmp_path / "repo")
    bug = _bug(repository)
    _git(repository, "apply", "-", stdin=bug)
    _git(repository, "apply", "-", stdin=reverse_patch(bug))
    assert _git(repository, "status", "--porcelain").stdout == "", "the reversed bug gives back the tree"
    assert reverse_patch(reverse_patch(bug)) == bug
    row = published_smith_row()
    (instance,) = benchmark_from_rows("s", [row], images="pull").instances
    assert '+        if lib.is_np_dtype(keyarr.dtype, "mM") or isinstance(' in instance.reference_patch
    assert '-        if keyarr.dtype.kind in "mM":' in instance.reference_patch


def test_the_starting_state_is_the_tree_with_the_bug_and_nothing_else(tmp_path):
    """The construction the harness layer runs (common/start_patch.py), in a repository as an image holds it: the
    bug is in the working tree, committed as the only commit; the unbroken tree, the tag, the later commit and the
    remote are gone, objects and all."""
    repository = _repository(tmp_path / "repo")
    fixed_blob = _git(repository, "rev-parse", "HEAD:calc.py").stdout.strip()
    later = _git(repository, "rev-parse", "later").stdout.strip()
    bug = _bug(repository)
    patch_file = tmp_path / "start.patch"
    patch_file.write_text(bug)
    subprocess.run(["sh", "-ec", start_from_patch(str(patch_file), "img")], cwd=repository, check=True)
    assert "return a - b" in (repository / "calc.py").read_text() and (repository / "helper.py").exists()
    assert not (repository / "gone.txt").exists() and not patch_file.exists()
    assert _git(repository, "status", "--porcelain").stdout == ""
    assert _git(repository, "rev-list", "--all", "--parents").stdout.split() == [
        _git(repository, "rev-parse", "HEAD").stdout.strip()
    ], "one commit, with no parent"
    assert _git(repository, "for-each-ref").stdout == "" and _git(repository, "remote").stdout == ""
    for gone in (fixed_blob, later):
        assert _git(repository, "cat-file", "-e", gone, check=False).returncode != 0, gone
    # A bug that does not apply to the image's tree fails the build, naming the image.
    patch_file.write_text(bug)
    failed = subprocess.run(
        ["sh", "-ec", start_from_patch(str(patch_file), "docker.io/x/y:z")],
        cwd=repository,
        capture_output=True,
        text=True,
    )
    assert failed.returncode != 0 and "docker.io/x/y:z: the start patch does not apply" in failed.stderr


def test_the_harness_layer_applies_the_rows_bug_in_place_of_checking_a_base_commit():
    """Over a SWE-smith image the harness layer carries the bug and starts from it; each bug is its own
    environment; a SWE-bench image's layer still checks its base commit."""
    row = published_smith_row()
    (instance,) = benchmark_from_rows("s", [row], images="pull").instances
    spec = benchmark_from_rows("s", [row], images="pull").environment_for(instance)
    layer = pulled_code_layer(f"docker.io/x@{DIGEST}", DIGEST, instance.named_image, instance, spec, None)
    assert layer.files["start.patch"] == row["patch"].encode()
    assert f"COPY start.patch {START_PATCH_FILE}\n" in layer.dockerfile
    assert start_from_patch(START_PATCH_FILE, instance.named_image.reference) in layer.dockerfile
    assert instance.base_commit not in layer.dockerfile, "the bug's commit is in no image: nothing checks it"
    other_bug = {**row, "instance_id": f"{row['instance_id']}x", "patch": row["patch"].replace("kind in", "kind  in")}
    (other,) = benchmark_from_rows("s", [other_bug], images="pull").instances
    assert pulled_code_layer(f"docker.io/x@{DIGEST}", DIGEST, other.named_image, other, spec, None).tag != layer.tag


def _go_row(row: dict) -> dict:
    return {
        **row,
        "instance_id": "gin-gonic__gin.3c12d2a8.lm_rewrite__4pb48n1g",
        "repo": "swesmith/gin-gonic__gin.3c12d2a8",
        "patch": "diff --git a/context.go b/context.go\n--- a/context.go\n+++ b/context.go\n@@ -1 +1 @@\n-a\n+b\n",
        "FAIL_TO_PASS": ["TestContextReset"],
    }


@pytest.mark.parametrize(
    ("change", "field", "why"),
    [
        (lambda row: row, "images", "SWE-smith ships no spec to build its environment from"),
        (_go_row, "repo", "a SWE-smith row of Go (its bug patch changes .go files)"),
        (
            lambda row: {
                **row,
                "instance_id": "tornadoweb__tornado.d5ac65c1.func_basic__x",
                "repo": "swesmith/tornadoweb__tornado.d5ac65c1",
            },
            "repo",
            "SWE-smith's profile of tornadoweb__tornado.d5ac65c1: its tests run under tornado's own runner",
        ),
        (
            lambda row: {
                **row,
                "instance_id": "python__mypy.e93f06ce.pr_1",
                "repo": "swesmith/python__mypy.e93f06ce",
            },
            "repo",
            "made of the FAIL_TO_PASS tests' names",
        ),
        (lambda row: {**row, "FAIL_TO_PASS": ["test_getitem_pyarrow_index"]}, "repo", "not pytest's node ids"),
        (
            lambda row: {**row, "instance_id": "other__repo.95280573.pr_1"},
            "instance_id",
            "not an instance of the mirror",
        ),
        (lambda row: {**row, "repo": "swesmith/pandas"}, "repo", "is not <owner>__<repo>.<commit[:8]>"),
        (lambda row: {**row, "FAIL_TO_PASS": []}, "FAIL_TO_PASS", "empty"),
    ],
)
def test_a_row_this_harness_cannot_run_as_swesmith_does_is_refused_naming_it(change, field, why):
    row = change(published_smith_row())
    images = "build" if field == "images" else "auto"
    with pytest.raises(InvalidDatasetError) as refused:
        benchmark_from_rows("swe-smith", [row], swebench_specs=True, images=images)
    assert f"row 0 ('{row['instance_id']}'): field {field}: " in str(refused.value)
    assert why in str(refused.value)


def test_a_campaign_slice_of_swesmith_rows_loads_under_its_images_policy(tmp_path):
    """`kind: swebench` with `images: pull` loads the row as SWE-smith's; the default (`build`) refuses it."""
    rows = tmp_path / "smith.jsonl"
    rows.write_text(json.dumps(published_smith_row()) + "\n")
    paths = Paths(tmp_path / "data")
    loaded = load_benchmark({"kind": "swebench", "path": str(rows), "images": "pull"}, paths)
    assert [type(task).__name__ for task in loaded.instances] == ["SmithInstance"] and loaded.images == "pull"
    with pytest.raises((InvalidDatasetError, DatasetSourceError)) as refused:
        load_benchmark({"kind": "swebench", "path": str(rows)}, paths)
    assert f"row 0 ('{ROW_ID}'): field images" in str(refused.value)
