"""Real Terminal-Bench 2.0 tasks, unmodified apart from their FROM image, graded as Harbor grades them."""

import pytest

from eval_pipeline.agents.builtin import NullAgent, OracleAgent
from eval_pipeline.common.outcomes import ImageBuildFailed, Outcome
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline.tasks.terminal.task import load_terminal_tasks
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate
from eval_pipeline_tests.support.real_data import task_base_images, terminal_bench_tasks
from eval_pipeline_tests.support.trials import prepare_on

pytestmark = pytest.mark.slow  # end to end: `pytest -m "not slow"` leaves it out


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    directory = terminal_bench_tasks(tmp_path_factory.mktemp("terminal_bench"))
    return load_terminal_tasks(directory, tmp_path_factory.mktemp("task_mirrors"))


def test_the_local_backend_refuses_tasks_it_cannot_run_faithfully(tasks, tmp_path):
    sandbox = LocalSandbox(tmp_path / "sb", ResourceLimits(), SandboxSettings(), "refuse")
    for task in tasks.instances:
        with pytest.raises(ImageBuildFailed, match="container backend"):
            prepare_on(sandbox, tasks, task)


def test_oracle_resolves_and_null_does_not_on_the_container_backend(container_sandbox, tasks, store):
    """Built from the task's own Dockerfile (FROM replaced), solved and verified at Harbor's paths, as root, in
    the agent's own container right after it: kv-store-grpc's verifier imports the grpcio its solution installed
    and calls the server it left running. Neither agent changes a tool the verifier runs (no `verifier_tools`
    flag); kv-store-grpc's server ran beside the verifier, which leaves its run exposed, and nothing else's."""
    sandbox = container_sandbox(task_base_images=task_base_images(), mode="pod")
    for task in tasks.instances:
        environment = prepare_on(sandbox, tasks, task)
        assert environment.details["task"]["workdir"] == "/app"
        timeout = task.verifier_timeout_s
        for agent, expected in ((OracleAgent(), Outcome.RESOLVED), (NullAgent(), Outcome.UNRESOLVED)):
            generation = generate(task, agent, 0, environment, sandbox, store, test_timeout_s=timeout)
            assert generation.status == "completed", generation.error
            evaluation = evaluate(task, task.environment, generation, environment, sandbox, store, timeout)
            output = evaluation.steps[-1].get("stdout_tail", "") if evaluation.steps else ""
            assert evaluation.outcome == expected, (task.instance_id, agent.name, evaluation.detail, output)
            assert evaluation.detail.startswith("reward "), "the reward file decided"
            assert evaluation.grading_mode == "in_container"
            left_a_server = task.instance_id == "kv-store-grpc" and agent.name == OracleAgent.name
            kinds = {flag["kind"] for flag in evaluation.audit}
            assert kinds == ({"verifier_exposed"} if left_a_server else set()), (task.instance_id, evaluation.audit)
