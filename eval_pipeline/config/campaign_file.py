"""The campaign file as it is written: one strict model per section, validated whole when the file is loaded.

config/campaign.py turns a validated file into the `Campaign` the pipeline runs;
here is only what a file may say. Cross-field rules (the baseline is a
variant, variant names are unique, a floor is not above its ceiling) are part
of the model, so they fail at load naming the field like any typo.
"""

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StrictBool, ValidationInfo, field_validator, model_validator

from eval_pipeline.agents import AGENTS, make_agent
from eval_pipeline.agents.base import Agent
from eval_pipeline.common.fields import (
    ConfigModel,
    Count,
    FieldProblem,
    InputPath,
    Number,
    PositiveCount,
    PositiveNumber,
    resolve_path,
)
from eval_pipeline.common.text import from_environment
from eval_pipeline.datasets.config import DatasetSource
from eval_pipeline.grading.verdict import REFERENCE_REPEATS
from eval_pipeline.sandbox import BACKENDS, ResourceLimits, SandboxSettings

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_SLICE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


def _identifier(name: str) -> str:
    """Campaign and variant names become Dagster names (asset prefixes, partition keys): letters, digits, _."""
    if not _NAME.match(name):
        raise ValueError(f"{name!r} must be letters, digits and underscores, starting with a letter")
    return name


Identifier = Annotated[str, AfterValidator(_identifier)]


