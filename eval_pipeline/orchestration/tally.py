"""A campaign run's progress for people: trials done of those to run, resolved so far, time spent and left, and
the model's tokens and cost so far.

`eval-pipeline run` shows it as one live line on a terminal, printing only the trials that ended unscored
above it as they happen; elsewhere (a log, CI) every trial's line carries it.
"""

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Tally", "duration"]


def duration(seconds: float) -> str:
    """`42s`, `3m05s`, `1h02m`: what a person reads at a glance."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _tokens(count: int) -> str:
    return f"{count / 1000:.1f}k" if count >= 1000 else str(count)


@dataclass
class Tally:
    """Counts trials as they end. The time left is the time per trial so far times the trials left: trials of
    one campaign cost alike, and the first ones (each waiting for its environment) make it an overestimate."""

    total: int
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)
    done: int = 0
    resolved: int = 0
    tokens: int = 0
    cost_usd: float = 0.0

    def __post_init__(self) -> None:
        self.started = self.started or self.clock()

    def add(self, outcome: str, generation: Mapping[str, Any] | None = None) -> None:
        """A trial ended in `outcome`; `generation`: its generation's metadata (tokens and cost), if stored."""
        self.done += 1
        self.resolved += outcome == "resolved"
        if generation:
            self.tokens += int(generation.get("input_tokens") or 0) + int(generation.get("output_tokens") or 0)
            self.cost_usd += float(generation.get("cost_usd") or 0.0)

    def line(self) -> str:
        elapsed = self.clock() - self.started
        left = self.total - self.done
        eta = duration(elapsed / self.done * left) if self.done and left else ("0s" if not left else "?")
        return (
            f"{self.done}/{self.total} done · {self.resolved} resolved · {duration(elapsed)} elapsed · ETA {eta}"
            f" · {_tokens(self.tokens)} tokens · ${self.cost_usd:.2f}"
        )
