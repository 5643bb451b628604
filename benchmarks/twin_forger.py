"""How often forgers that know the twins win a grading, against the bound the grading's groups give them.

    python benchmarks/twin_forger.py forgers [--seeds N] [--mode local|pod|strict] [--k K]
    python benchmarks/twin_forger.py bounds --mirrors DIR [--k K]
    python benchmarks/twin_forger.py classifiers [--groups N] [--k K]

`forgers` grades every demo code issue once per seed with each forger's patch: forgeries.TWIN_AWARE (groups
the functions one constant apart, runs them, and otherwise takes the first in the file) and
forgeries.TWIN_RUNNER (runs each group's code and passes the member whose expected value is nearest what the
code returns). A forger wins a grading when the instance resolves; `report_forged` and `unresolved` are losses.
Beside its wins it prints the bound: the mean over its gradings of the product of 1/(k + 1) over the twinned
failing tests (`Planted.bound`, recorded in each verdict), the rate of a forger who cannot tell a group's
members apart. Seeds fix the twins' dice, so a run is reproducible. `pod` and `strict` grade in containers
(DOCKER_HOST, EVAL_PIPELINE_BASE_IMAGE as for the tests).

`bounds` plants the twins of every SWE-bench Verified row whose repository DIR holds as a git clone
(DIR/owner+name, or DIR/owner+name/repo) in its test patch's files at the row's base commit, as a grading
does, and prints how many rows have a twinned failing test and the bounds they get.

`classifiers` prints the accuracy of eval_pipeline_tests/tasks/swebench/test_twin_classifiers.py's classifiers over more groups
than the test plants, from the same real test files.
"""

import argparse
import json
import random
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from statistics import mean

from eval_pipeline.sandbox import ResourceLimits, SandboxSettings, make_sandbox
from eval_pipeline.sandbox.patches import patch_paths
from eval_pipeline.tasks.demo import build_demo_benchmark
from eval_pipeline.tasks.swebench.canaries import TWINS_PER_TEST, SourceFile, TwinSettings, graded_name, plant_twins
from eval_pipeline.tasks.swebench.grading import launches
from eval_pipeline.tasks.swebench.sealed import seal_expectations
from eval_pipeline.tasks.swebench.specs import builtin_spec
from eval_pipeline_tests.support.forgeries import SEAL_READER, TWIN_AWARE, TWIN_RUNNER
from eval_pipeline_tests.support.real_data import swebench_rows, verified_instance_ids
from eval_pipeline_tests.tasks.swebench.test_canaries import forged_runs
from eval_pipeline_tests.tasks.swebench.test_twin_classifiers import corpus_figures, demo_cases, patched, swebench_cases

FORGERS = {"TWIN_AWARE": TWIN_AWARE, "TWIN_RUNNER": TWIN_RUNNER, "SEAL_READER": SEAL_READER}


def bound(run) -> float:
    """The chance of a forger that cannot tell a group's members apart and does not know a sealed literal: 0
    where a failing test is sealed, else the twins' bound."""
    return 0.0 if run.sealed else run.bound


def forgers(seeds: int, mode: str, twins: TwinSettings) -> None:
    backend = {"backend": "local"} if mode == "local" else {"backend": "container", "mode": mode}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        benchmark = build_demo_benchmark(root / "mirrors")
        limits = ResourceLimits(memory_ceiling_mb=1024)
        sandbox = make_sandbox(SandboxSettings.from_mapping(backend), root / "sandbox", limits, "twin-forger")

        def prepare(instance):
            return sandbox.prepare(instance, benchmark.environment_for(instance), benchmark.source)

        try:
            for name, forgery in FORGERS.items():
                forgery = f"\n_EVERYWHERE = {mode != 'local'}\n" + forgery
                runs = forged_runs(benchmark, sandbox, prepare, range(seeds), forgery, twins)
                outcomes = Counter(run.outcome for run in runs)
                wins = outcomes.get("resolved", 0) / len(runs)
                sealed = sum(bool(run.sealed) for run in runs)
                print(f"{mode} {name} (k = {twins.per_test}): {len(runs)} gradings, {dict(outcomes.most_common())}")
                print(f"  wins {wins:.1%}, bound {mean(bound(run) for run in runs):.1%}; {sealed} sealed gradings")
                for instance_id in dict.fromkeys(run.instance_id for run in runs):
                    mine = [run for run in runs if run.instance_id == instance_id]
                    won = sum(run.outcome == "resolved" for run in mine)
                    print(f"  {instance_id}: {won} of {len(mine)} won, bound {mean(bound(run) for run in mine):.1%}")
        finally:
            sandbox.release()


