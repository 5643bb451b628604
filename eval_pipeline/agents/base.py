"""The agent interface: what an agent is given (AgentTask), what it returns (AgentOutput), how it stops.

An agent works on a workspace (the repository at the base commit) and reports
its trajectory and usage; the harness then takes the agent's patch as the diff
of the workspace, so every agent, scripted or model-driven, yields patches the
same way.
"""

import json
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from eval_pipeline.agents.session_request import MAX_TOOL_TIMEOUT_S, inside_session_request
from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.sandbox import ExecResult, Workspace
from eval_pipeline.tasks.task import Task


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
    so a campaign refuses it on the local backend, which has no walls (config/campaign_file.py). Untrusted is the
    default, so a new agent has to claim trust to get it.
    """

    name: ClassVar[str]
    trusted: ClassVar[bool] = False
    # Whether the agent's product is the task's reference solution: its resolved evaluation is then evidence
    # that the instance passes within its limits, and its grading is never judged by grading the reference.
    applies_reference: ClassVar[bool] = False
    # Parameters that name files: a campaign file's relative path is read from its own directory.
    path_params: ClassVar[tuple[str, ...]] = ()

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
