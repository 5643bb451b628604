"""An OpenAI-compatible Chat Completions server that plays a scripted model, so agents run offline.

No real model can run on this machine, yet a tool-calling agent must be tested over the real wire protocol.
This server answers `POST /v1/chat/completions` as a tool-calling model would, deciding each reply from the
request's messages alone (it keeps no conversation state, as a model keeps none), so any agent loop can drive
it. Its scripts, chosen per server or per request by the model name (`scripted-<script>`):

- solve: recognises a known problem in the instruction and replays its reference patch as calls of our MCP
  tool server's tools (list the repository, read the files, edit them, run the tests, show the diff), then
  stops;
- loop: lists the repository forever, for the agent's step limit;
- rate-limited / server-error: fails the first n requests with 429 / a 5xx, then solves, for retry logic;
- mini-solve / mini-loop: the same two with mini-swe-agent's one tool, `bash` (agents/mini_swe.py): apply the
  reference patch with `git apply` from a heredoc, run the tests, then submit with mini-swe-agent's submission
  command; or run `ls` forever;
- chatter: answers in prose and never calls a tool (a model that ignores the tools: the llm agent stops at
  once, mini-swe-agent's format check fails on every reply).

Run `python -m eval_pipeline.testing.scripted_model --benchmark demo` to serve the demo benchmark's solutions.
"""

import argparse
import ast
import hashlib
import hmac
import json
import math
import posixpath
import re
import shlex
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self, cast

from eval_pipeline.tasks.task import Task

SCRIPTS = ("solve", "loop", "rate-limited", "server-error", "mini-solve", "mini-loop", "chatter")
# What mini-swe-agent takes for its submission: a command whose output's first line this is (and that exits 0).
MINI_SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
MODEL_PREFIX = "scripted-"
UNKNOWN_PROBLEM = "I do not know this problem."


@dataclass(frozen=True)
class Solution:
    """A known problem: the statement the solve script looks for in the instruction, the patch it replays,
    and the command it tests the result with (None: it runs no tests)."""

    problem_statement: str
    patch: str
    test_command: str | None = None


@dataclass(frozen=True)
class ToolCall:
    """One call of a tool of the MCP tool server, as the model asks for it."""

    name: str
    arguments: dict[str, Any]


# ---------------------------------------------------------------------------------------------------------------
# Unified diffs


class PatchError(ValueError):
    """A patch that cannot be replayed as tool calls: binary content, or a hunk that is not a unified diff's."""


@dataclass(frozen=True)
class Hunk:
    """One `@@` hunk: the line its old side starts at (1-based; for an insertion, the line it follows) and its
    lines as (tag, text), tag ' ', '-' or '+', each text ending in a newline unless git marked it as the last
    line of a file without one."""

    old_start: int
    lines: tuple[tuple[str, str], ...]

    @property
    def old_lines(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "+"]

    @property
    def new_lines(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "-"]


@dataclass(frozen=True)
class FilePatch:
    """One file's change: `old_path` None for a created file, `new_path` None for a deleted one, and two
    different paths for a rename (or a copy)."""

    old_path: str | None
    new_path: str | None
    hunks: tuple[Hunk, ...] = ()
    copied: bool = False


@dataclass
class _FileBuilder:
    """A FilePatch while its header lines are read; the `---`/`+++` paths win over the `diff --git` ones."""

    old_path: str | None
    new_path: str | None
    hunks: list[Hunk]
    copied: bool = False
    has_paths: bool = False

    def build(self) -> FilePatch:
        return FilePatch(self.old_path, self.new_path, tuple(self.hunks), self.copied)


_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_QUOTED_OR_WORD = re.compile(r'"(?:[^"\\]|\\.)*"|\S+')


def _unquote(path: str) -> str:
    """Git writes a path with special characters as a C string ("a/t\\303\\251st"); a bytes literal reads it."""
    if len(path) >= 2 and path.startswith('"') and path.endswith('"'):
        return ast.literal_eval("b" + path).decode("utf-8", "surrogateescape")
    return path


