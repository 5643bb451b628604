"""The `llm` agent: a tool-calling loop against any OpenAI-compatible Chat Completions endpoint.

The model's tools are the trial's tool server's (agents/tool_session.py), so the agent
runs in the worker and reaches the environment only through MCP. What it may
spend is bounded (steps, tokens, wall time, cost) and what it spent is recorded
(tokens in and out, cost from the campaign's price table, steps, why it
stopped), with the whole trajectory, each part truncated, for the report.

Who is to blame decides the outcome: the model API's rate limits, 5xx answers,
timeouts and refused connections are infrastructure (retried here with
backoff, then `model_api_error`, never scored); a request it refuses for a
reason of its own (a bad key, an unknown model) is the campaign's
configuration (`model_api_refused`, not retried, never scored); running out of
steps, tokens, cost or context window is the agent's failure (`agent_limit`),
and out of time `agent_timeout`, both scored, with the trajectory up to there
kept.
"""

import json
import os
import random
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import httpx

from eval_pipeline.agents.base import Agent, AgentLimitReached, AgentOutput, AgentTask, AgentTimeout
from eval_pipeline.common.foreign_text import valid_unicode_data
from eval_pipeline.common.outcomes import ModelAPIError, ModelAPIRefused
from eval_pipeline.common.text import from_environment, truncate
from eval_pipeline.sandbox import Workspace

if TYPE_CHECKING:
    from eval_pipeline.agents.tool_session import ToolSession

SYSTEM_PROMPT = (
    "You are a software engineer working in a repository checkout. Use the tools to inspect the code, make "
    "the change the task asks for, and run tests. Reply without a tool call when you are done."
)
PROMPT_TEMPLATE = 'Resolve this task in the repository.\n\n<task id="{instance_id}">\n{instruction}\n</task>'
RETRIED_STATUS = {408, 409, 429, 500, 502, 503, 504}
# How OpenAI-compatible servers (OpenAI, vLLM, llama.cpp, Ollama) word a request over the context window.
CONTEXT_WINDOW = re.compile(r"context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long", re.I)


class ContextWindowExceeded(Exception):  # noqa: N818 - named for what happened
    """The conversation outgrew the model's context window: the agent's budget, like its steps."""


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens, from the campaign's price table."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


@dataclass
class Spend:
    """What the loop has used so far, against its limits."""

    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    started: float = field(default_factory=time.monotonic)
    trajectory: list[dict[str, Any]] = field(default_factory=list)

    def output(self, stop_reason: str) -> AgentOutput:
        return AgentOutput(
            trajectory=self.trajectory,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=round(self.cost_usd, 6),
            steps=self.steps,
            stop_reason=stop_reason,
        )


class ChatModel:
    """One OpenAI-compatible endpoint: requests with retries, failures typed by who is to blame."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float, max_retries: int) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)
        self.max_retries = max_retries

    async def complete(self, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """The response to `body`, and how many retries it took. ModelAPIError when the API stays unavailable
        (rate limits, 5xx, timeouts, answers that hold no completion) or refuses the request for a reason of its
        own (a bad key). The conversation is sent as valid Unicode (the model's own lone surrogates as U+FFFD:
        common/foreign_text.py), so no answer of the model's makes the next request unsendable."""
        for attempt in range(self.max_retries + 1):
            try:
                response = await self.client.post("/chat/completions", json=valid_unicode_data(body))
            except httpx.TransportError as error:  # timeouts, refused or dropped connections
                failure = f"{type(error).__name__}: {error}"
                wait_s = None
            else:
                if response.status_code == 200 and (completion := _completion(response)) is not None:
                    return completion, attempt
                failure = f"HTTP {response.status_code}: {response.text[:500]}"
                if response.status_code == 400 and CONTEXT_WINDOW.search(response.text):
                    raise ContextWindowExceeded(failure)
                if response.status_code != 200 and response.status_code not in RETRIED_STATUS:  # 200: no completion
                    raise ModelAPIRefused(f"the model API at {self.client.base_url} refused the request: {failure}")
                wait_s = _retry_after(response)
            if attempt < self.max_retries:
                await anyio.sleep(wait_s if wait_s is not None else min(60.0, 2**attempt) * random.uniform(0.5, 1.0))
        raise ModelAPIError(
            f"the model API at {self.client.base_url} failed {self.max_retries + 1} times; last: {failure}"
        )

    async def close(self) -> None:
        await self.client.aclose()


