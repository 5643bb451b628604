"""The demo benchmark is real: git history, real bugs, gold resolves all, empty none."""

import pytest

from eval_pipeline.common.git import git
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.tasks.demo import build_demo_benchmark
from eval_pipeline.tasks.swebench.grading import grade


def test_demo_has_at_least_8_instances_over_2_repositories(demo_benchmark):
    assert len(demo_benchmark.instances) >= 8
    assert len({i.repo for i in demo_benchmark.instances}) >= 2


def test_repositories_are_git_repositories_with_history(demo_benchmark):
    for repo in {i.repo for i in demo_benchmark.instances}:
        location = demo_benchmark.source.location(repo)
        assert len(git(["rev-list", "HEAD"], location).split()) >= 2
        for instance in (i for i in demo_benchmark.instances if i.repo == repo):
            assert git(["cat-file", "-t", instance.base_commit], location).strip() == "commit"


def test_the_demo_is_identical_wherever_it_is_built(demo_benchmark, tmp_path):
    rebuilt = build_demo_benchmark(tmp_path / "elsewhere")
    assert rebuilt.version == demo_benchmark.version
    assert [i.base_commit for i in rebuilt.instances] == [i.base_commit for i in demo_benchmark.instances]


@pytest.mark.parametrize("patch_kind", ["gold", "empty"])
def test_gold_resolves_every_instance_and_empty_none(demo_benchmark, shared_sandbox, patch_kind):
    for instance in demo_benchmark.instances:
        spec = demo_benchmark.environment_for(instance)
        environment = shared_sandbox.prepare(instance, spec, demo_benchmark.source)
        with shared_sandbox.workspace(environment, "test") as workspace:
            verdict = grade(
                instance, spec, instance.patch if patch_kind == "gold" else "", workspace, test_timeout_s=60
            )
        expected = Outcome.RESOLVED if patch_kind == "gold" else Outcome.UNRESOLVED
        assert verdict.outcome is expected, (instance.instance_id, verdict.detail, verdict.tests)
        if patch_kind == "empty":
            assert all(verdict.tests[t] == "FAILED" for t in instance.FAIL_TO_PASS)
            assert all(verdict.tests[t] == "PASSED" for t in instance.PASS_TO_PASS)
