"""The campaign behind `eval-pipeline grade`: a predictions file graded on a dataset, with no campaign file to
write first (SWE-bench's `run_evaluation --predictions_path`).

It is an ordinary campaign of one variant, the `predictions` agent on the file, one seed: written out as a file
(so that the Dagster UI can load it too, by EVAL_PIPELINE_CAMPAIGNS) and run, resumed and reported as any other.
Its name comes from the predictions file's, so grading the same file again resumes it.
"""

import re
from pathlib import Path
from typing import Any

from eval_pipeline.agents.predictions import model_names

__all__ = ["dataset_source", "grading_campaign"]

HUB_DATASET = re.compile(r"^hf:(?P<name>[^@:]+)@(?P<revision>[^:]+)(?::(?P<split>.+))?$")


def _identifier(text: str, fallback: str) -> str:
    """`text` as a campaign or variant name: letters, digits and underscores, starting with a letter."""
    name = re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")
    return name if name[:1].isalpha() else f"{fallback}_{name}".rstrip("_")


def dataset_source(dataset: str, mirror_dir: Path | None = None) -> dict[str, Any]:
    """`--dataset`: `demo`, `hf:<name>@<revision>[:<split>]` (a Hub dataset at an exact revision), or the path of
    a file or folder of SWE-bench rows; with `mirror_dir` (`--mirror-dir`), SWE-bench rows' repositories are
    cloned from the mirrors there instead of from GitHub."""
    if dataset == "demo":
        if mirror_dir is not None:
            raise ValueError("--mirror-dir: the demo dataset makes its own repositories")
        return {"kind": "demo"}
    mirrors = {"mirror_dir": str(mirror_dir.resolve())} if mirror_dir is not None else {}
    if match := HUB_DATASET.match(dataset):
        return {
            "kind": "swebench",
            "hf_name": match["name"],
            "revision": match["revision"],
            "split": match["split"] or "test",
            **mirrors,
        }
    if dataset.startswith("hf:"):
        raise ValueError(f"--dataset {dataset}: a Hub dataset is hf:<name>@<revision>[:<split>], pinned to a revision")
    return {"kind": "swebench", "path": str(Path(dataset).resolve()), **mirrors}


def grading_campaign(predictions: Path, dataset: str, backend: str, mirror_dir: Path | None = None) -> dict[str, Any]:
    """The campaign grading `predictions` on `dataset` (its repositories from `mirror_dir`, if given), in the
    sandbox `backend` (the local one only when asked for by name: the predictions' code runs in it when their
    tests do)."""
    names = model_names(predictions)
    variant = _identifier(names[0].rsplit("/", 1)[-1], "model") if len(names) == 1 else "predictions"
    sandbox: dict[str, Any] = {"backend": backend}
    if backend == "local":
        sandbox["allow_untrusted_agents_locally"] = True
    return {
        "name": _identifier(f"grade_{predictions.stem}", "grade"),
        "description": f"{predictions} graded on {dataset}",
        "benchmark": dataset_source(dataset, mirror_dir),
        "variants": [{"name": variant, "agent": "predictions", "params": {"path": str(predictions.resolve())}}],
        "seeds": [0],
        "sandbox": sandbox,
    }
