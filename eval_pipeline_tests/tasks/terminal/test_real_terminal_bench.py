"""Real Terminal-Bench 2.0 tasks, unmodified apart from their FROM image, graded as Harbor grades them."""

import shutil
import urllib.request
import uuid
from dataclasses import replace

import pytest

from eval_pipeline.agents.builtin import NullAgent, OracleAgent
from eval_pipeline.common.outcomes import ImageBuildFailed, Outcome
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline.sandbox.pods.images import substitute_from
from eval_pipeline.tasks.named_image import NamedImage
from eval_pipeline.tasks.terminal.task import load_terminal_tasks
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate
from eval_pipeline_tests.support.real_data import task_base_images, terminal_bench_tasks
from eval_pipeline_tests.support.trials import prepare_on

pytestmark = pytest.mark.slow  # end to end: `pytest -m "not slow"` leaves it out


# Terminal-Bench 2 ships kv-store-grpc's solution ending with its server started as below, holding the output of
# the solution's exec (Harbor's exec returns when solve.sh exits; the server runs on for the verifier); the copy
# vendored in the fixture detaches it instead (setsid, its output to /dev/null). The tests run it as shipped.
VENDORED_SERVER_LINE = "setsid python server.py >/dev/null 2>&1 &"
SHIPPED_SERVER_LINE = "python server.py &"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    directory = terminal_bench_tasks(tmp_path_factory.mktemp("terminal_bench"))
    solution = directory / "kv-store-grpc" / "solution" / "solve.sh"
    script = solution.read_text()
    assert script.count(VENDORED_SERVER_LINE) == 1, "the fixture's kv-store-grpc solution changed"
    solution.write_text(script.replace(VENDORED_SERVER_LINE, SHIPPED_SERVER_LINE))
    return load_terminal_tasks(directory, tmp_path_factory.mktemp("task_mirrors"))


def test_the_local_backend_refuses_tasks_it_cannot_run_faithfully(tasks, tmp_path):
    sandbox = LocalSandbox(tmp_path / "sb", ResourceLimits(), SandboxSettings(), "refuse")
    for task in tasks.instances:
        with pytest.raises(ImageBuildFailed, match="container backend"):
            prepare_on(sandbox, tasks, task)


def test_oracle_resolves_and_null_does_not_on_the_container_backend(container_sandbox, tasks, store):
    """Built from the task's own Dockerfile (FROM replaced), solved and verified at Harbor's paths, as root, in
    the agent's own container right after it: kv-store-grpc's verifier imports the grpcio its solution installed
    and calls the server it left running, still holding the solution's output. Neither agent changes a tool the verifier runs (no `verifier_tools`
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


def test_a_server_left_holding_the_solutions_output_serves_the_verifier_in_a_strict_container(
    container_sandbox, tasks, store
):
    """The same kv-store-grpc oracle in strict mode (a container per trial): its server, started as Terminal-Bench
    2 ships it, runs on after solve.sh for the verifier (the runner hands the output it holds to a drainer)."""
    sandbox = container_sandbox(task_base_images=task_base_images(), mode="strict")
    (task,) = [task for task in tasks.instances if task.instance_id == "kv-store-grpc"]
    environment = prepare_on(sandbox, tasks, task)
    timeout = task.verifier_timeout_s
    generation = generate(task, OracleAgent(), 0, environment, sandbox, store, test_timeout_s=timeout)
    assert generation.status == "completed", generation.error
    evaluation = evaluate(task, task.environment, generation, environment, sandbox, store, timeout)
    output = evaluation.steps[-1].get("stdout_tail", "") if evaluation.steps else ""
    assert evaluation.outcome == Outcome.RESOLVED, (evaluation.detail, output)


@pytest.fixture
def regex_log_image(engine, image_registry, tmp_path):
    """regex-log's image, built here from its Dockerfile (FROM replaced by its stand-in) and pushed to the engine's
    mirror of docker.io under the name its task.toml's docker_image gives, no copy of it left on the engine: the
    task's `docker.io/alexgshaw/regex-log:20251031` as a registry serves it. Yields that name."""
    context = terminal_bench_tasks(tmp_path / "published", ("regex-log",)) / "regex-log" / "environment"
    dockerfile, _ = substitute_from((context / "Dockerfile").read_text(), task_base_images())
    (context / "Dockerfile").write_text(dockerfile)
    local = f"localhost/eval-pipeline-test-regex-log:{uuid.uuid4().hex[:8]}"
    engine.images.build(path=str(context), tag=local, rm=True, forcerm=True)
    try:
        reference = image_registry.push(local, "alexgshaw/regex-log:20251031")
    finally:
        engine.images.remove(local)
    image_registry.remove_local(reference)
    yield reference
    image_registry.remove_local(reference)


def registry_digest(registry: str, repository: str, tag: str) -> str:
    """The digest the registry at `registry` serves for `repository:tag`'s manifest."""
    accept = ", ".join(
        f"application/vnd.{kind}+json"
        for kind in ("oci.image.manifest.v1", "docker.distribution.manifest.v2", "oci.image.index.v1")
    )
    request = urllib.request.Request(
        f"http://{registry}/v2/{repository}/manifests/{tag}", method="HEAD", headers={"Accept": accept}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.headers["Docker-Content-Digest"]


def test_a_task_s_docker_image_served_by_a_registry_is_pulled_and_run_never_built(
    container_sandbox, image_registry, regex_log_image, store, tmp_path
):
    """Terminal-Bench 2's regex-log names its prebuilt image in task.toml (`alexgshaw/regex-log:20251031`). With
    `images: pull` the task runs in that image, pulled through the engine's mirror at the digest the registry
    serves, with only the harness's layer built on it: the task's environment/ directory is removed once loaded
    and no FROM stand-in is given, so a build from its Dockerfile would fail. The oracle resolves and null does
    not; `images: auto` uses the same environment."""
    directory = terminal_bench_tasks(tmp_path / "tasks", ("regex-log",))
    loaded = load_terminal_tasks(directory, tmp_path / "mirrors")
    (task,) = loaded.instances
    assert task.named_image == NamedImage(regex_log_image, "/app")
    shutil.rmtree(task.environment_dir)
    sandbox = container_sandbox(mode="pod")
    pulled = replace(loaded, images="pull")
    environment = prepare_on(sandbox, pulled, task)
    pulled_image = environment.details["pulled_image"]
    served = registry_digest(image_registry.mirror, "alexgshaw/regex-log", "20251031")
    assert (pulled_image["reference"], pulled_image["digest"]) == (regex_log_image, served)
    assert environment.details["task"]["workdir"] == "/app"
    timeout = task.verifier_timeout_s
    for agent, expected in ((OracleAgent(), Outcome.RESOLVED), (NullAgent(), Outcome.UNRESOLVED)):
        generation = generate(task, agent, 0, environment, sandbox, store, test_timeout_s=timeout)
        assert generation.status == "completed", generation.error
        evaluation = evaluate(task, pulled.environment_for(task), generation, environment, sandbox, store, timeout)
        output = evaluation.steps[-1].get("stdout_tail", "") if evaluation.steps else ""
        assert evaluation.outcome == expected, (agent.name, evaluation.detail, output)
        assert evaluation.grading_mode == "in_container"
    auto = prepare_on(sandbox, replace(loaded, images="auto"), task)
    assert (auto.key, auto.details["image_id"]) == (environment.key, environment.details["image_id"])
