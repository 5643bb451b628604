"""The llm agent against a scripted model on a real OpenAI-compatible HTTP server, through real MCP sessions.

The model is the only stand-in (testing/scripted_model.py): the agent's requests, its tool server, the workspaces
and the grading are the real ones, on the local backend here and in a real pod below.
"""

import json
import sys
from pathlib import Path

import duckdb
import pytest
from dagster import AssetKey, DagsterInstance

from eval_pipeline.agents import make_agent
from eval_pipeline.common.outcomes import ModelAPIError, ModelAPIRefused, Outcome
from eval_pipeline.store.attempts import attempts
from eval_pipeline.testing.scripted_model import ScriptedModelServer, solutions_from_tasks
from eval_pipeline.trial.generation import generate
from eval_pipeline.trial.spec import agent_timeout_s, generation_key
from eval_pipeline_tests.support.cli import eval_pipeline_cli
from eval_pipeline_tests.support.trials import prepare_on, resolve_trial

PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}


def llm(server: ScriptedModelServer, script: str = "solve", **params):
    return make_agent(
        "llm",
        {
            "model": f"scripted-{script}",
            "base_url": server.base_url,
            "api_key_env": "SCRIPTED_KEY",
            "price": PRICE,
            **params,
        },
    )


def test_the_llm_agent_resolves_demo_instances_through_the_tool_server(
    demo_benchmark, prepare, shared_sandbox, store, model
):
    for instance in demo_benchmark.instances[:2]:
        environment = prepare(instance)
        generation, evaluation = resolve_trial(
            instance, llm(model), 3, environment, shared_sandbox, store, demo_benchmark
        )
        assert evaluation.outcome == Outcome.RESOLVED, evaluation
        assert generation.status == "completed" and generation.stop_reason == "completed"
        tools_called = [step["tool"] for step in generation.trajectory if step["type"] == "tool_call"]
        assert "edit_file" in tools_called and "run_command" in tools_called and "workspace_diff" in tools_called
        assert generation.steps == len(tools_called) + 1, "one tool call per model call, then the final answer"
        assert generation.input_tokens > 0 and generation.output_tokens > 0
        expected_cost = (generation.input_tokens * 3.0 + generation.output_tokens * 15.0) / 1e6
        assert generation.cost_usd == pytest.approx(expected_cost, rel=1e-6)
    request = model.requests[0]
    assert request["seed"] == 3 and request["temperature"] == 0.0
    assert {tool["function"]["name"] for tool in request["tools"]} >= {"read_file", "edit_file", "run_command"}
    assert demo_benchmark.instances[0].instruction in request["messages"][1]["content"]


def test_a_model_that_loops_ends_at_the_step_limit_as_the_agents_failure(
    demo_benchmark, prepare, shared_sandbox, store, model
):
    instance = demo_benchmark.instances[0]
    environment = prepare(instance)
    generation, evaluation = resolve_trial(
        instance, llm(model, "loop", max_steps=4), 0, environment, shared_sandbox, store, demo_benchmark
    )
    assert generation.status == Outcome.AGENT_LIMIT and generation.stop_reason == "step limit"
    assert generation.steps == 4 and len([s for s in generation.trajectory if s["type"] == "tool_call"]) == 4
    assert evaluation.outcome == Outcome.AGENT_LIMIT and Outcome(evaluation.outcome).is_scored


def test_a_token_budget_stops_the_agent_too(demo_benchmark, prepare, shared_sandbox, store, model):
    instance = demo_benchmark.instances[0]
    generation = generate(instance, llm(model, max_tokens=50), 0, prepare(instance), shared_sandbox, store)
    assert generation.status == Outcome.AGENT_LIMIT and generation.stop_reason == "token limit"
    assert generation.input_tokens + generation.output_tokens >= 50 and generation.steps < 5


def test_rate_limits_are_retried_and_persistent_ones_are_infrastructure(
    demo_benchmark, prepare, shared_sandbox, store, monkeypatch
):
    monkeypatch.setenv("SCRIPTED_KEY", "sk-test")
    instance = demo_benchmark.instances[0]
    environment = prepare(instance)
    solutions = solutions_from_tasks(demo_benchmark.instances)
    with ScriptedModelServer(solutions, script="rate-limited", failing_requests=2) as server:
        generation, evaluation = resolve_trial(
            instance, llm(server, "rate-limited"), 1, environment, shared_sandbox, store, demo_benchmark
        )
    assert evaluation.outcome == Outcome.RESOLVED
    first_call = next(step for step in generation.trajectory if step["type"] == "model_call")
    assert first_call["retries"] == 2

    with ScriptedModelServer(solutions, script="rate-limited", failing_requests=None) as server:
        agent = llm(server, "rate-limited", max_retries=2)
        with pytest.raises(ModelAPIError, match="429") as raised:
            generate(instance, agent, 2, environment, shared_sandbox, store)
        assert len(server.requests) == 3, "the first request and two retries"
    assert raised.value.outcome == Outcome.MODEL_API_ERROR and not raised.value.outcome.is_scored
    key = generation_key(instance.content_hash, agent.config, 2, agent_timeout_s(instance))
    assert store.get(key) is None, "nothing final is stored for an infrastructure failure"
    kept = attempts(store, key)
    assert len(kept) == 1 and kept[0].outcome == Outcome.MODEL_API_ERROR, "the failed attempt is kept, typed"


