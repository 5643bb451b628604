"""Per-trial folders a person can browse: what the agent saw, what it did, how it was judged, and every attempt.

The warehouse answers questions across trials; a folder answers "what
happened in this one" with a file browser and a text editor, as SWE-bench's
and Harbor's run directories do. Everything comes from the artifact store (no
Dagster, no sandbox), so folders can be exported anywhere, any time, and
exported again as trials finish:

    <dest>/<slice>/<instance_id>/<variant>/seed-<n>/
        instruction.md    what the agent was asked
        patch.diff        the agent's patch (once a generation is stored)
        test_output.txt   each grading step's command, exit and output (once graded)
        outcome.json      outcome, kind, scored, durations, resources
        lineage.json      versions, environment, agent config, artifact keys (stored or to be)
        attempts.jsonl    every kept attempt at the trial's stages, oldest first

Nothing is written outside <dest>: slice and variant names and instance ids are checked names (config/
campaign_file.py, tasks/dataset.py), and each folder is checked to lie under <dest> once links are followed.
"""

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from eval_pipeline.common.foreign_text import json_text, valid_unicode
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.grading.verdict import GRADING_VERSION
from eval_pipeline.sandbox import SandboxBackend
from eval_pipeline.store.artifacts import ArtifactStore
from eval_pipeline.tasks.task import Task
from eval_pipeline.trial.evaluation import Evaluation
from eval_pipeline.trial.records import StoredTrial, read_trials
from eval_pipeline.trial.selection import EVERY_TRIAL, TrialSelection
from eval_pipeline.trial.spec import GENERATION_VERSION, TrialSpec

FILES = (
    "instruction.md",
    "patch.diff",
    "trajectory.json",
    "test_output.txt",
    "outcome.json",
    "lineage.json",
    "attempts.jsonl",
)
# What a grading step's record holds beyond its command and exit, in the order a reader wants it.
_STEP_OUTPUTS = ("log_tail", "stdout_tail", "stderr_tail")


class ExportError(ValueError):
    """A trial's folder that would not lie under the export's destination; the message names both."""


def trial_folder(dest: Path, identity: TrialSpec) -> Path:
    """Where a trial's folder is written: under `dest` once every link on the way is followed, whatever its
    names hold (they are checked ids, tasks/dataset.py, but a link inside `dest` may lead anywhere), else
    ExportError, and nothing is written."""
    folder = dest / identity.slice / identity.instance_id / identity.variant / f"seed-{identity.seed}"
    if not folder.resolve().is_relative_to(dest.resolve()):
        raise ExportError(
            f"trial {identity.instance_id}|{identity.trial}: its folder {folder} resolves to {folder.resolve()},"
            f" outside the destination {dest.resolve()}; nothing was written there"
        )
    return folder


def grading_output(evaluation: Evaluation) -> str:
    """The grading's steps as text: each step's command, how it ended, and the end of its output."""
    parts = [f"outcome: {evaluation.outcome}", *([evaluation.detail.strip()] if evaluation.detail.strip() else []), ""]
    for step in evaluation.steps:
        ended = {name: step[name] for name in ("exit_code", "timed_out", "oom_killed") if name in step}
        parts.append(f"== {step.get('step', 'step')} {json.dumps(ended, sort_keys=True)}")
        if step.get("command"):
            parts.append(f"$ {step['command']}")
        parts.extend(f"-- {name}\n{step[name].rstrip()}" for name in _STEP_OUTPUTS if step.get(name))
        parts.append("")
    return "\n".join(parts)


