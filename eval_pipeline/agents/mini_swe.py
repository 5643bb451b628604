"""The `mini-swe-agent` agent: the SWE-bench team's reference agent (mini-swe-agent), run on the trial's workspace.

mini-swe-agent is an optional extra (`pip install 'eval-pipeline[mini]'`), imported only when the agent is
made, so the code location loads without it. Its loop (`DefaultAgent`), its model class (litellm, tool
calling with its one `bash` tool) and its prompts (its shipped `swebench.yaml`, overridable per variant) are
its own; what this adapter supplies is its environment: every command the agent runs goes to the trial's
tool server as a `run_command` call over the trial's MCP session (agents/tool_session.py), as the llm agent's do, so
the agent runs in the worker and reaches the environment only through MCP, on every backend. mini calls its
environment synchronously, so the session lives in an anyio blocking portal (an event loop in a thread) and
each command is one `portal.call`.

Outcomes as for the llm agent: mini's step and cost limits are the agent's failure (`agent_limit`), its wall
time `agent_timeout`, a context window it overflows `agent_limit`, mini's own end on repeated badly formatted
replies `agent_error` (its trajectory kept); the model API's unavailability (after the variant's retries) is
infrastructure (`model_api_error`), its refusal of the request (401, 403, 404, another 400) the campaign's
configuration (`model_api_refused`, not retried); a submission is `completed`. Tokens, cost, steps and the
messages (each truncated) are kept in the trajectory.
"""

import copy
import importlib.metadata
import os
import shlex
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.from_thread

from eval_pipeline.agents.base import Agent, AgentLimitReached, AgentOutput, AgentStopped, AgentTask, AgentTimeout
from eval_pipeline.agents.llm import RETRIED_STATUS, Price
from eval_pipeline.common.foreign_text import valid_unicode_data
from eval_pipeline.common.outcomes import ModelAPIError, ModelAPIRefused
from eval_pipeline.common.text import from_environment, truncate
from eval_pipeline.sandbox import Workspace

if TYPE_CHECKING:
    from eval_pipeline.agents.tool_session import ToolSession

INSTALL_HINT = "the mini-swe-agent agent needs mini-swe-agent: pip install -e '.[mini]' in the project's checkout"
BASE_CONFIG = "swebench.yaml"  # mini-swe-agent's own config for SWE-bench (config/benchmarks/)
SUBMIT_LINE = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # mini's submission: a command's first output line
CONFIG_SECTIONS = ("agent", "model", "environment")


class MiniSweAgentMissing(ImportError, ValueError):  # noqa: N818 - named for what is missing
    """The `mini` extra is not installed: an ImportError, and a ValueError so that a campaign's validation
    reports it as the variant's problem (config/campaign_file.py) rather than crashing."""


def _import_mini() -> Any:
    """minisweagent, imported quietly: no banner on stdout (mini's, or litellm's when its cost map does not
    know a model: stdout is the report's, or `--json`'s), no cost map fetched from the network, and its
    global config directory (whose .env it loads into the environment) one of its own unless one is set."""
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("MSWEA_GLOBAL_CONFIG_DIR", str(Path(tempfile.gettempdir()) / "eval-pipeline-mini-swe-agent"))
    try:
        import minisweagent  # noqa: F401
        import minisweagent.agents.default  # noqa: F401
        import minisweagent.config  # noqa: F401
        import minisweagent.exceptions  # noqa: F401
        import minisweagent.models.litellm_model  # noqa: F401
    except ImportError as error:
        raise MiniSweAgentMissing(f"{INSTALL_HINT} ({error})") from error
    import litellm

    litellm.suppress_debug_info = True
    return minisweagent


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