def _strip_prefix(path: str, prefix: str) -> str:
    return path[len(prefix) :] if path.startswith(prefix) else path


def _marker_path(value: str, prefix: str) -> str | None:
    """The path of a `--- ` or `+++ ` line's value; None for /dev/null. A tab ends it (git adds one after a
    name with spaces, diff -u a timestamp)."""
    path = _unquote(value.split("\t", 1)[0])
    return None if path == "/dev/null" else _strip_prefix(path, prefix)


def _git_header_paths(line: str) -> tuple[str, str]:
    """The two paths of `diff --git a/X b/Y`. Unquoted names may hold spaces, so an unrenamed file's line is
    split in its middle; other lines only matter when no `---`/`+++` or rename line follows (mode changes)."""
    rest = line[len("diff --git ") :]
    if '"' in rest:
        tokens = [_unquote(token) for token in _QUOTED_OR_WORD.findall(rest)]
        old, new = (tokens + ["", ""])[:2]
    else:
        half = (len(rest) - 1) // 2
        old, new = rest[:half], rest[half + 1 :]
        if old[2:] != new[2:]:
            old, _, new = rest.partition(" b/")
            new = "b/" + new
    return _strip_prefix(old, "a/"), _strip_prefix(new, "b/")


def _parse_hunk(lines: Sequence[str], index: int) -> tuple[Hunk, int]:
    """The hunk whose header is `lines[index]`, read by its line counts (so content lines that look like
    headers stay content), and the index after it."""
    match = _HUNK_HEADER.match(lines[index])
    if match is None:
        raise PatchError(f"malformed hunk header {lines[index]!r}")
    old_count = int(match[2]) if match[2] is not None else 1
    new_count = int(match[4]) if match[4] is not None else 1
    body: list[tuple[str, str]] = []
    index += 1
    while index < len(lines) and (old_count > 0 or new_count > 0 or lines[index].startswith("\\")):
        line = lines[index]
        index += 1
        if line.startswith("\\"):  # "\ No newline at end of file": the line before ends its file
            if body:
                tag, text = body[-1]
                body[-1] = (tag, text.removesuffix("\n"))
            continue
        tag = line[:1] or " "  # a context line that lost its space (stripped trailing whitespace)
        if tag not in " -+":
            raise PatchError(f"hunk line {line!r} is neither context, removal nor addition")
        body.append((tag, line[1:] + "\n"))
        old_count -= tag != "+"
        new_count -= tag != "-"
    if old_count > 0 or new_count > 0:
        raise PatchError(f"hunk {match[0]!r} ends before its last line")
    return Hunk(int(match[1]), tuple(body)), index


def parse_unified_diff(text: str) -> list[FilePatch]:
    """Every file's change in `text`, git's output (renames, copies, creations, deletions, quoted names) or a
    plain `diff -u`'s. Lines that belong to no file (a commit message) are skipped."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    files: list[_FileBuilder] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        current = files[-1] if files else None
        if line.startswith("diff --git "):
            files.append(_FileBuilder(*_git_header_paths(line), hunks=[]))
        elif line.startswith("--- ") and index + 1 < len(lines) and lines[index + 1].startswith("+++ "):
            if current is None or current.has_paths or current.hunks:
                current = _FileBuilder(None, None, [])
                files.append(current)
            current.old_path = _marker_path(line[4:], "a/")
            current.new_path = _marker_path(lines[index + 1][4:], "b/")
            current.has_paths = True
            index += 1
        elif line.startswith("@@ ") and current is not None:
            hunk, index = _parse_hunk(lines, index)
            current.hunks.append(hunk)
            continue
        elif current is not None and not current.has_paths and not current.hunks:
            _read_extended_header(current, line)
        index += 1
    return [builder.build() for builder in files]


def _read_extended_header(current: _FileBuilder, line: str) -> None:
    """Git's lines between `diff --git` and the hunks: creation, deletion, rename, copy, binary content."""
    if line.startswith("new file mode"):
        current.old_path = None
    elif line.startswith("deleted file mode"):
        current.new_path = None
    elif line.startswith(("rename from ", "copy from ")):
        current.old_path = _unquote(line.split(" ", 2)[2])
        current.copied = line.startswith("copy")
    elif line.startswith(("rename to ", "copy to ")):
        current.new_path = _unquote(line.split(" ", 2)[2])
    elif line.startswith(("Binary files ", "GIT binary patch")):
        raise PatchError(f"the change of {current.new_path or current.old_path} is binary")


