"""Terminal-Bench (Harbor-format) tasks: loaded from task directories, graded by their verifier's reward."""

from eval_pipeline.tasks.terminal.task import TerminalTask, load_task, load_terminal_tasks
from eval_pipeline.tasks.terminal.verifier import run_verifier, score_verifier

__all__ = [
    "TerminalTask",
    "load_task",
    "load_terminal_tasks",
    "run_verifier",
    "score_verifier",
]
