"""Each run's stdout and stderr captured to files, as Dagster's local compute logs are, without copying them back.

Dagster's LocalComputeLogManager also mirrors what a run prints to the process's
own output: a `tail -F` and a Python watcher process per stream, four processes
per run, about a quarter of a second of CPU each time (most of it the watchers'
interpreter start). 18 runs of the demo's terminal tasks spent about 4 s of CPU
on it, on a 2-core machine. So a run's output (what its steps print, the
harness's logged warnings) is in the UI and in Dagster's files, where Dagster's
manager puts it, and is not copied to the terminal of the process that executed
it: the command's (whose own lines say how each trial ended) or `dagster dev`'s.
The Dagster names it extends are private (defs/dagster_internals.py).
"""

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from eval_pipeline.defs.dagster_internals import (
    IO_TYPE_EXTENSION,
    CapturedLogContext,
    ComputeIOType,
    LocalComputeLogManager,
    redirect_to_file,
)

__all__ = ["FileComputeLogManager"]


class FileComputeLogManager(LocalComputeLogManager):
    """LocalComputeLogManager whose capture writes the files only."""

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> "FileComputeLogManager":
        return cls(inst_data=inst_data, **config_value)

    @contextmanager
    def capture_logs(self, log_key: Sequence[str]) -> Iterator[CapturedLogContext]:
        stdout = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[ComputeIOType.STDOUT])
        stderr = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[ComputeIOType.STDERR])
        Path(stdout).parent.mkdir(parents=True, exist_ok=True)
        with redirect_to_file(sys.stdout, stdout), redirect_to_file(sys.stderr, stderr):
            yield CapturedLogContext(log_key)
        Path(self.complete_artifact_path(log_key)).touch()  # as Dagster's: the UI knows the capture ended
