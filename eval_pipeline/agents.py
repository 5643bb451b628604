"""Agents behind one small interface, and the built-in reference agents.

An agent works on a workspace (the repository at the base commit) and reports
its trajectory and usage; the harness then takes the agent's patch as the diff
of the workspace, so every agent, scripted or model-driven, yields patches the
same way.
"""

import json
import os
import random
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from eval_pipeline.hashing import stable_hash
from eval_pipeline.sandbox import ExecResult, Workspace
from eval_pipeline.tasks import Task
from eval_pipeline.tool_session import MAX_TOOL_TIMEOUT_S, inside_session_request


class AgentStopped(Exception):  # noqa: N818 - named for what happened to the agent
    """The agent was stopped by one of its limits, or gave up (agent_error): the agent's failure, scored, never
    retried. `output` is what it did until then (its trajectory and spend), kept with the generation."""

    def __init__(self, message: str, output: "AgentOutput | None" = None) -> None:
        super().__init__(message)
        self.output = output


class AgentTimeout(AgentStopped):
    """The agent ran over its own time limit (agent_timeout)."""


class AgentLimitReached(AgentStopped):
    """The agent used up its steps, tokens or cost (agent_limit)."""


class AgentOutOfMemory(AgentStopped):
    """One of the agent's own commands was killed at the memory ceiling (agent_error): the ceiling is the
    trial's budget, an experimental variable like its time limit, and what the agent runs within it is its
    doing. Left unscored, an agent that fails could end each failing trial so and leave the denominator."""


class AgentOverStorage(AgentStopped):
    """One of the agent's own commands filled more disk than the trial's quota (agent_error), which the runner
    ended it for: like the memory ceiling, the quota is the trial's budget, and a trial left unscored for
    exceeding it would be a way out of the denominator."""


def finished(result: ExecResult) -> ExecResult:
    """An agent command's result, unless a limit stopped it.

    Running out of time is the agent's end (AgentTimeout), and so is a kill
    at the memory ceiling (AgentOutOfMemory) or the disk quota
    (AgentOverStorage): all are the agent's own commands within the trial's
    budget, scored.
    """
    if result.timed_out:
        raise AgentTimeout(f"{result.command[:200]!r} ran over its time limit ({result.duration_s:.0f}s)")
    if result.oom_killed:
        raise AgentOutOfMemory(f"{result.command[:200]!r} was killed at the memory ceiling")
    if result.storage_exceeded:
        raise AgentOverStorage(f"{result.command[:200]!r} was ended for filling more disk than the trial's quota")
    return result


@dataclass(frozen=True)
class AgentTask:
    """What an agent is given. `apply_reference` applies the reference solution: only reference agents use it.

    `timeout_s` is the task's own limit on the agent (terminal tasks set one),
    already scaled by the campaign's timeout multiplier.
    """

    instance_id: str
    instruction: str
    seed: int
    apply_reference: Callable[[Workspace], ExecResult]
    timeout_s: float | None = None
    base_commit: str | None = None


def agent_task(task: Task, seed: int, timeout_multiplier: float = 1.0) -> AgentTask:
    """The agent's view of a task: its instruction, its own time limit (scaled) if it has one, and its reference
    (a code task's gold patch, a terminal task's solve.sh)."""
    timeout_s = None if task.agent_timeout_s is None else task.agent_timeout_s * timeout_multiplier
    return AgentTask(
        task.instance_id,
        task.instruction,
        seed,
        lambda workspace: task.apply_reference(workspace, timeout_s),
        timeout_s,
        task.base_commit,
    )


@dataclass
class AgentOutput:
    """What an agent did (its trajectory: messages, model calls, tool calls, each truncated) and spent; `steps`
    counts model calls, `stop_reason` says why it stopped."""

    trajectory: list[dict[str, Any]] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    steps: int = 0
    stop_reason: str = "completed"


class Agent(ABC):
    """`trusted` is true only for an agent whose every action is the harness's own code (applying the task's
    reference, or nothing). An agent that runs commands or code the harness did not write, or brings patches
    from outside it, is untrusted: its code, and its patch's code when graded, run wherever the trial runs,
    so a campaign refuses it on the local backend, which has no walls (campaign_config.py). Untrusted is the
    default, so a new agent has to claim trust to get it.
    """

    name: ClassVar[str]
    trusted: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        self.params = params

    @property
    def config(self) -> dict[str, Any]:
        """Everything that determines the agent's behaviour; its hash keys generation artifacts."""
        return {"agent": self.name, "params": self.params}

    @property
    def config_hash(self) -> str:
        return stable_hash(self.config)

    @abstractmethod
    def solve(self, task: AgentTask, workspace: Workspace) -> AgentOutput:
        """Work on the workspace's repository until done."""


class OracleAgent(Agent):
    """Applies the reference solution: the upper bound, and a check that the harness can resolve the task."""

    name = "oracle"
    trusted = True

    def solve(self, task: AgentTask, workspace: Workspace) -> AgentOutput:
        result = finished(task.apply_reference(workspace))
        return AgentOutput(trajectory=[{"action": "apply_reference", **result.summary(tail=500)}])


