"""The scripted model over real HTTP: its wire protocol, its scripts, and its replay of real patches as edits."""

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from eval_pipeline.tasks.dataset import Benchmark
from eval_pipeline.tasks.swebench.instance import Instance
from eval_pipeline.testing.scripted_model import (
    UNKNOWN_PROBLEM,
    PatchError,
    ScriptedModelServer,
    Solution,
    ToolCall,
    parse_unified_diff,
    patch_tool_calls,
    solutions_from_tasks,
)
from eval_pipeline_tests.support.real_data import PYTEST_COMMITS, repository

TOOL_PARAMETERS = {
    "run_command": {"command": "string", "timeout_s": "number"},
    "read_file": {"path": "string"},
    "write_file": {"path": "string", "content": "string"},
    "edit_file": {"path": "string", "old_str": "string", "new_str": "string", "replace_all": "boolean"},
    "list_directory": {"path": "string"},
    "workspace_diff": {},
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the MCP tool server's {name}",
            "parameters": {"type": "object", "properties": {p: {"type": t} for p, t in params.items()}},
        },
    }
    for name, params in TOOL_PARAMETERS.items()
]
PROMPT = "You work in a git repository. Fix this issue:\n\n<issue>\n{instruction}</issue>\n\nEdit the files, then stop."


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def run_tool(root: Path, call: ToolCall) -> dict[str, Any]:
    """The MCP tool server's tools, on a real directory, as the agent would run them."""
    args = call.arguments
    if call.name == "list_directory":
        return {"path": args["path"], "listing": "\n".join(sorted(os.listdir(root / args["path"])))}
    if call.name == "read_file":
        return {"path": args["path"], "content": (root / args["path"]).read_text(), "truncated": False}
    if call.name == "write_file":
        (root / args["path"]).parent.mkdir(parents=True, exist_ok=True)
        return {"path": args["path"], "bytes_written": (root / args["path"]).write_text(args["content"])}
    if call.name == "edit_file":
        text = (root / args["path"]).read_text()
        if text.count(args["old_str"]) != 1:
            return {"is_error": True, "error": f"old_str occurs {text.count(args['old_str'])} times"}
        (root / args["path"]).write_text(text.replace(args["old_str"], args["new_str"]))
        return {"path": args["path"], "replacements": 1}
    if call.name == "run_command":
        done = subprocess.run(args["command"], shell=True, cwd=root, capture_output=True, text=True, timeout=60)
        return {"exit_code": done.returncode, "stdout": done.stdout, "stderr": done.stderr, "timed_out": False}
    if call.name == "workspace_diff":
        return {"diff": git("diff", cwd=root), "truncated": False}
    raise AssertionError(f"unknown tool {call.name}")


def chat(client: httpx.Client, server: ScriptedModelServer, messages: list[dict], **extra: Any) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": messages, "tools": TOOLS, **extra}
    return client.post(f"{server.base_url}/chat/completions", json=body)


def drive(server: ScriptedModelServer, instruction: str, execute, max_steps: int = 40, **extra: Any):
    """The agent loop: ask, run the tool call it answers with, append both, until it stops. Returns the calls
    made and the final completion."""
    messages: list[dict] = [
        {"role": "system", "content": "You are a careful engineer."},
        {"role": "user", "content": PROMPT.format(instruction=instruction)},
    ]
    calls: list[ToolCall] = []
    with httpx.Client(timeout=10) as client:
        for _ in range(max_steps):
            response = chat(client, server, messages, **extra)
            assert response.status_code == 200, response.text
            completion = response.json()
            choice = completion["choices"][0]
            messages.append(choice["message"])
            if choice["finish_reason"] == "stop":
                assert "tool_calls" not in choice["message"]
                return calls, completion
            assert choice["finish_reason"] == "tool_calls"
            (tool_call,) = choice["message"]["tool_calls"]
            call = ToolCall(tool_call["function"]["name"], json.loads(tool_call["function"]["arguments"]))
            calls.append(call)
            messages.append({"role": "tool", "tool_call_id": tool_call["id"], "content": json.dumps(execute(call))})
    raise AssertionError(f"no final answer after {max_steps} steps")


def checkout(benchmark: Benchmark, instance: Instance, target: Path) -> Path:
    git("clone", "-q", benchmark.source.location(instance.repo), str(target), cwd=target.parent)
    git("checkout", "-q", instance.base_commit, cwd=target)
    return target


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}


