"""Attacks on the images and rows that ship their own environments (issue 52), by an agent that has read the code.

Each test knows the construction it attacks:

- SWE-bench Pro's log check (tasks/swebench/pro/report.py, `reported_both_ways`): the patch's code prints a PASSED
  line for every graded test after pytest's own FAILED ones, written so that Pro's real parser (which strips each
  line, reading the file with universal newlines, and keeps the last status of a name) reads it and the harness's
  reading of pytest's lines would not: indented, or with a form feed between the test's id and its status;
- SWE-smith's starting state (common/start_patch.py): the image's working tree was compiled from the unbroken
  tree (any import or test collection at build leaves `__pycache__`), git ignores the caches, so they survive the
  bug's commit and the strip of the history, and the agent reads the unbroken function out of them;
- the history strip of a pulled image (images.py's `pulled_code_layer`: refs, reflogs, `.keep` packs and
  alternates dropped, then `git gc --prune=now`): a linked worktree's HEAD (`.git/worktrees/*/HEAD`), which no
  `for-each-ref` lists and `gc` keeps reachable, holding a later commit; and, found on the way, a repository made
  by `git clone` (as SWE-bench Pro's images are), whose `refs/remotes/origin/HEAD` made the strip fail.
"""

from __future__ import annotations

import dis
import json
import marshal
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.common.settings import Paths
from eval_pipeline.common.start_patch import start_from_patch
from eval_pipeline.datasets.sources import load_benchmark
from eval_pipeline.sandbox.pods.images import TESTBED, pulled_code_layer, readable_by_all
from eval_pipeline.tasks.swebench.pro.grading import decide
from eval_pipeline.tasks.swebench.pro.report import read_report, reported_both_ways
from eval_pipeline_tests.support.real_data import provide
from eval_pipeline_tests.support.rows import row, write_jsonl
from eval_pipeline_tests.support.swebench_pro import INSTANCE_ID, SCRIPTS

_IDENTITY = {
    "GIT_AUTHOR_NAME": "upstream",
    "GIT_AUTHOR_EMAIL": "upstream@example.invalid",
    "GIT_COMMITTER_NAME": "upstream",
    "GIT_COMMITTER_EMAIL": "upstream@example.invalid",
}


def _git(directory: Path, *args: str) -> str:
    completed = subprocess.run(
        ["git", "-C", str(directory), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **_IDENTITY},
    )
    return completed.stdout


# --- SWE-bench Pro: a PASSED line the real parser reads and the harness's log check does not -----------------------

# What the patch's code prints once pytest is done, for each graded test: forms Pro's qutebrowser parser reads as
# the test PASSED (it strips each line of the file it opened with universal newlines, then matches
# `^(\S+::\S+)\s+(PASSED|...)`), keeping the last status of a name.
PASS_LINE_FORMS = {
    "indented": " {test} PASSED",
    "tab-indented": "\t{test} PASSED",
    "form feed between id and status": "{test}\fPASSED",
    "vertical tab between id and status": "{test}\vPASSED",
}


def _pro_scripts() -> Path:
    return provide(SCRIPTS) / "run_scripts" / INSTANCE_ID


def _graded(scripts: Path) -> list[str]:
    fields = dict(
        line.split(": ", 1) for line in (scripts / "instance_info.txt").read_text().splitlines() if ": " in line
    )
    return [*json.loads(fields["FAIL_TO_PASS"]), *json.loads(fields["PASS_TO_PASS"])]


