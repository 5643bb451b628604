"""A subset of a campaign's trials, for a command that runs only some of them (`run --instance X --variant Y`).

A selection filters the campaign's own plan: the trials it picks are the very partitions, with the very keys,
that they are in the whole campaign, so a trial run in a subset is found done by the next run of the whole, and
nothing runs twice. It is no new campaign file and no new name.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

__all__ = ["EVERY_TRIAL", "Planned", "SelectionError", "TrialSelection"]


class Planned(Protocol):
    """What a selection filters on: a trial's specification (trial/spec.py) or its results row (trial/records.py)."""

    @property
    def instance_id(self) -> str: ...
    @property
    def variant(self) -> str: ...
    @property
    def slice(self) -> str: ...
    @property
    def seed(self) -> int: ...


T = TypeVar("T", bound=Planned)


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
    `limit` of them, in the campaign's order (trial/spec.py's trial_specs: by slice as listed, instance id, trial)."""

    instances: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    slices: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()
    limit: int | None = None

    @property
    def everything(self) -> bool:
        return not (self.instances or self.variants or self.slices or self.seeds) and self.limit is None

    def _problems(self, specs: Sequence[Planned]) -> list[str]:
        problems = [
            _unknown("--instance", self.instances, {spec.instance_id for spec in specs}),
            _unknown("--variant", self.variants, {spec.variant for spec in specs}),
            _unknown("--slice", self.slices, {spec.slice for spec in specs}),
            _unknown("--seed", self.seeds, {spec.seed for spec in specs}),
        ]
        return [problem for problem in (*problems, self._limit_problem()) if problem]

    def _limit_problem(self) -> str:
        return f"--limit {self.limit}: must be at least 1" if self.limit is not None and self.limit < 1 else ""

    def _wants(self, spec: Planned) -> bool:
        return (
            (not self.instances or spec.instance_id in self.instances)
            and (not self.variants or spec.variant in self.variants)
            and (not self.slices or spec.slice in self.slices)
            and (not self.seeds or spec.seed in self.seeds)
        )

    def pick_instances(self, slice_of: Mapping[str, str]) -> list[str]:
        """The selected instance ids of `slice_of` (instance id -> slice, in the campaign's slice order), by slice
        then id as the campaign orders them, for a command over instances rather than trials (validate); SelectionError when a filter names what is not there, or is a
        variant or seed, which an instance does not have."""
        problems = [
            _unknown("--instance", self.instances, set(slice_of)),
            _unknown("--slice", self.slices, set(slice_of.values())),
            "--variant and --seed select trials, not instances" if self.variants or self.seeds else "",
            self._limit_problem(),
        ]
        if problems := [problem for problem in problems if problem]:
            raise SelectionError("; ".join(problems))
        slice_rank = {name: rank for rank, name in enumerate(dict.fromkeys(slice_of.values()))}
        chosen = [
            instance_id
            for instance_id, slice_name in sorted(slice_of.items(), key=lambda item: (slice_rank[item[1]], item[0]))
            if (not self.instances or instance_id in self.instances) and (not self.slices or slice_name in self.slices)
        ]
        return chosen if self.limit is None else chosen[: self.limit]

    def pick(self, specs: Sequence[T]) -> list[T]:
        """The selected trials of `specs` (a campaign's specs or results rows, in its order); SelectionError when a filter names what
        the campaign does not have, rather than running nothing."""
        if problems := self._problems(specs):
            raise SelectionError("; ".join(problems))
        chosen = [spec for spec in specs if self._wants(spec)]
        return chosen if self.limit is None else chosen[: self.limit]


EVERY_TRIAL = TrialSelection()