def test_a_completion_has_the_standard_shape():
    with ScriptedModelServer([]) as server, httpx.Client() as client:
        short = chat(client, server, [{"role": "user", "content": "hi"}], seed=3, temperature=0).json()
        long = chat(client, server, [{"role": "user", "content": "hi " * 400}]).json()
        models = client.get(f"{server.base_url}/models").json()
    assert short["object"] == "chat.completion" and short["id"].startswith("chatcmpl-")
    assert short["model"] == "gpt-4o" and isinstance(short["created"], int)
    assert short["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": UNKNOWN_PROBLEM},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    usage = short["usage"]
    assert (
        usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] and usage["completion_tokens"] > 0
    )
    assert long["usage"]["prompt_tokens"] > usage["prompt_tokens"] + 250  # a quarter of 1,200 more characters
    assert {"scripted-solve", "scripted-loop", "scripted-rate-limited"} <= {m["id"] for m in models["data"]}
    assert server.requests[0]["seed"] == 3 and server.requests[0]["tools"] == TOOLS


def test_solve_replays_the_gold_patch_on_every_demo_task(demo_benchmark, tmp_path):
    """On each demo task, the calls it makes (fed real results) leave the tree the gold patch leaves."""
    solutions = [Solution(s.problem_statement, s.patch) for s in solutions_from_tasks(demo_benchmark.instances)]
    with ScriptedModelServer(solutions) as server:
        for instance in demo_benchmark.instances:
            workspace = checkout(demo_benchmark, instance, tmp_path / f"{instance.instance_id}-agent")
            gold = checkout(demo_benchmark, instance, tmp_path / f"{instance.instance_id}-gold")
            subprocess.run(["git", "apply"], cwd=gold, input=instance.patch, text=True, check=True)
            base = tree(workspace)
            calls, final = drive(server, instance.instruction, lambda call, root=workspace: run_tool(root, call))
            assert [c.name for c in calls[:2]] == ["list_directory", "read_file"]
            assert {c.name for c in calls[2:-1]} == {"edit_file"} and calls[-1].name == "workspace_diff"
            assert final["choices"][0]["message"]["content"].startswith("Fixed: ")
            assert tree(workspace) == tree(gold) != base
            assert git("diff", cwd=workspace) == instance.patch


@pytest.fixture
def median_task(demo_benchmark) -> Instance:
    return next(i for i in demo_benchmark.instances if "median" in i.problem_statement)


def test_solve_reads_then_edits_then_tests_then_diffs(demo_benchmark, median_task, tmp_path):
    """The whole sequence on one task with its test command, and what the agent sent reached the model."""
    (solution,) = solutions_from_tasks([median_task])
    assert solution.test_command == "python -m pytest -q tests/test_stats.py"
    workspace = checkout(demo_benchmark, median_task, tmp_path / "agent")
    results = []

    def execute(call: ToolCall) -> dict:
        results.append(run_tool(workspace, call))
        return results[-1]

    with ScriptedModelServer([solution]) as server:
        calls, _ = drive(server, median_task.instruction, execute, seed=42, temperature=0.0)
    assert [c.name for c in calls] == [
        "list_directory",
        "read_file",
        "edit_file",
        "run_command",
        "workspace_diff",
    ]
    assert calls[0].arguments == {"path": "."} and calls[1].arguments == {"path": "calclib/stats.py"}
    assert calls[3].arguments == {"command": solution.test_command} and results[3]["exit_code"] == 0
    assert results[4]["diff"] == median_task.patch
    assert len(server.requests) == 6 and all(r["seed"] == 42 and r["tools"] == TOOLS for r in server.requests)
    assert [len(r["messages"]) for r in server.requests] == [2, 4, 6, 8, 10, 12]


def test_failed_tool_calls_are_reported_and_the_script_still_stops(median_task):
    (solution,) = solutions_from_tasks([median_task])

    def failing(call: ToolCall) -> Any:
        return "Error: no such workspace" if call.name in ("edit_file", "read_file") else {"ok": True}

    with ScriptedModelServer([solution]) as server:
        calls, final = drive(server, median_task.instruction, failing)
    assert [c.name for c in calls] == ["list_directory", "read_file", "edit_file", "run_command", "workspace_diff"]
    assert final["choices"][0]["message"]["content"].startswith("Attempted a fix, but 2 tool call(s) failed")