def _completion(response: httpx.Response) -> dict[str, Any] | None:
    """The completion a 200 answer holds, its bytes read as UTF-8 with any invalid sequence as U+FFFD (a model
    server may pass on the bytes its model made); None when it is no completion (not JSON, or no choice with a
    message): the endpoint's failure, retried as its other failures are."""
    try:
        completion = json.loads(response.content.decode("utf-8", errors="replace"))
        message = completion["choices"][0]["message"]
    except (ValueError, LookupError, TypeError):
        return None
    return completion if isinstance(message, dict) else None


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return min(60.0, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return None


def openai_tools(tools: list) -> list[dict[str, Any]]:
    """MCP tools as Chat Completions function tools."""
    return [
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description or "", "parameters": tool.input_schema},
        }
        for tool in tools
    ]


class LLMAgent(Agent):
    """A model behind an OpenAI-compatible endpoint, with the tool server's tools.

    `base_url` (else $OPENAI_BASE_URL) and the key's variable name (`api_key_env`, never its value) say
    where; `model`, the prompts and the sampling parameters what, all part of the variant's config hash so
    a changed prompt is a new variant; the trial's seed is sent as `seed`. `price` comes from the campaign's
    `prices` table for `model`. Limits: `max_steps` model calls, `max_tokens` in and out together,
    `max_cost_usd`, `max_wall_s` (or the task's own time limit, if shorter).
    """

    name = "llm"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        system_prompt: str = SYSTEM_PROMPT,
        prompt_template: str = PROMPT_TEMPLATE,
        temperature: float = 0.0,
        top_p: float | None = None,
        max_output_tokens: int | None = None,
        max_steps: int = 50,
        max_tokens: int | None = None,
        max_cost_usd: float | None = None,
        max_wall_s: float = 1800.0,
        price: dict[str, float] | None = None,
        max_retries: int = 4,
        request_timeout_s: float = 300.0,
        tool_output_chars: int = 20_000,
    ) -> None:
        model = from_environment(model)
        if not model.strip():
            raise ValueError("llm agent: model must not be empty")
        if max_steps < 1:
            raise ValueError(f"llm agent: max_steps must be at least 1, got {max_steps}")
        try:
            prompt_template.format(instance_id="", instruction="")
        except (KeyError, IndexError, ValueError) as error:
            raise ValueError(
                f"llm agent: prompt_template may use only {{instance_id}} and {{instruction}}: {error}"
            ) from None
        Price(**(price or {}))  # a misspelt price field fails at load
        if max_cost_usd is not None and not price:
            raise ValueError(f"llm agent: max_cost_usd needs a price for {model!r}: add it to the campaign's prices")
        params = {key: value for key, value in locals().items() if key not in ("self", "__class__")}
        super().__init__(**{key: value for key, value in params.items() if value is not None})

    def _sampling(self, seed: int) -> dict[str, Any]:
        params = self.params
        sampling = {"model": params["model"], "temperature": params["temperature"], "seed": seed}
        if "top_p" in params:
            sampling["top_p"] = params["top_p"]
        if "max_output_tokens" in params:
            sampling["max_tokens"] = params["max_output_tokens"]
        return sampling

    def _model(self) -> ChatModel:
        base_url = self.params.get("base_url") or os.environ.get("OPENAI_BASE_URL")
        if not base_url:
            raise ModelAPIError("llm agent: no endpoint: set the variant's base_url or OPENAI_BASE_URL")
        return ChatModel(
            base_url,
            os.environ.get(self.params["api_key_env"]),
            self.params["request_timeout_s"],
            self.params["max_retries"],
        )

    def solve(self, task: AgentTask, workspace: Workspace) -> AgentOutput:
        # The MCP client is imported by the agents that open a session, when they do (session_request.py).
        from mcp.shared.exceptions import MCPError

        from eval_pipeline.agents.tool_session import innermost

        try:
            return anyio.run(self._solve, task, workspace)
        except (BaseExceptionGroup, MCPError) as error:  # the session's task groups wrap what the loop raised
            raise innermost(error) from None

    async def _solve(self, task: AgentTask, workspace: Workspace) -> AgentOutput:
        from eval_pipeline.agents.tool_session import open_tool_session

        spend = Spend()
        wall_s = min(self.params["max_wall_s"], task.timeout_s or float("inf"))
        model = self._model()
        try:
            async with open_tool_session(workspace, base_revision=task.base_commit) as tools:
                with anyio.move_on_after(wall_s) as deadline:
                    stop_reason = await self._loop(task, tools, model, spend)
        finally:
            await model.close()
        if deadline.cancelled_caught:
            raise AgentTimeout(f"the agent ran over its {wall_s:.0f} s", output=spend.output("wall_time"))
        if stop_reason != "completed":
            raise AgentLimitReached(f"the agent reached its {stop_reason}", output=spend.output(stop_reason))
        return spend.output(stop_reason)

    def _over_budget(self, spend: Spend) -> str | None:
        params = self.params
        if spend.steps >= params["max_steps"]:
            return "step limit"
        if "max_tokens" in params and spend.input_tokens + spend.output_tokens >= params["max_tokens"]:
            return "token limit"
        if "max_cost_usd" in params and spend.cost_usd >= params["max_cost_usd"]:
            return "cost limit"
        return None

    async def _loop(self, task: AgentTask, tools: "ToolSession", model: ChatModel, spend: Spend) -> str:
        prompt = self.params["prompt_template"].format(instance_id=task.instance_id, instruction=task.instruction)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.params["system_prompt"]},
            {"role": "user", "content": prompt},
        ]
        spend.trajectory += [
            {"type": "message", "role": m["role"], "content": truncate(m["content"])} for m in messages
        ]
        specs = openai_tools(await tools.tools())
        price = Price(**self.params.get("price", {}))
        while (limit := self._over_budget(spend)) is None:
            try:
                response, retries = await model.complete(
                    {**self._sampling(task.seed), "messages": messages, "tools": specs}
                )
            except ContextWindowExceeded:
                return "context limit"
            spend.steps += 1
            usage = response.get("usage") or {}
            spent_in, spent_out = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
            spend.input_tokens += spent_in
            spend.output_tokens += spent_out
            spend.cost_usd += price.cost(spent_in, spent_out)
            choice = response["choices"][0]
            message = choice["message"]
            messages.append({key: message[key] for key in ("role", "content", "tool_calls") if message.get(key)})
            spend.trajectory.append(
                {
                    "type": "model_call",
                    "step": spend.steps,
                    "content": truncate(message.get("content") or ""),
                    "finish_reason": choice.get("finish_reason"),
                    "input_tokens": spent_in,
                    "output_tokens": spent_out,
                    "retries": retries,
                }
            )
            if not message.get("tool_calls"):
                return "completed"
            for call in message["tool_calls"]:
                messages.append(await self._call_tool(call, tools, spend))
        return limit

    async def _call_tool(self, call: dict[str, Any], tools: "ToolSession", spend: Spend) -> dict[str, Any]:
        """Run one tool call and return the message that answers it; arguments the model garbled are its
        own error, answered as such."""
        function = call["function"]
        started = time.monotonic()
        try:
            arguments = json.loads(function.get("arguments") or "{}")
            result = await tools.call(function["name"], arguments)
            text, is_error = result.text, result.is_error
        except json.JSONDecodeError as error:
            arguments, text, is_error = function.get("arguments"), f"Error: arguments are not JSON: {error}", True
        shown = truncate(text, self.params["tool_output_chars"])
        spend.trajectory.append(
            {
                "type": "tool_call",
                "step": spend.steps,
                "tool": function["name"],
                "arguments": arguments,
                "result": truncate(text),
                "is_error": is_error,
                "duration_s": round(time.monotonic() - started, 3),
            }
        )
        return {"role": "tool", "tool_call_id": call["id"], "content": shown}