class Variant(ConfigModel):
    """`variants[i]`: an agent and its parameters under a name; the agent is made once at load to check them.

    `network: true` lets this variant's agent reach the network (a model API, a package index); every other
    variant's trials, and every grading, have none. The choice is in each trial's lineage.
    """

    name: Identifier
    agent: str
    params: dict[str, Any] = {}
    network: StrictBool = False

    def make_agent(self) -> Agent:
        return make_agent(self.agent, dict(self.params))

    @field_validator("params", mode="before")
    @classmethod
    def _none_is_empty(cls, params: Any) -> Any:
        """`params:` with every line commented out is YAML's null: no parameters."""
        return {} if params is None else params

    @field_validator("params", mode="after")
    @classmethod
    def _paths_from_the_files_directory(cls, params: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """The agent's file parameters (a predictions file) as absolute paths, read from the campaign file's
        directory, so that every process that makes the agent (run workers, the UI's) reads the same file."""
        agent = AGENTS.get(info.data.get("agent", ""))
        named = [name for name in (agent.path_params if agent else ()) if isinstance(params.get(name), str)]
        return {**params, **{name: resolve_path(params[name], info, must_exist=True) for name in named}}

    @model_validator(mode="after")
    def _makes_an_agent(self) -> "Variant":
        try:
            self.make_agent()
        except (ValueError, TypeError) as error:
            raise FieldProblem("agent" if self.agent not in AGENTS else "params", str(error)) from None
        return self


class RetrySettings(ConfigModel):
    """`retries:` how infrastructure outcomes are tried again; agent outcomes never are.

    Within one run, a trial (or an environment's step) that ended in an
    infrastructure outcome is retried up to `max_retries` times, waiting
    `delay_s` before the first retry and twice as long before each next one
    (with jitter). A partition whose run exhausted them is requested again by
    the campaign's sensor, up to `max_rerequests` times, so an outage longer
    than the backoff costs a later run, not a trial. Before a grading that
    ended abnormally is called the harness's, the instance's reference is
    graded at once up to `reference_repeats` times (trial/reference.py).
    """

    max_retries: Count = 2
    delay_s: Number = 2.0
    max_rerequests: Count = 2
    reference_repeats: PositiveCount = REFERENCE_REPEATS


class BatchSettings(ConfigModel):
    """`batches:` how many trial partitions one Dagster run materializes (`size`), and how many of them it runs
    at once (`concurrency`).

    Dagster's cost per run (start, event log, step machinery) is paid once per batch, so a campaign of 16k
    trials is about a thousand runs, not 16k. The CLI and the nightly sensor batch one instance's trials, so
    they share one environment; a backfill from the UI lets Dagster cut the ranges (along whichever
    dimension has fewer keys: often one trial across consecutive instances). Either way each trial ends on
    its own (materialized, or failed and backfillable alone).
    """

    size: PositiveCount = 64
    concurrency: PositiveCount = 1


class NightlySettings(ConfigModel):
    """`nightly:` a schedule that brings the whole campaign up to date (cron and time zone); how many of its
    runs run at once is the Dagster instance's run queue's to decide."""

    cron: str = "0 2 * * *"
    timezone: str = "UTC"

    @field_validator("cron")
    @classmethod
    def _five_fields(cls, cron: str) -> str:
        if len(cron.split()) != 5:
            raise ValueError(f"expected five cron fields (minute hour day month weekday), got {cron!r}")
        return cron


class Timeouts(ConfigModel):
    """`timeouts:` code tasks' test timeout (terminal tasks bring their own); the multiplier scales every
    agent and test timeout."""

    tests_s: PositiveNumber = 900.0
    multiplier: PositiveNumber = 1.0


class Exclude(ConfigModel):
    """`exclude:` instances left out of every slice: by id, and the quarantine of a validation report."""

    instances: list[str] = []
    validation: InputPath | None = None


def _seeds(value: Any) -> Any:
    """`seeds: 3` means seeds 0, 1, 2; a list names them."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return list(range(value))
    if isinstance(value, list) and value and len(set(value)) == len(value):
        return value
    raise ValueError(f"expected a positive count or a list of distinct seeds, got {value!r}")


def _untrusted_on_local(untrusted: list[tuple[int, Variant]]) -> FieldProblem:
    """The refusal of untrusted variants on the local backend, naming each, the container backend and the opt-in."""
    named = ", ".join(f"variant {variant.name!r} (agent {variant.agent!r})" for _, variant in untrusted)
    field, runs = (f"variants[{untrusted[0][0]}].agent", "runs") if len(untrusted) == 1 else ("variants", "run")
    return FieldProblem(
        field,
        f"{named} {runs} code the harness did not write, and the local backend has no walls: use the container"
        " backend (sandbox: {backend: container}), or opt in explicitly (sandbox: {allow_untrusted_agents_locally:"
        " true})",
    )


class ModelPrice(ConfigModel):
    """`prices.<model>`: what a model's tokens cost, in US dollars per million; agents that call that model
    (`params.model`) are given it as `params.price`, so it is part of their config (a cost limit depends on it)."""

    input_per_mtok: Number
    output_per_mtok: Number


class CampaignFile(ConfigModel):
    """A whole campaign file. `benchmark:` is the one-slice shorthand of `slices:`."""

    name: Identifier
    description: str = ""
    benchmark: DatasetSource | None = None
    slices: dict[str, DatasetSource] | None = None
    variants: list[Variant] = Field(min_length=1)
    baseline: str | None = None
    gates: list[InputPath] = []
    seeds: list[Count] = [0]
    sandbox: SandboxSettings = SandboxSettings()
    resources: ResourceLimits = ResourceLimits()
    timeouts: Timeouts = Timeouts()
    retries: RetrySettings = RetrySettings()
    batches: BatchSettings = BatchSettings()
    nightly: NightlySettings | None = None
    exclude: Exclude = Exclude()
    prices: dict[str, ModelPrice] = {}

    @field_validator("seeds", mode="before")
    @classmethod
    def _seed_list(cls, value: Any) -> Any:
        return _seeds(value)

    @field_validator("slices")
    @classmethod
    def _slice_names(cls, slices: dict[str, Any] | None) -> dict[str, Any] | None:
        if slices is not None and not slices:
            raise ValueError("expected at least one slice")
        for name in slices or {}:
            if not _SLICE_NAME.match(name):
                raise ValueError(f"{name!r} must be letters, digits, '-' and '_', starting with a letter")
        return slices

    @field_validator("variants")
    @classmethod
    def _unique_names(cls, variants: list[Variant]) -> list[Variant]:
        names = [variant.name for variant in variants]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate variant names {names}")
        return variants

    @field_validator("resources")
    @classmethod
    def _floors_below_ceilings(cls, limits: ResourceLimits) -> ResourceLimits:
        for floor, ceiling in (("memory_floor_mb", "memory_ceiling_mb"), ("cpu_floor", "cpu_ceiling")):
            if getattr(limits, floor) > getattr(limits, ceiling):
                below = f"{getattr(limits, floor)} is above {ceiling} ({getattr(limits, ceiling)})"
                raise FieldProblem(floor, f"{below}: a floor is at most its ceiling")
        return limits

    @field_validator("sandbox")
    @classmethod
    def _known_backend(cls, sandbox: SandboxSettings) -> SandboxSettings:
        if sandbox.backend not in BACKENDS:
            raise FieldProblem("backend", f"unknown backend {sandbox.backend!r} (known: {', '.join(BACKENDS)})")
        if sandbox.allow_untrusted_agents_locally and sandbox.backend != "local":
            problem = f"only the local backend runs agents uncontained; backend {sandbox.backend!r} needs no opt-in"
            raise FieldProblem("allow_untrusted_agents_locally", problem)
        return sandbox

    @model_validator(mode="after")
    def _untrusted_agents_contained(self) -> "CampaignFile":
        """Refuse an untrusted agent on the local backend (it would run as the harness's own user: data directory, instance,
        engine socket) unless the campaign opts in, in one line that names the way out."""
        if self.sandbox.backend != "local" or self.sandbox.allow_untrusted_agents_locally:
            return self
        untrusted = [(i, v) for i, v in enumerate(self.variants) if not AGENTS[v.agent].trusted]
        if untrusted:
            raise _untrusted_on_local(untrusted)
        return self

    @model_validator(mode="after")
    def _untrusted_agents_alone_in_a_pod(self) -> "CampaignFile":
        """Refuse trials of an untrusted agent sharing a pod. The kernel gives a pod's trials no memory cgroup or
        pid namespace of their own there (Podman's cgroup v1 delegates none, and a fresh /proc is refused under
        its masked paths): a neighbour would see the trial's processes and could drive the pod out of memory
        while its tests run, an honest patch then scored as the one killed. One trial at a time per pod (pods
        of different instances still run at once), or a container per trial (`mode: strict`), keeps each
        trial's OOM counter its own."""
        sandbox = self.sandbox
        strict = sandbox.backend == "container" and sandbox.mode == "strict"  # Kubernetes has pods only
        if sandbox.backend == "local" or strict or sandbox.pod_parallelism == 1:
            return self
        untrusted = [variant.name for variant in self.variants if not AGENTS[variant.agent].trusted]
        if untrusted:
            raise FieldProblem(
                "sandbox.pod_parallelism",
                f"{sandbox.pod_parallelism} lets trials of untrusted variants ({', '.join(untrusted)}) share a pod,"
                " where a neighbour can drive the trial's tests out of memory: use 1 (one trial per pod at a time)"
                " or, on the container backend, mode: strict (a container per trial)",
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _priced_models(cls, data: Any) -> Any:
        """Give each variant whose model has a price in `prices`, and no price of its own, that price (before the
        variants are read, since each makes its agent then)."""
        if not isinstance(data, dict) or not isinstance(data.get("prices"), dict):
            return data
        variants = []
        for variant in data.get("variants") or []:
            params = variant.get("params") if isinstance(variant, dict) else None
            if isinstance(params, dict) and isinstance(params.get("model"), str):
                model = from_environment(params["model"])
                if model in data["prices"] and "price" not in params:
                    variant = {**variant, "params": {**params, "price": data["prices"][model]}}
            variants.append(variant)
        return {**data, "variants": variants}

    @model_validator(mode="after")
    def _one_kind_of_dataset(self) -> "CampaignFile":
        if (self.slices is None) == (self.benchmark is None):
            raise ValueError("give either benchmark (one dataset) or slices (a portfolio), not both or neither")
        return self

    @model_validator(mode="after")
    def _images_pulled_into_containers(self) -> "CampaignFile":
        """Refuse a slice that pulls its tasks' named images on the local backend, which runs no image."""
        if self.sandbox.backend != "local":
            return self
        sources = self.slices or ({"benchmark": self.benchmark} if self.benchmark else {})
        for name, source in sources.items():
            if (images := getattr(source, "images", "build")) != "build":  # a source kind that can pull
                raise FieldProblem(
                    "benchmark.images" if self.slices is None else f"slices.{name}.images",
                    f"{images!r} runs tasks in the images they name, and the local backend runs no image:"
                    " use the container or kubernetes backend (sandbox: {backend: container}), or images: build",
                )
        return self

    @field_validator("baseline")
    @classmethod
    def _baseline_is_a_variant(cls, baseline: str | None, info: ValidationInfo) -> str | None:
        names = [variant.name for variant in info.data.get("variants", [])]
        if baseline is not None and names and baseline not in names:
            raise ValueError(f"{baseline!r} is not a variant ({', '.join(names)})")
        return baseline
