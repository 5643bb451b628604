"""Patches someone already has, graded like any agent's: a SWE-bench predictions file as a variant's agent.

SWE-bench's harness grades a predictions file (`run_evaluation --predictions_path`): a JSON list, a JSON object
by instance id, or JSON Lines, each prediction with `instance_id`, `model_name_or_path` and `model_patch`. Here
the file is the `predictions` agent's (`agent: predictions`, `params: {path: FILE}`): its `solve` applies the
instance's prediction to the trial's workspace, so the prediction becomes the trial's generation, graded,
reported and gated like any other. The file's content hash is in the agent's config, so in every generation's
key and lineage: an edited file is graded anew, an unchanged one never twice.

The file is read whole when the campaign loads, and one that cannot be read as predictions is refused then,
naming it and the line (JSON Lines) or the prediction (a JSON document): so is a file holding none, a second
prediction for an instance, a key repeated in one JSON object (which `json` would otherwise resolve by keeping the
last, silently), and an `instance_id` that is no dataset's id (tasks/dataset.py: `id_problem`), which would
otherwise reach paths and partition keys. A prediction that is not one (no `model_patch` string, or
one holding a lone surrogate, which no file's bytes can be) is kept as that instance's problem, and its
trial, like an instance the file has no prediction for, ends as the agent's error, named: every planned trial
counts, as SWE-bench counts an instance it could not evaluate as not resolved. Its patches come from outside
the harness: the agent is untrusted, graded only where untrusted code may run.
"""

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from eval_pipeline.agents.base import Agent, AgentOutput, AgentStopped, AgentTask
from eval_pipeline.common.foreign_text import valid_unicode
from eval_pipeline.common.hashing import sha256_text
from eval_pipeline.sandbox import ExecResult, Workspace
from eval_pipeline.sandbox.patches import apply_patch
from eval_pipeline.tasks.dataset import id_problem

__all__ = ["PredictionsAgent", "model_names", "read_predictions"]


class _RepeatedKey(ValueError):
    """A JSON object that names one key twice: `json` would keep the last silently."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are distinct; _RepeatedKey otherwise (a second prediction in an object by instance
    id, or a prediction that repeats a field)."""
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise _RepeatedKey(key)
        value[key] = item
    return value


def _json(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_object)


def _rows(text: str, origin: str) -> list[tuple[str, Any]]:
    """The file's predictions as parsed, each with where it is (`line N` in JSON Lines, `prediction N` in a
    JSON document): a JSON list, a JSON object by instance id, or one JSON value a line."""
    stripped = text.strip()
    if stripped.startswith(("[", "{")):
        try:
            value = _json(stripped)
        except _RepeatedKey as repeated:
            raise ValueError(f"{origin}: the key {str(repeated)!r} appears twice in one object") from None
        except json.JSONDecodeError as error:
            if not stripped.startswith("{"):
                raise ValueError(f"{origin}: not JSON ({error})") from None
        else:
            if isinstance(value, dict) and "instance_id" not in value:  # an object by instance id
                value = [{"instance_id": key, **row} if isinstance(row, dict) else row for key, row in value.items()]
            values = value if isinstance(value, list) else [value]
            return [(f"prediction {number}", row) for number, row in enumerate(values, start=1)]
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append((f"line {number}", _json(line)))
            except _RepeatedKey as repeated:
                raise ValueError(f"{origin}: line {number}: the key {str(repeated)!r} appears twice") from None
            except json.JSONDecodeError as error:
                raise ValueError(f"{origin}: line {number} is not JSON ({error})") from None
    return rows


def _read(path: Path) -> tuple[str, list[tuple[str, Any]]]:
    """The file's text and its rows (where, value); ValueError naming the file when it cannot be read as
    predictions or holds none."""
    origin = f"predictions file {path}"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{origin}: cannot be read ({error})") from None
    rows = _rows(text, origin)
    if not rows:
        raise ValueError(f"{origin}: holds no predictions")
    return text, rows


def model_names(path: Path) -> list[str]:
    """The distinct `model_name_or_path` values of the file's predictions, in the file's order."""
    rows = (row for _, row in _read(path)[1])
    names = (row.get("model_name_or_path") for row in rows if isinstance(row, dict))
    return list(dict.fromkeys(name for name in names if isinstance(name, str) and name))


