"""Wall time of `eval-pipeline run` against Harbor's `harbor run` on the demo's 8 terminal tasks, oracle agent, Podman.

    python benchmarks/harbor_comparison.py [--rounds 3] [--concurrency 1,4] [--harbor /opt/harbor-venv/bin/harbor] [--out DIR]

Setup, once per machine (Harbor 0.25 needs Python >= 3.12; podman-compose is the compose frontend of Harbor's
`podman` environment, since this Podman has no `podman compose`):

    bash scripts/start_container_engine.sh
    /root/.pyenv/versions/3.12.1/bin/python -m venv /opt/harbor-venv
    /opt/harbor-venv/bin/pip install 'harbor==0.25.0' 'podman-compose==1.6.0'

Both harnesses run the same task directories (eval_pipeline/demo_tasks: Harbor's own task format) with the
oracle agent (solution/solve.sh, then tests/test.sh) on the same Podman. Harbor runs with `--env podman`, its
own Podman environment (podman CLI plus `podman-compose --in-pod=false`), not `--env docker`: its docker
environment needs Compose V2's `up --wait`, `cp` and `--project-directory`, which no compose frontend for
Podman available here has. Harbor gets copies of the tasks whose `FROM` lines are rewritten to the local
images eval_pipeline itself substitutes for them (EVAL_PIPELINE_TASK_BASE_IMAGES): Docker Hub cannot be
reached here, and this way both harnesses build their environments on identical base images.

Each harness first does one untimed warm-up run, which builds its images; the timed runs then measure
trial execution, not builds. Harbor runs with `--no-delete`: its default `--delete` ends every trial with
`compose down --rmi local`, which deletes the image it just built, so every trial would rebuild it. Its
trials still run `compose build` each (a cache hit), as they do by design. Our runs each get a fresh
DAGSTER_HOME and data directory (nothing is reused from an earlier run but the container images), and
`--workers N` Dagster runs at once: the CLI makes one run per instance's trials, and with one seed that is
one trial, so N workers is N trials at once, Harbor's `--n-concurrent N`.

A third contestant is no harness at all (`bare`): each task's own image, built once, run with `podman run`
as its task.toml limits it, its solve.sh and then its test.sh in the same container, N containers at once.
Its wall is the floor any harness could reach for the same work on this machine; ours / bare is the
harness's overhead, and bare / Harbor the best ratio to Harbor that the tasks themselves allow.

Rounds are interleaved (Harbor c=1, ours c=1, bare c=1, Harbor c=4, ...), so drift on the machine
hits all alike. Each run's wall is the whole command's, process start to exit. Printed as JSON: every
run's wall and per-task outcome, per concurrency the median of the paired ratios ours / Harbor, and
Harbor's per-trial phases from its job's result files (mean trial wall, environment setup, agent,
verifier, and teardown: the trial's end after its verifier's).

The demo's tasks fail on purpose in both harnesses: build-index's verifier needs more than the task's
256 MB (killed), slow-report's verifier outlives its 3 s timeout, and shuffle-deck's test fails when the
shuffle of two cards leaves them in order (about half the time).
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
TASKS = REPO / "eval_pipeline" / "demo_tasks"
# What the project's container benchmarks and CI set; an exported value wins.
ENVIRONMENT_DEFAULTS = {
    "DOCKER_HOST": "unix:///run/podman/podman.sock",
    "EVAL_PIPELINE_BASE_IMAGE": "localhost/eval-base:bookworm",
    "EVAL_PIPELINE_EXTRA_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt",
    "EVAL_PIPELINE_PYTHON_SOURCE": "pyenv",
    "EVAL_PIPELINE_TASK_BASE_IMAGES": "python:3.11-slim=localhost/eval-task-base:bookworm-py3.11 "
    "python:3.13-slim-bookworm=localhost/eval-task-base:bookworm-py3.13 ubuntu:24.04=localhost/eval-task-base:noble",
}
# Harbor: no telemetry, and litellm's bundled price table rather than three failing fetches from GitHub.
HARBOR_ENVIRONMENT = {"HARBOR_TELEMETRY": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
TRIAL_LINE = re.compile(r"^\[\d+/\d+\] (?P<task>\S+) \S+: (?P<outcome>\w+)")
HARBOR_IMAGE = re.compile(r"^localhost/[a-z0-9-]+__[a-z0-9]+__env_main:latest$")


def base_images() -> dict[str, str]:
    """EVAL_PIPELINE_TASK_BASE_IMAGES as {FROM image: local image}."""
    pairs = (item.split("=", 1) for item in os.environ["EVAL_PIPELINE_TASK_BASE_IMAGES"].split())
    return dict(pairs)


def harbor_tasks(directory: Path) -> Path:
    """Copies of the demo's tasks for Harbor, each Dockerfile's FROM rewritten to the local image ours uses."""
    images = base_images()
    for task in sorted(p for p in TASKS.iterdir() if (p / "task.toml").is_file()):
        shutil.copytree(task, directory / task.name)
        dockerfile = directory / task.name / "environment" / "Dockerfile"
        lines = dockerfile.read_text().splitlines(keepends=True)
        for index, line in enumerate(lines):
            words = line.split()
            if len(words) >= 2 and words[0].upper() == "FROM" and words[1] in images:
                lines[index] = line.replace(words[1], images[words[1]], 1)
        dockerfile.write_text("".join(lines))
    return directory


def write_campaign(path: Path) -> Path:
    """The demo's terminal slice alone, the oracle, one seed, in pods; no retries (Harbor's default is none)."""
    campaign = {
        "name": "harbor_comparison",
        "slices": {"terminal": {"kind": "terminal", "path": "builtin:demo_tasks"}},
        "variants": [{"name": "oracle", "agent": "oracle"}],
        "seeds": 1,
        "sandbox": {"backend": "container", "mode": "pod", "pod_parallelism": 1, "build_parallelism": 2},
        "retries": {"max_retries": 0},
    }
    path.write_text(yaml.safe_dump(campaign))
    return path


def timed(command: list[str], env: dict[str, str], log: Path) -> tuple[float, int]:
    """Wall seconds and exit code of `command`; its stdout and stderr go to `log`."""
    started = time.perf_counter()
    with log.open("w") as out:
        code = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    return round(time.perf_counter() - started, 2), code


def failure(code: int, log: Path) -> dict:
    """Nothing for a command that exited 0; else its exit code and its log's last lines (the run is not paired)."""
    if code == 0:
        return {}
    print(f"{log.name}: exit code {code}, see {log}", file=sys.stderr)
    return {"exit_code": code, "log_tail": log.read_text(errors="replace").splitlines()[-5:]}


def seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def harbor_trial(result: dict) -> tuple[str, dict[str, float]]:
    """A Harbor trial's outcome (`resolved`, `reward 0.0`, or its exception's type) and its phases in seconds."""
    rewards = (result.get("verifier_result") or {}).get("rewards") or {}
    exception = (result.get("exception_info") or {}).get("exception_type")
    reward = rewards.get("reward")
    outcome = exception or ("resolved" if reward == 1 else f"reward {reward}")
    phases = {"trial_s": seconds(result["started_at"], result["finished_at"])}
    for phase in ("environment_setup", "agent_execution", "verifier"):
        if timing := result.get(phase):
            phases[f"{phase}_s"] = seconds(timing["started_at"], timing["finished_at"])
    last = result.get("verifier") or result.get("agent_execution")
    if last:
        phases["teardown_s"] = seconds(last["finished_at"], result["finished_at"])
    return outcome, phases


def run_harbor(harbor: Path, tasks: Path, jobs: Path, name: str, concurrency: int) -> dict:
    """`harbor run` over the tasks: its wall, each task's outcome, and the mean of its trials' phases."""
    env = {**os.environ, **HARBOR_ENVIRONMENT, "PATH": f"{harbor.parent}{os.pathsep}{os.environ['PATH']}"}
    command = [str(harbor), "run", "--path", str(tasks), "--agent", "oracle", "--env", "podman"]
    command += ["--n-concurrent", str(concurrency), "--no-delete", "--jobs-dir", str(jobs), "--job-name", name]
    wall, code = timed([*command, "--yes", "--quiet"], env, log := jobs / f"{name}.log")
    outcomes, phases = {}, {}
    for path in sorted((jobs / name).glob("*/result.json")):
        result = json.loads(path.read_text())
        outcomes[result["task_name"]], trial = harbor_trial(result)
        for key, value in trial.items():
            phases.setdefault(key, []).append(value)
    means = {f"mean_{key}": round(statistics.mean(values), 2) for key, values in phases.items()}
    return {"wall_s": wall, **failure(code, log), "outcomes": outcomes, **means}