def outcome_summary(records: StoredTrial) -> dict[str, Any]:
    """How the trial ended and what it used: outcome, kind, scoring, durations, resources and usage."""
    result = records.result
    return {
        "outcome": result.outcome,
        "kind": result.outcome_kind,
        "scored": result.scored,
        "resolved": result.resolved,
        "limit_evidence": result.limit_evidence,
        "attempts": result.attempts,
        "durations_s": {"generation": result.generation_duration_s, "evaluation": result.evaluation_duration_s},
        "resources": {
            "peak_memory_mb": result.peak_memory_mb,
            "oom_killed": result.oom_killed,
            "requested": records.evaluation.resources.get("requested") if records.evaluation else None,
            "enforced": json.loads(result.enforced_limits),
        },
        "usage": {
            "input_tokens": result.input_tokens,
            "output_tokens": result.output_tokens,
            "cost_usd": result.cost_usd,
        },
    }


def trial_lineage(records: StoredTrial) -> dict[str, Any]:
    """What the trial's result depends on: every version, the environment, the agent's config, the artifact keys."""
    identity, result, generation = records.identity, records.result, records.generation
    return {
        "campaign": identity.campaign,
        "harness_version": result.harness_version,
        "dataset_version": result.dataset_version,
        "generation_version": generation.generation_version if generation else GENERATION_VERSION,
        "grading_version": records.evaluation.grading_version if records.evaluation else GRADING_VERSION,
        "grading_mode": result.grading_mode,
        "snapshot": generation.snapshot if generation else None,
        "environment_key": identity.environment_key,
        "environment_image": result.environment_image,
        "sandbox": {"backend": result.sandbox_backend, "mode": result.sandbox_mode},
        "agent": identity.agent,
        "agent_config_hash": identity.agent_config_hash,
        "agent_config": generation.agent_config if generation else None,
        "network": identity.network,
        # Where the stage's artifact is stored or, before it is, will be (an evaluation's key waits for its patch).
        "artifacts": {
            "generation": identity.generation_key,
            "evaluation": identity.evaluation_key(generation.patch_sha256) if generation else None,
        },
    }


def write_trial_folder(records: StoredTrial, instruction: str, dest: Path) -> Path:
    """Write one trial's folder under `dest`, replacing what an earlier export wrote there; its path.

    Its text is the agent's as the store keeps it (common/foreign_text.py): the trajectory and every JSON file
    exactly (a lone surrogate as its `\\u` escape), the other files as valid UTF-8 (a lone surrogate as
    U+FFFD). A file is removed before it is written, so a link left in its place leads nowhere."""
    folder = trial_folder(dest, records.identity)
    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:  # a file of an earlier export may no longer hold (an attempt graded since, say)
        (folder / name).unlink(missing_ok=True)
    _write(folder / "instruction.md", instruction)
    if records.generation:
        _write(folder / "patch.diff", records.generation.patch)
        _write(folder / "trajectory.json", json_text(records.generation.trajectory, indent=2) + "\n")
    if records.evaluation:
        _write(folder / "test_output.txt", grading_output(records.evaluation))
    _write(folder / "outcome.json", json_text(outcome_summary(records), indent=2, sort_keys=True) + "\n")
    _write(folder / "lineage.json", json_text(trial_lineage(records), indent=2, sort_keys=True) + "\n")
    _write(folder / "attempts.jsonl", "".join(json_text(asdict(a), sort_keys=True) + "\n" for a in records.attempts))
    return folder


def _write(path: Path, text: str) -> None:
    path.write_text(valid_unicode(text), encoding="utf-8")


def export_trials(
    campaign: Campaign,
    portfolio: Portfolio,
    sandbox_for: Callable[[Task], SandboxBackend],
    store: ArtifactStore,
    dest: Path,
    selection: TrialSelection = EVERY_TRIAL,
) -> list[Path]:
    """Write the folder of every planned trial of the campaign (or the `selection`'s) under `dest`, from the
    artifact store alone; the folders written, by instance then trial. `sandbox_for` gives a task's sandbox
    (it is not started: it names the environment and resources the trial's keys hold)."""
    return [
        write_trial_folder(records, portfolio.instance(records.identity.instance_id).instruction, dest)
        for records in read_trials(campaign, portfolio, sandbox_for, store, selection)
    ]
