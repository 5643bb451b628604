"""Campaigns: which benchmark slices, which agent variants, how many seeds, on which sandbox.

A campaign is a YAML file (or the name of a built-in one). Its portfolio is a
set of named slices, each with its own dataset source (`slices:`), or one
source (`benchmark:`, the slice `default`). Its trials are the variants
crossed with the seeds; a trial's key (`<variant>-s<seed>`) is its Dagster
partition key, crossed with the instance ids of every slice. `exclude:` leaves
instances out of every slice: by id, or the quarantine of a validation report
(trial/validation.py), read when the campaign is loaded.

What a file may say is config/campaign_file.py: every field is checked when the
file is loaded, and relative paths are read from the file's directory (or
`builtin:` from eval_pipeline's own files), so a copied file keeps working.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, cast

import yaml
from pydantic import ValidationError

from eval_pipeline.common.fields import describe_errors, problem_lines
from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.config.campaign_file import BatchSettings, CampaignFile, NightlySettings, RetrySettings, Variant
from eval_pipeline.config.gates import GatePolicy, GatePolicyError, load_policy
from eval_pipeline.config.quarantine import ValidationFileError, read_quarantine
from eval_pipeline.datasets.config import DatasetSource
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.tasks.task import Task

__all__ = [
    "BUILTIN_DIR",
    "BatchSettings",
    "DEFAULT_SLICE",
    "Campaign",
    "CampaignError",
    "NightlySettings",
    "RetrySettings",
    "VariantSeed",
    "Variant",
    "builtin_campaigns",
    "load_campaign",
    "parse_campaign",
]

DEFAULT_SLICE = "default"
BUILTIN_DIR = Path(str(resources.files("eval_pipeline.campaigns")))


class CampaignError(ValueError):
    """A campaign file that cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class VariantSeed:
    """One (variant, seed) of the campaign's plan; with an instance it names a trial (trial/spec.py: TrialSpec)."""

    variant: Variant
    seed: int

    @property
    def key(self) -> str:
        return f"{self.variant.name}-s{self.seed}"


@dataclass(frozen=True)
class Campaign:
    """`test_timeout_s` is code tasks' test timeout (terminal tasks bring their own); the timeout
    multiplier scales every task's agent and test timeouts, as resources' multiplier scales ceilings."""

    name: str
    slices: Mapping[str, DatasetSource]
    variants: tuple[Variant, ...]
    seeds: tuple[int, ...]
    sandbox: SandboxSettings = SandboxSettings()
    resources: ResourceLimits = ResourceLimits()
    test_timeout_s: float = 900.0
    timeout_multiplier: float = 1.0
    retries: RetrySettings = RetrySettings()
    batches: BatchSettings = BatchSettings()
    nightly: NightlySettings | None = None
    description: str = ""
    baseline: str = ""  # the variant every other is compared with, paired by instance; the first by default
    gates: tuple[GatePolicy, ...] = ()  # release gates, one policy per environment (config/gates.py)
    exclude: Mapping[str, str] = field(default_factory=dict)  # instance id -> why the campaign leaves it out

    def limits_for(self, task: Task | None) -> ResourceLimits:
        """The task's resources: its own ceilings where it sets them (terminal tasks), else the campaign's (and
        the campaign's alone without a task: a sandbox that runs none, say to release pods)."""
        return self.resources if task is None else self.resources.for_task(task.memory_mb, task.cpus)

    def test_timeout_for(self, task: Task) -> float:
        """The task's own verifier timeout where it sets one (terminal tasks), else the campaign's, scaled."""
        own = task.verifier_timeout_s
        return (self.test_timeout_s if own is None else own) * self.timeout_multiplier

    @property
    def network(self) -> bool:
        """Whether any variant opted into network: its sandboxes must then be able to give it one."""
        return any(variant.network for variant in self.variants)

    @property
    def trials(self) -> tuple[VariantSeed, ...]:
        return tuple(VariantSeed(variant, seed) for variant in self.variants for seed in self.seeds)

    def trial(self, key: str) -> VariantSeed:
        for trial in self.trials:
            if trial.key == key:
                return trial
        raise KeyError(f"campaign {self.name!r} has no trial {key!r}")

    @property
    def plan_version(self) -> str:
        """The hash of the trial plan: it changes when variants, seeds or settings change."""
        return stable_hash(
            {
                # A variant's network joins its identity only when opted in, so other plans keep their hash.
                "variants": [(v.name, v.agent, dict(v.params), *(["network"] * v.network)) for v in self.variants],
                "seeds": self.seeds,
                "sandbox": self.sandbox.backend,
                "mode": self.sandbox.mode,
                "resources": self.resources.as_record(),
                "test_timeout_s": self.test_timeout_s,
                "timeout_multiplier": self.timeout_multiplier,
            }
        )


