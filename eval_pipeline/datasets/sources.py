"""Where a campaign's benchmark comes from: loading what a slice's source (datasets/config.py) names.

A campaign names its sources per slice (`slices: {name: source}`), or one
source as `benchmark:` (a single slice named `default`).

kind: demo      the built-in demo benchmark; twins, as below, its only field.
kind: terminal  Terminal-Bench / Harbor task directories (tasks/terminal/task.py):
                  path: a task directory, or a directory of them
                  mirror_dir: where their working trees are committed (default: the data directory's)
                  on_invalid: reject (default) or quarantine
                  images: build (default) each task's image from its Dockerfile, pull the docker_image its
                    task.toml names, or auto (pull where it names one)
kind: swebench  rows in SWE-bench's schema (Lite, Verified and SWE-rebench load as they are), read with
                the `datasets` library from
                  path: a .json, .jsonl or .parquet file, or a folder saved with save_to_disk
                  or hf_name + revision: a Hugging Face dataset pinned to an exact revision
                split: the split to read (default test; ignored for single files)
                mirror_dir or url_template: where the repositories are cloned from
                environments: {"owner/repo@version": {python, packages, install, test_cmd, ...}}: overrides
                  SWE-bench's own specification of that repository and version (tasks/swebench/specs.py)
                include_hints: give the agent the rows' hints_text (default false, as SWE-bench's rules say)
                on_invalid: reject (default) or quarantine
                twins: {per_test, per_run}: the mutated twins that guard each grading's graded tests
                  (default 3 per test, 9 per run; tasks/swebench/canaries.py)
                images: build (default) each environment from its spec, or pull (pull, auto) SWE-bench's
                  instance image of each row, `<image_namespace>/sweb.eval.x86_64.<id>:<image_tag>` as
                  SWE-bench's harness names it (image_namespace default swebench, image_tag default latest)
                A row that carries its own `install_config` (SWE-rebench) is built from it, not from
                SWE-bench's table (an `environments:` entry still wins), and one that names its image
                (`docker_image`, SWE-smith's `image_name`) is pulled as that image (tasks/swebench/rebench.py)
kind: swebench_pro  SWE-bench Pro rows (tasks/swebench/pro/), read as `kind: swebench` reads its rows from
                  path, or hf_name + revision (ScaleAI/SWE-bench_Pro), split
                  scripts: a checkout of scaleapi/SWE-bench_Pro-os, holding run_scripts/<instance_id>/
                    {run_script.sh,parser.py} and dockerfiles/; a row without them is invalid
                  on_invalid: reject (default) or quarantine
                  images: pull (default) or auto: each row runs in docker.io/jefzda/sweap-images:<dockerhub_tag>

A slice whose `images: pull` meets a task that names no image is refused at load, naming the task.
"""

import os
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from eval_pipeline.common.settings import Paths
from eval_pipeline.datasets.config import (
    DatasetSource,
    RowsSource,
    SweBenchProSource,
    SweBenchSource,
    TerminalSource,
    parse_source,
)
from eval_pipeline.datasets.portfolio import DuplicateInstanceError, Portfolio
from eval_pipeline.tasks.dataset import Benchmark
from eval_pipeline.tasks.demo import build_demo_benchmark
from eval_pipeline.tasks.environment import RepoSource
from eval_pipeline.tasks.named_image import ImagePolicy
from eval_pipeline.tasks.swebench.instance import benchmark_from_rows
from eval_pipeline.tasks.swebench.pro import benchmark_from_pro_rows
from eval_pipeline.tasks.terminal.task import load_terminal_tasks

_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


class DatasetSourceError(ValueError):
    """A `benchmark:` section that cannot be loaded; the message names the field."""


def _as_text(value: Any) -> Any:
    """Timestamps as SWE-bench writes them (ISO 8601, UTC as Z).

    The JSON reader under `datasets` turns such strings into datetimes; without
    this, the same row would hash differently as JSON and as parquet.
    """
    if isinstance(value, datetime):
        return value.isoformat() + "Z" if value.tzinfo is None else value.isoformat().replace("+00:00", "Z")
    return value


