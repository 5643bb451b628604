"""What agents did in chosen trials, for the HTML report: each trial's generation record, step by step.

`trajectories_for` reads the generation records of the failed trials (scored
and not resolved), or of trials chosen by id, from the artifact store;
`render_trajectories` shows them as HTML sections, one per trial, with an id
(`trajectory-<trial id>`) to link to. A trajectory is agent-controlled text
(model output, tool results): every piece of it is truncated and
HTML-escaped, so it never adds markup or script to the page; the page that holds
it is `shown` (common/foreign_text.py), so no control character or lone surrogate
in it reaches the file or the browser.

A trial's id is its trial partition's key, `<instance id>|<trial>` (the trial
is `<variant>-s<seed>`, which is unique only within an instance).
"""

import json
import re
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from html import escape
from itertools import zip_longest
from typing import Any

from eval_pipeline.common.text import truncate
from eval_pipeline.grading.verdict import ERROR, FAILED, MISSING
from eval_pipeline.results.markdown import format_cost
from eval_pipeline.results.matrix import trial_id
from eval_pipeline.results.warehouse import ResultRow
from eval_pipeline.store.artifacts import ArtifactStore

TRAJECTORY_LIMIT = 20  # trials shown, at most
TEXT_LIMIT = 2000  # characters of any one text (a message, a model's output, a tool's arguments or result)
FAILING = (FAILED, ERROR, MISSING)  # a graded test's statuses that count against the patch
PATCH_LIMIT = 20_000  # characters of a final patch shown
TESTS_SHOWN = 20  # failing tests named in a trial's section
PREVIEW_LIMIT = 120  # characters of a step's one-line preview
MAX_DEPTH = 12  # levels of a nested value shown
STYLE = """.trajectory{border-top:1px solid #cbd5e0;margin-top:1.5em}.trajectory h3{margin-bottom:.3em}
.trajectory pre{white-space:pre-wrap;word-break:break-word;background:#f7fafc;padding:6px;margin:4px 0}
.trajectory summary{cursor:pointer;overflow-wrap:anywhere}.step{margin:2px 0}.step.error>summary{color:#c53030}
.trajectory dl{margin:4px 0}.trajectory dt{font-weight:600}.diff .add{color:#22543d;background:#f0fff4}
.diff .del{color:#742a2a;background:#fff5f5}.diff .hunk{color:#6b46c1}.diff .file{font-weight:600}"""


def is_failed(trial: ResultRow) -> bool:
    """A failure of the agent's: scored and not resolved (infrastructure outcomes are not scored)."""
    return trial.scored and not trial.resolved


def _by_variant_in_turn(trials: Sequence[ResultRow]) -> list[ResultRow]:
    """The trials by instance and trial within each variant, taking one of each variant in turn, so every
    variant's failures are shown before any one variant's fill the limit."""
    queues = defaultdict(list)
    for trial in sorted(trials, key=lambda t: (t.variant, t.instance_id, t.trial)):
        queues[trial.variant].append(trial)
    return [trial for column in zip_longest(*queues.values()) for trial in column if trial is not None]


def _failing_tests(store: ArtifactStore, trial: ResultRow) -> list[str]:
    """The graded tests that did not pass, from the trial's evaluation record (none before it is graded)."""
    evaluation = store.get(trial.evaluation_key) if trial.evaluation_key else None
    tests = evaluation.get("tests") if evaluation else None
    return sorted(name for name, status in tests.items() if status in FAILING) if isinstance(tests, dict) else []


def trajectories_for(
    trials: Sequence[ResultRow],
    store: ArtifactStore,
    chosen: Collection[str] | None = None,
    limit: int = TRAJECTORY_LIMIT,
) -> dict[str, dict[str, Any]]:
    """By trial id, at most `limit` trials' views: the failed trials, or those whose id is in `chosen`, each
    variant's in turn (by instance and trial within it); each is its row's identity and outcome with its
    generation record's steps, stop reason, tokens, cost, error, trajectory and final patch, and the tests that
    failed. Trials without a stored generation are passed over, and so are failed ones whose agent left
    nothing to read (no trajectory and no patch, as the null agent's): they would fill the page and say nothing."""
    picked = [t for t in trials if trial_id(t) in chosen] if chosen is not None else [t for t in trials if is_failed(t)]
    views: dict[str, dict[str, Any]] = {}
    for trial in _by_variant_in_turn(picked):
        if len(views) >= limit:
            break
        generation = store.get(trial.generation_key) if trial.generation_key else None
        if generation is None:
            continue
        trajectory = generation.get("trajectory") if isinstance(generation.get("trajectory"), list) else []
        stored_patch = generation.get("patch")
        patch = stored_patch if isinstance(stored_patch, str) else ""
        if chosen is None and not (trajectory or patch.strip()):
            continue
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
            "trajectory": trajectory,
            "patch": patch,
            "failing_tests": _failing_tests(store, trial),
        }
    return views


