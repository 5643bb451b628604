"""The typed end of every trial.

An outcome is either *scored* (the agent's patch was judged: it counts in the
resolved rate) or *infrastructure* (the harness could not judge it: it is left
out of the rate and shows in coverage, never as a zero).
"""

from enum import StrEnum


class Outcome(StrEnum):
    RESOLVED = "resolved"
    UNRESOLVED = "unresolved"
    PATCH_APPLY_FAILED = "patch_apply_failed"
    # The tests did not finish in time. Slow machines and noisy neighbours cause
    # this as often as bad patches do, so it is not held against the agent.
    TIMEOUT = "timeout"
    # The kernel killed the tests at the memory ceiling: a resource verdict, not the agent's.
    OOM_KILLED = "oom_killed"
    ERROR = "error"

    @property
    def is_scored(self) -> bool:
        return self in _SCORED

    @property
    def is_resolved(self) -> bool:
        return self is Outcome.RESOLVED


_SCORED = frozenset({Outcome.RESOLVED, Outcome.UNRESOLVED, Outcome.PATCH_APPLY_FAILED})