class MiniSweAgent(Agent):
    """mini-swe-agent's DefaultAgent with a model behind an OpenAI-compatible endpoint.

    `model` is the endpoint's model name (sent through litellm's `openai/` provider); `base_url` (else
    $OPENAI_BASE_URL) and the key's variable name `api_key_env` say where. `step_limit` and `cost_limit`
    are mini's own limits (0: none); cost is reckoned from `price` (the campaign's price table for `model`)
    where given, else by litellm's model map (0 for a model it does not know). `config` overrides sections of
    mini's `swebench.yaml` (`agent`: its templates; `model`: observation and format-error templates,
    model_kwargs; `environment`: `timeout` of one command). All of it, with mini's version, is in the config
    hash. `max_wall_s` (or the task's own time limit, if shorter) bounds the run.
    """

    name = "mini-swe-agent"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        step_limit: int = 250,
        cost_limit: float = 3.0,
        config: dict[str, Any] | None = None,
        temperature: float = 0.0,
        max_wall_s: float = 1800.0,
        price: dict[str, float] | None = None,
        max_retries: int = 4,
    ) -> None:
        model = from_environment(model)  # `${OPENAI_MODEL}` as for the llm agent: resolved, then hashed
        params = {key: value for key, value in locals().items() if key not in ("self", "__class__")}
        _import_mini()  # a missing extra fails when the variant is made, with how to install it
        if not model.strip():
            raise ValueError("mini-swe-agent agent: model must not be empty")
        if step_limit < 0 or cost_limit < 0:
            raise ValueError("mini-swe-agent agent: step_limit and cost_limit must be >= 0 (0: no limit)")
        if set(config or {}) - set(CONFIG_SECTIONS):
            raise ValueError(f"mini-swe-agent agent: config sections are {CONFIG_SECTIONS}, not {sorted(config or {})}")
        Price(**(price or {}))  # a misspelt price field fails at load
        super().__init__(**{key: value for key, value in params.items() if value is not None})

    @property
    def config(self) -> dict[str, Any]:
        """The params and mini-swe-agent's version: its prompts and loop are part of the agent."""
        return {**super().config, "mini_swe_agent": importlib.metadata.version("mini-swe-agent")}

    def mini_config(self) -> dict[str, Any]:
        """mini's swebench.yaml with this variant's limits and overrides."""
        import yaml

        mini = _import_mini()
        base = yaml.safe_load(mini.config.get_config_path(BASE_CONFIG).read_text())
        merged = _merge({section: base.get(section, {}) for section in CONFIG_SECTIONS}, self.params.get("config", {}))
        merged["agent"] |= {"step_limit": self.params["step_limit"], "cost_limit": self.params["cost_limit"]}
        return merged

    def solve(self, task: AgentTask, workspace: Workspace) -> AgentOutput:
        from eval_pipeline.agents.tool_session import innermost, open_tool_session  # when a session opens: llm.py

        mini = _import_mini()
        config = self.mini_config()
        base_url = self.params.get("base_url") or os.environ.get("OPENAI_BASE_URL")
        if not base_url:
            raise ModelAPIError("mini-swe-agent agent: no endpoint: set the variant's base_url or OPENAI_BASE_URL")
        model = _model_class(mini)(
            price=Price(**self.params["price"]) if "price" in self.params else None,
            max_retries=self.params["max_retries"],
            **_merge(
                config["model"],
                {
                    "model_name": f"openai/{self.params['model']}",
                    "model_kwargs": {
                        "api_base": base_url,
                        "api_key": os.environ.get(self.params["api_key_env"]) or "none",
                        "temperature": self.params["temperature"],
                        "seed": task.seed,
                        "max_retries": 0,  # the openai client's own: retries are the model class's (max_retries)
                    },
                    "cost_tracking": "ignore_errors",
                },
            ),
        )
        wall_s = min(self.params["max_wall_s"], task.timeout_s or float("inf"))
        agent_config = config["agent"] | {"wall_time_limit_seconds": max(1, int(wall_s)), "output_path": None}
        try:
            with anyio.from_thread.start_blocking_portal() as portal:
                with portal.wrap_async_context_manager(
                    open_tool_session(workspace, base_revision=task.base_commit)
                ) as session:
                    environment = _environment_class(mini)(portal, session, **config["environment"])
                    agent = mini.agents.default.DefaultAgent(model, environment, **agent_config)
                    return self._run(mini, agent, task)
        except BaseExceptionGroup as group:  # the session's task groups wrap what the run raised
            raise innermost(group) from None

    def _run(self, mini: Any, agent: Any, task: AgentTask) -> AgentOutput:
        import litellm

        try:
            result = agent.run(task.instruction)
        except litellm.exceptions.ContextWindowExceededError as error:
            raise AgentLimitReached(
                f"the agent overflowed the model's context window: {error}", output=_output(agent, "context window")
            ) from None
        status = result.get("exit_status", "")
        if status == "Submitted":
            return _output(agent, "completed")
        if status == "TimeExceeded":
            raise AgentTimeout("the agent ran over its wall time", output=_output(agent, "wall_time"))
        if status == "LimitsExceeded":
            stop = "step limit" if 0 < agent.config.step_limit <= agent.n_calls else "cost limit"
            raise AgentLimitReached(f"the agent reached its {stop}", output=_output(agent, stop))
        # RepeatedFormatError and anything else mini ends on: the agent's own failure (agent_error), with what it
        # did until then.
        raise AgentStopped(f"mini-swe-agent ended with {status or 'no exit status'}", output=_output(agent, status))


