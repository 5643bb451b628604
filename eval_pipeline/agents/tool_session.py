"""A trial's session with its environment's tool server: the MCP client, in the run worker.

Agents run outside the environment and reach it only through the tool server
(sandbox/tool_server.py). `open_tool_session` starts that trial's server over
the workspace's channel (`Workspace.open_tool_channel`: a local pipe, an exec
into the pod) and speaks MCP to it with the official SDK's client, so every
backend is reached the same way, and an agent that speaks MCP itself (a CLI
agent) reaches the same server through the same tools.
"""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import mcp_types
from mcp import Client
from mcp.client._transport import TransportStreams
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from eval_pipeline.agents.session_request import MAX_TOOL_TIMEOUT_S, session_request
from eval_pipeline.common.foreign_text import valid_unicode, valid_unicode_data
from eval_pipeline.common.outcomes import SandboxLost
from eval_pipeline.sandbox import ToolChannel, Workspace


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as error:
        return error


@asynccontextmanager
async def channel_transport(channel: ToolChannel) -> AsyncIterator[TransportStreams]:
    """An MCP transport over a tool channel: newline-delimited JSON-RPC, as the stdio transport frames it,
    with the channel's blocking reads and writes run in worker threads."""
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def read() -> None:
        buffer = b""
        async with read_writer:
            while chunk := await anyio.to_thread.run_sync(channel.receive, abandon_on_cancel=True):
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        await read_writer.send(_parse(line))

    async def write() -> None:
        async with write_reader:
            async for message in write_reader:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                await anyio.to_thread.run_sync(channel.send, data.encode())

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        tasks.start_soon(write)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(channel.close)
            tasks.cancel_scope.cancel()


def innermost(error: BaseException) -> BaseException:
    """The one error an exception group (of the session's task groups, nested) was raised for, so that its
    type (an InfrastructureError, an agent's limit) decides the outcome; the group itself if it holds more.
    A protocol failure outside a tool call (the server gone before its handshake) is SandboxLost."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if isinstance(error, MCPError):
        return SandboxLost(f"the tool session could not start: {error}")
    return error


@dataclass(frozen=True)
class ToolResult:
    """One tool call's answer: its structured result (the runner's fields), the text the model is shown,
    and whether the tool reported an error (a missing file, an edit that does not apply)."""

    structured: Any
    text: str
    is_error: bool


class ToolServerEnded(Exception):  # noqa: N818 - named for what the agent did
    """The agent ended its own tool server: its commands run as the server's own user (a terminal task's
    root, the local backend's user), and the environment is still there. The agent's failure (agent_error):
    blaming the infrastructure would leave every trial an agent sabotages unscored."""


class ToolSession:
    """One trial's MCP session: the tools it offers and calls to them. `agent_reaches_server` says whether the
    agent's commands run as the server's own user (no uid of their own), so could end it."""

    def __init__(self, client: Client, channel: ToolChannel, agent_reaches_server: bool) -> None:
        self.client, self.channel, self.agent_reaches_server = client, channel, agent_reaches_server

    async def tools(self) -> list[mcp_types.Tool]:
        return list((await self.client.list_tools()).tools)

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """The tool's answer. A broken session is the infrastructure's failure (SandboxLost when the
        environment is gone), unless the agent could have ended the server itself and the environment is
        still there: then it is the agent's (ToolServerEnded). The call is sent as valid Unicode (a lone
        surrogate in the model's arguments as U+FFFD: common/foreign_text.py), as MCP's JSON must be."""
        try:
            result = await self.client.call_tool(valid_unicode(name), valid_unicode_data(arguments))
        except MCPError as error:
            why = self.channel.diagnostics().strip()[-2000:]
            message = f"the tool session broke during {name}: {error}; the server said: {why or 'nothing'}"
            failure = await anyio.to_thread.run_sync(self.channel.failure, message)
            if self.agent_reaches_server and not isinstance(failure, SandboxLost):
                raise ToolServerEnded(f"{message} (the agent's commands run as the server's own user)") from error
            raise failure from error
        text = "\n".join(block.text for block in result.content if isinstance(block, mcp_types.TextContent))
        structured = result.structured_content
        if structured is not None and not result.is_error:
            text = json.dumps(structured)
        return ToolResult(structured, text, result.is_error)


@asynccontextmanager
async def open_tool_session(
    workspace: Workspace, base_revision: str | None = None, max_timeout_s: float = MAX_TOOL_TIMEOUT_S
) -> AsyncIterator[ToolSession]:
    """A session with a tool server bound to `workspace`, ended (the server with it) on exit."""
    request = session_request(workspace, base_revision, max_timeout_s)
    channel = await anyio.to_thread.run_sync(workspace.open_tool_channel, request)
    async with Client(channel_transport(channel)) as client:
        yield ToolSession(client, channel, agent_reaches_server=request["placement"].get("uid") is None)
