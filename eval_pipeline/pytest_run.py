"""The graded pytest run: the environment's pytest, started by the harness, with a canary test in it.

A test command as datasets give it (`pytest -rA`, `python -m pytest ...`,
with variables before it) runs whatever the repository puts first on
sys.path: a patch's `pytest.py` at the root is the runner under `python -m`.
The grader runs pytest_launcher.py instead, from the harness directory, which
imports pytest from the environment before the repository is on the path and
adds the canary (see there). Commands that start pytest some other way (tox,
a repository's own script) run as given, without a canary; the patch audit
still looks at what the patch changed.
"""

import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path

LAUNCHER_SOURCE = (Path(__file__).with_name("pytest_launcher.py")).read_text()
LAUNCHER_NAME = "runner/pytest_launcher.py"
_PYTHONS = ("python", "python3")


@dataclass(frozen=True)
class Canary:
    """The always-failing test added to a graded run, named at random, reported as a test of `file`."""

    file: str
    name: str

    @classmethod
    def new(cls, test_file: str) -> "Canary":
        return cls(test_file, f"test_{secrets.token_hex(6)}")

    @property
    def node_id(self) -> str:
        return f"{self.file}::{self.name}"


def _runner_start(words: list[str]) -> tuple[int, str] | None:
    """Where the runner's own words start after the variable assignments, and how it was started (`module`:
    `python -m pytest`, `script`: the `pytest` script); None when the command does not start pytest itself."""
    first = next((index for index, word in enumerate(words) if "=" not in word), len(words))
    rest = words[first:]
    if rest[:1] == ["pytest"]:
        return first, "script"
    if len(rest) >= 3 and (rest[0] in _PYTHONS or rest[0].startswith("python3.")) and rest[1:3] == ["-m", "pytest"]:
        return first, "module"
    return None


def launched_command(test_cmd: str, launcher: str, canary: Canary) -> str | None:
    """`test_cmd` with pytest started by the launcher at `launcher`, or None when the command does not start
    pytest itself (a shell pipeline, tox, a repository's script)."""
    try:
        words = shlex.split(test_cmd)
    except ValueError:
        return None
    start = _runner_start(words)
    if start is None or any(word in ("|", "&&", ";", "||") for word in words):
        return None
    first, mode = start
    skipped = 1 if mode == "script" else 3
    assignments = [f"{name}={shlex.quote(value)}" for name, _, value in (word.partition("=") for word in words[:first])]
    launch = ["python", launcher, canary.file, canary.name, mode, *words[first + skipped :]]
    return " ".join([*assignments, shlex.join(launch)])
