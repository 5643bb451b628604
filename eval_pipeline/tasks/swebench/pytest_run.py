"""The graded pytest run: the environment's pytest, started by the harness, with a canary test file beside the tests.

A test command as datasets give it (`pytest -rA`, `python -m pytest ...`,
with variables before it) runs whatever the repository puts first on
sys.path: a patch's `pytest.py` at the root is the runner under `python -m`.
The grader runs pytest_launcher.py instead, from the harness directory, which
imports pytest from the environment before the repository is on the path and
sends the results on the report channel, the command's captured output
(`channel_redirections`). Commands that start pytest some other way (tox, a
repository's own script) run as given, with a JUnit report; the patch audit
still looks at what the patch changed.

The canary is a test file the grader writes beside the graded test files,
under a random name, holding one ordinary test that always fails. Code under
test runs inside pytest and can always lie to it; a lie that turns failures
into passes turns the canary too, and the grader calls that run
`report_forged`. The canary is an ordinary test function in an ordinary
module, collected like the others, so a forger cannot tell it by its type.
"""

import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from eval_pipeline.tasks.swebench.pytest_launcher import CHANNEL_FD

LAUNCHER_SOURCE = (Path(__file__).with_name("pytest_launcher.py")).read_text()
LAUNCHER_NAME = "runner/pytest_launcher.py"
_PYTHONS = ("python", "python3")


@dataclass(frozen=True)
class Canary:
    """The always-failing test `name` in the test file `file`, both named at random, beside the graded tests."""

    file: str
    name: str
    source: str

    @classmethod
    def beside(cls, test_file: str) -> "Canary":
        directory = PurePosixPath(test_file).parent
        file, name = str(directory / f"test_{secrets.token_hex(4)}.py"), f"test_{secrets.token_hex(4)}"
        left, right = secrets.randbelow(90) + 10, secrets.randbelow(90) + 10
        source = f"def {name}():\n    assert {left} + {right} == {left + right + 1}\n"
        return cls(file, name, source)

    @property
    def node_id(self) -> str:
        return f"{self.file}::{self.name}"

    def write_command(self) -> str:
        """The shell command that writes the canary's file into the workspace."""
        return f"printf %s {shlex.quote(self.source)} > {shlex.quote(self.file)}"


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


def launched_command(test_cmd: str, launcher: str) -> str | None:
    """`test_cmd` with pytest started by the launcher at `launcher`; None when the command does not start
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
    return " ".join([*assignments, shlex.join(["python", launcher, mode, *words[first + skipped :]])])


def channel_redirections(log: str) -> str:
    """The redirections that give the launcher its report channel, the command's captured output, and send its
    output and errors to `log`: the shell opens the channel before it moves them."""
    return f"{CHANNEL_FD}>&1 > {shlex.quote(log)} 2>&1"
