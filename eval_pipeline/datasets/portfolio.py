"""A campaign's portfolio: named slices (say `code-issues` and `terminal`), each a benchmark of its own.

Variants and seeds apply to every slice; reports and gates work per slice.
Instance ids are unique across the portfolio, since they name partitions.
A campaign may leave instances out (`exclude:`, say the quarantine of a
validation report): they leave the portfolio as quarantined rows of their slice,
with the reason, so reports count them as they count invalid rows.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.tasks.dataset import Benchmark, RowProblem
from eval_pipeline.tasks.environment import EnvironmentSpec, RepoSource
from eval_pipeline.tasks.task import Task

EXCLUDED = "exclude"  # the field a quarantined row names when the campaign left its instance out


class DuplicateInstanceError(ValueError):
    """Two slices hold the same instance id; the message names both slices."""


@dataclass(frozen=True)
class Portfolio:
    slices: Mapping[str, Benchmark]
    _slice_of: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        slice_of: dict[str, str] = {}
        for name, benchmark in self.slices.items():
            for instance in benchmark.instances:
                if instance.instance_id in slice_of:
                    raise DuplicateInstanceError(
                        f"instance {instance.instance_id!r} is in slices {slice_of[instance.instance_id]!r}"
                        f" and {name!r}: instance ids must be unique across a campaign's slices"
                    )
                slice_of[instance.instance_id] = name
        object.__setattr__(self, "_slice_of", slice_of)

    @property
    def instances(self) -> tuple[Task, ...]:
        return tuple(instance for benchmark in self.slices.values() for instance in benchmark.instances)

    @property
    def version(self) -> str:
        """Changes when and only when a slice's content (or the slicing) changes."""
        return stable_hash({name: benchmark.version for name, benchmark in self.slices.items()})

    @property
    def quarantined(self) -> tuple[RowProblem, ...]:
        return tuple(problem for benchmark in self.slices.values() for problem in benchmark.quarantined)

    @property
    def excluded(self) -> dict[str, str]:
        """The instances the campaign left out (`excluding`): id -> why."""
        return {problem.instance_id: problem.message for problem in self.quarantined if problem.field == EXCLUDED}

    def excluding(self, reasons: Mapping[str, str]) -> "Portfolio":
        """The portfolio without the instances in `reasons` (id -> why), each kept as a quarantined row.

        A slice that loses instances gets a new version, since what it evaluates changed. Ids in
        no slice are passed over: a validation report may name instances the dataset has since dropped.
        """
        slices = {}
        for name, benchmark in self.slices.items():
            dropped = [i.instance_id for i in benchmark.instances if i.instance_id in reasons]
            if not dropped:
                slices[name] = benchmark
                continue
            slices[name] = replace(
                benchmark,
                instances=tuple(i for i in benchmark.instances if i.instance_id not in reasons),
                version=stable_hash({"dataset": benchmark.version, "excluded": sorted(dropped)}),
                quarantined=benchmark.quarantined
                + tuple(RowProblem("excluded by the campaign", i, EXCLUDED, reasons[i]) for i in dropped),
            )
        return Portfolio(slices)

    def __contains__(self, instance_id: object) -> bool:
        return instance_id in self._slice_of

    def slice_of(self, instance_id: str) -> str:
        try:
            return self._slice_of[instance_id]
        except KeyError:
            raise KeyError(f"instance {instance_id!r} is in no slice of this portfolio") from None

    def instance(self, instance_id: str) -> Task:
        return self.slices[self.slice_of(instance_id)].instance(instance_id)

    def environment_for(self, instance: Task) -> EnvironmentSpec:
        return self.slices[self.slice_of(instance.instance_id)].environment_for(instance)

    def source_for(self, instance: Task) -> RepoSource:
        return self.slices[self.slice_of(instance.instance_id)].source
