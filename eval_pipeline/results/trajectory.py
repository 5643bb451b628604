"""What agents did in chosen trials, for the HTML report: each trial's generation record, step by step.

`trajectories_for` reads the generation records of the failed trials (scored
and not resolved), or of trials chosen by id, from the artifact store;
`render_trajectories` shows them as HTML sections, one per trial, with an id
(`trajectory-<trial id>`) to link to. A trajectory is agent-controlled text
(model output, tool results): every piece of it is truncated and
HTML-escaped, so it never adds markup or script to the page.

A trial's id is its trial partition's key, `<instance id>|<trial>` (the trial
is `<variant>-s<seed>`, which is unique only within an instance).
"""

import json
import re
from collections.abc import Collection, Mapping, Sequence
from html import escape
from typing import Any

from eval_pipeline.common.text import truncate
from eval_pipeline.results.markdown import format_cost
from eval_pipeline.results.warehouse import ResultRow
from eval_pipeline.store.artifacts import ArtifactStore

TRAJECTORY_LIMIT = 20  # trials shown, at most
TEXT_LIMIT = 2000  # characters of any one text (a message, a model's output, a tool's arguments or result)
PREVIEW_LIMIT = 120  # characters of a step's one-line preview
STYLE = """.trajectory{border-top:1px solid #cbd5e0;margin-top:1.5em}.trajectory h3{margin-bottom:.3em}
.trajectory pre{white-space:pre-wrap;word-break:break-word;background:#f7fafc;padding:6px;margin:4px 0}
.trajectory summary{cursor:pointer;overflow-wrap:anywhere}.step{margin:2px 0}.step.error>summary{color:#c53030}
.trajectory dl{margin:4px 0}.trajectory dt{font-weight:600}"""


def trial_id(trial: ResultRow) -> str:
    """The trial's id in the report: its trial partition's key."""
    return f"{trial.instance_id}|{trial.trial}"


def is_failed(trial: ResultRow) -> bool:
    """A failure of the agent's: scored and not resolved (infrastructure outcomes are not scored)."""
    return trial.scored and not trial.resolved


def trajectories_for(
    trials: Sequence[ResultRow],
    store: ArtifactStore,
    chosen: Collection[str] | None = None,
    limit: int = TRAJECTORY_LIMIT,
) -> dict[str, dict[str, Any]]:
    """By trial id, at most `limit` trials' views: the failed trials, or those whose id is in `chosen`, by
    variant, instance and trial; each is its row's identity and outcome with its generation record's steps,
    stop reason, tokens, cost, error and trajectory. Trials without a stored generation are passed over."""
    picked = [t for t in trials if trial_id(t) in chosen] if chosen is not None else [t for t in trials if is_failed(t)]
    views: dict[str, dict[str, Any]] = {}
    for trial in sorted(picked, key=lambda t: (t.variant, t.instance_id, t.trial)):
        if len(views) >= limit:
            break
        generation = store.get(trial.generation_key) if trial.generation_key else None
        if generation is None:
            continue
        trajectory = generation.get("trajectory")
        views[trial_id(trial)] = {
            "trial": trial.trial,
            "variant": trial.variant,
            "instance_id": trial.instance_id,
            "slice": trial.slice,
            "outcome": trial.outcome,
            "status": generation.get("status", ""),
            "steps": generation.get("steps", trial.steps),
            "stop_reason": generation.get("stop_reason", trial.stop_reason),
            "input_tokens": generation.get("input_tokens", trial.input_tokens),
            "output_tokens": generation.get("output_tokens", trial.output_tokens),
            "cost_usd": generation.get("cost_usd", trial.cost_usd),
            "error": generation.get("error", ""),
            "trajectory": trajectory if isinstance(trajectory, list) else [],
        }
    return views