@pytest.mark.slow
def test_the_llm_agent_resolves_a_demo_instance_in_a_pod(container_sandbox, demo_benchmark, store, model):
    sandbox = container_sandbox()
    instance = demo_benchmark.instances[1]
    environment = prepare_on(sandbox, demo_benchmark, instance)
    generation, evaluation = resolve_trial(instance, llm(model), 0, environment, sandbox, store, demo_benchmark)
    assert evaluation.outcome == Outcome.RESOLVED, evaluation
    assert any(step["type"] == "tool_call" and step["tool"] == "edit_file" for step in generation.trajectory)


CLI_AGENT = """
import json, os, sys
import anyio
from mcp import Client, StdioServerParameters

async def main():
    server = json.load(open(os.environ["EVAL_MCP_CONFIG"]))["mcpServers"]["workspace"]
    params = StdioServerParameters(command=server["command"], args=server["args"], env=server["env"] or None)
    async with Client(params) as client:
        readme = await client.call_tool("read_file", {"path": "README.md"})
        await client.call_tool("write_file", {"path": "via_mcp.txt", "content": readme.structured_content["content"]})

anyio.run(main)
"""


def test_a_command_agent_reaches_its_tool_server_through_the_documented_config(
    demo_benchmark, prepare, shared_sandbox, store, tmp_path
):
    """A CLI agent that speaks MCP (here a small one on the official SDK) starts the trial's server from
    $EVAL_MCP_CONFIG and works on its own workspace through it."""
    script = tmp_path / "cli_agent.py"
    script.write_text(CLI_AGENT)
    instance = demo_benchmark.instances[0]
    agent = make_agent("command", {"command": f"{sys.executable} {script}", "timeout_s": 120})
    generation = generate(instance, agent, 0, prepare(instance), shared_sandbox, store)
    assert generation.status == "completed", generation.error
    assert "+++ b/via_mcp.txt" in generation.patch and "+# calclib" in generation.patch


@pytest.mark.slow
def test_demo_llm_runs_against_the_endpoint_in_openai_base_url(campaign_env, demo_benchmark):
    """`eval-pipeline run --campaign demo_llm` as the README gives it, against a model on OPENAI_BASE_URL:
    tokens, cost, steps and the trajectory reach the warehouse, the Dagster metadata and the HTML report."""
    with ScriptedModelServer(solutions_from_tasks(demo_benchmark.instances)) as server:
        env = {**campaign_env, "OPENAI_BASE_URL": server.base_url, "OPENAI_MODEL": "scripted-solve"}
        run = eval_pipeline_cli(env, "run", "--campaign", "demo_llm", "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    assert summary["variants"]["llm"]["resolved_rate"] == 1.0 and summary["variants"]["llm"]["n"] == 8
    home = Path(campaign_env["DAGSTER_HOME"])
    with duckdb.connect(str(home / "eval_pipeline" / "results" / "demo_llm.duckdb"), read_only=True) as db:
        spent = db.execute(
            "SELECT count(*), min(steps), min(input_tokens), min(cost_usd), min(stop_reason), max(stop_reason)"
            " FROM trials WHERE variant = 'llm'"
        ).fetchone()
    assert spent[0] == 8 and spent[1] >= 3 and spent[2] > 0 and spent[3] > 0
    assert spent[4] == spent[5] == "completed"
    with DagsterInstance.from_config(str(home)) as instance:
        event = instance.get_latest_materialization_event(AssetKey(["demo_llm", "generation"]))
        metadata = event.asset_materialization.metadata
    if metadata["steps"].value:  # the latest may be the oracle's
        assert metadata["input_tokens"].value > 0 and metadata["cost_usd"].value > 0
    link = metadata["trajectory"].value
    assert link.startswith("file://") and "generation/" in link
    assert Path(link.removeprefix("file://")).is_file()
    html = Path(summary["report"]["html"]).read_text()
    assert "Time, tokens and cost" in html


def test_a_cost_budget_stops_the_agent_and_a_changed_prompt_is_a_new_variant(
    demo_benchmark, prepare, shared_sandbox, store, model
):
    instance = demo_benchmark.instances[0]
    costly = llm(model, max_cost_usd=0.001, price={"input_per_mtok": 1000.0, "output_per_mtok": 1000.0})
    generation = generate(instance, costly, 0, prepare(instance), shared_sandbox, store)
    assert generation.status == Outcome.AGENT_LIMIT and generation.stop_reason == "cost limit"
    assert generation.cost_usd >= 0.001

    plain, reworded = llm(model), llm(model, prompt_template="Fix this:\n{instruction}")
    assert plain.config_hash != reworded.config_hash
    assert generation_key(instance.content_hash, plain.config, 0, None) != generation_key(
        instance.content_hash, reworded.config, 0, None
    )
    with pytest.raises(ValueError, match="prompt_template may use only"):
        llm(model, prompt_template="{repo}: {instruction}")


def test_a_request_the_model_api_refuses_is_configuration_neither_scored_nor_retried(
    demo_benchmark, prepare, shared_sandbox, store, model
):
    """An unknown model (the server's 404) gives the same answer every time: not the agent's failure, not
    a flaky outage to retry, but the campaign's configuration to fix."""
    instance = demo_benchmark.instances[0]
    with pytest.raises(ModelAPIRefused, match="404") as raised:
        generate(instance, llm(model, "nope"), 0, prepare(instance), shared_sandbox, store)
    assert model.base_url in str(raised.value), "the message names the endpoint"
    outcome = raised.value.outcome
    assert outcome == Outcome.MODEL_API_REFUSED and not outcome.is_scored and not outcome.is_retried
    assert len(model.requests) == 1, "refused once, not retried"
    with pytest.raises(ValueError, match="max_cost_usd needs a price"):
        make_agent("llm", {"model": "m", "max_cost_usd": 1.0})
