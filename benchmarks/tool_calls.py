"""Per-call overhead of the MCP tool server against one exec per command, on one backend.

    python benchmarks/tool_calls.py --backend local|pod|strict [--calls 50] [--sessions 5] [--sequences 5]

On the demo's calclib-2 environment, in one workspace: N calls each of
`run_command("true")` and `read_file("README.md")` through a tool session
(tool_session.open_tool_session, as agents call tools), and the same commands
(`true`, `cat -- README.md`) through `workspace.run` directly, one exec per
command in containers. Prints the median and p95 wall time per call, the
median `peak_memory_mb` each path reports, the one-time cost of a session
(the channel with the server process started, the MCP handshake up to the
server's answer to `initialize`, the first `list_tools`, and closing it), and a
small realistic sequence both ways: read calclib/arith.py, edit one line of it,
run tests/test_arith.py with the environment's pytest. The exec path edits as
a harness would without the server: `cat` the file, then write it back whole
(one base64 `printf`). The container modes need the engine (DOCKER_HOST) and
the test settings of README's "Tests"; the sandbox is released at the end, so
no managed container is left behind.
"""

import argparse
import base64
import shlex
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from eval_pipeline.agents.session_request import MAX_TOOL_TIMEOUT_S, session_request
from eval_pipeline.agents.tool_session import ToolSession, channel_transport, open_tool_session
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings, Workspace, make_sandbox
from eval_pipeline.tasks.demo import build_demo_benchmark

LIMITS = ResourceLimits(memory_floor_mb=256, memory_ceiling_mb=1024, cpu_ceiling=1)
TIMEOUT_S = 120.0
SOURCE = "calclib/arith.py"
BUGGY, FIXED = "    if value > low:\n", "    if value > high:\n"


def _p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20, method="inclusive")[-1]


def _ms(samples: list[float]) -> tuple[float, float]:
    return round(statistics.median(samples) * 1000, 1), round(_p95(samples) * 1000, 1)


