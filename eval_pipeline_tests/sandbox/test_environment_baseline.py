"""The environment's state after its install steps is every trial's baseline, on every backend.

An install that leaves build output or edits a tracked file (a non-editable
`pip install .` leaves `build/`; sphinx's spec `sed -i`s its tox.ini) changes
the environment, not the agent's work: the null agent's patch is empty, the
reference patch resolves, and no patch, however written, can undo the edit.
"""

from dataclasses import replace

import pytest

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline.sandbox.patches import workspace_diff
from eval_pipeline.tasks.swebench.grading import grade

# Untracked build output, an egg-info a .gitignore would usually hide, and a tracked file edited in place.
CONFIGURE = "# configured by the environment"
INSTALL = (
    "mkdir -p build/lib && echo built > build/lib/calclib.py",
    f"sed -i '1i {CONFIGURE}' README.md",
)


@pytest.fixture
def installed(demo_benchmark):
    """A demo instance whose environment's install steps leave output and edit README.md."""
    instance = demo_benchmark.instances[0]
    return instance, replace(demo_benchmark.environment_for(instance), install=INSTALL)


def _backends(request, tmp_path):
    if request.param == "local":
        return LocalSandbox(tmp_path / "sb", ResourceLimits(memory_ceiling_mb=1024), SandboxSettings(), "baseline")
    return request.getfixturevalue("container_sandbox")(mode=request.param)


@pytest.fixture(
    params=["local", pytest.param("pod", marks=pytest.mark.slow), pytest.param("strict", marks=pytest.mark.slow)]
)
def sandbox(request, tmp_path):
    return _backends(request, tmp_path)


def test_the_null_agents_patch_is_empty_and_gold_resolves_over_the_install_output(sandbox, installed, demo_benchmark):
    instance, spec = installed
    environment = sandbox.prepare(instance, spec, demo_benchmark.source)
    with sandbox.workspace(environment, "null") as workspace:
        assert workspace.run("cat build/lib/calclib.py && head -1 README.md", timeout_s=60).stdout == (
            f"built\n{CONFIGURE}\n"
        ), "the trial sees the environment as installed"
        assert workspace_diff(workspace, instance.base_commit) == ""
    with sandbox.workspace(environment, "gold") as workspace:
        verdict = grade(instance, spec, instance.patch, workspace, 300)
        assert verdict.outcome == Outcome.RESOLVED, verdict.detail
        assert workspace.run("head -1 README.md", timeout_s=60).stdout == f"{CONFIGURE}\n"


def test_a_patch_written_to_make_the_fallback_reverse_the_environments_edit_is_refused(
    installed, demo_benchmark, tmp_path
):
    """The attack: a hunk that adds the environment's own edit again. `git apply` refuses it (already there);
    GNU patch in batch mode would take it as reversed and remove the edit. With the edit gone the tests would
    run on a configuration the environment never had; instead the patch is not applied."""
    instance, spec = installed
    sandbox = LocalSandbox(tmp_path / "sb", ResourceLimits(memory_ceiling_mb=1024), SandboxSettings(), "baseline")
    environment = sandbox.prepare(instance, spec, demo_benchmark.source)
    with sandbox.workspace(environment, "probe") as workspace:
        readme = workspace.run("git show HEAD~1:README.md | head -3", timeout_s=60).stdout.splitlines()
    again = (
        "--- a/README.md\n+++ b/README.md\n@@ -1,3 +1,4 @@\n"
        + f"+{CONFIGURE}\n"
        + "".join(f" {line}\n" for line in readme)
    )
    with sandbox.workspace(environment, "attack") as workspace:
        verdict = grade(instance, spec, again + instance.patch, workspace, 300)
        assert verdict.outcome == Outcome.PATCH_APPLY_FAILED
        assert workspace.run("head -1 README.md", timeout_s=60).stdout == f"{CONFIGURE}\n"
