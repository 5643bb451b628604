"""SWE-bench Verified's population table: the reference and the empty patch on a stratified sample, per backend.

    python benchmarks/population.py --mirrors DIR --backend local [--repos sympy/sympy ...] [--limit N]
    python benchmarks/population.py --render    # with SWE-bench Pro's and SWE-rebench's samples
                                                # (dataset_population.py) and Terminal-Bench 2's table
                                                # (terminal_population.py)

The sample (`sample`) is one row of every repository x version of the repositories whose environments install
without compiling, and one row of each repository that compiles its own extensions, chosen by the hash of the
instance id (reproducible, and blind to how easy a row is). Each row is validated as `eval-pipeline validate`
does it (validation.validate_task: the gold patch, then the empty patch, each in a fresh workspace) after its
environment is prepared with nothing but SWE-bench's own spec, and the null agent's patch (an untouched
workspace's diff) is measured. Rows come from the tests' SWE-bench Verified fixture (eval_pipeline_tests/
fixtures.md); repositories from DIR, which holds full clones as `owner/name` (a campaign's `mirror_dir`:
`git clone --mirror https://github.com/owner/name DIR/owner/name`).

It takes hours: run it in parts (by repository, or --limit). Each row's result is appended to
docs/validation/population.jsonl as soon as it is known (with the harness commit that measured it), a row
already measured on the backend is skipped unless named by --rows or, when not valid, --again, and --render
writes docs/POPULATION.md from the latest result of every row and backend.
"""

import argparse
import hashlib
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from dataset_population import RESULTS as DATASET_RESULTS  # benchmarks/, beside this script
from dataset_population import render as render_datasets
from real_rows import environment_disk_bytes
from terminal_population import RESULTS as TERMINAL_RESULTS
from terminal_population import render as render_terminal
from validation_log import ROOT, append_result, harness_commit, read_results, table, why_not_valid

from eval_pipeline.sandbox import ResourceLimits, SandboxSettings, make_sandbox
from eval_pipeline.sandbox.patches import workspace_diff
from eval_pipeline.tasks.dataset import InvalidDatasetError
from eval_pipeline.tasks.environment import RepoSource
from eval_pipeline.tasks.swebench.instance import benchmark_from_rows
from eval_pipeline.trial.validation import environment_failure, validate_task
from eval_pipeline_tests.support.real_data import swebench_rows, verified_instance_ids

RESULTS = ROOT / "docs" / "validation" / "population.jsonl"
TABLE = ROOT / "docs" / "POPULATION.md"
COMPILING = ("astropy/astropy", "matplotlib/matplotlib", "scikit-learn/scikit-learn")
LIMITS = ResourceLimits(memory_ceiling_mb=4096, output_bytes=200_000)
TEST_TIMEOUT_S = 1800.0


def _draw(instance_id: str) -> str:
    return hashlib.sha256(instance_id.encode()).hexdigest()


def sample(rows: Iterable[dict]) -> list[dict]:
    """One row per (repository, version), or per repository for those that compile: the lowest hash wins."""
    chosen: dict[tuple[str, str], dict] = {}
    for row in rows:
        stratum = (row["repo"], "" if row["repo"] in COMPILING else row["version"])
        if stratum not in chosen or _draw(row["instance_id"]) < _draw(chosen[stratum]["instance_id"]):
            chosen[stratum] = row
    return [chosen[stratum] for stratum in sorted(chosen)]


