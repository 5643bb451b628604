"""Terminal-Bench 2's population table: the oracle and the null agent on every task, on the container backend.

    python benchmarks/terminal_population.py --tasks DIR [--names TASK ...] [--limit N] [--again]
    python benchmarks/population.py --render      # writes both tables into docs/POPULATION.md

DIR holds Terminal-Bench 2.0's task directories, unmodified (for example the `terminal-bench-2/` folder of a
copy of its repository). Each task is loaded as `eval-pipeline` loads it, its image built from its own
Dockerfile with only `FROM` replaced by its family's stand-in (EVAL_PIPELINE_TASK_BASE_IMAGES, from
scripts/build_task_base.sh: no registry is reachable here), then the
oracle (its `solution/solve.sh`) and the null agent are generated and graded as a campaign grades them: the
verifier runs in the agent's own container right after it, and the reward file decides. `valid`: the oracle
resolved and the null agent did not. Tasks are taken in the order of their names' hashes (blind to how easy a
task is), so a part of any size is a fair sample; each result is appended to docs/validation/terminal.jsonl as
soon as it is known, and a task already measured is skipped unless named by --names or, when not valid,
--again.

Needs the container engine of `.ci/run` (DOCKER_HOST) and the variables it exports.
"""

import argparse
import contextlib
import hashlib
import tempfile
import time
from pathlib import Path

import docker
from validation_log import ROOT, append_result, harness_commit, read_results, table, why_not_valid  # beside

from eval_pipeline.agents.builtin import NullAgent, OracleAgent
from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings, make_sandbox
from eval_pipeline.sandbox.container.workspace import CAMPAIGN_LABEL
from eval_pipeline.sandbox.pods.images import substitute_from
from eval_pipeline.store.artifacts import LocalArtifactStore
from eval_pipeline.tasks.dataset import InvalidDatasetError
from eval_pipeline.tasks.terminal.task import load_terminal_tasks
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate

RESULTS = ROOT / "docs" / "validation" / "terminal.jsonl"
LIMITS = ResourceLimits(memory_ceiling_mb=8192, output_bytes=200_000)
CAMPAIGN = "tb-population"


