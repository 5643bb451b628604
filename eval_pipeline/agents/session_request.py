"""What binds a trial's tool server to that trial: its workspace's placement, limits and git settings.

Kept apart from the MCP client (tool_session.py) so that what only names a session, as the `mcp_endpoint`
helper of agents that start their own server does, does not import the MCP SDK: half a second of every run
worker's start, for campaigns whose agents never open a session.
"""

from typing import Any

from eval_pipeline.sandbox import Workspace

__all__ = ["MAX_TOOL_TIMEOUT_S", "inside_session_request", "session_request"]

# How long one tool call may run at most, whatever the agent asks for.
MAX_TOOL_TIMEOUT_S = 600.0


def session_request(workspace: Workspace, base_revision: str | None, max_timeout_s: float) -> dict[str, Any]:
    """What binds a tool server to one trial: its workspace's placement, limits and git settings."""
    return {
        "placement": workspace.command_placement(),
        "max_timeout_s": max_timeout_s,
        "git_env": workspace.harness_git_env,
        "base_revision": workspace.base_revision or base_revision,
    }


def inside_session_request(workspace: Workspace, base_revision: str | None, max_timeout_s: float) -> dict[str, Any]:
    """The session of a tool server that an agent starts inside its workspace (a CLI agent's own MCP client):
    it runs as the trial already, in its view, so its calls keep the limits but need no uid or view."""
    request = session_request(workspace, base_revision, max_timeout_s)
    request["placement"] = {k: v for k, v in request["placement"].items() if k not in ("uid", "view")}
    return request