def measure(row: dict, backend: str, mirrors: Path, scratch: Path) -> dict:
    """Prepare the row's environment (timed), take the null patch, and validate gold and empty once each."""
    try:
        source = RepoSource(mirror_dir=str(mirrors))
        benchmark = benchmark_from_rows("verified", [row], source=source, swebench_specs=True)
    except InvalidDatasetError as error:  # a spec this harness refuses (a conda environment.yml): refused at load
        return {"status": "refused_at_load", "gold": {}, "empty": {}, "detail": str(error).split("\n", 1)[-1].strip()}
    instance = benchmark.instances[0]
    spec = benchmark.environment_for(instance)
    sandbox = make_sandbox(SandboxSettings.from_mapping({"backend": backend}), scratch, LIMITS, "population")
    figures: dict = {"python": spec.python}
    try:
        started = time.perf_counter()
        try:
            environment = sandbox.prepare(instance, spec, benchmark.source)
        except Exception as error:  # noqa: BLE001 - a build that fails is this row's result
            validation = environment_failure("verified", instance, 1, error)
        else:
            figures["environment_s"] = round(time.perf_counter() - started, 1)
            figures["environment_mb"] = round(environment_disk_bytes(sandbox, environment) / 2**20)
            with sandbox.workspace(environment, "null") as workspace:
                figures["null_patch_bytes"] = len(workspace_diff(workspace, instance.base_commit).encode())
            validation = validate_task(
                "verified", instance, spec, environment, sandbox, repeats=1, test_timeout_s=TEST_TIMEOUT_S
            )
    finally:
        sandbox.release()
    verdicts = {"status": validation.status, "gold": validation.gold, "empty": validation.empty}
    return {**figures, **verdicts, "detail": validation.detail}


def run(backend: str, mirrors: Path, repos: list[str], only: list[str], again: bool, limit: int | None) -> None:
    latest = {r["instance_id"]: r["status"] for r in read_results(RESULTS) if r["backend"] == backend}
    harness = harness_commit()
    rows = [row for row in sample(swebench_rows(verified_instance_ids())) if not repos or row["repo"] in repos]
    if only:  # named rows are measured again whatever their last result
        pending = [row for row in rows if row["instance_id"] in only][:limit]
    else:
        pending = [r for r in rows if r["instance_id"] not in latest or (again and latest[r["instance_id"]] != "valid")]
        pending = pending[:limit]
    for number, row in enumerate(pending, 1):
        with tempfile.TemporaryDirectory() as scratch:
            result = measure(row, backend, mirrors, Path(scratch))
        record = append_result(
            RESULTS,
            harness,
            {
                "backend": backend,
                "instance_id": row["instance_id"],
                "repo": row["repo"],
                "version": row["version"],
                **result,
            },
        )
        print(f"[{number}/{len(pending)}] {row['instance_id']} {backend}: {record['status']}", flush=True)


# Why a row is not valid where its detail does not say it outright (evidence in each line); a row not named
# here and not valid is not explained yet.
EXPLAINED = {
    **dict.fromkeys(
        ("psf__requests-1766", "psf__requests-1921", "psf__requests-2317", "psf__requests-2931", "psf__requests-5414"),
        "its graded tests reach httpbin.org and time out without the internet (SWE-bench validated them online; "
        "trials here have no network and this machine reaches no such host): a row for a machine with network",
    ),
    **dict.fromkeys(
        ("django__django-7530", "django__django-10097"),
        "SWE-bench's spec says Python 3.5, which this machine's pyenv lacks and cannot fetch (the container "
        "backend with `python_source: image` takes python:3.5-slim where a registry is reachable)",
    ),
    **dict.fromkeys(
        ("django__django-11740", "django__django-13512"),
        "the mirror here (a django fork under the fetch size limit) lacks the row's environment_setup_commit",
    ),
    **dict.fromkeys(
        ("matplotlib__matplotlib-24026", "scikit-learn__scikit-learn-25747"),
        "no mirror of the repository here: its snapshot exceeds what this machine may fetch (500 MiB)",
    ),
    "pytest-dev__pytest-7521": "a bad row: its PASS_TO_PASS lists `test_capsysbinary.py::test_hello`, a test of "
    "a file that exists only in the temporary directory of an inner pytest run (pytester's makepyfile in "
    "testing/test_capture.py): SWE-bench's log parser read that run's own `PASSED` line from the outer log; no "
    "test of the repository has that id, so no patch can make it pass",
    "sphinx-doc__sphinx-8269": "its graded linkcheck tests check links to www.google.com, w3.org and "
    "sphinx-doc.org (tests/roots/test-linkcheck/links.txt): a row for a machine with network, as the requests "
    "rows",
}


