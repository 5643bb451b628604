"""Agents behind one small interface (base.py), by name: the built-in ones (builtin.py), the llm agent
(llm.py), the mini-swe-agent adapter (mini_swe.py) and a predictions file's patches (predictions.py).

An agent works on a workspace (the repository at the base commit) and reports its trajectory and usage; the
harness then takes the agent's patch as the diff of the workspace, so every agent, scripted or model-driven,
yields patches the same way. The mini-swe-agent adapter imports mini-swe-agent (an optional extra) only when one
is made: making it without the extra fails with how to install it.
"""

from collections.abc import Mapping
from typing import Any

from eval_pipeline.agents.base import (
    Agent,
    AgentLimitReached,
    AgentOutOfMemory,
    AgentOutput,
    AgentOverStorage,
    AgentStopped,
    AgentTask,
    AgentTimeout,
    agent_task,
    finished,
    mcp_endpoint,
)
from eval_pipeline.agents.builtin import CommandAgent, FlakyAgent, NullAgent, OracleAgent
from eval_pipeline.agents.llm import LLMAgent
from eval_pipeline.agents.mini_swe import MiniSweAgent
from eval_pipeline.agents.predictions import PredictionsAgent

__all__ = [
    "AGENTS",
    "Agent",
    "AgentLimitReached",
    "AgentOutOfMemory",
    "AgentOutput",
    "AgentOverStorage",
    "AgentStopped",
    "AgentTask",
    "AgentTimeout",
    "CommandAgent",
    "FlakyAgent",
    "LLMAgent",
    "MiniSweAgent",
    "NullAgent",
    "OracleAgent",
    "PredictionsAgent",
    "agent_task",
    "applies_reference",
    "finished",
    "make_agent",
    "mcp_endpoint",
]

AGENTS: dict[str, type[Agent]] = {
    agent.name: agent
    for agent in (OracleAgent, NullAgent, FlakyAgent, CommandAgent, LLMAgent, MiniSweAgent, PredictionsAgent)
}


def make_agent(name: str, params: dict[str, Any] | None = None) -> Agent:
    try:
        agent_class = AGENTS[name]
    except KeyError:
        raise ValueError(f"unknown agent {name!r} (known: {', '.join(sorted(AGENTS))})") from None
    return agent_class(**(params or {}))


def applies_reference(agent_config: Mapping[str, Any]) -> bool:
    """Whether the agent a generation recorded (its `Agent.config`) applies the task's reference solution."""
    agent_class = AGENTS.get(agent_config.get("agent", ""))
    return agent_class is not None and agent_class.applies_reference