def _draw(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def _agent_run(task, agent, environment, sandbox, store) -> dict:
    """One trial of `agent`: its generation's status and the evaluation's outcome and reward detail."""
    started = time.perf_counter()
    timeout = task.verifier_timeout_s
    generation = generate(
        task, agent, 0, environment, sandbox, store, network=task.allow_internet, test_timeout_s=timeout
    )
    if generation.status != "completed":
        return {"outcome": generation.status, "detail": str(generation.error)[:400]}
    evaluation = evaluate(task, task.environment, generation, environment, sandbox, store, timeout)
    verifier = evaluation.steps[-1].get("stdout_tail", "") if evaluation.steps else ""
    agent_said = " ".join(
        str(step.get("stderr_tail") or step.get("stdout_tail") or "") for step in generation.trajectory
    )
    return {
        "outcome": Outcome(evaluation.outcome).value,
        "detail": f"{evaluation.detail}; verifier: {verifier[-300:]}; agent: {agent_said[-300:]}",
        "s": round(time.perf_counter() - started, 1),
    }


def _remove_snapshots() -> None:
    """Each generation keeps its container's snapshot image, which outlives the sandbox (a re-grade starts from
    it); a run over the whole benchmark would fill the engine's disk with them."""
    engine = docker.from_env()
    labels = ["eval_pipeline.layer=snapshot", f"{CAMPAIGN_LABEL}={CAMPAIGN}"]
    for attempt in range(5):  # Podman 4.3's listing fails now and then while an image goes ("image not known")
        try:
            images = engine.images.list(filters={"label": labels})
            break
        except docker.errors.APIError:
            time.sleep(2**attempt)
    else:
        return
    for image in images:
        with contextlib.suppress(docker.errors.NotFound):
            engine.images.remove(image.id, force=True)


def measure(directory: Path, scratch: Path) -> dict:
    """Load, build (timed), then the oracle and the null agent once each."""
    try:
        tasks = load_terminal_tasks(directory, scratch / "mirrors")
    except InvalidDatasetError as error:
        return {"status": "refused_at_load", "detail": str(error).split("\n", 1)[-1].strip()}
    task = tasks.instances[0]
    settings = SandboxSettings.from_mapping({"backend": "container"})
    sandbox = make_sandbox(settings, scratch, LIMITS, CAMPAIGN, network=True)  # Harbor's default
    store = LocalArtifactStore(scratch / "artifacts")
    try:
        started = time.perf_counter()
        try:
            environment = sandbox.prepare(task, task.environment, tasks.source)
        except Exception as error:  # noqa: BLE001 - a build that fails is this task's result
            return {"status": "environment_failed", "detail": str(error)[-600:]}
        figures = {"environment_s": round(time.perf_counter() - started, 1)}
        try:
            oracle = _agent_run(task, OracleAgent(), environment, sandbox, store)
            null = _agent_run(task, NullAgent(), environment, sandbox, store)
        except Exception as error:  # noqa: BLE001 - the harness failing on a task is this task's result
            return {**figures, "status": "harness_error", "detail": f"{type(error).__name__}: {error}"[-600:]}
    finally:
        sandbox.release()
        _remove_snapshots()
    resolved = Outcome.RESOLVED.value
    if oracle["outcome"] == resolved and null["outcome"] != resolved:
        status = "valid"
    elif oracle["outcome"] == resolved:
        status = "null_resolves"
    else:
        status = "oracle_fails" if oracle["outcome"] == Outcome.UNRESOLVED.value else "not_scored"
    detail = "" if status == "valid" else f"oracle: {oracle['detail']}; null: {null['detail']}"
    return {**figures, "status": status, "oracle": oracle["outcome"], "null": null["outcome"], "detail": detail}


def _stand_in(directory: Path) -> str:
    """The image(s) standing in for the task's FROM on this machine, as the container backend picks them."""
    dockerfile = directory / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        return ""
    stand_ins = SandboxSettings.from_mapping({"backend": "container"}).task_base_images
    return " ".join(sorted(set(substitute_from(dockerfile.read_text(), stand_ins)[1].values())))


def run(tasks_dir: Path, names: list[str], again: bool, limit: int | None) -> None:
    latest = {r["task"]: r["status"] for r in read_results(RESULTS)}
    harness = harness_commit()
    directories = sorted((d for d in tasks_dir.iterdir() if d.is_dir()), key=lambda d: _draw(d.name))
    if names:  # named tasks are measured again whatever their last result
        pending = [d for d in directories if d.name in names][:limit]
    else:
        pending = [d for d in directories if d.name not in latest or (again and latest[d.name] != "valid")][:limit]
    for number, directory in enumerate(pending, 1):
        with tempfile.TemporaryDirectory() as scratch:
            result = measure(directory, Path(scratch))
        record = append_result(
            RESULTS,
            harness,
            {
                "task_base": _stand_in(directory),
                "task": directory.name,
                **result,
            },
        )
        print(f"[{number}/{len(pending)}] {directory.name}: {record['status']}", flush=True)


# What results recorded before the task base was written down were measured on (scripts/build_task_base.sh then).
EARLIER_BASE = "localhost/eval-task-base:trixie"

# Why a task is not valid where its detail does not say it outright; a task not named here is not explained yet.
_INTERNET = "its build or solution downloads from {host}, which this machine cannot reach (it reaches PyPI, npm and Debian's and Ubuntu's archives only): a task for a machine with the internet"
EXPLAINED: dict[str, str] = {
    "build-pmars": "its solve.sh pins Debian 13.0's package versions (ca-certificates=20250419, dpkg-dev=1.22.21); "
    "Debian's archive serves only the current point release, and Harbor runs it on its own prebuilt image "
    "(alexgshaw/build-pmars:20251031), which no registry here serves",
    "gpt2-codegolf": _INTERNET.format(host="openaipublic.blob.core.windows.net"),
    "hf-model-inference": _INTERNET.format(host="huggingface.co"),
    "make-mips-interpreter": _INTERNET.format(host="github.com (git clone of doomgeneric)"),
    "fix-git": _INTERNET.format(host="github.com (git clone of personal-site)"),
    "chess-best-move": _INTERNET.format(host="notofonts.github.io"),
    "install-windows-3.11": _INTERNET.format(host="archive.org"),
    "pytorch-model-cli": _INTERNET.format(host="download.pytorch.org (torch's CPU wheels)"),
    "qemu-alpine-ssh": _INTERNET.format(host="dl-cdn.alpinelinux.org"),
    "sam-cell-seg": _INTERNET.format(host="github.com (pip installs MobileSAM from git)"),
    "bn-fit-modify": _INTERNET.format(host="the dataset's URL ($BN_URL)"),
    "query-optimize": _INTERNET.format(host="huggingface.co"),
    "compile-compcert": _INTERNET.format(host="opam's package sources"),
    "build-cython-ext": _INTERNET.format(host="github.com (git clone of pyknotid)"),
    "sanitize-git-repo": _INTERNET.format(host="github.com (git clone of test-secret-removal)"),
    "make-doom-for-mips": _INTERNET.format(host="github.com (git clone of doomgeneric)"),
    "filter-js-from-html": _INTERNET.format(host="github.com (its verifier downloads html-sanitizer-testbed)"),
    "count-dataset-tokens": _INTERNET.format(host="huggingface.co"),
    "fix-ocaml-gc": _INTERNET.format(host="github.com (git clone of sadiqj/ocaml)"),
    "caffe-cifar-10": _INTERNET.format(host="github.com (git clone of BVLC/caffe)"),
    "mteb-retrieve": _INTERNET.format(host="huggingface.co (the model BAAI/bge-small-zh-v1.5)")
    + "; its image also installs mteb with whatever transformers PyPI serves today, which no longer has"
    " AutoModelForVision2Seq (the solution's import fails before the download)",
    "rstan-to-pystan": _INTERNET.format(host="api.launchpad.net (add-apt-repository ppa:deadsnakes)"),
    "mteb-leaderboard": _INTERNET.format(host="github.com (git clone of embeddings-benchmark/results)")
    + "; its image's mteb==1.38.41 also imports Pillow, which nothing it installs from today's PyPI brings",
    "build-pov-ray": "its solve.sh pins an Ubuntu 24.04 package version (wget=1.21.4-1ubuntu4.1) that the archive "
    "no longer serves (a later update replaced it), and Harbor runs it on its own prebuilt image",
    "financial-document-processor": "its Dockerfile copies from the image ghcr.io/astral-sh/uv:0.8.14 (COPY --from), "
    "and no registry is reachable here",
    "qemu-startup": _INTERNET.format(host="dl-cdn.alpinelinux.org"),
    "crack-7z-hash": _INTERNET.format(host="github.com (git clone of openwall/john)"),
    "mcmc-sampling-stan": _INTERNET.format(host="cloud.r-project.org (CRAN: remotes, rstan and their pins)"),
    "fix-code-vulnerability": _INTERNET.format(host="github.com (git clone of bottlepy/bottle)"),
    "custom-memory-heap-crash": _INTERNET.format(host="github.com (gcc 13.2.0's source tarball)"),
    "portfolio-optimization": "its tests time the solution's C extension against a Python baseline (1.2x faster "
    "for 5,000+ assets): a timing test, measured on a loaded 2-core machine beside other builds",
    "reshard-c4-data": "its Dockerfile copies from the image ghcr.io/astral-sh/uv:0.8.15 (COPY --from), and no "
    "registry is reachable here",
    "protein-assembly": _INTERNET.format(host="pubchem.ncbi.nlm.nih.gov and RCSB's API"),
    **dict.fromkeys(
        ("pytorch-model-recovery", "sqlite-with-gcov", "train-fasttext"),
        "the copy of the task here lacks a large file the task ships (weights.pt, a vendored tarball or "
        "private_test.tar.gz: the repository snapshot this machine can fetch leaves out its largest blobs)",
    ),
}


def render(records: list[dict]) -> list[str]:
    """The table's lines: the latest result of each task, totals first."""
    latest = sorted({r["task"]: r for r in records}.values(), key=lambda r: r["task"])
    valid = sum(r["status"] == "valid" for r in latest)
    explained = sum(r["status"] != "valid" and r["task"] in EXPLAINED for r in latest)
    lines = [
        "# Terminal-Bench 2.0: the population table",
        "",
        "Written from `docs/validation/terminal.jsonl` (`benchmarks/terminal_population.py` says how). `valid`: the",
        "oracle resolved and the null agent did not, on the container backend, with the task's own Dockerfile",
        "(`FROM` replaced by the stand-in `scripts/build_task_base.sh` builds for its family: Ubuntu noble for",
        "`ubuntu:24.04`, Debian bookworm with the image's Python for `python:3.X`, the Debian suite for `debian:`).",
        "",
        f"- **container**: {valid} of {len(latest)} tasks valid, {explained} of the rest explained.",
        "",
    ]
    columns = ["task", "status", "oracle", "null", "environment s", "task base", "date", "harness", "why not valid"]
    cells = [
        [
            r["task"],
            r["status"],
            r.get("oracle"),
            r.get("null"),
            r.get("environment_s"),
            r.get("task_base", EARLIER_BASE),
            r["date"],
            r["harness"],
            why_not_valid(r, EXPLAINED.get(r["task"])),
        ]
        for r in latest
    ]
    lines += table(columns, cells)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=Path, required=True, help="a folder of Terminal-Bench 2.0 task directories")
    parser.add_argument("--names", nargs="*", default=[], help="only these tasks, measured again")
    parser.add_argument("--again", action="store_true", help="measure again the tasks whose latest result is not valid")
    parser.add_argument("--limit", type=int, help="at most this many tasks in this part")
    args = parser.parse_args()
    run(args.tasks, args.names, args.again, args.limit)


if __name__ == "__main__":
    main()
