"""The tool server: one trial's workspace as MCP tools, over real sessions on every backend.

A session is started as an agent starts it (tool_session.open_tool_session) and its tools are called
through the official MCP client. In a pod, concurrent trials' sessions each reach only their own
workspace, whatever path an agent passes.
"""

import anyio
import pytest

from eval_pipeline.agents.tool_session import ToolServerEnded, ToolSession, open_tool_session
from eval_pipeline.sandbox import ResourceLimits
from eval_pipeline_tests.support.trials import prepare_on

TOOLS = {"run_command", "read_file", "write_file", "edit_file", "list_directory", "workspace_diff"}


async def _edit_and_diff(session: ToolSession) -> None:
    """The tools an agent fixes a bug with, as it calls them, on the demo's calclib checkout."""
    assert {tool.name for tool in await session.tools()} == TOOLS
    listing = await session.call("list_directory", {"path": "."})
    assert "README.md" in listing.structured["listing"]
    readme = await session.call("read_file", {"path": "README.md"})
    assert readme.structured["content"].startswith("# calclib")
    edited = await session.call("edit_file", {"path": "README.md", "old_str": "# calclib", "new_str": "# calc"})
    assert edited.structured == {"path": "README.md", "replacements": 1}
    big = "line\n" * 30_000  # several write chunks
    assert (await session.call("write_file", {"path": "new/big.txt", "content": big})).structured[
        "bytes_written"
    ] == len(big)
    assert (await session.call("run_command", {"command": "wc -l < new/big.txt"})).structured["stdout"] == "30000\n"
    diff = (await session.call("workspace_diff", {})).structured["diff"]
    assert "-# calclib" in diff and "+# calc" in diff and "new/big.txt" in diff
    missing = await session.call("read_file", {"path": "no/such/file"})
    assert missing.is_error and "No such file" in missing.text
    unmatched = await session.call("edit_file", {"path": "README.md", "old_str": "absent text", "new_str": "x"})
    assert unmatched.is_error and "not found" in unmatched.text


def test_tools_on_a_local_workspace(demo_benchmark, prepare, shared_sandbox):
    environment = prepare(demo_benchmark.instances[1])

    async def main() -> None:
        with shared_sandbox.workspace(environment, "tools") as workspace:
            async with open_tool_session(workspace) as session:
                await _edit_and_diff(session)
                slow = await session.call("run_command", {"command": "sleep 5", "timeout_s": 0.5})
                assert slow.structured["timed_out"] and not slow.is_error
                loud = await session.call("run_command", {"command": "yes | head -c 3000000"})
                assert loud.structured["output_truncated"]
                assert len(loud.structured["stdout"]) <= shared_sandbox.limits.output_bytes

    anyio.run(main)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["pod", "strict"])
def test_tools_in_a_container(container_sandbox, demo_benchmark, engine, mode):
    """Every tool through the root server, and a call over the memory ceiling: the kernel kills the call's
    command (the OOM killer's first choice), not the server, which reports it and goes on serving."""
    sandbox = container_sandbox(mode=mode, limits=ResourceLimits(memory_floor_mb=64, memory_ceiling_mb=256))
    environment = prepare_on(sandbox, demo_benchmark, demo_benchmark.instances[1])

    async def main() -> None:
        with sandbox.workspace(environment, "tools") as workspace:
            async with open_tool_session(workspace) as session:
                await _edit_and_diff(session)
                me = (await session.call("run_command", {"command": "id -u"})).structured["stdout"]
                assert int(me) == workspace.uid, "tool calls run as the trial's uid, not as the server's root"
                hog = await session.call("run_command", {"command": "python3 -c 'x = b\"y\" * (600 * 2**20)'"})
                assert hog.structured["oom_killed"] and hog.structured["exit_code"] != 0, hog.text
                score = await session.call("run_command", {"command": "cat /proc/self/oom_score_adj"})
                assert score.structured["stdout"] == "1000\n", "the trial's commands are killed first"

    anyio.run(main)


@pytest.mark.slow
def test_concurrent_sessions_in_one_pod_see_only_their_own_workspace(container_sandbox, demo_benchmark, engine):
    sandbox = container_sandbox(pod_parallelism=2)
    environment = prepare_on(sandbox, demo_benchmark, demo_benchmark.instances[1])

    async def main() -> None:
        with sandbox.workspace(environment, "a") as first, sandbox.workspace(environment, "b") as second:
            assert first.container.id == second.container.id
            async with open_tool_session(first) as mine, open_tool_session(second) as theirs:
                await mine.call("write_file", {"path": "secret.txt", "content": "hunter2\n"})
                assert (await mine.call("read_file", {"path": "/testbed/secret.txt"})).structured[
                    "content"
                ] == "hunter2\n"
                for path in ("/testbed/secret.txt", f"{first.repo}/secret.txt", "../../a/repo/secret.txt"):
                    peek = await theirs.call("read_file", {"path": path})
                    assert peek.is_error, f"{path} was readable from the other trial's session"
                shell = await theirs.call("run_command", {"command": f"cat {first.repo}/secret.txt; ls /workspaces"})
                assert "hunter2" not in shell.structured["stdout"] and "Permission denied" in shell.structured["stderr"]
                overwrite = await theirs.call("write_file", {"path": f"{first.repo}/secret.txt", "content": "x"})
                assert overwrite.is_error
                assert (await mine.call("read_file", {"path": "secret.txt"})).structured["content"] == "hunter2\n"

    anyio.run(main)


def test_an_agent_that_ends_its_own_tool_server_fails_itself_and_is_scored(demo_benchmark, prepare, shared_sandbox):
    """Locally the agent's commands run as the server's own user: ending the server is its doing (an
    agent_error, scored), not the infrastructure's, or an agent could go unscored whenever it liked."""
    environment = prepare(demo_benchmark.instances[1])

    async def main() -> None:
        with shared_sandbox.workspace(environment, "killed") as workspace:
            async with open_tool_session(workspace) as session:
                with pytest.raises(ToolServerEnded, match="tool session broke during run_command"):
                    await session.call("run_command", {"command": "kill -9 $PPID; sleep 5"})

    anyio.run(main)