def read_predictions(path: Path) -> tuple[dict[str, str], dict[str, str], str]:
    """(patch by instance id, problem by instance id, the file's content hash). A row that is no object or has
    no instance id cannot be anyone's, so it refuses the file; two predictions for one instance too. Each
    refusal names the file and the line (JSON Lines) or the prediction's place (a JSON document)."""
    origin = f"predictions file {path}"
    text, rows = _read(path)
    patches: dict[str, str] = {}
    problems: dict[str, str] = {}
    first: dict[str, str] = {}  # instance id -> where its prediction is
    for where, row in rows:
        if not isinstance(row, dict):
            raise ValueError(f"{origin}: {where} is not an object with instance_id and model_patch")
        instance_id = row.get("instance_id")
        if not isinstance(instance_id, str) or not instance_id:
            raise ValueError(f"{origin}: {where} has no instance_id")
        if problem := id_problem(instance_id):
            raise ValueError(f"{origin}: {where}: field instance_id: {problem}")
        if instance_id in first:
            raise ValueError(
                f"{origin}: {where}: a second prediction for {instance_id!r} (the first is {first[instance_id]})"
            )
        first[instance_id] = where
        patch = row.get("model_patch")
        if patch is not None and not isinstance(patch, str):
            problems[instance_id] = f"{where} ({instance_id!r}): model_patch is not a string"
        elif patch and valid_unicode(patch) != patch:
            problems[instance_id] = (
                f"{where} ({instance_id!r}): model_patch holds a lone surrogate (a \\ud800-style"
                " escape), which no file's bytes can be"
            )
        else:
            patches[instance_id] = patch or ""
    return patches, problems, sha256_text(text)


def _read_once(path: Path) -> tuple[dict[str, str], dict[str, str], str]:
    """`read_predictions`, once per version of the file and process: the agent is made for every trial of a
    batch, and a whole dataset's predictions are megabytes to read and hash."""
    try:
        status = path.stat()
    except OSError:
        return read_predictions(path)  # names the file and why it cannot be read
    return _read_version(str(path.resolve()), status.st_mtime_ns, status.st_size)


@lru_cache(maxsize=8)
def _read_version(path: str, mtime_ns: int, size: int) -> tuple[dict[str, str], dict[str, str], str]:
    return read_predictions(Path(path))


class PredictionsAgent(Agent):
    """Applies the prediction the file at `path` holds for the task (an empty one changes nothing). With `sha256`
    (as `eval-pipeline grade` writes it), the file must have that content hash: a campaign never grades, nor
    shows the trials of, another file than the one it was written for."""

    name = "predictions"
    trusted = False  # patches from outside the harness, run by the tests that grade them
    path_params = ("path",)

    def __init__(self, path: str, sha256: str | None = None) -> None:
        self.path = Path(path)
        self.patches, self.problems, content = _read_once(self.path)
        if sha256 is not None and sha256 != content:
            raise ValueError(
                f"predictions file {path}: its content (sha256 {content}) is not the one this campaign grades"
                f" (sha256 {sha256}): the file changed after it was graded"
            )
        # The content, not the path, determines what the agent does: moving the file changes no key.
        super().__init__(predictions_sha256=content)

    def solve(self, task: AgentTask, workspace: Workspace) -> AgentOutput:
        if problem := self.problems.get(task.instance_id):
            raise AgentStopped(f"predictions file {self.path}: {problem}")
        if task.instance_id not in self.patches:
            raise AgentStopped(f"predictions file {self.path} has no prediction for {task.instance_id!r}")
        patch = self.patches[task.instance_id]
        if not patch.strip():
            return AgentOutput(trajectory=[{"action": "apply_prediction", "patch_bytes": 0}], stop_reason="empty")
        applied = apply_patch(workspace, patch, "prediction.patch")
        step = {"action": "apply_prediction", "patch_bytes": len(patch.encode()), **applied.summary(tail=500)}
        if not applied.ok:
            raise AgentStopped(
                f"the prediction for {task.instance_id!r} does not apply: {_why_not_applied(applied)}",
                AgentOutput(trajectory=[step]),
            )
        return AgentOutput(trajectory=[step])


def _why_not_applied(applied: ExecResult) -> str:
    """The end of what the patch tools said: GNU patch, the fallback, writes its diagnostics on stdout."""
    said = "\n".join(part.strip() for part in (applied.stderr, applied.stdout) if part.strip())
    return said[-500:]