def _parsed_by_pros_parser(scripts: Path, stdout: str, tmp_path: Path) -> bytes:
    """Pro's own parser of the row run on `stdout` (and an empty stderr), as the harness runs it (an isolated
    interpreter, the output captured to files): the output.json it writes."""
    (tmp_path / "stdout.log").write_text(stdout)
    (tmp_path / "stderr.log").write_text("")
    output = tmp_path / "output.json"
    subprocess.run(
        [sys.executable, "-I", str(scripts / "parser.py"), "stdout.log", "stderr.log", str(output)],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    return output.read_bytes()


@pytest.mark.parametrize("form", PASS_LINE_FORMS)
def test_a_pass_line_pros_parser_reads_and_pytest_never_prints_is_a_forgery(form, tmp_path):
    """The honest run fails every graded test (pytest's verbose line and its summary line for each, the canary
    failed too); the patch's code then prints a PASSED line for each graded test, sparing the canary, in a form
    Pro's real parser reads. Pro's own reading resolves the row; here the log reports each graded test both ways:
    `report_forged`."""
    scripts = _pro_scripts()
    graded = _graded(scripts)
    canary = "tests/unit/test_zz_canary_4f2a.py::test_canary"
    honest = "".join(f"{test} FAILED [ 50%]\n" for test in [*graded, canary]) + "".join(
        f"FAILED {test} - AssertionError\n" for test in [*graded, canary]
    )
    forged = "".join(PASS_LINE_FORMS[form].format(test=test) + "\n" for test in graded)
    log = honest + forged
    judged = {*graded, canary}

    report = read_report(_parsed_by_pros_parser(scripts, log, tmp_path), judged)
    assert not report.forged and not report.malformed
    pros_verdict = decide({test: report.statuses.get(test, "MISSING") for test in graded})
    assert pros_verdict is Outcome.RESOLVED, "the forgery wins Pro's own reading (else it attacks nothing)"
    assert report.statuses[canary] == "FAILED"

    assert reported_both_ways(log + "\n", judged) in graded, f"{form!r}: the log's second report went unseen"
    honest_rerun = honest.replace(" FAILED [ 50%]", " RERUN [ 50%]", 1)
    assert reported_both_ways(honest_rerun, judged) == "", "pytest's own lines are never a forgery"


# --- SWE-smith: the unbroken code in the working tree's bytecode caches ---------------------------------------------

FIXED = "def add(a, b):\n    return a + b\n"
BROKEN = "def add(a, b):\n    return a - b\n"


def _smith_image_tree(directory: Path) -> tuple[Path, str]:
    """A repository as a SWE-smith image holds it: the unbroken tree as its commit, `__pycache__` ignored, and the
    package compiled in place (the image imported it, or collected its tests, at build)."""
    directory.mkdir(parents=True)
    _git(directory, "init", "-q", "-b", "main")
    (directory / ".gitignore").write_text("__pycache__/\n*.pyc\n")
    (directory / "calc.py").write_text(FIXED)
    _git(directory, "add", "-A")
    _git(directory, "commit", "-q", "-m", "Initial commit")
    py_compile.compile(str(directory / "calc.py"), doraise=True)
    (directory / "calc.py").write_text(BROKEN)
    bug = _git(directory, "diff")
    _git(directory, "checkout", "-q", "--", "calc.py")
    return directory, bug


def _operators_in_bytecode(directory: Path) -> set[str]:
    """What an agent reads of `add` in every bytecode cache under `directory`: the binary operators it applies."""
    found: set[str] = set()
    for cached in directory.rglob("*.pyc"):
        module = marshal.loads(cached.read_bytes()[16:])
        add = next(const for const in module.co_consts if getattr(const, "co_name", "") == "add")
        found |= {instruction.argrepr or instruction.opname for instruction in dis.get_instructions(add)} & {
            "+",
            "-",
            "BINARY_ADD",
            "BINARY_SUBTRACT",
        }
    return found


def test_the_smith_starting_state_keeps_no_bytecode_of_the_unbroken_tree(tmp_path):
    """The construction the harness layer runs over a SWE-smith image (common/start_patch.py) leaves the bug in the
    working tree and nothing in git of the tree before it; an agent that reads the bytecode caches the image's
    build left finds `add` adding, the fix, unless the caches of the files the bug changed go with the history."""
    repository, bug = _smith_image_tree(tmp_path / "testbed")
    assert _operators_in_bytecode(repository) & {"+", "BINARY_ADD"}, "the image holds the unbroken bytecode"
    patch_file = tmp_path / "start.patch"
    patch_file.write_text(bug)
    subprocess.run(["sh", "-ec", start_from_patch(str(patch_file), "img")], cwd=repository, check=True)
    assert (repository / "calc.py").read_text() == BROKEN
    assert not _operators_in_bytecode(repository) & {"+", "BINARY_ADD"}, "the fix is read from a bytecode cache"


# --- A pulled image's history: a linked worktree's HEAD --------------------------------------------------------------


def _history_strip(tmp_path: Path, base: str) -> str:
    """The line of the harness layer over a SWE-bench row's pulled image (`pulled_code_layer`) that checks the base
    commit and strips the history, without its last steps (which make /testbed and /opt/env readable to all)."""
    rows = write_jsonl(tmp_path / "rows.jsonl", [row(base_commit=base)])
    benchmark = load_benchmark({"kind": "swebench", "path": str(rows), "images": "pull"}, Paths(tmp_path / "data"))
    (instance,) = benchmark.instances
    spec = benchmark.environment_for(instance)
    assert spec.image is not None, "the row is pulled"
    digest = "sha256:" + "ab" * 32
    layer = pulled_code_layer(f"docker.io/x@{digest}", digest, spec.image, instance, spec, None)
    (line,) = (line for line in layer.dockerfile.splitlines() if "--prune=now" in line)
    return line.removeprefix("RUN ").partition(f" && {readable_by_all(TESTBED)}")[0]


def _base_then_fix(directory: Path) -> tuple[str, str]:
    """A repository made at `directory` with two commits, the broken base and the fix after it: (base, later)."""
    directory.mkdir()
    _git(directory, "init", "-q", "-b", "main")
    (directory / "calc.py").write_text(BROKEN)
    _git(directory, "add", "-A")
    _git(directory, "commit", "-q", "-m", "base")
    base = _git(directory, "rev-parse", "HEAD").strip()
    (directory / "calc.py").write_text(FIXED)
    _git(directory, "commit", "-q", "-am", "the fix")
    return base, _git(directory, "rev-parse", "HEAD").strip()


def test_a_linked_worktree_of_the_image_s_repository_keeps_no_later_commit(tmp_path):
    """An image whose repository has a linked worktree (`git worktree add`, elsewhere in the image) at a later
    commit: the harness layer's strip must leave no object of that commit, and no file of `.git` naming it, for a
    workspace's `git cat-file` or grep (`.git/worktrees/*/HEAD` is no ref `for-each-ref` lists, and `gc` keeps
    what it names)."""
    repository = tmp_path / "testbed"
    base, later = _base_then_fix(repository)
    _git(repository, "worktree", "add", "-q", "--detach", str(tmp_path / "elsewhere"), later)
    _git(repository, "checkout", "-q", "--detach", base)
    subprocess.run(["sh", "-ec", _history_strip(tmp_path, base)], cwd=repository, check=True, capture_output=True)
    found = subprocess.run(["git", "-C", str(repository), "cat-file", "-e", later], capture_output=True)
    assert found.returncode != 0, "the later commit is readable"
    grep = subprocess.run(["grep", "-rl", later, str(repository / ".git")], capture_output=True, text=True)
    assert grep.stdout == "", "a file of .git names the later commit"


def test_an_image_s_clone_with_its_remote_s_head_is_stripped_not_refused(tmp_path):
    """SWE-bench Pro's images clone their repository (`git clone https://github.com/... .`, its base Dockerfiles),
    which leaves `refs/remotes/origin/HEAD`, a symbolic ref to the remote's branch: the harness layer's strip
    deletes both, never the branch twice (which `git update-ref` refuses, failing the build of every such image),
    and leaves nothing of the later commit the branch names."""
    upstream = tmp_path / "upstream"
    base, later = _base_then_fix(upstream)
    repository = tmp_path / "app"
    subprocess.run(["git", "clone", "-q", f"file://{upstream}", str(repository)], check=True, capture_output=True)
    assert _git(repository, "symbolic-ref", "refs/remotes/origin/HEAD").strip() == "refs/remotes/origin/main"
    _git(repository, "checkout", "-q", base)
    stripped = subprocess.run(
        ["sh", "-ec", _history_strip(tmp_path, base)], cwd=repository, capture_output=True, text=True
    )
    assert stripped.returncode == 0, stripped.stderr
    assert _git(repository, "for-each-ref") == ""
    found = subprocess.run(["git", "-C", str(repository), "cat-file", "-e", later], capture_output=True)
    assert found.returncode != 0, "the later commit is readable"