def _peak(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return round(statistics.median(known), 1) if known else None


def time_exec(workspace: Workspace, command: str, calls: int) -> dict[str, Any]:
    for _ in range(3):  # warm-up, not counted
        workspace.run(command, timeout_s=TIMEOUT_S)
    durations, peaks = [], []
    for _ in range(calls):
        started = time.perf_counter()
        result = workspace.run(command, timeout_s=TIMEOUT_S)
        durations.append(time.perf_counter() - started)
        assert result.ok, result.summary()
        peaks.append(result.peak_memory_mb)
    return {"ms": _ms(durations), "peak_mb": _peak(peaks)}


async def time_tool(session: ToolSession, name: str, arguments: dict[str, Any], calls: int) -> dict[str, Any]:
    for _ in range(3):
        await session.call(name, arguments)
    durations, peaks = [], []
    for _ in range(calls):
        started = time.perf_counter()
        result = await session.call(name, arguments)
        durations.append(time.perf_counter() - started)
        assert not result.is_error, result.text
        peaks.append(result.structured.get("peak_memory_mb"))
    return {"ms": _ms(durations), "peak_mb": _peak(peaks)}


async def time_session_opens(workspace: Workspace, sessions: int) -> dict[str, tuple[float, float]]:
    """What open_tool_session does, timed in its parts: the channel (the server process started: a pipe
    locally, a `docker exec` in containers), the MCP handshake (the server's start-up included: it answers
    once its Python has imported the SDK), the first list_tools, and the close."""
    request = session_request(workspace, None, MAX_TOOL_TIMEOUT_S)
    parts: dict[str, list[float]] = {"channel": [], "handshake": [], "list_tools": [], "close": [], "total": []}
    for _ in range(sessions):
        started = time.perf_counter()
        channel = await anyio.to_thread.run_sync(workspace.open_tool_channel, request)
        opened = time.perf_counter()
        client = Client(channel_transport(channel))
        await client.__aenter__()
        shaken = time.perf_counter()
        assert (await client.list_tools()).tools
        listed = time.perf_counter()
        await client.__aexit__(None, None, None)
        closed = time.perf_counter()
        parts["channel"].append(opened - started)
        parts["handshake"].append(shaken - opened)
        parts["list_tools"].append(listed - shaken)
        parts["close"].append(closed - listed)
        parts["total"].append(listed - started)
    return {part: _ms(samples) for part, samples in parts.items()}


def exec_sequence(workspace: Workspace, test_cmd: str) -> Callable[[str, str], None]:
    def run(old: str, new: str) -> None:
        workspace.run(f"cat -- {shlex.quote(SOURCE)}", timeout_s=TIMEOUT_S)  # the agent reads the file
        content = workspace.run(f"cat -- {shlex.quote(SOURCE)}", timeout_s=TIMEOUT_S).stdout  # the edit: read,
        encoded = base64.b64encode(content.replace(old, new, 1).encode()).decode()  # replace, write back
        assert workspace.run(f"printf %s {encoded} | base64 -d > {shlex.quote(SOURCE)}", timeout_s=TIMEOUT_S).ok
        workspace.run(f"{test_cmd} tests/test_arith.py", timeout_s=TIMEOUT_S)

    return run


def tool_sequence(session: ToolSession, test_cmd: str) -> Callable[[str, str], Awaitable[None]]:
    async def run(old: str, new: str) -> None:
        await session.call("read_file", {"path": SOURCE})
        edited = await session.call("edit_file", {"path": SOURCE, "old_str": old, "new_str": new})
        assert not edited.is_error, edited.text
        await session.call("run_command", {"command": f"{test_cmd} tests/test_arith.py"})

    return run


async def time_sequences(run: Callable[[str, str], Any], repeats: int) -> tuple[float, float]:
    """The sequence `repeats` times, each edit undoing the last (so every edit applies), after one warm-up."""
    durations = []
    for index in range(repeats + 1):
        old, new = (BUGGY, FIXED) if index % 2 == 0 else (FIXED, BUGGY)
        started = time.perf_counter()
        outcome = run(old, new)
        if outcome is not None:
            await outcome
        if index:
            durations.append(time.perf_counter() - started)
    return _ms(durations)


def measure(backend: str, calls: int, sessions: int, sequences: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="tool-calls-"))
    benchmark = build_demo_benchmark(root / "mirrors")
    settings = SandboxSettings.from_mapping(
        {"backend": "local" if backend == "local" else "container", "mode": "strict" if backend == "strict" else "pod"}
    )
    campaign = f"bench-tools-{uuid.uuid4().hex[:8]}"
    sandbox = make_sandbox(settings, root / "sandbox", LIMITS, campaign)
    instance = benchmark.instances[1]
    spec = benchmark.environment_for(instance)
    figures: dict[str, Any] = {}
    try:
        environment = sandbox.prepare(instance, spec, benchmark.source)

        async def main() -> None:
            with sandbox.workspace(environment, "tools") as workspace:
                figures["exec true"] = time_exec(workspace, "true", calls)
                figures["exec cat"] = time_exec(workspace, "cat -- README.md", calls)
                figures["session"] = await time_session_opens(workspace, sessions)
                async with open_tool_session(workspace) as session:
                    figures["tool true"] = await time_tool(session, "run_command", {"command": "true"}, calls)
                    figures["tool read"] = await time_tool(session, "read_file", {"path": "README.md"}, calls)
                    figures["tool sequence"] = await time_sequences(tool_sequence(session, spec.test_cmd), sequences)
                figures["exec sequence"] = await time_sequences(exec_sequence(workspace, spec.test_cmd), sequences)

        anyio.run(main)
    finally:
        sandbox.release()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["local", "pod", "strict"], default="local")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--sequences", type=int, default=5)
    args = parser.parse_args()
    started = time.monotonic()
    f = measure(args.backend, args.calls, args.sessions, args.sequences)

    def row(what: str, exec_figures: dict[str, Any], tool_figures: dict[str, Any]) -> str:
        (exec_median, exec_p95), (tool_median, tool_p95) = exec_figures["ms"], tool_figures["ms"]
        return (
            f"| {what} | {exec_median} / {exec_p95} | {tool_median} / {tool_p95} | "
            f"{round(exec_median - tool_median, 1)} | {exec_figures['peak_mb']} | {tool_figures['peak_mb']} |"
        )

    print(f"\n{args.backend}, {args.calls} calls each (ms, median / p95)\n")
    print("| per call | exec per command | tool call | saved per call (median) | peak MB, exec | peak MB, tool |")
    print("|---|---|---|---|---|---|")
    print(row('`true` / `run_command("true")`', f["exec true"], f["tool true"]))
    print(row("`cat README.md` / `read_file`", f["exec cat"], f["tool read"]))
    (exec_median, exec_p95), (tool_median, tool_p95) = f["exec sequence"], f["tool sequence"]
    print(
        f"| sequence: read, edit, pytest ({args.sequences}x) | {exec_median} / {exec_p95} | "
        f"{tool_median} / {tool_p95} | {round(exec_median - tool_median, 1)} | | |"
    )
    print(f"\nopening a session ({args.sessions}x, ms, median / p95)\n")
    print("| part | median / p95 |\n|---|---|")
    for part, (median, p95) in f["session"].items():
        print(f"| {part} | {median} / {p95} |")
    print(f"\n{args.backend}: {time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