def test_an_unknown_problem_is_answered_as_such(median_task):
    with ScriptedModelServer(solutions_from_tasks([median_task])) as server:
        calls, final = drive(server, "The parser crashes on empty input.", lambda call: {})
    assert calls == [] and final["choices"][0]["message"]["content"] == UNKNOWN_PROBLEM


def test_loop_lists_the_directory_forever(median_task):
    with ScriptedModelServer(solutions_from_tasks([median_task]), script="loop") as server:
        with pytest.raises(AssertionError, match="no final answer after 25 steps"):
            drive(server, median_task.instruction, lambda call: {"path": ".", "listing": "a\nb"}, max_steps=25)
    replies = [r["messages"][-2]["tool_calls"][0] for r in server.requests[1:]]
    assert {(r["function"]["name"], r["function"]["arguments"]) for r in replies} == {
        ("list_directory", '{"path": "."}')
    }
    assert len({r["id"] for r in replies}) == 24


def test_a_model_name_picks_the_script(median_task):
    """The server solves by default; `scripted-loop` makes the same conversation loop."""
    messages = [{"role": "user", "content": median_task.instruction}]
    with ScriptedModelServer(solutions_from_tasks([median_task])) as server, httpx.Client() as client:
        first = chat(client, server, messages).json()["choices"][0]["message"]
        messages += [first, {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "{}"}]
        solving, looping = (chat(client, server, messages, model=f"scripted-{s}") for s in ("solve", "loop"))
        unknown = chat(client, server, messages, model="scripted-nonsense")
    assert solving.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "read_file"
    assert looping.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "list_directory"
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("script", "status", "error_status"),
    [("rate-limited", 429, 503), ("server-error", 503, 503), ("server-error", 500, 500)],
)
def test_the_failing_scripts_fail_n_requests_then_solve(median_task, script, status, error_status):
    messages = [{"role": "user", "content": median_task.instruction}]
    with (
        ScriptedModelServer(
            solutions_from_tasks([median_task]), script=script, failing_requests=2, error_status=error_status
        ) as server,
        httpx.Client() as client,
    ):
        responses = [chat(client, server, messages) for _ in range(4)]
    assert [r.status_code for r in responses] == [status, status, 200, 200]
    assert responses[0].headers["Retry-After"] == "0"
    assert set(responses[0].json()["error"]) == {"message", "type", "param", "code"}
    assert responses[2].json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "list_directory"


def test_rate_limited_without_a_count_never_answers(median_task):
    messages = [{"role": "user", "content": median_task.instruction}]
    with ScriptedModelServer(failing_requests=None) as server, httpx.Client() as client:
        statuses = {chat(client, server, messages, model="scripted-rate-limited").status_code for _ in range(5)}
        solved = chat(client, server, messages, model="scripted-solve")
    assert statuses == {429} and solved.status_code == 200


def test_a_key_is_required_when_set():
    messages = [{"role": "user", "content": "hi"}]
    with ScriptedModelServer(api_key="sk-right") as server, httpx.Client() as client:
        missing = chat(client, server, messages)
        wrong = client.post(
            f"{server.base_url}/chat/completions",
            json={"model": "m", "messages": messages},
            headers={"Authorization": "Bearer sk-wrong"},
        )
        models = client.get(f"{server.base_url}/models")
        right = client.post(
            f"{server.base_url}/chat/completions",
            json={"model": "m", "messages": messages},
            headers={"Authorization": "Bearer sk-right"},
        )
    assert (missing.status_code, wrong.status_code, models.status_code, right.status_code) == (401, 401, 401, 200)
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    assert len(server.requests) == 1  # only the authorized request reached the model


def test_a_needed_tool_that_is_not_offered_stops_the_model(median_task):
    messages = [{"role": "user", "content": median_task.instruction}]
    with ScriptedModelServer(solutions_from_tasks([median_task])) as server, httpx.Client() as client:
        completion = chat(client, server, messages, tools=TOOLS[:2]).json()
    assert completion["choices"][0]["finish_reason"] == "stop"
    assert "list_directory" in completion["choices"][0]["message"]["content"]