def _fail(origin: str, problems: list[tuple[str, str]]) -> CampaignError:
    """One line per problem, each naming the file and the field's path in it."""
    return CampaignError(problem_lines(origin, problems))


def _gates(config: CampaignFile, origin: str) -> tuple[GatePolicy, ...]:
    """`gates:` policy files (already resolved and found), one per environment, each for one of the variants."""
    names = [variant.name for variant in config.variants]
    policies = []
    for index, path in enumerate(config.gates):
        try:
            policy = load_policy(Path(path))
        except GatePolicyError as error:
            raise _fail(origin, [(f"gates[{index}]", str(error))]) from None
        if policy.candidate not in names:
            problem = f"{path}: candidate {policy.candidate!r} is not a variant ({', '.join(names)})"
            raise _fail(origin, [(f"gates[{index}]", problem)])
        policies.append(policy)
    environments = [policy.environment for policy in policies]
    if len(set(environments)) != len(environments):
        raise _fail(origin, [("gates", f"more than one policy for an environment: {environments}")])
    return tuple(policies)


def _exclude(config: CampaignFile, origin: str) -> dict[str, str]:
    """`exclude:` id -> why: the quarantine of the validation report, then the instances listed by id."""
    reasons = {}
    if config.exclude.validation:
        try:
            reasons.update(read_quarantine(Path(config.exclude.validation)))
        except ValidationFileError as error:
            raise _fail(origin, [("exclude.validation", str(error))]) from None
    reasons.update(dict.fromkeys(config.exclude.instances, "listed in the campaign's exclude.instances"))
    return reasons


def parse_campaign(data: Any, origin: str, base_dir: Path | None = None) -> Campaign:
    """Build a Campaign from parsed YAML; `origin` names the file in error messages, and relative paths are
    read from `base_dir` (the file's directory; the working directory for a campaign given in code)."""
    try:
        config = CampaignFile.model_validate(data, context={"base_dir": base_dir or Path.cwd()})
    except ValidationError as error:
        raise _fail(origin, describe_errors(error, CampaignFile)) from None
    try:
        sandbox = config.sandbox.with_machine_overrides()
    except ValueError as error:
        raise _fail(origin, [("sandbox.python_source", str(error))]) from None
    return Campaign(
        name=config.name,
        description=config.description,
        # CampaignFile holds either slices (one at least) or a benchmark
        slices=config.slices or {DEFAULT_SLICE: cast(DatasetSource, config.benchmark)},
        variants=tuple(config.variants),
        baseline=config.baseline or config.variants[0].name,
        gates=_gates(config, origin),
        exclude=_exclude(config, origin),
        seeds=tuple(config.seeds),
        sandbox=sandbox,
        resources=config.resources,
        test_timeout_s=float(config.timeouts.tests_s),
        timeout_multiplier=float(config.timeouts.multiplier),
        retries=config.retries,
        batches=config.batches,
        nightly=config.nightly,
    )


def builtin_campaigns() -> list[str]:
    return sorted(path.stem for path in BUILTIN_DIR.glob("*.yaml"))


def load_campaign(name_or_path: str) -> Campaign:
    """A built-in campaign by name, or a campaign YAML file by path."""
    if name_or_path in builtin_campaigns():
        text = (BUILTIN_DIR / f"{name_or_path}.yaml").read_text()
        origin, base_dir = f"built-in campaign {name_or_path!r}", BUILTIN_DIR
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise CampaignError(
                f"campaign {name_or_path!r}: no such file, and not a built-in campaign ({', '.join(builtin_campaigns())})"
            )
        text, origin, base_dir = path.read_text(), str(path), path.resolve().parent
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise CampaignError(f"{origin}: not valid YAML{where}: {error.problem}") from None
    except yaml.YAMLError as error:
        raise CampaignError(f"{origin}: not valid YAML: {error}") from None
    return parse_campaign(data, origin, base_dir)
