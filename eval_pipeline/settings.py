"""Where eval_pipeline keeps its state, chosen by environment variables.

- ``DAGSTER_HOME``: the Dagster instance (SQLite storage by default). The CLI
  uses ``~/.eval_pipeline/dagster_home`` when it is unset.
- ``EVAL_PIPELINE_DATA_DIR``: artifacts, prepared environments, workspaces,
  demo repositories, result tables and reports. Defaults to
  ``$DAGSTER_HOME/eval_pipeline`` so one directory holds a whole installation.
"""

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DAGSTER_HOME = Path.home() / ".eval_pipeline" / "dagster_home"


def dagster_home() -> Path:
    return Path(os.environ.get("DAGSTER_HOME") or DEFAULT_DAGSTER_HOME)


@dataclass(frozen=True)
class Paths:
    """The directory layout under the data directory."""

    data_dir: Path

    @classmethod
    def from_env(cls) -> "Paths":
        configured = os.environ.get("EVAL_PIPELINE_DATA_DIR")
        return cls(Path(configured) if configured else dagster_home() / "eval_pipeline")

    @property
    def artifacts(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def sandboxes(self) -> Path:
        return self.data_dir / "sandboxes"

    @property
    def mirrors(self) -> Path:
        return self.data_dir / "mirrors"

    @property
    def results(self) -> Path:
        return self.data_dir / "results"

    @property
    def snapshots(self) -> Path:
        return self.data_dir / "snapshots"

    @property
    def reports(self) -> Path:
        return self.data_dir / "reports"
