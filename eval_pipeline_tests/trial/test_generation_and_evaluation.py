"""Agents, generation and evaluation: typed outcomes, reuse, and kept attempts."""

import errno
import json
from dataclasses import replace

import pytest

from eval_pipeline.agents import make_agent
from eval_pipeline.agents.base import Agent, AgentOutput
from eval_pipeline.agents.builtin import FlakyAgent
from eval_pipeline.common.outcomes import Outcome, SandboxLost, StorageError
from eval_pipeline.grading import verdict
from eval_pipeline.sandbox import ExecResult
from eval_pipeline.sandbox.base import RunnerEnded
from eval_pipeline.store.artifacts import attempts_prefix
from eval_pipeline.store.attempts import attempts
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.swebench import grading
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate
from eval_pipeline.trial.spec import agent_timeout_s, generation_key


class CrashingAgent(Agent):
    name = "crashing"

    def solve(self, task, workspace):
        workspace.run("echo partial > partial.txt", timeout_s=10)
        raise RuntimeError("model API returned garbage")


class EngineLostAgent(Agent):
    name = "engine-lost"

    def solve(self, task, workspace):
        raise SandboxLost("the container disappeared under the agent")


class RunnerKillingAgent(Agent):
    """Its command runner ends under it (as when its processes kill the runner in a pod) while the environment
    serves on: what a container's workspace raises then."""

    name = "runner-killing"

    def solve(self, task, workspace):
        raise RunnerEnded("eval-pod-x: the command runner failed (exit 137): b''")


class CountingAgent(Agent):
    name = "counting"
    calls = 0

    def solve(self, task, workspace):
        CountingAgent.calls += 1
        return AgentOutput(trajectory=[{"step": 1}], input_tokens=100, output_tokens=20, cost_usd=0.01)


@pytest.fixture
def instance(demo_benchmark):
    return demo_benchmark.instances[2]


@pytest.fixture
def environment(prepare, instance):
    return prepare(instance)


def test_flaky_agent_is_deterministic_per_instance_and_seed(demo_benchmark, shared_sandbox, prepare, store):
    outcomes = {}
    for instance in demo_benchmark.instances:
        environment = prepare(instance)
        for seed in (0, 1, 2):
            generation = generate(instance, FlakyAgent(p=0.5), seed, environment, shared_sandbox, store)
            outcomes[(instance.instance_id, seed)] = bool(generation.patch)
    assert 0 < sum(outcomes.values()) < len(outcomes), "p=0.5 should both fix and give up"
    for (instance_id, seed), fixed in list(outcomes.items())[:4]:
        instance = demo_benchmark.instance(instance_id)
        environment = prepare(instance)
        again = generate(
            instance, FlakyAgent(p=0.5), seed, environment, shared_sandbox, type(store)(store.root / "fresh")
        )
        assert bool(again.patch) == fixed


@pytest.mark.parametrize(("p", "fixes"), [(0.0, False), (1.0, True)])
def test_flaky_agent_extremes(instance, environment, shared_sandbox, store, p, fixes):
    generation = generate(instance, FlakyAgent(p=p), 0, environment, shared_sandbox, store)
    assert bool(generation.patch) is fixes


def test_oracle_patch_is_the_workspace_diff_and_null_is_empty(instance, environment, shared_sandbox, store):
    oracle = generate(instance, make_agent("oracle"), 0, environment, shared_sandbox, store)
    null = generate(instance, make_agent("null"), 0, environment, shared_sandbox, store)
    assert "raise ValueError" in oracle.patch and oracle.patch.startswith("diff --git")
    assert null.patch == ""
    assert (oracle.input_tokens, oracle.output_tokens, oracle.cost_usd) == (0, 0, 0.0)
    assert oracle.agent_config_hash != null.agent_config_hash


def test_generation_is_reused_not_recomputed(instance, environment, shared_sandbox, store):
    CountingAgent.calls = 0
    first = generate(instance, CountingAgent(), 3, environment, shared_sandbox, store)
    second = generate(instance, CountingAgent(), 3, environment, shared_sandbox, store)
    other_seed = generate(instance, CountingAgent(), 4, environment, shared_sandbox, store)
    assert CountingAgent.calls == 2
    assert (first.reused, second.reused, other_seed.reused) == (False, True, False)
    assert second.payload() == first.payload()
    assert second.input_tokens == 100 and second.cost_usd == 0.01