# ---------------------------------------------------------------------------------------------------------------
# From a patch to tool calls


def _split_lines(text: str) -> list[str]:
    """Lines with their newlines, split on '\\n' only (str.splitlines also splits on '\\r' and form feeds)."""
    pieces = text.split("\n")
    return [piece + "\n" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


def _locate(lines: list[str], old: list[str], expected: int) -> int | None:
    """Where the hunk's old lines are: at the line the header says (shifted by the hunks before), else the
    nearest place they occur, else None."""
    if 0 <= expected <= len(lines) and lines[expected : expected + len(old)] == old:
        return expected
    places = [start for start in range(len(lines) - len(old) + 1) if lines[start : start + len(old)] == old]
    return min(places, key=lambda start: abs(start - expected)) if places else None


def _unique_window(lines: list[str], start: int, length: int) -> tuple[int, int]:
    """How many lines before and after the hunk make its old text occur once in the file, as `edit_file`
    needs: three lines of context are not always enough (repeated blocks, an insertion with no context)."""
    text = "".join(lines)
    before = after = 0
    while True:
        window = "".join(lines[start - before : start + length + after])
        if window and text.find(window) == text.rfind(window):
            return before, after
        if start - before == 0 and start + length + after == len(lines):
            return before, after
        before += start - before > 0
        after += start + length + after < len(lines)


def _hunk_edits(hunks: Sequence[Hunk], content: str | None) -> list[tuple[str, str]]:
    """(old_str, new_str) for each hunk: its old and new sides, widened to be unique where the file's content
    is known (as read), each applied to the content before the next is located."""
    if content is None:
        return [("".join(hunk.old_lines), "".join(hunk.new_lines)) for hunk in hunks]
    lines = _split_lines(content)
    offset = 0
    edits = []
    for hunk in hunks:
        old, new = hunk.old_lines, hunk.new_lines
        start = _locate(lines, old, hunk.old_start - (1 if old else 0) + offset)
        if start is None:  # not in the file as read: ask for the edit anyway, the tool will say it failed
            edits.append(("".join(old), "".join(new)))
            continue
        before, after = _unique_window(lines, start, len(old))
        end = start + len(old)
        edits.append(
            (
                "".join(lines[start - before : end + after]),
                "".join(lines[start - before : start] + new + lines[end : end + after]),
            )
        )
        lines[start:end] = new
        offset += len(new) - len(old)
    return edits


def _file_calls(change: FilePatch, content: str | None) -> list[ToolCall]:
    """The calls that make one file's change: rm for a deletion, write_file for a creation (or an empty file,
    which edit_file cannot anchor in), mv/cp for a rename/copy, then edit_file per hunk."""
    if change.new_path is None:
        assert change.old_path is not None
        return [ToolCall("run_command", {"command": f"rm -f {shlex.quote(change.old_path)}"})]
    new_text = "".join(line for hunk in change.hunks for line in hunk.new_lines)
    if change.old_path is None:
        return [ToolCall("write_file", {"path": change.new_path, "content": new_text})]
    calls = []
    if change.old_path != change.new_path:
        parent = posixpath.dirname(change.new_path)
        mkdir = f"mkdir -p {shlex.quote(parent)} && " if parent else ""
        verb = "cp" if change.copied else "mv"
        command = f"{mkdir}{verb} {shlex.quote(change.old_path)} {shlex.quote(change.new_path)}"
        calls.append(ToolCall("run_command", {"command": command}))
    if content == "" and change.hunks:
        return [*calls, ToolCall("write_file", {"path": change.new_path, "content": new_text})]
    calls.extend(
        ToolCall("edit_file", {"path": change.new_path, "old_str": old, "new_str": new})
        for old, new in _hunk_edits(change.hunks, content)
    )
    return calls


def patch_tool_calls(patch: str, contents: Mapping[str, str] | None = None) -> list[ToolCall]:
    """The MCP tool calls that turn the pre-image into the patch's post-image. `contents` maps paths to the
    files as read before the change; where a file's is given, each edit's old_str is made unique in it."""
    calls = []
    for change in parse_unified_diff(patch):
        content = (contents or {}).get(change.old_path) if change.old_path else None
        calls.extend(_file_calls(change, content))
    return calls


# ---------------------------------------------------------------------------------------------------------------
# Reading the conversation


@dataclass(frozen=True)
class _MadeCall:
    """A tool call the assistant made earlier in the conversation, and its result's text (None: no result)."""

    call: ToolCall
    result: str | None


def _text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _arguments(function: Mapping[str, Any]) -> dict[str, Any]:
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except (TypeError, json.JSONDecodeError):
        return {}
    return arguments if isinstance(arguments, dict) else {}


def _made_calls(messages: Sequence[Mapping[str, Any]]) -> list[_MadeCall]:
    results = {
        message.get("tool_call_id"): _text(message.get("content"))
        for message in messages
        if message.get("role") == "tool"
    }
    made = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            made.append(
                _MadeCall(ToolCall(str(function.get("name", "")), _arguments(function)), results.get(call.get("id")))
            )
    return made


def _is_error(result: str | None) -> bool:
    """Whether a tool's result reports a failure: an `is_error`/`error` field, or text that starts with Error."""
    if result is None:
        return False
    try:
        parsed = json.loads(result)
    except json.JSONDecodeError:
        return result.lstrip().lower().startswith("error")
    if isinstance(parsed, str):
        return parsed.lstrip().lower().startswith("error")
    return isinstance(parsed, dict) and bool(parsed.get("is_error") or parsed.get("error"))


def _read_contents(made: Iterable[_MadeCall]) -> dict[str, str]:
    """The files the conversation has read whole, by the path the assistant asked for."""
    contents = {}
    for item in made:
        if item.call.name != "read_file" or item.result is None or _is_error(item.result):
            continue
        try:
            result = json.loads(item.result)
        except json.JSONDecodeError:
            continue
        if isinstance(result, dict) and isinstance(result.get("content"), str) and not result.get("truncated"):
            contents[str(item.call.arguments.get("path"))] = result["content"]
    return contents


def _match(solutions: Sequence[Solution], instruction: str) -> Solution | None:
    """The solution whose problem statement the instruction holds (the longest, should several fit)."""
    fitting = [s for s in solutions if s.problem_statement.strip() and s.problem_statement.strip() in instruction]
    return max(fitting, key=lambda s: len(s.problem_statement.strip()), default=None)


# ---------------------------------------------------------------------------------------------------------------
# The scripts


@dataclass(frozen=True)
class _Reply:
    """What the model answers: one tool call, or a final text."""

    content: str | None = None
    tool_call: ToolCall | None = None


def _solve_plan(solution: Solution, contents: Mapping[str, str]) -> list[ToolCall]:
    """Every tool call of the solve script, in order. Its length does not depend on what the reads return,
    so the step a conversation is at is the number of calls made so far."""
    changes = parse_unified_diff(solution.patch)
    reads = dict.fromkeys(change.old_path for change in changes if change.old_path is not None)
    plan = [ToolCall("list_directory", {"path": "."})]
    plan += [ToolCall("read_file", {"path": path}) for path in reads]
    plan += patch_tool_calls(solution.patch, contents)
    if solution.test_command:
        plan.append(ToolCall("run_command", {"command": solution.test_command}))
    return [*plan, ToolCall("workspace_diff", {})]


def _solve(solutions: Sequence[Solution], messages: Sequence[Mapping[str, Any]]) -> _Reply:
    """The next step of the solve script; a failed tool call is reported at the end, never retried."""
    instruction = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    solution = _match(solutions, instruction)
    if solution is None:
        return _Reply(content=UNKNOWN_PROBLEM)
    made = _made_calls(messages)
    try:
        plan = _solve_plan(solution, _read_contents(made))
    except PatchError as error:
        return _Reply(content=f"I cannot replay the fix of this problem: {error}")
    if len(made) < len(plan):
        return _Reply(tool_call=plan[len(made)])
    summary = solution.problem_statement.strip().splitlines()[0][:120]
    failed = sum(_is_error(item.result) for item in made)
    if failed:
        return _Reply(content=f"Attempted a fix, but {failed} tool call(s) failed: {summary}")
    return _Reply(content=f"Fixed: {summary}")


def _mini_plan(solution: Solution) -> list[ToolCall]:
    """mini-swe-agent's bash calls for a solution: the patch applied from a heredoc, the tests, the submission."""
    delimiter = "EVAL_PIPELINE_PATCH"
    while delimiter in solution.patch:
        delimiter += "_"
    patch = solution.patch if solution.patch.endswith("\n") else solution.patch + "\n"
    plan = [ToolCall("bash", {"command": f"git apply --whitespace=nowarn - <<'{delimiter}'\n{patch}{delimiter}"})]
    if solution.test_command:
        plan.append(ToolCall("bash", {"command": solution.test_command}))
    return [*plan, ToolCall("bash", {"command": f"echo {MINI_SUBMIT} && git diff"})]


def _mini_solve(solutions: Sequence[Solution], messages: Sequence[Mapping[str, Any]]) -> _Reply:
    """The next bash call of the mini-solve script (mini-swe-agent wants a tool call in every reply)."""
    instruction = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    solution = _match(solutions, instruction)
    if solution is None:
        return _Reply(content=UNKNOWN_PROBLEM)
    made, plan = _made_calls(messages), _mini_plan(solution)
    return _Reply(content="THOUGHT: next step of the fix.", tool_call=plan[min(len(made), len(plan) - 1)])


def _offered_tools(body: Mapping[str, Any]) -> set[str]:
    tools = body.get("tools") or []
    return {
        str(tool.get("function", {}).get("name"))
        for tool in tools
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict)
    }


