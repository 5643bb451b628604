"""What the runner reports of a command: a JSON object, the same fields in the same order for every command."""

from typing import Literal, TypedDict

__all__ = ["ReadBackResult", "RunResult", "not_started"]


class RunResult(TypedDict):
    """The command's exit code, its output (each stream capped), how long it ran, and which limit ended it."""

    command: str
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool
    output_truncated: bool
    peak_memory_mb: float | None
    oom_killed: bool
    storage_exceeded: bool


class ReadBackResult(RunResult):
    """A RunResult with the files the request named to read back ({path: `read_back.read_back`}), its first
    field."""

    files: dict[str, str | Literal[False] | None]


def not_started(command: str, error: OSError, duration_s: float) -> RunResult:
    """The result of a command that could not start (its working directory is gone: an earlier command
    removed it): it fails as a shell fails a command it cannot find."""
    return {
        "command": command,
        "exit_code": 127,
        "stdout": "",
        "stderr": f"cannot start the command: {error}",
        "duration_s": duration_s,
        "timed_out": False,
        "output_truncated": False,
        "peak_memory_mb": None,
        "oom_killed": False,
        "storage_exceeded": False,
    }