def _model_class(mini: Any) -> type:
    """mini's litellm model with cost from the campaign's price table and the variant's retries."""
    import litellm
    import openai
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

    base = mini.models.litellm_model.LitellmModel

    class PricedLitellmModel(mini.models.litellm_model.LitellmModel):  # `base`: mypy takes no variable as a base
        abort_exceptions = [*base.abort_exceptions, ModelAPIError, ModelAPIRefused]

        def __init__(self, *, price: Price | None, max_retries: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.price = price
            self.max_retries = max_retries

        def _query(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
            """mini's request, retried as the variant says unless the API refused it (as the llm agent's);
            what still fails is ModelAPIError or ModelAPIRefused, which mini's own retrying (in query(): 10
            attempts, waits of 4-60 s) lets through at once. The conversation is sent as valid Unicode (the
            model's own lone surrogates as U+FFFD: common/foreign_text.py), as the llm agent's is."""
            retrying = Retrying(
                reraise=True,
                stop=stop_after_attempt(self.max_retries + 1),
                wait=wait_exponential(multiplier=1, min=1, max=60),
                retry=retry_if_exception(
                    lambda error: not isinstance(error, tuple(self.abort_exceptions)) and not _refused(error)
                ),
            )
            try:
                return retrying(super()._query, valid_unicode_data(messages), **kwargs)
            except litellm.exceptions.ContextWindowExceededError:
                raise  # the agent's: it filled the context window
            except openai.OpenAIError as error:  # litellm's errors are the openai client's
                failure = f"{type(error).__name__}: {str(error)[:500]}"
                if _refused(error):
                    raise ModelAPIRefused(
                        f"the model API at {self.config.model_kwargs['api_base']} refused: {failure}"
                    ) from error
                raise ModelAPIError(f"the model API failed: {failure}") from error

        def _calculate_cost(self, response: Any) -> dict[str, float]:
            if self.price is None:
                return super()._calculate_cost(response)
            usage = getattr(response, "usage", None)
            spent_in = int(getattr(usage, "prompt_tokens", 0) or 0)
            spent_out = int(getattr(usage, "completion_tokens", 0) or 0)
            return {"cost": self.price.cost(spent_in, spent_out)}

    return PricedLitellmModel


def _refused(error: BaseException) -> bool:
    """The API refused the request itself (a status the llm agent does not retry either), rather than being
    unavailable: a context window the agent filled (a 400) is told apart before this is asked.

    The status is the one the server sent, from the openai client's error that litellm's wraps: litellm
    re-classes errors by their words (a 404 naming a model `…-rate-limited` becomes its RateLimitError, 429)."""
    status, seen = None, set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(sent := getattr(cause, "status_code", None), int):
            status = sent
        cause = cause.__cause__ or cause.__context__
    return status is not None and status not in RETRIED_STATUS


def _environment_class(mini: Any) -> type:
    """mini's Environment protocol over the trial's MCP session: each command is a `run_command` call."""
    Submitted = mini.exceptions.Submitted  # noqa: N806 - mini's exception class

    class ToolServerEnvironment:
        def __init__(self, portal: Any, session: "ToolSession", timeout: float = 60, **ignored: Any) -> None:
            # mini's other environment settings (cwd, env, interpreter, its docker class) are its container's;
            # commands here run in the repository root, in the environment the trial's tool server sets up.
            self.portal = portal
            self.session = session
            self.config = {"timeout": timeout, "ignored": sorted(ignored)}

        def execute(self, action: dict, cwd: str = "", *, timeout: float | None = None) -> dict[str, Any]:
            command = action.get("command", "")
            if cwd:
                command = f"cd {shlex.quote(cwd)} && {command}"
            started = time.monotonic()
            result = self.portal.call(
                self.session.call, "run_command", {"command": command, "timeout_s": timeout or self.config["timeout"]}
            )
            structured = result.structured if isinstance(result.structured, dict) else {}
            if result.is_error or not structured:
                return {"output": result.text, "returncode": -1, "exception_info": f"the tool failed: {result.text}"}
            stdout, stderr = structured.get("stdout", ""), structured.get("stderr", "")
            output = {
                "output": stdout + stderr,
                "returncode": structured.get("exit_code", -1),
                "exception_info": "",
                "extra": {"duration_s": round(time.monotonic() - started, 3)},
            }
            if structured.get("timed_out"):
                output["exception_info"] = (
                    f"the command ran over its {timeout or self.config['timeout']} s and was killed"
                )
            elif structured.get("oom_killed"):
                output["exception_info"] = "the command was killed at the memory ceiling"
            elif structured.get("storage_exceeded"):
                output["exception_info"] = "the command was ended for filling more disk than the trial's quota"
            lines = stdout.lstrip().splitlines(keepends=True)
            if lines and lines[0].strip() == SUBMIT_LINE and output["returncode"] == 0:
                submission = "".join(lines[1:])
                raise Submitted(
                    {
                        "role": "exit",
                        "content": submission,
                        "extra": {"exit_status": "Submitted", "submission": submission},
                    }
                )
            return output

        def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
            return {"timeout": self.config["timeout"], **kwargs}

        def serialize(self) -> dict:
            return {"info": {"config": {"environment": self.config, "environment_type": "eval_pipeline.mcp"}}}

    return ToolServerEnvironment


def _usage(message: dict[str, Any]) -> tuple[int, int]:
    response = message.get("extra", {}).get("response") or {}
    usage = response.get("usage") or {} if isinstance(response, dict) else {}
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


def _reply_text(response: Any) -> str:
    """The model's words in a response mini kept with a badly formatted reply (a dict, or its repr)."""
    try:
        return str(response["choices"][0]["message"]["content"] or "")
    except (TypeError, KeyError, IndexError):
        return str(response)


def _tool_call(step: int, command: str, result: str, is_error: bool, duration_s: Any = None) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "step": step,
        "tool": "bash",
        "arguments": {"command": truncate(command)},
        "result": truncate(result),
        "is_error": is_error,
        "duration_s": duration_s,
    }


def _output(agent: Any, stop_reason: str) -> AgentOutput:
    """mini's messages as the trajectory (message, model_call, tool_call entries, each truncated), with its
    spend: tokens summed from the responses' usage, cost and model calls as mini counted them. The command
    that submitted has no observation in mini's messages (the exit message is its answer): it is kept as a
    tool call whose result is the submission."""
    trajectory: list[dict[str, Any]] = []
    pending: dict[str, str] = {}  # the last model call's commands without a result yet, by tool call id
    input_tokens = output_tokens = step = 0
    for message in agent.messages:
        role, extra = message.get("role"), message.get("extra", {})
        content = message.get("content")
        text = content if isinstance(content, str) else str(content or "")
        if role == "assistant" or "response" in extra:  # a model call (a badly formatted one too)
            step += 1
            spent_in, spent_out = _usage(message)
            input_tokens, output_tokens = input_tokens + spent_in, output_tokens + spent_out
            actions = extra.get("actions", [])
            pending = {
                action.get("tool_call_id", str(i)): action.get("command", "") for i, action in enumerate(actions)
            }
            trajectory.append(
                {
                    "type": "model_call",
                    "step": step,
                    "content": truncate(text if role == "assistant" else _reply_text(extra["response"])),
                    "commands": [truncate(command) for command in pending.values()],
                    "input_tokens": spent_in,
                    "output_tokens": spent_out,
                    "cost_usd": round(float(extra.get("cost", 0.0)), 6),
                }
            )
            if role == "assistant":
                continue
        if "raw_output" in extra:  # an observation: one command's result
            key = message.get("tool_call_id") or next(iter(pending), "")
            command = pending.pop(key, "")
            trajectory.append(_tool_call(step, command, text, extra.get("returncode") != 0, extra.get("duration_s")))
            continue
        if role == "exit" and extra.get("exit_status") == "Submitted":
            trajectory += [_tool_call(step, command, text, False) for command in pending.values()]
            pending = {}
        entry = {"type": "message", "role": role, "content": truncate(text)}
        if "exit_status" in extra:
            entry["exit_status"] = extra["exit_status"]
        trajectory.append(entry)
    return AgentOutput(
        trajectory=trajectory,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=round(agent.cost, 6),
        steps=agent.n_calls,
        stop_reason=stop_reason,
    )
