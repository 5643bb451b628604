"""What a checkout's trials store, as a fingerprint two checkouts can be compared by.

    python benchmarks/trial_fingerprint.py --checkout PATH --out FILE [--parts demo demo_containers grade]
        [--work DIR]
    python benchmarks/trial_fingerprint.py --compare A.json B.json

Runs the checkout's own code (`python -m eval_pipeline.cli` with PYTHONPATH=PATH, from a directory outside
it) on a fresh DAGSTER_HOME per part:

- `demo`: the built-in demo campaign on its embedded default (local backend);
- `demo_containers`: the built-in demo on the container backend in pod mode, seed 0 only;
- `grade`: `eval-pipeline grade` of the gold patches and of empty patches of two real SWE-bench Verified rows
  (flask, requests) in containers, the rows and their repositories cut as the real-data tests cut them
  (eval_pipeline_tests/support/real_data.py, into the work directory: nothing is committed).

Both demo parts leave out shuffle-deck (the campaign's `exclude:`): its reference solution shuffles two cards
at random and its test wants a new order, so its verdicts are a coin toss by design. The container parts need
an engine (DOCKER_HOST); without one they are recorded as skipped.

Then it walks each part's artifact store and writes every key and every record's payload, with only what
varies from run to run replaced (VARYING_FIELDS, `_normalised_text`, the random names of `_drawn_names`), each
trial's verdicts by who the trial is (instance, agent and parameters, seed) rather than by key, the
environments' keys and build logs, the report's numbers and the command's JSON summary. `--compare` prints
every difference and exits 1 on any.

Keys hash the paths of what a trial reads (a predictions file, a mirror), so runs to be compared must use the
same --work directory (the default is the same on every run); the parts' homes are emptied first.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PARTS = ("demo", "demo_containers", "grade")
CONTAINER_PARTS = ("demo_containers", "grade")
RANDOM_BY_DESIGN = "shuffle-deck"
GRADED_ROWS = ("pallets__flask-5014", "psf__requests-1142")
DEFAULT_WORK = Path(tempfile.gettempdir()) / "trial_fingerprint"
VARIES = "<varies>"

# Record fields whose value differs from run to run of the same code; each is kept, its value replaced by VARIES.
VARYING_FIELDS = {
    "started_at": "the wall-clock time a generation, evaluation or attempt started",
    "recorded_at": "the wall-clock time limit evidence was recorded",
    "duration_s": "wall time: of a trial, a step, an agent's command; the report's median and p95 of them",
    "peak_memory_mb": "a command's memory peak: its sample, or null when it ended before one was taken",
    "attempt_id": "the random id (uuid4) each attempt draws",
    "image_id": "the engine's id of an image (its tag, the harness's name for it, is kept): a snapshot's commit"
    " gets a new one each run",
}
# Outputs of the step that ran the graded tests beside random twins and a canary: the runner's log and the
# report channel of a test file laid out at random (members' order, drawn values, line numbers; a tail's lines
# differ with the order), read into the step's other fields (tests, canary_status, channel_lines, ...).
DRAWN_OUTPUTS = ("log_tail", "stdout_tail")
WORKSPACE_SUFFIX = re.compile(r"(workspaces/(?:gen|eval)-\d+-)[0-9a-f]{8}")
TEST_DURATION = re.compile(r"\bin \d+(?:\.\d+)?s\b(?: \(\d+:\d\d:\d\d\))?")
CANARY_SUM = re.compile(r"\b\d+ \+ \d+ == \d+\b|\(\d+ \+ \d+\) == \d+")
KILLED_JOB = re.compile(r"(: line \d+:) +\d+ (?=Killed|Terminated)")  # bash's notice names the pid


def _normalised_text(text: str) -> str:
    """`text` with the workspace directory's random suffix, the pid in bash's notice of a killed job, and test
    runners' timings ("3 passed in 0.08s", with pytest's `=` padding around it) replaced."""
    text = KILLED_JOB.sub(r"\1 <pid> ", WORKSPACE_SUFFIX.sub(r"\1<random>", text))
    lines = []
    for line in text.split("\n"):
        if TEST_DURATION.search(line):
            line = TEST_DURATION.sub("in <t>s", line).strip("= ")
        lines.append(line)
    return "\n".join(lines)


def _drawn_names(step: dict[str, Any]) -> dict[str, str]:
    """The names a grading drew at random in `step` (its canary's file and test, each twin group's renamed
    original and its twins), each with a placeholder saying what it names."""
    names: dict[str, str] = {}
    if isinstance(canary := step.get("canary"), str):
        path, _, test = canary.partition("::")
        names[path] = "<canary-file>"
        names[test] = "<canary>"
    for group in step.get("twins") or []:
        original = group.get("original", "?")
        names[group["renamed"]] = f"<original {original}>"
        names.update(dict.fromkeys(group.get("twins", []), f"<twin of {original}>"))
    return names


def _substituted(text: str, names: dict[str, str]) -> str:
    """`text` with `names` replaced where they stand as whole names (a test file named like a twin stays), and
    the canary's sum replaced."""
    pattern = re.compile(
        r"(?<![\w/])(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")(?![\w.])"
    )
    return CANARY_SUM.sub("<canary sum>", pattern.sub(lambda found: names[found.group(1)], text))


