"""The built-in agents: the oracle (the task's reference), the null agent (no change), a flaky one for testing
retries, and a command agent (any CLI agent, run in the workspace)."""

import os
import random

from eval_pipeline.agents.base import Agent, AgentOutput, AgentTask, finished, mcp_endpoint
from eval_pipeline.sandbox import Workspace

__all__ = ["CommandAgent", "FlakyAgent", "NullAgent", "OracleAgent"]


class OracleAgent(Agent):
    """Applies the reference solution: the upper bound, and a check that the harness can resolve the task."""

    name = "oracle"
    trusted = True
    applies_reference = True

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
