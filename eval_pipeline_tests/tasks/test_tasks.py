"""The `Task` protocol: both kinds implement it, and callers work from what a task states, for any kind."""

from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import ClassVar

import pytest

from eval_pipeline.agents.base import agent_task
from eval_pipeline.common.outcomes import ImageBuildFailed, Outcome
from eval_pipeline.config.campaign import parse_campaign
from eval_pipeline.grading.verdict import Verdict
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.kubernetes.sandbox import KubernetesSandbox
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.swebench.instance import Instance
from eval_pipeline.tasks.task import Task
from eval_pipeline.tasks.terminal.task import DEMO_TASKS_DIR, load_terminal_tasks
from eval_pipeline.trial.reference import grade_in_fresh_workspace
from eval_pipeline_tests.support.rows import row

MEMBERS = sorted(name for name in dir(Task) if not name.startswith("_"))  # its data's (TaskData) too


@pytest.fixture(scope="module")
def code_task() -> Instance:
    return Instance.from_row(row())


@pytest.fixture(scope="module")
def terminal_task(tmp_path_factory):
    return load_terminal_tasks(DEMO_TASKS_DIR, tmp_path_factory.mktemp("mirrors")).instance("build-index")


def resources(task: Task) -> tuple[int | None, float | None, float | None, float | None]:
    """A typed caller: it takes any Task, and asks it, never its kind."""
    return task.memory_mb, task.cpus, task.agent_timeout_s, task.verifier_timeout_s


def test_both_kinds_have_every_member_of_the_protocol(code_task, terminal_task):
    assert {"instruction", "own_image", "local_problem", "memory_mb", "reference_patch", "grade"} <= set(MEMBERS)
    for task in (code_task, terminal_task):
        assert isinstance(task, Task)
        assert [name for name in MEMBERS if not hasattr(task, name)] == []


def test_a_code_task_brings_nothing_of_its_own_and_its_reference_is_the_gold_patch(code_task):
    assert resources(code_task) == (None, None, None, None)
    assert (code_task.own_image, code_task.local_problem) == (None, "")
    assert code_task.reference_patch == code_task.patch
    assert agent_task(code_task, seed=0, timeout_multiplier=3).timeout_s is None


def test_the_protocol_s_constants_stay_out_of_a_code_task_s_row_and_hash(code_task):
    """SWE-bench's schema is the row: the members a code task states as constants, the campaign's settings it
    carries to its grading and its image's name, and the columns of its own a row of SWE-bench's has none of
    (install_config, docker_image), must not change its hash."""
    settings = {"twins", "image_namespace", "image_tag", "install_config", "docker_image"}
    assert set(code_task.to_row()) == {field.name for field in fields(Instance)} - settings
    assert not set(code_task.to_row()) & {"own_image", "local_problem", "memory_mb", "verifier_timeout_s"}


def test_a_terminal_task_brings_its_own_image_resources_and_timeouts(terminal_task):
    assert resources(terminal_task) == (256, 1.0, 60.0, 120.0)
    assert terminal_task.own_image is terminal_task and terminal_task.own_image.workdir == "/app"
    assert terminal_task.reference_patch is None
    assert terminal_task.environment_setup_commit == terminal_task.base_commit
    assert agent_task(terminal_task, seed=0, timeout_multiplier=3).timeout_s == 180.0


def test_the_campaign_s_limits_and_timeouts_apply_where_a_task_has_none(code_task, terminal_task):
    campaign = parse_campaign(
        {
            "name": "mine",
            "benchmark": {"kind": "demo"},
            "variants": [{"name": "o", "agent": "oracle"}],
            "timeouts": {"tests_s": 100, "multiplier": 2},
        },
        "x",
    )
    assert campaign.limits_for(code_task) == campaign.resources == campaign.limits_for(None)
    assert campaign.test_timeout_for(code_task) == 200.0
    assert campaign.limits_for(terminal_task).memory_ceiling_mb == 256
    assert campaign.test_timeout_for(terminal_task) == 240.0


@dataclass(frozen=True)
class ScoredByLength(Instance):
    """A kind of task that grades its own way: the harness must call its grader, not a kind's it knows."""

    def grade(self, spec: EnvironmentSpec, model_patch: str, workspace, test_timeout_s: float) -> Verdict:
        return Verdict(Outcome.RESOLVED if len(model_patch) > 3 else Outcome.UNRESOLVED, detail="by length")


@dataclass(frozen=True)
class NeedsAnImage(Instance):
    """A kind of task that states why the local backend cannot run it."""

    local_problem: ClassVar[str] = "it needs an image"


def _fields(task: Instance) -> dict:
    return {field.name: getattr(task, field.name) for field in fields(Instance)}


class NoWorkspaces:
    """A sandbox whose workspaces are None: enough for a kind that grades without one."""

    @contextmanager
    def workspace(self, environment, label):
        yield None


def test_grading_is_the_kind_s_own(code_task):
    task = ScoredByLength(**_fields(code_task))
    verdict = grade_in_fresh_workspace(task, EnvironmentSpec(), "long patch", None, NoWorkspaces(), 1, "eval")
    assert (verdict.outcome, verdict.detail) == (Outcome.RESOLVED, "by length")
    assert grade_in_fresh_workspace(task, EnvironmentSpec(), "", None, NoWorkspaces(), 1, "eval").outcome == (
        Outcome.UNRESOLVED
    )


def test_backends_refuse_what_a_task_states_they_cannot_run(tmp_path, code_task, terminal_task):
    kubernetes = KubernetesSandbox(tmp_path / "k8s", ResourceLimits(), SandboxSettings(), "test")
    with pytest.raises(ImageBuildFailed, match="Kubernetes backend runs code tasks only"):
        kubernetes.prepare(terminal_task, terminal_task.environment, source=None)
    local = LocalSandbox(tmp_path / "local", ResourceLimits(), SandboxSettings(), "test")
    with pytest.raises(ImageBuildFailed, match="it needs an image.*container backend"):
        local.build(NeedsAnImage(**_fields(code_task)), EnvironmentSpec(), source=None)
