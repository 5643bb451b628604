"""What the population scripts (population.py, terminal_population.py) share: their append-only result logs, the
harness commit each result is measured with, and the rendering of a table's rows.

A result's detail is the harness's own message, which names places on the machine that measured it (its scratch
directories, its mirrors, its home). The logs and the table keep the cause and drop those places (`public_detail`):
a missing commit is named with its repository, a missing mirror by the repository it would hold, and what is left
of a scratch path is shown under `<scratch>`."""

import json
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def harness_commit() -> str:
    """The commit of this checkout, recorded with every result (a result is as good as the harness it ran on)."""
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip()


def read_results(path: Path) -> list[dict]:
    """Every result logged at `path`, oldest first (the latest of a row is the one a table shows)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def append_result(path: Path, harness: str, fields: dict) -> dict:
    """Log one result as soon as it is known, so a run stopped in its middle loses only the row at work: `fields`
    with today's date and the `harness` commit it was measured with, its detail as `public_detail` gives it. The
    record as measured (its detail whole) is returned."""
    record = {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "harness": harness, **fields}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as log:
        log.write(json.dumps(public_record(record), sort_keys=True) + "\n")
    return record


# The places of the machine that measured a result, in the harness's messages (paths inside a task's container,
# /app or /tmp/pip-…, are the task's own and stay).
_LOG = re.compile(r"\s*; log: /\S+")
_MISSING_COMMIT = re.compile(r"is not in the repository at /\S+ \(an incomplete mirror\?\)")
_NO_MIRROR = re.compile(
    r"git clone -q --no-checkout (/\S+)/([^/\s]+/[^/\s]+) /\S+ in /\S+ failed: fatal: repository '\1/\2'"
)
_SCRATCH = re.compile(r"/tmp/tmp\w{8}(?=[/\s\"')]|$)|/tmp/pytest-of-[^/\s]+/pytest-\d+")
_PYENV = re.compile(r"/root/\.pyenv|/home/\w+/\.pyenv")
_HOME = re.compile(r"/root/|/home/\w+/")
_DATASET_COPY = re.compile(r"/work/\S*?/(terminal-bench-2)/")
# The engine's words for a pull name the machine's DNS resolver and its registry mirror on loopback.
_RESOLVER = re.compile(r" on \d{1,3}(?:\.\d{1,3}){3}:53:")
_LOOPBACK_MIRROR = re.compile(r"\b(?:127\.0\.0\.1|localhost):\d+/")


def public_detail(detail: str, repo: str | None = None) -> str:
    """`detail` with the places of the machine that measured it replaced by what they stood for: a build's log
    is dropped (it stayed on that machine), a commit missing from the clone is named as missing from the mirror of
    `repo` the run cloned, a clone from a mirror directory that lacks the repository says so, pyenv's root is
    `$(pyenv root)`, a home `~/`, a copy of Terminal-Bench 2 its folder's name, a scratch directory `<scratch>`,
    and in an engine's pull error its DNS resolver `its resolver` and its registry mirror on loopback `<mirror>/`."""
    mirror = f"the mirror of {repo} the run cloned from" if repo else "the mirror the run cloned from"
    detail = _LOG.sub("", detail)
    detail = _MISSING_COMMIT.sub(f"is not in {mirror}", detail)
    detail = _NO_MIRROR.sub(
        r"the mirror directory holds no clone of \2: git clone failed: fatal: repository '\2'", detail
    )
    detail = _PYENV.sub("$(pyenv root)", detail)
    detail = _HOME.sub("~/", detail)
    detail = _DATASET_COPY.sub(r"\1/", detail)
    detail = _RESOLVER.sub(" on its resolver:", detail)
    detail = _LOOPBACK_MIRROR.sub("<mirror>/", detail)
    return _SCRATCH.sub("<scratch>", detail)


def public_record(record: dict) -> dict:
    """`record` with its detail as `public_detail` gives it."""
    return {**record, "detail": public_detail(record.get("detail", ""), record.get("repo"))}


def why_not_valid(record: dict, explanation: str | None) -> str:
    """A table cell: the explanation (or that there is none yet) in bold, then the measured detail, without the
    places of the machine that measured it (`public_detail`)."""
    detail = public_detail(record["detail"], record.get("repo")).replace("|", "\\|")
    detail = detail.replace("\r", " ").replace("\n", " ")[:300]
    return detail if record["status"] == "valid" else f"**{explanation or 'not explained yet'}**; {detail}"


def table(columns: list[str], rows: list[list[object]]) -> list[str]:
    """A markdown table's lines: a header, then one line per row, each cell as text."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join("" if cell is None else str(cell) for cell in row) + " |" for row in rows]