def as_text(value: Any, depth: int = 0) -> str:
    """A value as a person reads it: a string as it is (its line breaks kept, never escaped as `\\n`), a
    mapping as `key: value` lines and a list as `- item` lines, a nested or many-line value indented under
    its key; a number, boolean or null as JSON writes it."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        items = [(f"{key}:", item) for key, item in value.items()]
    elif isinstance(value, list | tuple):
        items = [("-", item) for item in value]
    else:
        return json.dumps(value) if value is None or isinstance(value, bool | int | float) else str(value)
    if not items:
        return "{}" if isinstance(value, Mapping) else "[]"
    if depth >= MAX_DEPTH:  # deeper than any stored record nests (or circular): shown, not followed
        return truncate(repr(value), PREVIEW_LIMIT)
    return "\n".join(
        _item(label, as_text(item, depth + 1), isinstance(item, Mapping) and bool(item)) for label, item in items
    )


def _item(label: str, text: str, nested: bool) -> str:
    """`label text` on one line, or the label with the text's lines indented under it (a list item's first
    line beside its dash); a nested mapping always under its label, so its keys are not read as the label's."""
    if label == "-":
        return "- " + text.replace("\n", "\n  ")
    if not nested and "\n" not in text and text.strip() == text:
        return f"{label} {text}".rstrip()
    return label + "".join(f"\n  {line}" for line in text.split("\n"))


def _pre(value: Any) -> str:
    return f"<pre>{escape(truncate(as_text(value), TEXT_LIMIT))}</pre>"


def _preview(value: Any) -> str:
    """A value's start on one line, escaped: what a step's summary line shows."""
    return escape(truncate(" ".join(as_text(value).split()), PREVIEW_LIMIT))


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


def _facts(view: Mapping[str, Any]) -> str:
    """The trial's identity and outcome, then what the agent used, leaving out what it did not have (a model's
    steps and tokens, for an agent without a model)."""
    facts = [
        f"variant <strong>{escape(str(view.get('variant', '')))}</strong>",
        f"instance <code>{escape(str(view.get('instance_id', '')))}</code>",
        f'outcome <span class="outcome">{escape(str(view.get("outcome", "")))}</span>',
    ]
    if view.get("steps"):
        facts.append(f"{escape(str(view['steps']))} steps")
    if view.get("stop_reason"):
        facts.append(f"stopped: {escape(str(view['stop_reason']))}")
    if view.get("input_tokens") or view.get("output_tokens"):
        facts.append(
            f"tokens {escape(str(view.get('input_tokens', 0)))} in / {escape(str(view.get('output_tokens', 0)))} out"
        )
    if view.get("cost_usd"):
        facts.append(f"cost ${format_cost(view.get('cost_usd'))}")
    return ", ".join(facts)


def render_patch(patch: str) -> str:
    """A unified diff as a `<pre>`: added, removed, hunk and file lines each in a class of their own, escaped."""
    classes = (("+++", "file"), ("---", "file"), ("diff ", "file"), ("@@", "hunk"), ("+", "add"), ("-", "del"))
    lines = []
    for line in truncate(patch, PATCH_LIMIT).split("\n"):
        kind = next((name for prefix, name in classes if line.startswith(prefix)), "")
        lines.append(f'<span class="{kind}">{escape(line)}</span>' if kind else escape(line))
    return '<pre class="diff">' + "\n".join(lines) + "</pre>"


def render_steps(trajectory: Sequence[Any]) -> str:
    """Each trajectory entry as a `<details>`, numbered from 1."""
    return "".join(_step(entry, index) for index, entry in enumerate(trajectory, 1))


def _trial(identifier: str, view: Mapping[str, Any], html_id: str) -> str:
    error, patch, failing = view.get("error") or "", view.get("patch") or "", view.get("failing_tests") or []
    tests = ", ".join(f"<code>{escape(name)}</code>" for name in failing[:TESTS_SHOWN])
    more = f" and {len(failing) - TESTS_SHOWN} more" if len(failing) > TESTS_SHOWN else ""
    return (
        f'<section class="trajectory" id="{escape(html_id)}"><h3>{escape(identifier)}</h3><p>{_facts(view)}</p>'
        + (f"<details><summary>agent error</summary>{_pre(error)}</details>" if error else "")
        + (f'<p class="failing">failing tests: {tests}{more}</p>' if failing else "")
        + (render_steps(view.get("trajectory") or []) or "<p>No trajectory recorded.</p>")
        + (
            f'<details class="patch"><summary>final patch ({patch.count(chr(10))} lines)</summary>'
            f"{render_patch(patch)}</details>"
            if patch.strip()
            else "<p>The agent left no patch.</p>"
        )
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