# Whole classes of rows the table found graded wrong, and what the harness does for each (the row that showed it first).
LESSONS = (
    "What the table found, and what the harness does about it:",
    "",
    "- Editable installs of projects with no pyproject.toml must be `setup.py develop`, as SWE-bench's pip made",
    "  them (pip 25.3 made every editable install an import hook that keeps the repository off sys.path):",
    "  environments get `pip<25.3` and wheel (pylint-dev__pylint-6386).",
    "- Unbounded dependencies have moved since SWE-bench built its images: sphinx 3.x and 4.x get `docutils<0.22`",
    "  (0.22 removed `docutils.utils.roman`; sphinx-doc__sphinx-7454, -8638) and every sphinx `pygments<2.19`",
    "  (2.19 changed highlighted HTML; sphinx-doc__sphinx-10323), recorded in the spec (`AMENDMENTS`).",
    "- `[100%]`, pytest's progress counter read as a test id by SWE-bench's log parser, grades nothing",
    "  (pytest-dev__pytest-5262).",
    "- SWE-bench's `environment.yml` specs (xarray, matplotlib) install through pip, conda names mapped to PyPI's",
    "  and resolved with the spec's pins in one install (pydata__xarray-4356).",
    "- A setup commit missing from the mirror is named as such (django__django-11740).",
)


def render(results: list[dict]) -> str:
    """The table: the latest result of each row and backend, totals first."""
    latest = {(r["instance_id"], r["backend"]): r for r in results}
    rows = sorted(latest.values(), key=lambda r: (r["repo"], r["version"], r["backend"]))
    lines = [
        "# SWE-bench Verified: the population table",
        "",
        "Written by `python benchmarks/population.py --render` from `docs/validation/population.jsonl`; the sample,",
        "the method and how to run it in parts are in the script's docstring. `valid`: gold resolved and the empty",
        "patch did not, with nothing but SWE-bench's own spec of the row's repository and version. `environment s`",
        "is what preparing the environment took in that run: on the container backend an image an earlier run built",
        "is reused, so it can be seconds; `environment MB` is then the whole image, shared layers included.",
        "",
        *LESSONS,
        "",
    ]
    for backend in sorted({r["backend"] for r in rows}):
        mine = [r for r in rows if r["backend"] == backend]
        valid = sum(r["status"] == "valid" for r in mine)
        explained = sum(r["status"] != "valid" and r["instance_id"] in EXPLAINED for r in mine)
        lines.append(f"- **{backend}**: {valid} of {len(mine)} rows valid, {explained} of the rest explained.")
    columns = ["repository", "version", "row", "backend", "Python", "status", "environment s", "environment MB"]
    columns += ["null patch bytes", "date", "harness", "why not valid"]
    cells = [
        [
            r["repo"],
            r["version"],
            r["instance_id"],
            r["backend"],
            r.get("python"),
            r["status"],
            r.get("environment_s"),
            r.get("environment_mb"),
            r.get("null_patch_bytes"),
            r["date"],
            r["harness"],
            why_not_valid(r, EXPLAINED.get(r["instance_id"])),
        ]
        for r in rows
    ]
    lines += ["", *table(columns, cells)]
    return "\n".join(lines) + "\n"


def render_all() -> str:
    """docs/POPULATION.md: SWE-bench Verified's table, the samples of SWE-bench Pro and SWE-rebench, and
    Terminal-Bench 2's table, each from its results so far."""
    sections = (render_datasets(read_results(DATASET_RESULTS)), render_terminal(read_results(TERMINAL_RESULTS)))
    return render(read_results(RESULTS)) + "".join("\n" + "\n".join(lines) + "\n" for lines in sections)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mirrors", type=Path, help="full clones as owner/name (a campaign's mirror_dir)")
    parser.add_argument("--backend", choices=("local", "container"), default="local")
    parser.add_argument("--repos", nargs="*", default=[], help="only these repositories (owner/name)")
    parser.add_argument("--rows", nargs="*", default=[], help="only these rows (instance ids)")
    parser.add_argument("--again", action="store_true", help="measure again the rows whose latest result is not valid")
    parser.add_argument("--limit", type=int, help="at most this many rows in this part")
    parser.add_argument("--render", action="store_true", help="write docs/POPULATION.md from the results so far")
    args = parser.parse_args()
    if args.render:
        TABLE.write_text(render_all())
        return
    if not args.mirrors:
        parser.error("--mirrors is required to run rows")
    run(args.backend, args.mirrors, args.repos, args.rows, args.again, args.limit)


if __name__ == "__main__":
    main()
