"""The tool server: one trial's workspace as MCP tools, for agents that run outside the environment.

Every environment carries this server (the container backend mounts it with its
own Python and the `mcp` SDK into every pod and container, tool_runtime.py; the
local backend runs it with the harness's Python). A trial's session is one
server process, started over the environment's own channel (an exec's stdin and
stdout, or a local pipe) and bound at start to that trial's workspace: it gets
the workspace's command placement (`Workspace.command_placement`: its view, uid,
environment and limits) on stdin's first line, never on a command line, and runs
every tool call through the runner's `run_limited` with it (runner/run.py). A tool call is thus
held to exactly what a command of the trial is (its uid and mount view, its
timeout, output cap, memory ceiling, the end of every process it left), so
sessions of concurrent trials in one pod see only their own files, whatever
paths an agent passes: the kernel refuses the rest, not this server.

Standard library and `mcp` only, with the runner's directory beside it: it
runs in environments that have neither the harness nor its dependencies.
"""

import base64
import json
import os
import shlex
import sys
import threading
from typing import Any

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

if __name__ == "__main__":  # a script beside the runner's directory (in a pod, a container, locally), which it
    # enters as the runner's command line does (runner/entry.py). Imported as eval_pipeline's module (by the tests),
    # no directory of the sandbox goes on sys.path: its kubernetes/ package would shadow the Kubernetes client
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner"))
    from entry import enter_package

    enter_package(sys.path.pop(0))

from eval_pipeline.sandbox.runner import RunRequest, run_limited

# A command line's argument may hold 128 KiB (MAX_ARG_STRLEN): files are written in base64 chunks well under it.
WRITE_CHUNK_BYTES = 48 * 1024
INSTRUCTIONS = (
    "Tools on one repository checkout. Paths are relative to the repository root. Commands run in a shell "
    "there, one at a time, each with a timeout and capped output; background processes end with their command."
)


