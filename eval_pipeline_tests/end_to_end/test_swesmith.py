"""A SWE-smith row runs as SWE-smith ships it: pulled in the image its profile names, from its bug.

SWE-smith's one public row reachable here (pandas) cannot be built here (support/smith.py), so the row is one made
as SWE-smith's PR mirroring makes rows, from SWE-bench Verified's flask row: the mirror's tree is flask with the fix
merged, the bug the fix undone. Its image is the flask environment built here re-shaped as SWE-smith's images are
(the Python at /opt/miniconda3/envs/testbed, the mirror cloned at /testbed), pushed to the engine's mirror of
docker.io under the name SWE-smith's profile forms. Under `images: pull` the agent's workspace holds the bug, one
commit and nothing of the unbroken tree; the reference (the bug reversed) resolves, the empty patch does not, in a pod
and in a strict container.
"""

import pytest

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.sandbox import ResourceLimits
from eval_pipeline.sandbox.patches import patch_paths
from eval_pipeline.tasks.environment import RepoSource
from eval_pipeline.tasks.swebench.instance import benchmark_from_rows
from eval_pipeline_tests.support.real_data import swebench_mirror, swebench_rows
from eval_pipeline_tests.support.smith import PrMirror, pr_mirror_row, smith_shaped_image
from eval_pipeline_tests.support.trials import prepare_on

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600), pytest.mark.xdist_group("engine")]

FLASK_ROW = "pallets__flask-5014"


def test_a_swesmith_row_runs_in_its_image_from_its_bug_and_grades_as_swesmith_does(
    engine, image_registry, container_sandbox, tmp_path
):
    (verified,) = swebench_rows((FLASK_ROW,))
    mirrors = swebench_mirror([verified], tmp_path / "mirrors")
    built = benchmark_from_rows("verified", [verified], swebench_specs=True, source=RepoSource(mirror_dir=str(mirrors)))
    flask = built.instances[0]
    record = container_sandbox().build(flask, built.environment_for(flask), built.source)
    mirror = PrMirror(verified, mirrors / verified["repo"], tmp_path / "smith")
    row = pr_mirror_row(mirror)
    local = smith_shaped_image(engine, record["tag"], mirror, tmp_path / "shape")
    image_registry.push(local, row["image_name"])
    image_registry.remove_local(local)
    image_registry.remove_local(f"docker.io/{row['image_name']}:latest")

    benchmark = benchmark_from_rows("swe-smith", [row], images="pull")
    (instance,) = benchmark.instances
    assert (
        instance.named_image.reference
        == row["image_name"]
        == f"swebench/swesmith.x86_64.pallets_1776_flask.{mirror.commit[:8]}"
    )
    spec = benchmark.environment_for(instance)
    for mode in ("pod", "strict"):
        sandbox = container_sandbox(mode=mode, limits=ResourceLimits(memory_ceiling_mb=2048, output_bytes=200_000))
        environment = prepare_on(sandbox, benchmark, instance)
        assert environment.details["pulled_image"]["reference"] == row["image_name"]
        assert environment.details["pulled_image"]["digest"].startswith("sha256:")

        with sandbox.workspace(environment, "agent") as workspace:
            bug = workspace.write_harness_file("bug.patch", row["patch"])
            assert workspace.run(f"git apply --check -R {bug}", timeout_s=60).ok, "the bug is in the working tree"
            assert workspace.run("git status --porcelain", timeout_s=60).stdout.strip() == ""
            history = workspace.run(
                "git rev-list --all --parents; git for-each-ref; git remote; git stash list", timeout_s=60
            )
            assert history.stdout.split() == [workspace.base_revision], "one commit, no parent, no ref, no remote"
            for path in patch_paths(row["patch"]):
                fixed = mirror.fixed_blob(path)
                assert not workspace.run(f"git cat-file -e {fixed}", timeout_s=60).ok, (
                    f"the unbroken {path} is readable"
                )
            assert not workspace.run(f"git cat-file -e {row['base_commit']}", timeout_s=60).ok

        for patch, expected in ((instance.reference_patch, Outcome.RESOLVED), ("", Outcome.UNRESOLVED)):
            with sandbox.workspace(environment, "grade") as workspace:
                verdict = instance.grade(spec, patch, workspace, 600)
            assert verdict.outcome is expected, (mode, verdict.detail, verdict.steps[-1])