class NullAgent(Agent):
    """Changes nothing: the lower bound, and a check that no instance passes unfixed."""

    name = "null"
    trusted = True

    def solve(self, task: AgentTask, workspace: Workspace) -> AgentOutput:
        return AgentOutput(trajectory=[{"action": "none"}])


class FlakyAgent(Agent):
    """Applies the reference solution with probability `p`, deterministically per (instance, seed)."""

    name = "flaky"
    trusted = True

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"flaky agent: p must be in [0, 1], got {p}")
        super().__init__(p=p)

    def solve(self, task: AgentTask, workspace: Workspace) -> AgentOutput:
        draw = random.Random(f"{task.instance_id}:{task.seed}").random()
        if draw >= self.params["p"]:
            return AgentOutput(trajectory=[{"action": "give_up", "draw": draw}])
        result = finished(task.apply_reference(workspace))
        return AgentOutput(trajectory=[{"action": "apply_reference", "draw": draw, **result.summary(tail=500)}])


def mcp_endpoint(workspace: Workspace, base_revision: str | None) -> dict[str, str]:
    """The variables that tell a command in `workspace` how to start its tool server (CommandAgent)."""
    session = inside_session_request(workspace, base_revision, MAX_TOOL_TIMEOUT_S)
    argv, env = workspace.tool_server_command()
    argv = [*argv, "--session-file", workspace.write_harness_file("mcp/session.json", json.dumps(session))]
    config = {"mcpServers": {"workspace": {"command": argv[0], "args": argv[1:], "env": env}}}
    return {
        "EVAL_MCP_CONFIG": workspace.write_harness_file("mcp/config.json", json.dumps(config)),
        "EVAL_MCP_COMMAND": shlex.join(["env", *(f"{k}={v}" for k, v in env.items()), *argv]),
    }


class CommandAgent(Agent):
    """Runs a configured command line in the workspace: how installed CLI agents are evaluated.

    The task's instruction is handed in as a file outside the repository
    (`$EVAL_INSTRUCTION_FILE`), with `$EVAL_INSTANCE_ID` and `$EVAL_SEED`, the
    configured `env`, and the host variables named in `pass_env` (API keys:
    their names are part of the config, their values never are). The task's
    own agent timeout, where it has one, wins over `timeout_s`.

    A CLI agent that speaks MCP (Claude Code, Codex, …) finds the trial's tool server, bound to its workspace
    like an `llm` agent's session, in `$EVAL_MCP_CONFIG`: a JSON file in the `mcpServers` format those
    agents read (one stdio server named `workspace`), or as one shell command line in `$EVAL_MCP_COMMAND`.
    """

    name = "command"

    def __init__(
        self,
        command: str,
        env: dict[str, str] | None = None,
        pass_env: list[str] | None = None,
        timeout_s: float = 1800,
    ) -> None:
        if not command.strip():
            raise ValueError("command agent: command must not be empty")
        super().__init__(command=command, env=dict(env or {}), pass_env=list(pass_env or []), timeout_s=timeout_s)

    def solve(self, task: AgentTask, workspace: Workspace) -> AgentOutput:
        passed = {name: os.environ[name] for name in self.params["pass_env"] if name in os.environ}
        env = {
            **self.params["env"],
            **passed,
            "EVAL_INSTRUCTION_FILE": workspace.write_harness_file("instruction.md", task.instruction),
            "EVAL_INSTANCE_ID": task.instance_id,
            "EVAL_SEED": str(task.seed),
            **mcp_endpoint(workspace, task.base_commit),
        }
        result = finished(
            workspace.run(self.params["command"], timeout_s=task.timeout_s or self.params["timeout_s"], env=env)
        )
        # Its patch is graded whatever its exit, as a CLI agent's work is; the exit is its stop reason.
        stop_reason = "completed" if result.exit_code == 0 else f"exit {result.exit_code}"
        return AgentOutput(trajectory=[{"action": "command", **result.summary()}], stop_reason=stop_reason)


# The model-driven agents build on this module's interface, so they are imported once that is defined. The
# mini-swe-agent adapter imports mini-swe-agent (an optional extra) only when one is made: making it without
# the extra fails with how to install it.
from eval_pipeline.llm_agent import LLMAgent  # noqa: E402
from eval_pipeline.mini_swe_agent import MiniSweAgent  # noqa: E402

AGENTS: dict[str, type[Agent]] = {
    agent.name: agent for agent in (OracleAgent, NullAgent, FlakyAgent, CommandAgent, LLMAgent, MiniSweAgent)
}


def make_agent(name: str, params: dict[str, Any] | None = None) -> Agent:
    try:
        agent_class = AGENTS[name]
    except KeyError:
        raise ValueError(f"unknown agent {name!r} (known: {', '.join(sorted(AGENTS))})") from None
    return agent_class(**(params or {}))
