"""A subset of a campaign's trials, for a command that runs only some of them (`run --instance X --variant Y`).

A selection filters the campaign's own plan: the trials it picks are the very partitions, with the very keys,
that they are in the whole campaign, so a trial run in a subset is found done by the next run of the whole, and
nothing runs twice. It is no new campaign file and no new name.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from eval_pipeline.trial.spec import TrialSpec

__all__ = ["EVERY_TRIAL", "SelectionError", "TrialSelection"]


class SelectionError(ValueError):
    """A filter naming what the campaign does not have; the message names the flag, the value and what it has."""


def _unknown(flag: str, wanted: Iterable[object], known: set[object]) -> str:
    missing = [value for value in wanted if value not in known]
    if not missing:
        return ""
    listed = ", ".join(map(str, sorted(known, key=str)[:20]))
    return f"{flag} {', '.join(map(str, missing))}: not in the campaign (it has {listed})"


@dataclass(frozen=True)
class TrialSelection:
    """The trials whose instance, variant, slice and seed are among those given (none given: any), at most
    `limit` of them, in the campaign's order (by instance id, then variant and seed as planned)."""

    instances: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    slices: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()
    limit: int | None = None

    @property
    def everything(self) -> bool:
        return not (self.instances or self.variants or self.slices or self.seeds) and self.limit is None

    def _problems(self, specs: Sequence[TrialSpec]) -> list[str]:
        problems = [
            _unknown("--instance", self.instances, {spec.instance_id for spec in specs}),
            _unknown("--variant", self.variants, {spec.variant for spec in specs}),
            _unknown("--slice", self.slices, {spec.slice for spec in specs}),
            _unknown("--seed", self.seeds, {spec.seed for spec in specs}),
        ]
        if self.limit is not None and self.limit < 1:
            problems.append(f"--limit {self.limit}: must be at least 1")
        return [problem for problem in problems if problem]

    def _wants(self, spec: TrialSpec) -> bool:
        return (
            (not self.instances or spec.instance_id in self.instances)
            and (not self.variants or spec.variant in self.variants)
            and (not self.slices or spec.slice in self.slices)
            and (not self.seeds or spec.seed in self.seeds)
        )

    def pick(self, specs: Sequence[TrialSpec]) -> list[TrialSpec]:
        """The selected trials of `specs` (a campaign's, in its order); SelectionError when a filter names what
        the campaign does not have, rather than running nothing."""
        if problems := self._problems(specs):
            raise SelectionError("; ".join(problems))
        chosen = [spec for spec in specs if self._wants(spec)]
        return chosen if self.limit is None else chosen[: self.limit]


EVERY_TRIAL = TrialSelection()