class WorkspaceTools:
    """One trial's tools: each is one or more commands run with the trial's placement, one call at a time
    (a pod's runner ends every process of the trial's uid after each command, so two at once would cut each
    other short)."""

    def __init__(self, session: dict[str, Any]) -> None:
        self.placement = session["placement"]
        self.max_timeout_s = float(session.get("max_timeout_s", 600))
        self.git_env = session.get("git_env", {})
        self.base_revision = session.get("base_revision") or "HEAD"
        self._lock = threading.Lock()

    def run(self, command: str, timeout_s: float | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
        """The runner's result for `command`, as the runner reports it for every command of a trial."""
        timeout = float(timeout_s or self.max_timeout_s)
        if not 0 < timeout <= self.max_timeout_s:  # NaN too: a call is never without its ceiling
            timeout = self.max_timeout_s
        environment = {**self.placement["env"], **(env or {})}
        with self._lock:
            fields = {**self.placement, "command": command, "timeout_s": timeout, "env": environment}
            result: dict[str, Any] = dict(run_limited(RunRequest.from_fields(fields)))
        result.pop("command", None)
        # The command was forked from this server, so its ru_maxrss counts the server's own resident set
        # (the MCP SDK's tens of MB): a figure about the server, not the command, is left out.
        result["peak_memory_mb"] = None
        return result

    def checked(self, command: str, what: str) -> dict[str, Any]:
        """`run`, raising the tool error the agent sees when the command fails or hits a limit."""
        result = self.run(command)
        if result["exit_code"] != 0 or result["timed_out"] or result["oom_killed"] or result["storage_exceeded"]:
            reason = (
                "timed out"
                if result["timed_out"]
                else "was killed at the memory ceiling"
                if result["oom_killed"]
                else "was ended for filling more disk than the trial's quota"
                if result["storage_exceeded"]
                else result["stderr"].strip()[-2000:] or f"exit {result['exit_code']}"
            )
            raise ToolError(f"{what}: {reason}")
        return result

    def read_file(self, path: str) -> dict[str, Any]:
        result = self.checked(f"cat -- {shlex.quote(path)}", f"cannot read {path}")
        return {"path": path, "content": result["stdout"], "truncated": result["output_truncated"]}

    def write_file(self, path: str, content: str) -> dict[str, Any]:
        data = content.encode()
        quoted = shlex.quote(path)
        self.checked(f'mkdir -p -- "$(dirname -- {quoted})" && : > {quoted}', f"cannot write {path}")
        for start in range(0, len(data), WRITE_CHUNK_BYTES):
            chunk = base64.b64encode(data[start : start + WRITE_CHUNK_BYTES]).decode()
            self.checked(f"printf %s {chunk} | base64 -d >> {quoted}", f"cannot write {path}")
        return {"path": path, "bytes_written": len(data)}

    def edit_file(self, path: str, old_str: str, new_str: str, replace_all: bool = False) -> dict[str, Any]:
        current = self.read_file(path)
        if current["truncated"]:
            raise ToolError(f"{path} is larger than the output cap; edit it with a command instead")
        count = current["content"].count(old_str) if old_str else 0
        if count == 0:
            raise ToolError(f"old_str not found in {path}")
        if count > 1 and not replace_all:
            raise ToolError(f"old_str occurs {count} times in {path}; make it unique or set replace_all")
        self.write_file(path, current["content"].replace(old_str, new_str, -1 if replace_all else 1))
        return {"path": path, "replacements": count if replace_all else 1}

    def list_directory(self, path: str) -> dict[str, Any]:
        result = self.checked(f"ls -la -- {shlex.quote(path)}", f"cannot list {path}")
        return {"path": path, "listing": result["stdout"], "truncated": result["output_truncated"]}

    def workspace_diff(self) -> dict[str, Any]:
        """The checkout's changes against the commit the trial started from, new files included."""
        base = shlex.quote(self.base_revision)
        command = f"git add -A -N . >/dev/null 2>&1; git -c core.quotepath=false diff --no-color --no-ext-diff {base}"
        result = self.run(command, env=self.git_env)
        if result["exit_code"] != 0:
            raise ToolError(f"cannot diff the workspace: {result['stderr'].strip()[-2000:]}")
        return {"diff": result["stdout"], "truncated": result["output_truncated"]}


def build_server(tools: WorkspaceTools) -> MCPServer:
    """The MCP server whose tools are `tools`' methods, each run off the event loop."""
    server = MCPServer("eval-pipeline-workspace", instructions=INSTRUCTIONS)

    @server.tool()
    async def run_command(command: str, timeout_s: float = 120.0) -> dict[str, Any]:
        """Run a shell command in the repository root. Returns exit_code, stdout, stderr (capped), timed_out,
        output_truncated and oom_killed."""
        return await anyio.to_thread.run_sync(tools.run, command, timeout_s)

    @server.tool()
    async def read_file(path: str) -> dict[str, Any]:
        """Read a text file."""
        return await anyio.to_thread.run_sync(tools.read_file, path)

    @server.tool()
    async def write_file(path: str, content: str) -> dict[str, Any]:
        """Create or overwrite a file with `content` (parent directories are made)."""
        return await anyio.to_thread.run_sync(tools.write_file, path, content)

    @server.tool()
    async def edit_file(path: str, old_str: str, new_str: str, replace_all: bool = False) -> dict[str, Any]:
        """Replace `old_str`, which must occur exactly once unless `replace_all`, with `new_str`."""
        return await anyio.to_thread.run_sync(tools.edit_file, path, old_str, new_str, replace_all)

    @server.tool()
    async def list_directory(path: str = ".") -> dict[str, Any]:
        """List a directory (ls -la)."""
        return await anyio.to_thread.run_sync(tools.list_directory, path)

    @server.tool()
    async def workspace_diff() -> dict[str, Any]:
        """The diff of every change made to the repository so far."""
        return await anyio.to_thread.run_sync(tools.workspace_diff)

    return server


def main() -> None:
    """Serve one session on stdin and stdout, bound to the session on stdin's first line (a root process's
    stdin, which no trial uid can read, unlike a command line or, on Kubernetes, no exec environment); or,
    started by an agent inside its workspace (`--session-file`), to the session the harness wrote there."""
    if sys.argv[1:2] == ["--session-file"]:
        with open(sys.argv[2]) as file:
            session = json.load(file)
    else:
        session = json.loads(_first_line())
    build_server(WorkspaceTools(session)).run("stdio")


def _first_line() -> bytes:
    """Stdin's first line, read a byte at a time: a buffered read would take the client's first message
    along with it, out of the stdio transport's reach."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(0, 1)
        if not byte:
            break
        line += byte
    return line


if __name__ == "__main__":
    main()
