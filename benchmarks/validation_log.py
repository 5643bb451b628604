"""What the population scripts (population.py, terminal_population.py) share: their append-only result logs, the
harness commit each result is measured with, and the rendering of a table's rows."""

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def harness_commit() -> str:
    """The commit of this checkout, recorded with every result (a result is as good as the harness it ran on)."""
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip()


def read_results(path: Path) -> list[dict]:
    """Every result logged at `path`, oldest first (the latest of a row is the one a table shows)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def append_result(path: Path, record: dict) -> None:
    """Log one result as soon as it is known, so a run stopped in its middle loses only the row at work."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as log:
        log.write(json.dumps(record, sort_keys=True) + "\n")


def why_not_valid(record: dict, explanation: str | None) -> str:
    """A table cell: the explanation (or that there is none yet) in bold, then the measured detail."""
    detail = record["detail"].replace("|", "\\|").replace("\n", " ")[:300]
    return detail if record["status"] == "valid" else f"**{explanation or 'not explained yet'}**; {detail}"


def table(columns: list[str], rows: list[list[object]]) -> list[str]:
    """A markdown table's lines: a header, then one line per row, each cell as text."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join("" if cell is None else str(cell) for cell in row) + " |" for row in rows]