def run_ours(campaign: Path, root: Path, name: str, concurrency: int) -> dict:
    """`eval-pipeline run` of the campaign with a fresh DAGSTER_HOME and data directory: wall and outcomes."""
    home, data = root / name / "home", root / name / "data"
    home.mkdir(parents=True)
    env = {**os.environ, "DAGSTER_HOME": str(home), "EVAL_PIPELINE_DATA_DIR": str(data)}
    env.pop("EVAL_PIPELINE_DAGSTER_URL", None)  # the embedded worker pool, not a server's queue
    log = root / f"{name}.log"
    command = ["eval-pipeline", "run", "--campaign", str(campaign), "--workers", str(concurrency), "--json"]
    wall, code = timed(command, env, log)
    outcomes = {m["task"]: m["outcome"] for line in log.read_text().splitlines() if (m := TRIAL_LINE.match(line))}
    return {"wall_s": wall, **failure(code, log), "outcomes": dict(sorted(outcomes.items()))}


def bare_image(task: Path) -> str:
    return f"localhost/eval-bare-{task.name}:latest"


def build_bare(tasks: Path) -> None:
    """Each task's own image, as its Dockerfile says (FROM already rewritten), untimed."""
    for task in sorted(tasks.iterdir()):
        built = subprocess.run(
            ["podman", "build", "-q", "-t", bare_image(task), str(task / "environment")], capture_output=True, text=True
        )
        if built.returncode:
            sys.exit(f"podman build of {task.name} failed: {built.stderr[-2000:]}")


def bare_trial(task: Path) -> str:
    """One task's solve.sh then test.sh in one fresh container of its image, within its limits: its outcome."""
    config = tomllib.loads((task / "task.toml").read_text())
    environment, verifier = config.get("environment", {}), config.get("verifier", {})
    memory = f"{environment.get('memory_mb', 1024)}m"
    script = (
        "mkdir -p /logs/verifier && bash /solution/solve.sh >/dev/null 2>&1; "
        f"timeout {verifier.get('timeout_sec', 600)} bash /tests/test.sh >/dev/null 2>&1; "
        "cat /logs/verifier/reward.txt /logs/verifier/reward.json 2>/dev/null"
    )
    command = ["podman", "run", "--rm", "--memory", memory, "--memory-swap", memory]
    command += ["--cpus", str(environment.get("cpus", 1)), "-v", f"{task / 'tests'}:/tests:ro"]
    command += ["-v", f"{task / 'solution'}:/solution:ro", bare_image(task), "bash", "-c", script]
    reward = subprocess.run(command, capture_output=True, text=True).stdout.strip()
    if reward.startswith("{"):  # reward.json: {"reward": x}
        reward = str(json.loads(reward).get("reward"))
    return "resolved" if reward in ("1", "1.0") else f"reward {reward or None}"


def run_bare(tasks: Path, concurrency: int) -> dict:
    """Every task's container, `concurrency` at once, with no harness: the wall and each task's outcome."""
    started = time.perf_counter()
    names = sorted(tasks.iterdir())
    with ThreadPoolExecutor(concurrency) as pool:
        outcomes = dict(zip((task.name for task in names), pool.map(bare_trial, names), strict=True))
    return {"wall_s": round(time.perf_counter() - started, 2), "outcomes": outcomes}


def remove_bare_images(tasks: Path) -> None:
    subprocess.run(["podman", "rmi", *(bare_image(task) for task in tasks.iterdir())], capture_output=True)


