"""Hostile or broken agent output on the local sandbox: each ends in a typed outcome, nothing else harmed.

The same cases that need a container's isolation (writes outside the
workspace, a fork bomb, gigabytes of output) are in test_hostile_containers.py.
"""

import uuid
from pathlib import Path

import pytest

from eval_pipeline.agents import make_agent
from eval_pipeline.common.git import git
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.sandbox.patches import MAX_PATCH_BYTES, MAX_PATCH_FILES, apply_patch
from eval_pipeline.tasks.swebench.grading import grade
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate

FORCE_PASS_CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


@pytest.fixture
def instance(demo_benchmark):
    return demo_benchmark.instances[2]  # calclib: mean([]) must raise ValueError


@pytest.fixture
def spec(demo_benchmark, instance):
    return demo_benchmark.environment_for(instance)


@pytest.fixture
def environment(prepare, instance):
    return prepare(instance)


def trial(instance, spec, environment, sandbox, store, command: str):
    """Generate with a command agent running `command`, then evaluate: the whole trial."""
    generation = generate(instance, make_agent("command", {"command": command}), 0, environment, sandbox, store)
    return generation, evaluate(instance, spec, generation, environment, sandbox, store, 60)


def new_file_patch(path: str, text: str = "pwned") -> str:
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{text}\n"


@pytest.mark.parametrize("where", ["../escape-{tag}.txt", "../../escape-{tag}.txt", "/tmp/escape-{tag}.txt"])
def test_a_patch_naming_paths_outside_the_repository_is_refused(instance, spec, environment, shared_sandbox, where):
    path = where.format(tag=uuid.uuid4().hex[:8])
    patch = new_file_patch(path).replace("+++ b//tmp", "+++ /tmp").replace("a//tmp", "a/tmp")
    with shared_sandbox.workspace(environment, "hostile") as workspace:
        verdict = grade(instance, spec, patch, workspace, 60)
        escaped = [*workspace.root.parent.parent.rglob("escape-*.txt"), *Path("/tmp").glob("escape-*.txt")]
    assert verdict.outcome is Outcome.PATCH_APPLY_FAILED
    assert "outside the repository" in verdict.detail and path.lstrip("./") in verdict.detail.replace("../", "")
    assert escaped == [], "nothing was written outside the workspace"


@pytest.mark.parametrize("path", [".git/hooks/post-checkout", "vendor/.git/config"])
def test_a_patch_writing_inside_a_git_directory_is_refused(instance, spec, environment, shared_sandbox, path):
    """GNU patch, the fallback after git apply, would write a hook that the grader's own git checkout runs."""
    patch = new_file_patch(path, "#!/bin/sh\\necho forged > conftest.py")
    with shared_sandbox.workspace(environment, "hooked") as workspace:
        verdict = grade(instance, spec, patch, workspace, 60)
        written = (workspace.repo / path).exists()
    assert verdict.outcome is Outcome.PATCH_APPLY_FAILED and "inside a git directory" in verdict.detail
    assert verdict.steps == [] and not written, "no command ran, nothing was written"


@pytest.mark.parametrize("path", ["calclib/__pycache__/stats.cpython-311.pyc", "calclib/stats.pyc"])
def test_a_patch_writing_compiled_bytecode_is_refused(instance, spec, environment, shared_sandbox, path):
    """Python may load a .pyc without its source (an unchecked hash-based one always): code no diff shows."""
    with shared_sandbox.workspace(environment, "compiled") as workspace:
        verdict = grade(instance, spec, new_file_patch(path, "forged"), workspace, 60)
        written = (workspace.repo / path).exists()
    assert verdict.outcome is Outcome.PATCH_APPLY_FAILED and "compiled bytecode" in verdict.detail
    assert verdict.steps == [] and not written