def test_an_agent_crash_is_recorded_as_agent_error_with_its_partial_patch(instance, environment, shared_sandbox, store):
    generation = generate(instance, CrashingAgent(), 0, environment, shared_sandbox, store)
    assert generation.status == Outcome.AGENT_ERROR
    assert "model API returned garbage" in generation.error
    assert "partial.txt" in generation.patch
    evaluation = evaluate(instance, EnvironmentSpec(), generation, environment, shared_sandbox, store, 60)
    assert evaluation.outcome_type is Outcome.AGENT_ERROR and evaluation.outcome_type.is_scored
    assert store.get(evaluation.key) is not None, "the agent's failure is final: never retried"


def test_a_sandbox_failure_under_the_agent_is_not_the_agents_failure(instance, environment, shared_sandbox, store):
    key = generation_key(instance.content_hash, EngineLostAgent().config, 0, agent_timeout_s(instance))
    for _ in range(2):
        with pytest.raises(SandboxLost):
            generate(instance, EngineLostAgent(), 0, environment, shared_sandbox, store)
    assert store.get(key) is None, "nothing final stored: the step is retried"
    kept = attempts(store, key)
    assert [(a.stage, a.outcome) for a in kept] == [("generation", "sandbox_lost")] * 2, "every attempt is kept"
    assert "disappeared" in kept[0].detail


def test_a_workspace_that_fails_under_the_agent_while_its_environment_serves_is_the_agents_failure(
    instance, environment, shared_sandbox, store
):
    """What the agent's own commands cause (its runner killed, its container ended) is scored: left unscored,
    an agent could end each failing trial so and leave the denominator."""
    generation = generate(instance, RunnerKillingAgent(), 0, environment, shared_sandbox, store)
    assert generation.status == Outcome.AGENT_ERROR.value and "still serves others" in generation.error
    assert store.get(generation.key) is not None, "final: never retried"


def test_scored_evaluations_are_final_and_reused(instance, environment, shared_sandbox, store, demo_benchmark):
    generation = generate(instance, make_agent("oracle"), 0, environment, shared_sandbox, store)
    spec = demo_benchmark.environment_for(instance)
    first = evaluate(instance, spec, generation, environment, shared_sandbox, store, 60)
    second = evaluate(instance, spec, generation, environment, shared_sandbox, store, 60)
    assert first.outcome_type is Outcome.RESOLVED and not first.reused
    assert second.reused and second.attempt_id == first.attempt_id
    assert first.resources["requested"]["memory_ceiling_mb"] == 1024


def test_unscored_attempts_are_kept_and_graded_again(instance, environment, shared_sandbox, store, demo_benchmark):
    generation = generate(instance, make_agent("oracle"), 0, environment, shared_sandbox, store)
    spec = demo_benchmark.environment_for(instance)
    slow = replace(spec, test_cmd="sleep 30; " + spec.test_cmd)
    timed_out = evaluate(instance, slow, generation, environment, shared_sandbox, store, 0.5)
    assert timed_out.outcome_type is Outcome.TEST_TIMEOUT and timed_out.outcome_type.is_retried
    assert store.get(timed_out.key) is None, "an unscored verdict must not become final"
    retried = evaluate(instance, slow, generation, environment, shared_sandbox, store, 0.5)
    assert not retried.reused and retried.attempt_id != timed_out.attempt_id
    assert len(store.keys(attempts_prefix(timed_out.key))) == 2, "every attempt is kept"


def test_a_command_agent_gets_the_instruction_as_a_file_and_its_changes_become_the_patch(
    instance, environment, shared_sandbox, store, monkeypatch
):
    monkeypatch.setenv("FAKE_API_KEY", "sk-secret")
    agent = make_agent(
        "command",
        {
            "command": 'cat "$EVAL_INSTRUCTION_FILE" > notes.txt && echo "$MODEL $EVAL_SEED ${FAKE_API_KEY:+key}" >> notes.txt',
            "env": {"MODEL": "tiny-1"},
            "pass_env": ["FAKE_API_KEY"],
        },
    )
    generation = generate(instance, agent, 7, environment, shared_sandbox, store)
    assert generation.status == "completed"
    assert f"+{instance.problem_statement}" in generation.patch
    assert "+tiny-1 7 key" in generation.patch
    assert "instruction.md" not in generation.patch, "the instruction lives outside the repository"
    assert "sk-secret" not in json.dumps(agent.config), "secrets are passed by name, never stored"
    assert generation.trajectory[0]["exit_code"] == 0