def podman_images() -> set[str]:
    listing = subprocess.run(
        ["podman", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True
    )
    return set(listing.stdout.split())


def remove_harbor_images(before: set[str]) -> None:
    """Harbor tags one image per trial (`<trial>__env_main`); remove those this script made."""
    made = sorted(image for image in podman_images() - before if HARBOR_IMAGE.match(image))
    if made:
        subprocess.run(["podman", "rmi", *made], capture_output=True)


def resolved_counts(runs: list[dict]) -> dict[str, str]:
    """Per task: in how many of these runs it was resolved."""
    tasks = sorted({task for run in runs for task in run["outcomes"]})
    return {task: f"{sum(run['outcomes'].get(task) == 'resolved' for run in runs)}/{len(runs)}" for task in tasks}


def summarize(rounds: list[dict], concurrency: list[int]) -> dict:
    summary = {}
    for c in concurrency:
        pairs = [r[f"c{c}"] for r in rounds]
        harbor, ours, bare = [p["harbor"] for p in pairs], [p["ours"] for p in pairs], [p["bare"] for p in pairs]
        ratios = [p["ratio_ours_over_harbor"] for p in pairs if p["ratio_ours_over_harbor"] is not None]
        summary[f"c{c}"] = {
            "harbor_walls_s": [h["wall_s"] for h in harbor],
            "ours_walls_s": [o["wall_s"] for o in ours],
            "median_ratio_ours_over_harbor": round(statistics.median(ratios), 3) if ratios else None,
            "pairs_both_exited_0": f"{len(ratios)}/{len(pairs)}",
            "bare_walls_s": [b["wall_s"] for b in bare],
            "median_ratio_ours_over_bare": round(
                statistics.median(o["wall_s"] / b["wall_s"] for o, b in zip(ours, bare, strict=True)), 3
            ),
            "median_ratio_bare_over_harbor": round(
                statistics.median(b["wall_s"] / h["wall_s"] for b, h in zip(bare, harbor, strict=True)), 3
            ),
            **{
                f"harbor_{key}": round(statistics.mean(h[key] for h in harbor if key in h), 2)
                for key in ("mean_trial_s", "mean_teardown_s")
                if any(key in h for h in harbor)
            },
            "harbor_resolved": resolved_counts(harbor),
            "ours_resolved": resolved_counts(ours),
            "bare_resolved": resolved_counts(bare),
        }
    return summary


def versions(harbor: Path) -> dict[str, str]:
    def package(name: str) -> str:
        code = f"import importlib.metadata as m; print(m.version({name!r}))"
        return subprocess.run(
            [str(harbor.parent / "python"), "-c", code], capture_output=True, text=True
        ).stdout.strip()

    podman = subprocess.run(["podman", "--version"], capture_output=True, text=True).stdout.split()[-1]
    return {"harbor": package("harbor"), "podman_compose": package("podman-compose"), "podman": podman}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,4", help="comma-separated trials at once, each a pair per round")
    parser.add_argument("--harbor", type=Path, default=Path("/opt/harbor-venv/bin/harbor"))
    parser.add_argument(
        "--out", type=Path, help="where runs' logs, Harbor's jobs and our data go (default: new /tmp dir)"
    )
    args = parser.parse_args()
    concurrency = [int(c) for c in args.concurrency.split(",")]
    for key, value in ENVIRONMENT_DEFAULTS.items():
        os.environ.setdefault(key, value)
    if not args.harbor.exists():
        sys.exit(f"{args.harbor} not found: install Harbor as this file's docstring says, or pass --harbor")
    images_before = podman_images()
    root = args.out or Path(tempfile.mkdtemp(prefix="harbor-comparison-"))  # kept: the logs explain a failed run
    root.mkdir(parents=True, exist_ok=True)
    tasks = harbor_tasks(root / "harbor-tasks")
    names = sorted(p.name for p in tasks.iterdir())
    (jobs := root / "harbor-jobs").mkdir()
    campaign = write_campaign(root / "harbor_comparison.yaml")
    try:
        build_bare(tasks)
        warm_up = {
            "harbor": run_harbor(args.harbor, tasks, jobs, "warm-up", max(concurrency)),
            "ours": run_ours(campaign, root, "warm-up", max(concurrency)),
            "bare": run_bare(tasks, max(concurrency)),
        }
        rounds = []
        for number in range(1, args.rounds + 1):
            pairs: dict = {"round": number}
            for c in concurrency:
                harbor = run_harbor(args.harbor, tasks, jobs, f"r{number}-c{c}", c)
                ours = run_ours(campaign, root, f"r{number}-c{c}", c)
                bare = run_bare(tasks, c)
                both_ran = "exit_code" not in harbor and "exit_code" not in ours
                ratio = round(ours["wall_s"] / harbor["wall_s"], 3) if both_ran else None
                pairs[f"c{c}"] = {"harbor": harbor, "ours": ours, "bare": bare, "ratio_ours_over_harbor": ratio}
                walls = f"harbor {harbor['wall_s']} s, ours {ours['wall_s']} s, bare {bare['wall_s']} s"
                print(f"round {number} c={c}: {walls}", file=sys.stderr)
            rounds.append(pairs)
    finally:
        remove_harbor_images(images_before)
        remove_bare_images(tasks)
    figures = {
        "tasks": names,
        "versions": versions(args.harbor),
        "cores": os.cpu_count(),
        "logs": str(root),
        "warm_up_walls_s": {name: run["wall_s"] for name, run in warm_up.items()},
        "rounds": rounds,
        "summary": summarize(rounds, concurrency),
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