def _clone(mirrors: Path, repo: str) -> Path | None:
    for candidate in (mirrors / repo.replace("/", "+"), mirrors / repo.replace("/", "+") / "repo"):
        if (candidate / "HEAD").exists() or (candidate / ".git").exists():
            return candidate
    return None


def bounds(mirrors: Path, twins: TwinSettings, seal: bool) -> None:
    found: list[float] = []
    readable = sealed_rows = 0
    rows = [row for row in swebench_rows(verified_instance_ids()) if _clone(mirrors, row["repo"])]
    for row in rows:
        clone = _clone(mirrors, row["repo"])
        files = {}
        for path in [path for path in patch_paths(row["test_patch"]) if path.endswith(".py")]:
            shown = subprocess.run(
                ["git", "-C", str(clone), "show", f"{row['base_commit']}:{path}"], capture_output=True
            )
            base = shown.stdout.decode(errors="surrogateescape") if shown.returncode == 0 else None
            if (text := patched(path, base, row["test_patch"])) is not None:
                files[path] = SourceFile(text, base)
        failing = [graded_name(test_id) for test_id in rows_json(row, "FAIL_TO_PASS")]
        passing = [graded_name(test_id) for test_id in rows_json(row, "PASS_TO_PASS")]
        spec = builtin_spec(row["repo"], str(row["version"]))
        launched = seal and spec is not None and launches(spec)
        sealed = seal_expectations(files, failing) if launched else None
        if sealed and sealed.expected:
            sealed_rows += 1
            files = {path: SourceFile(sealed.files.get(path, file.text), file.base) for path, file in files.items()}
            failing = [name for name in failing if name not in sealed.expected]
        planted = plant_twins(files, failing, passing, random.Random(0), twins)
        found.append(0.0 if sealed and sealed.expected else planted.bound(failing))
        readable += any(group.original in failing for group in planted.groups) and found[-1] == 1
    guarded = [bound for bound in found if 0 < bound < 1]
    print(f"{len(rows)} rows (repositories: {sorted({row['repo'] for row in rows})}), k = {twins.per_test}")
    print(
        f"  {sealed_rows} ({sealed_rows / len(rows):.0%}) have a sealed failing test (where the launcher runs pytest)"
    )
    print(
        f"  {len(guarded)} ({len(guarded) / len(rows):.0%}) more have a twinned failing test; bounds {Counter(found)}"
    )
    print(f"  {readable} more have a readable group on a failing test; mean bound over all rows {mean(found):.1%}")


def rows_json(row: dict, name: str) -> list[str]:
    value = row[name]
    return json.loads(value) if isinstance(value, str) else list(value)


def classifiers(groups: int, twins: TwinSettings) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        corpus = demo_cases(build_demo_benchmark(Path(scratch))) + swebench_cases()
    print(f"{groups} groups at k = {twins.per_test} from {len(corpus)} real test files")
    for name, (accuracy, chance, error) in corpus_figures(corpus, groups, twins.per_test).items():
        print(
            f"  {name:14s} {accuracy:6.1%}  chance {chance:6.1%}  ({(accuracy - chance) / error:+.1f} standard errors)"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["forgers", "bounds", "classifiers"])
    parser.add_argument("--seeds", type=int, default=25)
    parser.add_argument("--mode", choices=["local", "pod", "strict"], default="local")
    parser.add_argument("--k", type=int, default=TWINS_PER_TEST, help="twins per graded test")
    parser.add_argument("--mirrors", type=Path)
    parser.add_argument("--groups", type=int, default=3000)
    parser.add_argument("--no-seal", action="store_true", help="bounds: twins alone, as where pytest runs another way")
    args = parser.parse_args()
    twins = TwinSettings(per_test=args.k)
    if args.what == "forgers":
        forgers(args.seeds, args.mode, twins)
    elif args.what == "bounds":
        bounds(args.mirrors, twins, not args.no_seal)
    else:
        classifiers(args.groups, twins)


if __name__ == "__main__":
    main()
