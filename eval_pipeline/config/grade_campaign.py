"""The campaign behind `eval-pipeline grade`: a predictions file graded on a dataset, with no campaign file to
write first (SWE-bench's `run_evaluation --predictions_path ... --run_id ...`).

It is an ordinary campaign of one variant, the `predictions` agent on the file, one seed: written out as a file
under the data directory (`campaigns/<name>.yaml`, so that the Dagster UI can load it too, by
EVAL_PIPELINE_CAMPAIGNS) and run, resumed and reported as any other. Its name is `grade_` and the run id
(`--run-id`, SWE-bench's `--run_id`); the default run id is the file's base name and a hash of its content and the
dataset, so two different files never share a campaign and the same file graded again on it resumes its own. The
campaign pins the file's content hash (the agent's `sha256`): a campaign file is only ever rewritten by a grading
of the same predictions on the same dataset (`grading_conflict`), and an edited file is refused by the campaign
that graded it rather than read as its predictions.
"""

import re
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from eval_pipeline.agents.predictions import model_names, read_predictions
from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.tasks.dataset import id_problem

__all__ = [
    "GRADING_RECORD",
    "Grading",
    "campaign_file",
    "dataset_source",
    "grading_campaign",
    "grading_conflict",
    "unknown_ids_message",
]

CAMPAIGNS_DIR = "campaigns"  # under the data directory: the campaign files `grade` writes
SHOWN_IDS = 10  # ids a message lists before it gives only their count
GRADING_RECORD = "grading.json"  # beside the campaign's report files: what was graded, and what was not

HUB_DATASET = re.compile(r"^hf:(?P<name>[^@:]+)@(?P<revision>[^:]+)(?::(?P<split>.+))?$")


def _identifier(text: str, fallback: str) -> str:
    """`text` as a campaign or variant name: letters, digits and underscores, starting with a letter."""
    name = re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")
    return name if name[:1].isalpha() else f"{fallback}_{name}".rstrip("_")


@dataclass(frozen=True)
class ImageFlags:
    """`--images`, `--namespace` and `--instance-image-tag`: whether SWE-bench rows are run in the instance images
    SWE-bench's harness names (`images` a slice's image policy), and under which namespace and tag, as that
    harness's own flags say; None where the flag is not given (the source's default)."""

    images: str = "build"
    namespace: str | None = None
    instance_image_tag: str | None = None

    def source_fields(self) -> dict[str, str]:
        """The fields of a `swebench` source these flags set; none when every flag is left at its default."""
        fields = {"images": self.images} if self.images != "build" else {}
        if self.namespace is not None:
            fields["image_namespace"] = self.namespace
        if self.instance_image_tag is not None:
            fields["image_tag"] = self.instance_image_tag
        return fields


def dataset_source(dataset: str, mirror_dir: Path | None = None, images: ImageFlags = ImageFlags()) -> dict[str, Any]:
    """`--dataset`: `demo`, `hf:<name>@<revision>[:<split>]` (a Hub dataset at an exact revision), or the path of
    a file or folder of SWE-bench rows; with `mirror_dir` (`--mirror-dir`), SWE-bench rows' repositories are
    cloned from the mirrors there instead of from GitHub; `images` their instance images' flags."""
    if dataset == "demo":
        if mirror_dir is not None:
            raise ValueError("--mirror-dir: the demo dataset makes its own repositories")
        if images.source_fields():
            raise ValueError(
                "--images, --namespace, --instance-image-tag: the demo dataset's environments are built here"
            )
        return {"kind": "demo"}
    mirrors = {"mirror_dir": str(mirror_dir.resolve())} if mirror_dir is not None else {}
    mirrors.update(images.source_fields())
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


@dataclass(frozen=True)
class Grading:
    """A predictions file to grade on a dataset: its campaign (as its file holds it), its run id, and the instance
    ids it predicts, in the file's order."""

    run_id: str
    campaign: dict[str, Any]
    predicted_ids: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.campaign["name"]

    def unknown_ids(self, dataset: Container[str]) -> list[str]:
        """The predicted ids that are not in `dataset`, in the file's order."""
        return [instance_id for instance_id in self.predicted_ids if instance_id not in dataset]

    def record(self, unknown_ids: Sequence[str]) -> dict[str, Any]:
        """What GRADING_RECORD holds: the run id, the file and its content hash, the dataset, how many instances
        the file predicts, and the predictions left ungraded because the dataset has no such instance."""
        params = self.campaign["variants"][0]["params"]
        return {
            "run_id": self.run_id,
            "campaign": self.name,
            "predictions": params["path"],
            "predictions_sha256": params["sha256"],
            "dataset": self.campaign["benchmark"],
            "predicted_instances": len(self.predicted_ids),
            "unknown_ids_ignored": len(unknown_ids),
            "unknown_ids": list(unknown_ids),
        }


