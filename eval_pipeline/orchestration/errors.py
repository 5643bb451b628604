"""The orchestration's expected failures, which the command reports in one line.

Kept apart from the drivers and launchers, which import Dagster, so that the command can name them before it
has imported Dagster (its run workers start first: run_workers.py).
"""

__all__ = ["CampaignRunError", "LaunchError"]


class CampaignRunError(RuntimeError):
    """A stage that every trial depends on failed; the message carries the underlying error."""


class LaunchError(RuntimeError):
    """The Dagster server refused a run, or cannot be reached."""