def _normalised_step(step: dict[str, Any]) -> dict[str, Any]:
    """A step with its drawn names and DRAWN_OUTPUTS replaced."""
    names = _drawn_names(step)
    if not names:
        return step
    step = {key: _substituted(value, names) if isinstance(value, str) else value for key, value in step.items()}
    step["twins"] = [
        {**group, "renamed": names[group["renamed"]], "twins": [names[twin] for twin in group.get("twins", [])]}
        for group in step.get("twins") or []
    ]
    return {key: VARIES if key in DRAWN_OUTPUTS and value else value for key, value in step.items()}


def normalised(value: Any) -> Any:
    """`value` with VARYING_FIELDS, drawn names and varying text replaced, at any depth."""
    if isinstance(value, dict):
        if "step" in value:
            value = _normalised_step(value)
        return {key: VARIES if key in VARYING_FIELDS else normalised(item) for key, item in value.items()}
    if isinstance(value, list):
        return [normalised(item) for item in value]
    if isinstance(value, str):
        return _normalised_text(value)
    return value


def _store_key(key: str, artifacts: Path) -> tuple[str, dict[str, Any]]:
    """A stored key as compared, with what the key itself checks: an attempt's key without its random id; a
    scored marker's without its fingerprint and MAC (over records holding timestamps, under a results key
    drawn per DAGSTER_HOME), the fingerprint checked against the evaluation it names instead."""
    if key.startswith("attempts/"):
        return key.rpartition("/")[0] + "/<attempt>", {}
    if key.startswith("scored/"):
        name, _, sealed = key.partition("~")
        fingerprint = sealed.partition("~")[0]
        evaluation = artifacts / "evaluation" / name.removeprefix("scored/").partition("-")[2]
        stored = evaluation.is_file() and hashlib.md5(evaluation.read_bytes()).hexdigest() == fingerprint
        return name, {"marker_fingerprint_is_the_stored_evaluation": stored}
    if key.startswith("quarantine/"):
        stem, _, reason = key.rpartition(".")
        return f"{stem.rpartition('.')[0]}.<time>.{reason}", {}
    return key, {}