def test_a_command_agent_that_overruns_is_stopped_and_recorded(instance, environment, shared_sandbox, store):
    agent = make_agent("command", {"command": "echo started > partial.txt; sleep 30", "timeout_s": 5})
    generation = generate(instance, agent, 0, environment, shared_sandbox, store)
    assert generation.status == Outcome.AGENT_TIMEOUT and "time limit" in generation.error
    assert "partial.txt" in generation.patch
    evaluation = evaluate(instance, EnvironmentSpec(), generation, environment, shared_sandbox, store, 60)
    assert evaluation.outcome_type is Outcome.AGENT_TIMEOUT and evaluation.outcome_type.is_scored


def test_a_corrupt_evaluation_is_quarantined_and_graded_again_without_regenerating(
    instance, environment, shared_sandbox, store, demo_benchmark
):
    spec = demo_benchmark.environment_for(instance)
    generation = generate(instance, make_agent("oracle"), 0, environment, shared_sandbox, store)
    first = evaluate(instance, spec, generation, environment, shared_sandbox, store, 60)
    generation_file = store.root / generation.key
    written = generation_file.stat().st_mtime_ns
    (store.root / first.key).write_text((store.root / first.key).read_text()[:40])  # truncated on disk

    again = evaluate(
        instance,
        spec,
        generate(instance, make_agent("oracle"), 0, environment, shared_sandbox, store),
        environment,
        shared_sandbox,
        store,
        60,
    )
    assert not again.reused and again.outcome_type is Outcome.RESOLVED, "detected by checksum, graded again"
    assert list((store.root / "quarantine").rglob("*")), "the corrupt copy is kept aside"
    assert generation_file.stat().st_mtime_ns == written, "the generation was reused, not recomputed"


def test_a_store_that_cannot_be_written_is_a_storage_error(
    instance, environment, shared_sandbox, store, demo_benchmark
):
    spec = demo_benchmark.environment_for(instance)
    generation = generate(instance, make_agent("oracle"), 0, environment, shared_sandbox, store)
    (store.root / "attempts").write_text("a file where a directory must be")
    blocked = evaluate(instance, spec, generation, environment, shared_sandbox, store, 60)
    assert blocked.outcome_type is Outcome.STORAGE_ERROR and blocked.outcome_type.is_retried
    assert "the verdict was resolved" in blocked.detail
    (store.root / "attempts").unlink()
    assert evaluate(instance, spec, generation, environment, shared_sandbox, store, 60).outcome_type is Outcome.RESOLVED


class DiskFullAgent(Agent):
    """The harness's own write under the agent meets a full disk."""

    name = "disk-full"

    def solve(self, task, workspace):
        raise OSError(errno.ENOSPC, "No space left on device", "harness/instruction.md")


def test_a_full_disk_under_the_agent_is_the_machines_failure_not_the_agents(
    instance, environment, shared_sandbox, store
):
    key = generation_key(instance.content_hash, DiskFullAgent().config, 0, agent_timeout_s(instance))
    with pytest.raises(StorageError, match="no space left"):
        generate(instance, DiskFullAgent(), 0, environment, shared_sandbox, store)
    assert store.get(key) is None, "retried, never a final agent_error"
    assert [a.outcome for a in attempts(store, key)] == ["storage_error"]


def test_a_model_patch_that_meets_a_full_disk_is_not_scored_as_one_that_does_not_apply(
    instance, environment, shared_sandbox, demo_benchmark, monkeypatch
):
    full = ExecResult("git apply", 1, "", "error: unable to write file: No space left on device", 0.1)
    monkeypatch.setattr(verdict, "apply_patch", lambda workspace, patch, name: full)
    with shared_sandbox.workspace(environment, "full") as workspace, pytest.raises(StorageError):
        grading.grade(instance, demo_benchmark.environment_for(instance), instance.patch, workspace, 60)