def _read_rows(source: RowsSource, cache_dir: Path) -> list[dict[str, Any]]:
    import datasets  # imported here: it is slow to import and only this source needs it

    if source.hf_name:
        dataset = datasets.load_dataset(
            source.hf_name, split=source.split, revision=source.revision, cache_dir=str(cache_dir)
        )
    else:
        path = Path(source.path or "")
        if not path.exists():
            raise DatasetSourceError(f"benchmark.path: {str(path)!r} does not exist")
        if path.is_dir():
            dataset = datasets.load_from_disk(str(path))
            if isinstance(dataset, datasets.DatasetDict):
                if source.split not in dataset:
                    raise DatasetSourceError(f"benchmark.split: {source.split!r} not in {path} (has {sorted(dataset)})")
                dataset = dataset[source.split]
        elif path.suffix in _FILE_BUILDERS:
            dataset = datasets.load_dataset(
                _FILE_BUILDERS[path.suffix], data_files=str(path), split="train", cache_dir=str(cache_dir)
            )
        else:
            raise DatasetSourceError(f"benchmark.path: {path} is not .json, .jsonl, .parquet or a saved dataset")
    return [{name: _as_text(value) for name, value in row.items()} for row in dataset]


def load_swebench(source: SweBenchSource, paths: Paths) -> Benchmark:
    return benchmark_from_rows(
        source.hf_name or str(source.path),  # what an invalid row's message names
        _read_rows(source, paths.data_dir / "datasets_cache"),
        on_invalid=source.on_invalid,
        include_hints=source.include_hints,
        twins=source.twins.settings(),
        image_namespace=source.image_namespace,
        image_tag=source.image_tag,
        images=source.images,  # a SWE-smith row is refused under `build` (tasks/swebench/smith.py)
        swebench_specs=True,
        source=RepoSource(url_template=source.url_template, mirror_dir=source.mirror_dir),
        environments=source.environments,
    )


def load_swebench_pro(source: SweBenchProSource, paths: Paths) -> Benchmark:
    checkout = Path(source.scripts)
    if not (checkout / "run_scripts").is_dir() or not (checkout / "dockerfiles").is_dir():
        raise DatasetSourceError(f"benchmark.scripts: {str(checkout)!r} holds no run_scripts/ and dockerfiles/")
    rows = _read_rows(source, paths.data_dir / "datasets_cache")
    return benchmark_from_pro_rows(source.hf_name or str(source.path), rows, checkout, on_invalid=source.on_invalid)


def write_snapshot(benchmark: Benchmark, directory: Path) -> Path:
    """The evaluated rows as `<version>.parquet`, written once and atomically: what a run pinned."""
    path = directory / f"{benchmark.version}.parquet"
    if not path.exists():
        import pandas  # here, not at the top: every run worker imports this module, few write a snapshot

        directory.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        pandas.DataFrame([instance.to_row() for instance in benchmark.instances]).to_parquet(scratch, index=False)
        os.replace(scratch, path)
    return path


def load_terminal(source: TerminalSource, paths: Paths) -> Benchmark:
    path = Path(source.path)
    if not path.is_dir():
        raise DatasetSourceError(f"benchmark.path: {str(path)!r} is not a directory of terminal tasks")
    return load_terminal_tasks(path, Path(source.mirror_dir or paths.mirrors), on_invalid=source.on_invalid)


def load_benchmark(source: DatasetSource | Mapping[str, Any], paths: Paths) -> Benchmark:
    """The benchmark a source names (a campaign's model, or a mapping checked here); `kind` selects the loader."""
    try:
        parsed = parse_source(source)
    except ValueError as error:
        raise DatasetSourceError(str(error)) from None
    if isinstance(parsed, SweBenchSource):
        return _with_image_policy(load_swebench(parsed, paths), parsed.images)
    if isinstance(parsed, SweBenchProSource):
        return load_swebench_pro(parsed, paths)
    if isinstance(parsed, TerminalSource):
        return _with_image_policy(load_terminal(parsed, paths), parsed.images)
    return build_demo_benchmark(paths.mirrors, parsed.twins.settings())


def _with_image_policy(benchmark: Benchmark, images: ImagePolicy) -> Benchmark:
    """The benchmark under its slice's `images:` policy; `pull` with a task that names no image is refused."""
    if images == "pull" and (unnamed := [t.instance_id for t in benchmark.instances if t.named_image is None]):
        listed = ", ".join(unnamed[:10]) + (f" and {len(unnamed) - 10} more" if len(unnamed) > 10 else "")
        raise DatasetSourceError(
            f"benchmark.images: pull, but {len(unnamed)} task(s) name no image to pull: {listed} (use `images: auto`"
            " to build those, or `build`)"
        )
    return replace(benchmark, images=images)


def load_portfolio(slices: Mapping[str, DatasetSource | Mapping[str, Any]], paths: Paths) -> Portfolio:
    """Every slice's benchmark; an error names the slice it comes from."""
    loaded = {}
    for name, source in slices.items():
        try:
            loaded[name] = load_benchmark(source, paths)
        except DatasetSourceError as error:
            raise DatasetSourceError(f"slice {name!r}: {error}") from None
    try:
        return Portfolio(loaded)
    except DuplicateInstanceError as error:
        raise DatasetSourceError(str(error)) from None