def _records(artifacts: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(artifacts.rglob("*")):
        if path.is_file() and not path.name.startswith(".tmp-"):
            try:
                payload = json.loads(path.read_text())["payload"]
            except (ValueError, KeyError, UnicodeDecodeError) as error:
                payload = {"unreadable": str(error)}
            yield path.relative_to(artifacts).as_posix(), payload


def store_fingerprint(artifacts: Path) -> dict[str, list[Any]]:
    """Every key of the store (as `_store_key` gives it) with its records' normalised payloads, sorted (a key
    without its attempt id holds each attempt)."""
    store: dict[str, list[Any]] = {}
    for key, payload in _records(artifacts):
        name, checks = _store_key(key, artifacts)
        store.setdefault(name, []).append({**normalised(payload), **checks})
    return {key: sorted(records, key=json.dumps) for key, records in sorted(store.items())}


def verdicts(artifacts: Path) -> dict[str, dict[str, list[Any]]]:
    """Each trial's final verdicts and every evaluation attempt's outcome, by the trial's generation (instance,
    agent and parameters, seed), so that verdicts compare even where keys differ."""
    records = dict(_records(artifacts))
    trials: dict[str, dict[str, list[Any]]] = {}

    def trial(generation_key: str) -> dict[str, list[Any]]:
        generation = records.get(generation_key, {})
        agent = generation.get("agent_config", {})
        name = (
            f"{generation.get('instance_id', generation_key)} {agent.get('agent')}"
            f" {json.dumps(agent.get('params'), sort_keys=True)} s{generation.get('seed')}"
        )
        return trials.setdefault(name, {"verdicts": [], "attempts": []})

    for key, payload in records.items():
        if key.startswith("evaluation/"):
            trial(payload["generation_key"])["verdicts"].append([payload["outcome"], payload.get("tests")])
        elif key.startswith("attempts/evaluation/"):
            trial(payload.get("keys", {}).get("generation", ""))["attempts"].append(payload["outcome"])
        elif key.startswith("attempts/generation/"):
            trial(payload.get("keys", {}).get("artifact", key))["attempts"].append(f"generation {payload['outcome']}")
    return {
        name: {field: sorted(values, key=json.dumps) for field, values in found.items()}
        for name, found in sorted(trials.items())
    }


def environments(data_dir: Path) -> dict[str, Any]:
    """The environments the sandboxes prepared (their keys) with their build logs, normalised."""
    found: dict[str, Any] = {}
    for directory in sorted(data_dir.glob("sandboxes/*/environments")):
        for entry in sorted(directory.iterdir()):
            name = f"{directory.parent.name}/{entry.name.split('.')[0]}"
            if entry.suffix == ".log":
                found[name] = _normalised_text(entry.read_text(errors="replace"))
            else:
                found.setdefault(name, None)
    return found


def reports(data_dir: Path) -> dict[str, Any]:
    """The reports' JSON files (numbers, gates, release decisions), normalised; the Markdown and HTML render
    the same numbers."""
    return {
        path.relative_to(data_dir).as_posix(): normalised(json.loads(path.read_text()))
        for path in sorted(data_dir.glob("reports/*/*.json"))
    }


def part_fingerprint(data_dir: Path, summaries: list[Any]) -> dict[str, Any]:
    artifacts = data_dir / "artifacts"
    return {
        "summaries": normalised(summaries),
        "verdicts": verdicts(artifacts),
        "reports": reports(data_dir),
        "environments": environments(data_dir),
        "store": store_fingerprint(artifacts),
    }


def _without_flaky_task(campaign_file: Path, target: Path) -> Path:
    """The built-in campaign at `campaign_file`, its `builtin:` paths still the checkout's own, leaving out
    RANDOM_BY_DESIGN (a top-level key appended: the built-in campaigns have no `exclude:`)."""
    text = campaign_file.read_text()
    if re.search(r"^exclude:", text, re.MULTILINE):
        raise SystemExit(f"{campaign_file} has an exclude: of its own; merge {RANDOM_BY_DESIGN} into it")
    target.write_text(f"{text.rstrip()}\nexclude:\n  instances: [{RANDOM_BY_DESIGN}]\n")
    return target


def _cut_rows(inputs: Path) -> tuple[Path, Path, dict[str, Path]]:
    """The graded rows as a JSONL file, their repositories' mirrors, and predictions files of their gold patches
    and of empty patches, under `inputs` (cut once; the paths are part of the trials' keys)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from eval_pipeline_tests.support.real_data import swebench_mirror, swebench_rows, write_rows

    inputs.mkdir(parents=True, exist_ok=True)
    rows = swebench_rows(GRADED_ROWS)
    rows_file, mirrors = inputs / "verified.jsonl", inputs / "mirrors"
    if not mirrors.is_dir():
        swebench_mirror(rows, mirrors)
    write_rows(rows, rows_file)
    predictions = {}
    for name in ("gold", "empty"):
        predictions[name] = inputs / f"{name}.jsonl"
        predictions[name].write_text(
            "".join(
                json.dumps({"instance_id": row["instance_id"], "model_name_or_path": name, "model_patch": patch}) + "\n"
                for row in rows
                for patch in [row["patch"] if name == "gold" else ""]
            )
        )
    return rows_file, mirrors, predictions


def part_commands(part: str, checkout: Path, work: Path) -> list[list[str]]:
    """The eval-pipeline commands (after `python -m eval_pipeline.cli`) that make `part`."""
    campaigns = checkout / "eval_pipeline" / "campaigns"
    if part == "demo":
        return [["run", "--campaign", str(_without_flaky_task(campaigns / "demo.yaml", work / "demo.yaml")), "--json"]]
    if part == "demo_containers":
        campaign = _without_flaky_task(campaigns / "demo_containers.yaml", work / "demo_containers.yaml")
        return [["run", "--campaign", str(campaign), "--seed", "0", "--json"]]
    rows_file, mirrors, predictions = _cut_rows(work / "inputs")
    dataset = ["--dataset", str(rows_file), "--mirror-dir", str(mirrors), "--backend", "container", "--json"]
    return [["grade", "--predictions", str(path), *dataset] for path in predictions.values()]


def _load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def run_part(part: str, checkout: Path, work: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run `part` on a fresh home under `work`; its fingerprint and how the run went (commands, wall, load)."""
    home = work / "homes" / part
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    environ = {**os.environ, "PYTHONPATH": str(checkout), "DAGSTER_HOME": str(home)}
    environ.pop("EVAL_PIPELINE_DATA_DIR", None)
    summaries, ran = [], []
    for command in part_commands(part, checkout, work):
        line = [sys.executable, "-m", "eval_pipeline.cli", *command]
        started, load = time.monotonic(), _load()
        done = subprocess.run(line, cwd=work, env=environ, capture_output=True, text=True, check=False)
        ran.append({"command": line, "wall_s": round(time.monotonic() - started, 1), "load_before": load})
        if done.returncode != 0:
            raise SystemExit(f"{part}: {' '.join(line)} exited {done.returncode}:\n{done.stderr[-3000:]}")
        summaries.append(json.loads(done.stdout))
    return part_fingerprint(home / "eval_pipeline", summaries), {"runs": ran, "load_after": _load()}


def engine_present() -> bool:
    return bool(os.environ.get("DOCKER_HOST")) or Path("/var/run/docker.sock").exists()


def fingerprint(checkout: Path, parts: list[str], work: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    head = ["git", "-C", str(checkout)]
    commit = subprocess.run([*head, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    status = subprocess.run([*head, "status", "--porcelain"], capture_output=True, text=True, check=False)
    found: dict[str, Any] = {}
    runs: dict[str, Any] = {}
    for part in parts:
        if part in CONTAINER_PARTS and not engine_present():
            found[part] = "skipped: no container engine (DOCKER_HOST)"
            continue
        found[part], runs[part] = run_part(part, checkout, work)
    return {
        "checkout": {
            "path": str(checkout),
            "commit": commit.stdout.strip(),
            "changed_files": status.stdout.splitlines(),
        },
        "work": str(work),
        "varying_fields": VARYING_FIELDS,
        "runs": runs,
        "parts": found,
    }


def differences(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """Each place where `a` and `b` differ, as a path and the two values."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in b:
                yield f"{path}/{key}: only in A"
            elif key not in a:
                yield f"{path}/{key}: only in B"
            else:
                yield from differences(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (left, right) in enumerate(zip(a, b, strict=True)):
            yield from differences(left, right, f"{path}[{index}]")
    elif a != b:
        yield f"{path}: A {json.dumps(a)[:300]} | B {json.dumps(b)[:300]}"


def compare(first: Path, second: Path) -> int:
    """Print how the parts of two fingerprints differ (their runs' commands and timings aside); 1 if they do."""
    a, b = (json.loads(path.read_text()) for path in (first, second))
    found = list(differences(a["parts"], b["parts"]))
    for line in found:
        print(line)
    print(f"{len(found)} difference(s) between {first} and {second}", file=sys.stderr)
    return 1 if found else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, help="the tree whose code runs (PYTHONPATH)")
    parser.add_argument("--out", type=Path, help="where the fingerprint's JSON goes")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK, help="inputs and homes (same for runs compared)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.checkout or not args.out:
        parser.error("--checkout and --out, or --compare A B")
    result = fingerprint(args.checkout.resolve(), args.parts, args.work.resolve())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result["runs"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