def test_a_streamed_completion_is_server_sent_chunks(median_task):
    messages = [{"role": "user", "content": median_task.instruction}]
    with ScriptedModelServer(solutions_from_tasks([median_task])) as server, httpx.Client() as client:
        response = chat(client, server, messages, stream=True, stream_options={"include_usage": True})
    assert response.headers["Content-Type"] == "text/event-stream"
    events = [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "list_directory"
    assert chunks[1]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[2]["choices"] == [] and chunks[2]["usage"]["total_tokens"] > 0


def apply_calls(root: Path, calls: list[ToolCall]) -> None:
    for call in calls:
        result = run_tool(root, call)
        assert not result.get("is_error") and result.get("exit_code", 0) == 0, (call, result)


@pytest.mark.parametrize("commit", PYTEST_COMMITS)
def test_the_edits_of_a_real_commit_turn_its_pre_image_into_its_post_image(commit, tmp_path):
    snapshot = str(repository("pytest-dev/pytest"))
    patch = git("--git-dir", snapshot, "show", "--format=", commit, cwd=tmp_path)
    changes = parse_unified_diff(patch)
    before = {
        c.old_path: git("--git-dir", snapshot, "show", f"{commit}^:{c.old_path}", cwd=tmp_path)
        for c in changes
        if c.old_path
    }
    for path, text in before.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    apply_calls(tmp_path, patch_tool_calls(patch, before))
    for change in changes:
        if change.new_path is None:
            assert not (tmp_path / change.old_path).exists()
        else:
            assert (tmp_path / change.new_path).read_text() == git(
                "--git-dir", snapshot, "show", f"{commit}:{change.new_path}", cwd=tmp_path
            )


def test_a_hunk_whose_context_repeats_is_widened_until_unique():
    """Commit 8d40684d adds a line after context that occurs twice in hookspec.py: replayed without the file's
    content the edit is ambiguous; with it, the old_str grows until it occurs once."""
    snapshot = str(repository("pytest-dev/pytest"))
    commit = "8d40684d1f997e62758785aebb3132c2f5b712e1"
    patch = git("--git-dir", snapshot, "show", "--format=", commit, cwd=Path.cwd())
    content = git("--git-dir", snapshot, "show", f"{commit}^:src/_pytest/hookspec.py", cwd=Path.cwd())
    blind = patch_tool_calls(patch)
    widened = patch_tool_calls(patch, {"src/_pytest/hookspec.py": content})
    assert any(content.count(call.arguments["old_str"]) > 1 for call in blind)
    assert all(content.count(call.arguments["old_str"]) == 1 for call in widened)


def test_git_output_with_odd_names_renames_and_missing_newlines_replays_exactly(tmp_path):
    """Git's own output for what a parser gets wrong: names with spaces and non-ASCII (quoted), a pure rename,
    a copy-free rename with edits, an empty new file, a deletion, a file losing its last newline."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    files = {
        "with space.txt": "one\ntwo\nthree\n",
        "café/menu.py": "a = 1\n" * 3 + "b = 2\n",
        "moved.py": "".join(f"line {i}\n" for i in range(30)),
        "kept.py": "x\n",
        "gone.txt": "bye\n",
        "tail.txt": "first\nlast\n",
    }
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git("add", "-A", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "before", cwd=repo)
    (repo / "with space.txt").write_text("one\n2\nthree\n")
    (repo / "café/menu.py").write_text("a = 1\n" * 3 + "b = 3\n")
    (repo / "sub/dir").mkdir(parents=True)
    (repo / "moved.py").rename(repo / "sub/dir/moved.py")
    (repo / "sub/dir/moved.py").write_text((repo / "sub/dir/moved.py").read_text().replace("line 15\n", "LINE 15\n"))
    git("mv", "kept.py", "renamed.py", cwd=repo)
    (repo / "empty new").write_text("")
    (repo / "gone.txt").unlink()
    (repo / "tail.txt").write_text("first\nlast")
    git("add", "-A", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "after", cwd=repo)
    patch = git("show", "--format=", "HEAD", cwd=repo)
    assert '"a/caf\\303\\251/menu.py"' in patch and "rename from moved.py" in patch and "No newline" in patch

    workspace = tmp_path / "workspace"
    git("clone", "-q", str(repo), str(workspace), cwd=tmp_path)
    git("checkout", "-q", "HEAD~1", cwd=workspace)
    contents = {c.old_path: (workspace / c.old_path).read_text() for c in parse_unified_diff(patch) if c.old_path}
    apply_calls(workspace, patch_tool_calls(patch, contents))
    assert tree(workspace) == tree(repo)


def test_a_binary_change_cannot_be_replayed():
    patch = "diff --git a/logo.png b/logo.png\nindex 1..2 100644\nBinary files a/logo.png and b/logo.png differ\n"
    with pytest.raises(PatchError, match="logo.png"):
        parse_unified_diff(patch)