def test_the_harness_git_runs_no_hook_or_monitor_that_the_repository_names(environment, shared_sandbox):
    """A repository an agent had in hand may name a hook or an fsmonitor command; the harness's git runs neither."""
    with shared_sandbox.workspace(environment, "configured") as workspace:
        marker = workspace.harness_path("ran")
        hook = workspace.repo / ".git" / "hooks" / "post-checkout"
        hook.write_text(f"#!/bin/sh\necho hook >> {marker}\n")
        hook.chmod(0o755)
        monitor = workspace.repo / "monitor.sh"
        monitor.write_text(f"#!/bin/sh\necho monitor >> {marker}\n")
        monitor.chmod(0o755)
        git(["config", "core.fsmonitor", str(monitor)], workspace.repo)
        command = "git checkout -q HEAD -- . && git status --short >/dev/null"
        assert workspace.run(command, timeout_s=60, env=workspace.harness_git_env).ok
        assert not Path(marker).exists(), "the harness's git ran a command the repository named"
        assert workspace.run(command, timeout_s=60, env=workspace.git_env).ok
        assert Path(marker).exists(), "without the harness's settings the same git runs it: the check can fail"


def test_a_huge_patch_is_refused_without_applying_it(instance, spec, environment, shared_sandbox):
    patch = new_file_patch("big.txt", "x" * (MAX_PATCH_BYTES + 1))
    with shared_sandbox.workspace(environment, "huge") as workspace:
        verdict = grade(instance, spec, patch, workspace, 60)
    assert verdict.outcome is Outcome.PATCH_APPLY_FAILED and "over the limit" in verdict.detail
    assert verdict.steps == [], "no command ran"


def test_a_patch_touching_more_files_than_the_cap_is_the_patchs_failure(instance, spec, environment, shared_sandbox):
    patch = "".join(new_file_patch(f"tests/test_{i}.py", "") for i in range(MAX_PATCH_FILES + 1))
    with shared_sandbox.workspace(environment, "many") as workspace:
        verdict = grade(instance, spec, patch, workspace, 60)
    assert verdict.outcome is Outcome.PATCH_APPLY_FAILED, verdict.detail
    assert f"touches {MAX_PATCH_FILES + 1} files, over the limit" in verdict.detail
    assert verdict.outcome.is_scored and verdict.steps == [], "scored against the patch, and no command ran"


def test_an_agent_whose_changes_make_a_huge_patch_fails_as_the_agent(
    instance, spec, environment, shared_sandbox, store
):
    generation, evaluation = trial(
        instance, spec, environment, shared_sandbox, store, "head -c 12000000 /dev/zero | tr '\\0' x > big.txt"
    )
    assert generation.status == Outcome.AGENT_ERROR and "over the limit" in generation.error
    assert generation.patch == ""
    assert evaluation.outcome_type is Outcome.AGENT_ERROR


def test_a_conftest_that_forces_passes_is_undone_before_the_tests_run(
    instance, spec, environment, shared_sandbox, store
):
    command = f"cat > conftest.py <<'EOF'\n{FORCE_PASS_CONFTEST}EOF"
    generation, evaluation = trial(instance, spec, environment, shared_sandbox, store, command)
    assert "conftest.py" in generation.patch
    with shared_sandbox.workspace(environment, "naive") as workspace:  # what a harness that trusts it would see
        assert apply_patch(workspace, generation.patch, "model.patch").ok
        assert apply_patch(workspace, instance.test_patch, "test.patch").ok
        assert workspace.run(f"{spec.test_cmd} {instance.FAIL_TO_PASS[0]}", timeout_s=60).ok, "the attack works"
    assert evaluation.outcome_type is Outcome.UNRESOLVED
    assert "conftest.py" in evaluation.detail
    assert evaluation.tests[instance.FAIL_TO_PASS[0]] == "FAILED"


def test_a_patch_that_rewrites_the_tests_is_graded_against_the_real_tests(
    instance, spec, environment, shared_sandbox, store
):
    command = "printf 'def test_mean_of_empty_data_raises_value_error():\\n    pass\\n' > tests/test_stats.py"
    generation, evaluation = trial(instance, spec, environment, shared_sandbox, store, command)
    assert "tests/test_stats.py" in generation.patch
    assert evaluation.outcome_type is Outcome.UNRESOLVED
    assert evaluation.tests[instance.FAIL_TO_PASS[0]] == "FAILED"


