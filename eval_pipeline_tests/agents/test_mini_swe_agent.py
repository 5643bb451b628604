"""The mini-swe-agent agent against a scripted model on a real OpenAI-compatible HTTP server, its commands run
through the trial's real MCP session on the local backend; skipped without the `mini` extra."""

import importlib.util
import sys

import pytest

from eval_pipeline.agents import make_agent
from eval_pipeline.common.outcomes import ModelAPIError, ModelAPIRefused, Outcome
from eval_pipeline.testing.scripted_model import ScriptedModelServer, solutions_from_tasks
from eval_pipeline.trial.generation import generate
from eval_pipeline_tests.support.trials import resolve_trial

needs_mini = pytest.mark.skipif(
    importlib.util.find_spec("minisweagent") is None, reason="mini-swe-agent (the `mini` extra) is not installed"
)
PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}


def mini(server: ScriptedModelServer, script: str = "mini-solve", **params):
    return make_agent(
        "mini-swe-agent",
        {
            "model": f"scripted-{script}",
            "base_url": server.base_url,
            "api_key_env": "SCRIPTED_KEY",
            "price": PRICE,
            **params,
        },
    )


@needs_mini
def test_mini_swe_agent_resolves_a_demo_instance_through_the_tool_server(
    demo_benchmark, prepare, shared_sandbox, store, model
):
    instance = demo_benchmark.instances[0]
    environment = prepare(instance)
    generation, evaluation = resolve_trial(instance, mini(model), 3, environment, shared_sandbox, store, demo_benchmark)
    assert evaluation.outcome == Outcome.RESOLVED, evaluation
    assert generation.status == "completed" and generation.stop_reason == "completed"
    commands = [step["arguments"]["command"] for step in generation.trajectory if step["type"] == "tool_call"]
    assert commands[0].startswith("git apply") and "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in commands[-1]
    assert generation.steps == len(commands), "one bash call per model call, the last one the submission"
    assert generation.trajectory[-1]["type"] == "message" and generation.trajectory[-1]["exit_status"] == "Submitted"
    assert generation.input_tokens > 0 and generation.output_tokens > 0
    expected_cost = (generation.input_tokens * 3.0 + generation.output_tokens * 15.0) / 1e6
    assert generation.cost_usd == pytest.approx(expected_cost, rel=1e-4)
    request = model.requests[0]
    assert request["seed"] == 3 and request["temperature"] == 0.0
    assert [tool["function"]["name"] for tool in request["tools"]] == ["bash"]
    assert instance.instruction in request["messages"][1]["content"]


@needs_mini
def test_mini_swe_agents_step_limit_is_the_agents_failure(demo_benchmark, prepare, shared_sandbox, store, model):
    instance = demo_benchmark.instances[0]
    environment = prepare(instance)
    generation, evaluation = resolve_trial(
        instance, mini(model, "mini-loop", step_limit=3), 0, environment, shared_sandbox, store, demo_benchmark
    )
    assert generation.status == Outcome.AGENT_LIMIT and generation.stop_reason == "step limit"
    assert generation.steps == 3 and len([s for s in generation.trajectory if s["type"] == "tool_call"]) == 3
    assert evaluation.outcome == Outcome.AGENT_LIMIT and Outcome(evaluation.outcome).is_scored


@needs_mini
def test_a_model_without_a_price_costs_nothing_and_prints_nothing(
    demo_benchmark, prepare, shared_sandbox, store, model, capfd
):
    """litellm's cost map does not know the model: the cost is 0, and stdout (the report's, or --json's) stays
    clean of the banner litellm prints then."""
    instance = demo_benchmark.instances[0]
    generation = generate(instance, mini(model, price=None), 0, prepare(instance), shared_sandbox, store)
    assert generation.status == "completed" and generation.cost_usd == 0 and generation.input_tokens > 0
    assert capfd.readouterr().out == ""


@needs_mini
def test_mini_swe_agents_config_is_hashed_and_checked(model):
    agent = mini(model, config={"agent": {"system_template": "You fix bugs."}})
    assert agent.mini_config()["agent"]["system_template"] == "You fix bugs."
    assert agent.config["mini_swe_agent"] and agent.config_hash != mini(model).config_hash
    with pytest.raises(ValueError, match="config sections"):
        mini(model, config={"agents": {}})


@needs_mini
def test_a_model_api_that_stays_down_is_infrastructure(demo_benchmark, prepare, shared_sandbox, store, monkeypatch):
    monkeypatch.setenv("SCRIPTED_KEY", "sk-test")
    instance = demo_benchmark.instances[0]
    solutions = solutions_from_tasks(demo_benchmark.instances)
    with ScriptedModelServer(solutions, script="rate-limited", failing_requests=None) as server:
        agent = mini(server, "rate-limited", max_retries=1)
        with pytest.raises(ModelAPIError, match="RateLimitError") as raised:
            generate(instance, agent, 0, prepare(instance), shared_sandbox, store)
        assert len(server.requests) == 2, "the first request and one retry, nothing more (mini's, the client's)"
    assert raised.value.outcome == Outcome.MODEL_API_ERROR and not raised.value.outcome.is_scored


@needs_mini
@pytest.mark.parametrize("name", ["no-such-script", "rate-limited-typo"])
def test_a_model_the_api_does_not_know_is_refused_at_once(demo_benchmark, prepare, shared_sandbox, store, model, name):
    """A 404 (a misspelt model) is the campaign's configuration: one request, no retries, not scored; also
    when its text names a rate limit, which litellm takes for a 429."""
    instance = demo_benchmark.instances[0]
    with pytest.raises(ModelAPIRefused, match=model.base_url) as raised:
        generate(instance, mini(model, name, max_retries=3), 0, prepare(instance), shared_sandbox, store)
    assert len(model.requests) == 1
    assert raised.value.outcome == Outcome.MODEL_API_REFUSED and not raised.value.outcome.is_scored


@needs_mini
def test_a_model_that_never_calls_its_tool_is_the_agents_error_with_its_trajectory(
    demo_benchmark, prepare, shared_sandbox, store, model
):
    """mini ends on its third badly formatted reply in a row: the agent's failure, scored, and what the model
    said is kept for the report's trajectory view."""
    instance = demo_benchmark.instances[0]
    environment = prepare(instance)
    generation, evaluation = resolve_trial(
        instance, mini(model, "chatter"), 0, environment, shared_sandbox, store, demo_benchmark
    )
    assert generation.status == Outcome.AGENT_ERROR and generation.stop_reason == "RepeatedFormatError"
    model_calls = [step for step in generation.trajectory if step["type"] == "model_call"]
    assert len(model_calls) == 3 and "parser" in model_calls[0]["content"]
    assert generation.input_tokens > 0 and generation.cost_usd > 0
    assert evaluation.outcome == Outcome.AGENT_ERROR and Outcome(evaluation.outcome).is_scored


def test_without_the_extra_making_the_agent_says_how_to_install_it(monkeypatch):
    for name in [name for name in sys.modules if name == "minisweagent" or name.startswith("minisweagent.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "minisweagent", None)  # an import of it fails, as when it is not installed
    with pytest.raises(ImportError, match=r"pip install -e '\.\[mini\]'") as raised:
        make_agent("mini-swe-agent", {"model": "any"})
    assert isinstance(raised.value, ValueError), "a campaign's validation reports it as the variant's problem"