def _dataset_identity(benchmark: Mapping[str, Any]) -> dict[str, Any]:
    """What names the dataset in a grading's identity: its source without where its repositories are cloned from."""
    return {key: value for key, value in benchmark.items() if key != "mirror_dir"}


def _default_run_id(predictions: Path, sha256: str, benchmark: Mapping[str, Any]) -> str:
    """The file's base name (a label) and a hash of its content and the dataset (the identity)."""
    label = re.sub(r"[^A-Za-z0-9_-]+", "_", predictions.stem).strip("_-")[:40].strip("_-") or "predictions"
    return f"{label}-{stable_hash({'predictions': sha256, 'dataset': _dataset_identity(benchmark)})[:12]}"


def campaign_name(run_id: str) -> str:
    """The campaign of a run id: `grade_` and the id, its `.` and `-` as `_` (a campaign name is a Dagster name)."""
    return "grade_" + re.sub(r"[.-]", "_", run_id)


def campaign_file(data_dir: Path, name: str) -> Path:
    """Where `grade` writes the campaign `name` (a campaign name: no path separator can be in it)."""
    return data_dir / CAMPAIGNS_DIR / f"{name}.yaml"


def grading_campaign(
    predictions: Path,
    dataset: str,
    backend: str,
    mirror_dir: Path | None = None,
    run_id: str | None = None,
    images: ImageFlags = ImageFlags(),
) -> Grading:
    """The grading of `predictions` on `dataset` (its repositories from `mirror_dir`, if given; its instance images
    as `images` say), in the sandbox
    `backend` (the local one only when asked for by name: the predictions' code runs in it when their tests do),
    under `run_id` (default: derived from the file's content and the dataset). ValueError naming the file, line
    or flag when the predictions or the run id cannot be used."""
    if run_id is not None and (problem := id_problem(run_id)):
        raise ValueError(f"--run-id: {problem}")
    patches, problems, sha256 = read_predictions(predictions)
    benchmark = dataset_source(dataset, mirror_dir, images)
    run_id = run_id or _default_run_id(predictions, sha256, benchmark)
    names = model_names(predictions)
    variant = _identifier(names[0].rsplit("/", 1)[-1], "model") if len(names) == 1 else "predictions"
    sandbox: dict[str, Any] = {"backend": backend}
    if backend == "local":
        sandbox["allow_untrusted_agents_locally"] = True
    params = {"path": str(predictions.resolve()), "sha256": sha256}
    campaign = {
        "name": campaign_name(run_id),
        "description": f"{params['path']} graded on {dataset} (run id {run_id})",
        "benchmark": benchmark,
        "variants": [{"name": variant, "agent": "predictions", "params": params}],
        "seeds": [0],
        "sandbox": sandbox,
    }
    return Grading(run_id, campaign, tuple(dict.fromkeys([*patches, *problems])))


def _identity(campaign: Any) -> tuple[Any, Any] | None:
    """(the predictions' content hash, the dataset) a campaign written by `grade` grades; None for any other."""
    try:
        (variant,) = campaign["variants"]
        sha256 = variant["params"]["sha256"] if variant["agent"] == "predictions" else None
        return (sha256, _dataset_identity(campaign["benchmark"])) if sha256 else None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def grading_conflict(path: Path, grading: Grading) -> str:
    """Why the campaign file at `path` must not be rewritten by `grading`; '' when it grades the same predictions
    (by content) on the same dataset in the same sandbox, so that grading them again resumes it. Another sandbox
    is refused rather than written: a grading that then fails (no container engine) would leave the campaign on a
    backend its stored trials never ran on."""
    try:
        existing = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        existing = None
    if _identity(existing) == _identity(grading.campaign):
        sandbox = existing.get("sandbox") if isinstance(existing, dict) else None
        if sandbox == grading.campaign.get("sandbox"):
            return ""
        backend = sandbox.get("backend") if isinstance(sandbox, dict) else None
        return (
            f"run id {grading.run_id}: campaign {grading.name} grades these predictions on the {backend} backend;"
            f" it is kept as it is: grade with --backend {backend} to resume it, or give another --run-id"
            f" (its file: {path})"
        )
    described = existing.get("description") if isinstance(existing, dict) else None
    other = f" ({described})" if isinstance(described, str) else ""
    return (
        f"run id {grading.run_id}: campaign {grading.name} exists for other predictions or another dataset{other};"
        f" it is kept as it is: give another --run-id (its file: {path})"
    )


def unknown_ids_message(predictions: Path, unknown: Sequence[str]) -> str:
    """The predictions for instance ids the dataset does not have: the file, the first ids, how many in all."""
    shown = ", ".join(map(repr, unknown[:SHOWN_IDS]))
    more = f" and {len(unknown) - SHOWN_IDS} more" if len(unknown) > SHOWN_IDS else ""
    return (
        f"predictions file {predictions}: {len(unknown)} prediction(s) for instance ids not in the dataset:"
        f" {shown}{more}"
    )