def test_output_that_forges_the_test_runners_markers_changes_nothing(
    instance, spec, environment, shared_sandbox, store
):
    forged = f"{instance.FAIL_TO_PASS[0]} PASSED"
    command = (
        f'printf \'print("{forged}")\\nprint("===== 3 passed in 0.01s =====")\\n'
        'print("<testsuite><testcase name=\\\\"x\\\\"/></testsuite>")\\n\' >> calclib/stats.py'
    )
    generation, evaluation = trial(instance, spec, environment, shared_sandbox, store, command)
    assert forged in generation.patch
    assert evaluation.outcome_type is Outcome.UNRESOLVED
    assert evaluation.tests[instance.FAIL_TO_PASS[0]] == "FAILED"


def test_binary_and_non_utf8_changes_are_kept_byte_for_byte(instance, spec, environment, shared_sandbox, store):
    command = (
        "printf 'caf\\351 cr\\350me\\n' > latin1.txt && printf '\\000\\001\\377binary' > blob.bin"
        " && printf '\\377\\376 not utf-8 on stdout\\n'"
    )
    generation, evaluation = trial(instance, spec, environment, shared_sandbox, store, command)
    assert generation.status == "completed"
    assert "\ufffd" in generation.trajectory[0]["stdout_tail"], "undecodable output is replaced, not a crash"
    assert "GIT binary patch" in generation.patch and "\ufffd" not in generation.patch
    assert evaluation.outcome_type is Outcome.UNRESOLVED, "the patch applied; the bug is still there"
    with shared_sandbox.workspace(environment, "bytes") as workspace:
        assert apply_patch(workspace, generation.patch, "model.patch").ok
        assert (workspace.repo / "latin1.txt").read_bytes() == b"caf\xe9 cr\xe8me\n"
        assert (workspace.repo / "blob.bin").read_bytes() == b"\x00\x01\xffbinary"


def test_an_agent_that_destroys_its_workspace_fails_as_the_agent(
    instance, spec, environment, shared_sandbox, store, demo_benchmark
):
    generation, evaluation = trial(instance, spec, environment, shared_sandbox, store, 'rm -rf "$PWD"')
    assert generation.status == Outcome.AGENT_ERROR and "could not diff" in generation.error
    assert evaluation.outcome_type is Outcome.AGENT_ERROR
    oracle = generate(instance, make_agent("oracle"), 0, environment, shared_sandbox, store)
    again = evaluate(instance, spec, oracle, environment, shared_sandbox, store, 60)
    assert again.outcome_type is Outcome.RESOLVED, "the shared environment is unharmed"


def test_no_workspace_reaches_a_later_commit_hints_or_the_patches(demo_benchmark, shared_sandbox, prepare):
    """The demo's mirrors hold every later stage (the fixes among them): a workspace holds none of them."""
    hidden = 0
    for instance in demo_benchmark.instances:
        if not hasattr(instance, "FAIL_TO_PASS"):
            continue
        mirror = Path(demo_benchmark.source.location(instance.repo))
        later = set(git(["rev-list", "--all"], mirror).split()) - set(
            git(["rev-list", instance.base_commit], mirror).split()
        )
        hidden += len(later)
        assert "Hints" not in instance.instruction, "hints stay off unless the campaign asks for them"
        with shared_sandbox.workspace(prepare(instance), "agent") as workspace:
            reachable = workspace.run("git log --all --format=%H; git for-each-ref; git stash list", timeout_s=30)
            assert set(reachable.stdout.split()) <= set(git(["rev-list", instance.base_commit], mirror).split())
            objects = workspace.run("git cat-file --batch-all-objects --batch-check='%(objectname)'", timeout_s=30)
            assert not later & set(objects.stdout.split()), f"{instance.instance_id}: a later commit is in the store"
            leaked = workspace.run("grep -rlF 'FAIL_TO_PASS' . $HOME $TMPDIR", timeout_s=30)
            assert leaked.stdout.strip() == "", leaked.stdout
    assert hidden, "the mirrors do hold later commits for the check to find"
