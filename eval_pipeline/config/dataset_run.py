"""The campaign behind `eval-pipeline run --dataset D --agent A [--model M] [--seeds N]`: an agent on a dataset
with no campaign file to write first (Harbor's `harbor run -d DATASET -a AGENT -m MODEL`).

It is an ordinary campaign of one variant (the agent, with `model` as its parameter when given) and N seeds,
written out under the data directory (`campaigns/<name>.yaml`, as `grade` writes its own:
config/grade_campaign.py) and run, resumed, viewed, exported and reported as any other by its name. Its name is
`run_` and the run id (`--run-id`); the default run id is the agent's and model's names and a hash of the whole
campaign, so the same command again resumes its campaign and another command never shares it. A campaign file is
only ever rewritten by the same campaign (`run_conflict`).
"""

import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from eval_pipeline.agents import AGENTS
from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.config.grade_campaign import dataset_source
from eval_pipeline.tasks.dataset import id_problem

__all__ = ["DatasetRun", "benchmark_source", "dataset_run", "run_conflict"]

TASK_FILES = ("task.toml", "task.yaml")  # what makes a directory a Harbor (or Terminal-Bench) task


@dataclass(frozen=True)
class DatasetRun:
    """An agent to run on a dataset: its run id and its campaign, as the campaign's file holds it."""

    run_id: str
    campaign: dict[str, Any]

    @property
    def name(self) -> str:
        return self.campaign["name"]


def _label(text: str) -> str:
    """`text` as a part of a run id: letters, digits, `_` and `-`, at most 40 characters."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_-")[:40].strip("_-")


def _is_task(path: Path) -> bool:
    return any((path / name).is_file() for name in TASK_FILES)


def _holds_terminal_tasks(path: Path) -> bool:
    """Whether `path` is a Harbor task directory (it holds task.toml) or a folder of them."""
    return path.is_dir() and (_is_task(path) or any(_is_task(child) for child in path.iterdir()))


def benchmark_source(dataset: str, mirror_dir: Path | None = None) -> dict[str, Any]:
    """`--dataset`: a Harbor (Terminal-Bench) task directory or a folder of them, or what `grade` reads
    (`demo`, `hf:<name>@<revision>[:<split>]`, a file or folder of SWE-bench rows)."""
    if _holds_terminal_tasks(Path(dataset)):
        mirrors = {"mirror_dir": str(mirror_dir.resolve())} if mirror_dir is not None else {}
        return {"kind": "terminal", "path": str(Path(dataset).resolve()), **mirrors}
    if dataset != "demo" and not dataset.startswith("hf:") and not Path(dataset).exists():
        raise ValueError(
            f"--dataset {dataset}: no such file or directory (a dataset is demo, hf:<name>@<revision>[:<split>],"
            " a file or folder of SWE-bench rows, or a Harbor task directory or a folder of them)"
        )
    return dataset_source(dataset, mirror_dir)


def dataset_run(
    dataset: str,
    agent: str,
    model: str | None,
    seeds: int,
    backend: str,
    mirror_dir: Path | None = None,
    run_id: str | None = None,
) -> DatasetRun:
    """The campaign running `agent` (with `model` as its `model` parameter, when given) `seeds` times on each
    instance of `dataset`, in the sandbox `backend` (the local one only when asked for by name: the agent's
    commands then run with the local backend's walls, docs/SANDBOXES.md), under `run_id` (default: derived from
    the campaign). ValueError naming the flag when one cannot be used."""
    if seeds < 1:
        raise ValueError(f"--seeds must be at least 1, got {seeds}")
    if run_id is not None and (problem := id_problem(run_id)):
        raise ValueError(f"--run-id: {problem}")
    if model is not None and agent in AGENTS and "model" not in inspect.signature(AGENTS[agent]).parameters:
        with_model = ", ".join(name for name, kind in AGENTS.items() if "model" in inspect.signature(kind).parameters)
        raise ValueError(f"--model: the {agent} agent takes no model (agents that do: {with_model})")
    sandbox: dict[str, Any] = {"backend": backend}
    if backend == "local":
        sandbox["allow_untrusted_agents_locally"] = True
    variant = re.sub(r"[^A-Za-z0-9_]+", "_", model.rsplit("/", 1)[-1] if model else agent).strip("_")
    plan = {
        "benchmark": benchmark_source(dataset, mirror_dir),
        "variants": [
            {
                "name": variant if variant[:1].isalpha() else f"agent_{variant}".rstrip("_"),
                "agent": agent,
                "params": {"model": model} if model else {},
            }
        ],
        "seeds": seeds,
        "sandbox": sandbox,
    }
    run_id = run_id or "-".join(filter(None, [_label(agent), _label(model or ""), stable_hash(plan)[:12]]))
    described = f"{agent}{f' ({model})' if model else ''} on {dataset} (run id {run_id})"
    campaign = {"name": "run_" + re.sub(r"[.-]", "_", run_id), "description": described, **plan}
    return DatasetRun(run_id, campaign)


def run_conflict(path: Path, run: DatasetRun) -> str:
    """Why `run`'s campaign may not be written over the file at `path` ('' when it may: the file holds the same
    campaign, which the run then resumes)."""
    try:
        written = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        written = None
    if written == run.campaign:
        return ""
    return (
        f"run id {run.run_id}: {path} holds another campaign under this name; give another --run-id"
        " (or run that one with --campaign)"
    )