def _text(value: Any) -> str:
    """A value as text: strings as they are, anything else as (indented) JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    except ValueError:  # a circular structure: never in a stored record, but a view must not fail on it
        return repr(value)


def _pre(value: Any) -> str:
    return f"<pre>{escape(truncate(_text(value), TEXT_LIMIT))}</pre>"


def _preview(value: Any) -> str:
    """A value's start on one line, escaped: what a step's summary line shows."""
    return escape(truncate(" ".join(_text(value).split()), PREVIEW_LIMIT))


def anchor(identifier: str) -> str:
    """The HTML id of a trial's section: `trajectory-` and the trial id with anything but letters, digits,
    `_`, `-` and `.` replaced by `-`."""
    return "trajectory-" + re.sub(r"[^A-Za-z0-9_.-]", "-", identifier)


def _step(entry: Any, index: int) -> str:
    """One trajectory entry as a `<details>`: its kind and a preview on the summary line, its texts inside."""
    if not isinstance(entry, Mapping):
        return f'<details class="step"><summary>{index}. {_preview(entry)}</summary>{_pre(entry)}</details>'
    kind, step = entry.get("type"), entry.get("step")
    at = f"step {escape(str(step))} · " if step is not None else ""
    if kind == "message":
        role = escape(str(entry.get("role", "")))
        content = entry.get("content", "")
        return (
            f'<details class="step message"><summary>{index}. {role} message: {_preview(content)}</summary>'
            f"{_pre(content)}</details>"
        )
    if kind == "model_call":
        content = entry.get("content") or ""
        facts = ", ".join(
            f"{name} {escape(str(entry[key]))}"
            for name, key in (
                ("finish", "finish_reason"),
                ("in", "input_tokens"),
                ("out", "output_tokens"),
                ("retries", "retries"),
            )
            if entry.get(key) is not None
        )
        return (
            f'<details class="step model-call"><summary>{index}. {at}model ({facts}): '
            f"{_preview(content) or '<em>no text</em>'}</summary>{_pre(content)}</details>"
        )
    if kind == "tool_call":
        error = bool(entry.get("is_error"))
        duration = entry.get("duration_s")
        took = f" in {duration:.2f} s" if isinstance(duration, int | float) else ""
        return (
            f'<details class="step tool-call{" error" if error else ""}"><summary>{index}. {at}tool '
            f'<code class="tool">{escape(str(entry.get("tool", "")))}</code>{" <strong>error</strong>" if error else ""}'
            f"{took}: {_preview(entry.get('arguments', ''))}</summary>"
            f"<dl><dt>arguments</dt><dd>{_pre(entry.get('arguments', ''))}</dd>"
            f"<dt>result{' (error)' if error else ''}</dt><dd>{_pre(entry.get('result', ''))}</dd></dl></details>"
        )
    # Another agent's entry ({"action": ..., "exit_code": ..., "stdout_tail": ...}): every key with its value.
    name = entry.get("action", kind) or "entry"
    fields = "".join(f"<dt>{escape(str(key))}</dt><dd>{_pre(value)}</dd>" for key, value in entry.items())
    return (
        f'<details class="step"><summary>{index}. {at}{escape(str(name))}: {_preview(dict(entry))}</summary>'
        f"<dl>{fields}</dl></details>"
    )


def _trial(identifier: str, view: Mapping[str, Any], html_id: str) -> str:
    trajectory = view.get("trajectory") or []
    facts = (
        f"variant <strong>{escape(str(view.get('variant', '')))}</strong>, instance "
        f"<code>{escape(str(view.get('instance_id', '')))}</code>, outcome "
        f'<span class="outcome">{escape(str(view.get("outcome", "")))}</span>, '
        f"{escape(str(view.get('steps', 0)))} steps, stopped: {escape(str(view.get('stop_reason') or 'n/a'))}, "
        f"tokens {escape(str(view.get('input_tokens', 0)))} in / {escape(str(view.get('output_tokens', 0)))} out, "
        f"cost ${format_cost(view.get('cost_usd'))}"
    )
    error = view.get("error") or ""
    steps = "".join(_step(entry, index) for index, entry in enumerate(trajectory, 1))
    return (
        f'<section class="trajectory" id="{escape(html_id)}"><h3>{escape(identifier)}</h3><p>{facts}</p>'
        + (f"<details><summary>agent error</summary>{_pre(error)}</details>" if error else "")
        + (steps or "<p>No trajectory recorded.</p>")
        + "</section>"
    )


def render_trajectories(trajectories: Mapping[str, Mapping[str, Any]]) -> str:
    """Each trial's section, in the mapping's order; ids made unique should two trial ids sanitize alike."""
    sections, used = [], set()
    for identifier, view in trajectories.items():
        html_id, number = anchor(identifier), 1
        while html_id in used:
            number += 1
            html_id = f"{anchor(identifier)}-{number}"
        used.add(html_id)
        sections.append(_trial(identifier, view, html_id))
    return "".join(sections)