def _within_offer(reply: _Reply, offered: set[str]) -> _Reply:
    """A model can only call the tools it is offered: without the one it needs, it says so and stops."""
    if reply.tool_call is None or reply.tool_call.name in offered:
        return reply
    return _Reply(content=f"I cannot go on: no tool named {reply.tool_call.name!r} is offered.")


# ---------------------------------------------------------------------------------------------------------------
# The wire protocol


def _tokens(value: Any) -> int:
    """A deterministic token estimate, a quarter of the characters, as usage needs some count."""
    return math.ceil(len(json.dumps(value, ensure_ascii=False, sort_keys=True)) / 4)


def _error_body(message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


@dataclass(frozen=True)
class _Response:
    status: int
    body: dict[str, Any]
    headers: tuple[tuple[str, str], ...] = ()


def _completion(body: Mapping[str, Any], reply: _Reply, step: int) -> dict[str, Any]:
    """The standard `chat.completion` object for a reply."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_call is not None:
        message["tool_calls"] = [
            {
                "id": f"call_{step:04d}",
                "type": "function",
                "function": {"name": reply.tool_call.name, "arguments": json.dumps(reply.tool_call.arguments)},
            }
        ]
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:24]
    prompt_tokens, completion_tokens = _tokens(body["messages"]), _tokens(message)
    return {
        "id": f"chatcmpl-{digest}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if reply.tool_call is not None else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _stream_events(completion: Mapping[str, Any], include_usage: bool) -> bytes:
    """The completion as server-sent `chat.completion.chunk` events, for clients that ask to stream: the
    message in one delta, then the finish reason, then (when asked) the usage, then [DONE]."""
    choice = completion["choices"][0]
    delta = dict(choice["message"])
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": 0, **call} for call in delta["tool_calls"]]
    head = {key: completion[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks = [
        head | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        head | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
    ]
    if include_usage:
        chunks.append(head | {"choices": [], "usage": completion["usage"]})
    return "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks).encode() + b"data: [DONE]\n\n"


class ScriptedModelServer:
    """The scripted model on a loopback HTTP server in a background thread; a context manager.

    `script` is the default script (a request's model `scripted-<script>` overrides it); the failing scripts
    fail the server's first `failing_requests` of their requests (None: all), `rate-limited` with 429 and
    `server-error` with `error_status`, then solve. `requests` holds every authorized request's JSON body.
    """

    def __init__(
        self,
        solutions: Iterable[Solution] = (),
        *,
        script: str = "solve",
        failing_requests: int | None = 1,
        error_status: int = 503,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if script not in SCRIPTS:
            raise ValueError(f"script must be one of {SCRIPTS}, got {script!r}")
        if not 500 <= error_status <= 599:
            raise ValueError(f"error_status must be a 5xx status, got {error_status}")
        self.solutions = tuple(solutions)
        self.script = script
        self.failing_requests = failing_requests
        self.error_status = error_status
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self._failed = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _Handler)
        self._httpd.scripted_model = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = cast(tuple[str, int], self._httpd.server_address[:2])  # an AF_INET server's
        return f"http://{host}:{port}/v1"

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-model", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def authorized(self, header: str | None) -> bool:
        return self.api_key is None or hmac.compare_digest(header or "", f"Bearer {self.api_key}")

    def models(self) -> dict[str, Any]:
        data = [{"id": MODEL_PREFIX + s, "object": "model", "created": 0, "owned_by": "eval_pipeline"} for s in SCRIPTS]
        return {"object": "list", "data": data}

    def chat_completion(self, body: Any) -> _Response:
        """The answer to one chat completion request's body."""
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return _Response(400, _error_body("'model' must be a string", "invalid_request_error", None))
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            return _Response(
                400, _error_body("'messages' must be a non-empty list of objects", "invalid_request_error", None)
            )
        with self._lock:
            self.requests.append(body)
        script = self._script_of(body["model"])
        if script is None:
            # As OpenAI words it (clients classify errors by their words): the scripts are listed at /v1/models.
            message = f"The model {body['model']!r} does not exist or you do not have access to it."
            return _Response(404, _error_body(message, "invalid_request_error", "model_not_found"))
        if script in ("rate-limited", "server-error") and self._take_failure():
            return self._failure(script)
        step = len(_made_calls(messages))
        if script == "loop":
            reply = _Reply(tool_call=ToolCall("list_directory", {"path": "."}))
        elif script == "mini-loop":
            reply = _Reply(content="THOUGHT: look around.", tool_call=ToolCall("bash", {"command": "ls -la"}))
        elif script == "chatter":
            reply = _Reply(content="The bug is probably in the parser; I would look there first.")
        elif script == "mini-solve":
            reply = _mini_solve(self.solutions, messages)
        else:
            reply = _solve(self.solutions, messages)
        return _Response(200, _completion(body, _within_offer(reply, _offered_tools(body)), step))

    def _script_of(self, model: str) -> str | None:
        if not model.startswith(MODEL_PREFIX):
            return self.script
        name = model[len(MODEL_PREFIX) :]
        return name if name in SCRIPTS else None

    def _take_failure(self) -> bool:
        with self._lock:
            if self.failing_requests is not None and self._failed >= self.failing_requests:
                return False
            self._failed += 1
            return True

    def _failure(self, script: str) -> _Response:
        if script == "rate-limited":
            body = _error_body("Rate limit reached (scripted).", "requests", "rate_limit_exceeded")
            return _Response(429, body, (("Retry-After", "0"),))
        body = _error_body("The server had an error while processing your request (scripted).", "server_error", None)
        return _Response(self.error_status, body, (("Retry-After", "0"),))


class _Handler(BaseHTTPRequestHandler):
    """The HTTP side: routes, authorization and JSON; the answers are ScriptedModelServer's."""

    protocol_version = "HTTP/1.1"  # keep-alive, as the clients of real APIs expect
    disable_nagle_algorithm = True  # headers and body go out in two writes: Nagle would hold the body ~40 ms

    @property
    def model(self) -> ScriptedModelServer:
        return self.server.scripted_model  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the server runs inside tests and a CLI whose output is the user's."""

    def do_GET(self) -> None:
        if not self._authorize():
            return
        if self.path.split("?", 1)[0].rstrip("/") == "/v1/models":
            self._send(_Response(200, self.model.models()))
        else:
            self._send(_Response(404, _error_body(f"unknown path {self.path}", "invalid_request_error", None)))

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self._authorize():
            return
        if self.path.split("?", 1)[0].rstrip("/") != "/v1/chat/completions":
            self._send(_Response(404, _error_body(f"unknown path {self.path}", "invalid_request_error", None)))
            return
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            self._send(_Response(400, _error_body(f"the body is not JSON: {error}", "invalid_request_error", None)))
            return
        response = self.model.chat_completion(body)
        if response.status == 200 and body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._send_bytes(200, _stream_events(response.body, include_usage), "text/event-stream", ())
        else:
            self._send(response)

    def _authorize(self) -> bool:
        if self.model.authorized(self.headers.get("Authorization")):
            return True
        self._send(
            _Response(401, _error_body("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"))
        )
        return False

    def _send(self, response: _Response) -> None:
        self._send_bytes(response.status, json.dumps(response.body).encode(), "application/json", response.headers)

    def _send_bytes(self, status: int, payload: bytes, content_type: str, headers: Iterable[tuple[str, str]]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)


# ---------------------------------------------------------------------------------------------------------------
# Solutions of the project's tasks, and the command line


def _test_command(task: Task) -> str | None:
    """pytest on the task's test files, for kinds that name them (SWE-bench instances); the tests the fix makes
    pass are added only at grading, so these are the files as they stand in the workspace."""
    test_files = getattr(task, "test_files", ())
    return f"python -m pytest -q {' '.join(shlex.quote(path) for path in test_files)}" if test_files else None


def solutions_from_tasks(tasks: Iterable[Task]) -> list[Solution]:
    """A solution per task that has its reference as a patch (terminal tasks' is a script: left out); the
    instruction is what the agent is told, so the solve script finds it in the agent's first message."""
    return [
        Solution(task.instruction, task.reference_patch, _test_command(task)) for task in tasks if task.reference_patch
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--benchmark", choices=["demo"], default="demo", help="whose solutions the model knows")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--script", choices=SCRIPTS, default="solve")
    parser.add_argument(
        "--rate-limited-requests",
        type=int,
        default=1,
        help="requests the failing scripts fail before they solve (-1: every request)",
    )
    parser.add_argument("--error-status", type=int, default=503, help="the server-error script's status")
    parser.add_argument("--api-key", help="the Bearer key requests must carry (default: any)")
    args = parser.parse_args(argv)

    from eval_pipeline.tasks.demo import build_demo_benchmark  # builds git repositories: only when serving

    with tempfile.TemporaryDirectory(prefix="scripted-model-") as mirrors:
        solutions = solutions_from_tasks(build_demo_benchmark(Path(mirrors)).instances)
    server = ScriptedModelServer(
        solutions,
        script=args.script,
        failing_requests=None if args.rate_limited_requests < 0 else args.rate_limited_requests,
        error_status=args.error_status,
        api_key=args.api_key,
        host=args.host,
        port=args.port,
    )
    with server:
        print(f"scripted model ({args.script}, {len(solutions)} known problems) at {server.base_url}", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
