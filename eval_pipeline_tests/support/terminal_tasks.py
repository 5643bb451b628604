"""Terminal tasks made on the spot in the Harbor task format."""

from pathlib import Path


def write_terminal_task(tasks_dir: Path, name: str, test_sh: str, solve_sh: str = "true\n") -> Path:
    """A minimal Harbor-format task directory (empty working tree) whose verifier is `test_sh`."""
    task = tasks_dir / name
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True, exist_ok=True)
    (task / "instruction.md").write_text(f"Task {name}.\n")
    (task / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 30.0\n')
    (task / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\n")
    (task / "tests" / "test.sh").write_text(f"#!/bin/bash\n{test_sh}")
    (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve_sh}")
    return task
