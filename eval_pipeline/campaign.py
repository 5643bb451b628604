"""Campaigns: which benchmark slices, which agent variants, how many seeds, on which sandbox.

A campaign is a YAML file (or the name of a built-in one). Its portfolio is a
set of named slices, each with its own dataset source (`slices:`), or one
source (`benchmark:`, the slice `default`). Its trials are the variants
crossed with the seeds; a trial's key (`<variant>-s<seed>`) is its Dagster
partition key, crossed with the instance ids of every slice. `exclude:` leaves
instances out of every slice: by id, or the quarantine of a validation report
(validation.py), read when the campaign is loaded.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from eval_pipeline.agents import Agent, make_agent
from eval_pipeline.gates import GatePolicy, GatePolicyError, load_policy
from eval_pipeline.hashing import stable_hash
from eval_pipeline.sandbox import BACKENDS, ResourceLimits, SandboxSettings
from eval_pipeline.tasks import Task
from eval_pipeline.validation import ValidationFileError, read_quarantine

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_SLICE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_KNOWN_FIELDS = {
    "name",
    "description",
    "benchmark",
    "slices",
    "variants",
    "baseline",
    "seeds",
    "sandbox",
    "resources",
    "timeouts",
    "retries",
    "nightly",
    "gates",
    "exclude",
}
DEFAULT_SLICE = "default"
BUILTIN_DIR = Path(str(resources.files("eval_pipeline.campaigns")))


class CampaignError(ValueError):
    """A campaign file that cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class Variant:
    name: str
    agent: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def make_agent(self) -> Agent:
        return make_agent(self.agent, dict(self.params))


@dataclass(frozen=True)
class Trial:
    variant: Variant
    seed: int

    @property
    def key(self) -> str:
        return f"{self.variant.name}-s{self.seed}"


@dataclass(frozen=True)
class RetrySettings:
    """`retries:` how infrastructure outcomes are tried again; agent outcomes never are.

    Within one run, a step that ended in an infrastructure outcome is retried
    up to `max_retries` times, waiting `delay_s` before the first retry and
    twice as long before each next one (with jitter). A partition whose run
    exhausted them is requested again by the campaign's sensor, up to
    `max_rerequests` times, so an outage longer than the backoff costs a later
    run, not a trial.
    """

    max_retries: int = 2
    delay_s: float = 2.0
    max_rerequests: int = 2


@dataclass(frozen=True)
class NightlySettings:
    """`nightly:` a schedule that brings the whole campaign up to date (cron and time zone), N trials at a time."""

    cron: str = "0 2 * * *"
    timezone: str = "UTC"
    workers: int = 2


@dataclass(frozen=True)
class Campaign:
    """`test_timeout_s` is code tasks' test timeout (terminal tasks bring their own); the timeout
    multiplier scales every task's agent and test timeouts, as resources' multiplier scales ceilings."""

    name: str
    slices: Mapping[str, Mapping[str, Any]]
    variants: tuple[Variant, ...]
    seeds: tuple[int, ...]
    sandbox: SandboxSettings = SandboxSettings()
    resources: ResourceLimits = ResourceLimits()
    test_timeout_s: float = 900.0
    timeout_multiplier: float = 1.0
    retries: RetrySettings = RetrySettings()
    nightly: NightlySettings | None = None
    description: str = ""
    baseline: str = ""  # the variant every other is compared with, paired by instance; the first by default
    gates: tuple[GatePolicy, ...] = ()  # release gates, one policy per environment (gates.py)
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
    def trials(self) -> tuple[Trial, ...]:
        return tuple(Trial(variant, seed) for variant in self.variants for seed in self.seeds)

    def trial(self, key: str) -> Trial:
        for trial in self.trials:
            if trial.key == key:
                return trial
        raise KeyError(f"campaign {self.name!r} has no trial {key!r}")

    @property
    def plan_version(self) -> str:
        """The hash of the trial plan: it changes when variants, seeds or settings change."""
        return stable_hash(
            {
                "variants": [(v.name, v.agent, dict(v.params)) for v in self.variants],
                "seeds": self.seeds,
                "sandbox": self.sandbox.backend,
                "mode": self.sandbox.mode,
                "resources": self.resources.as_record(),
                "test_timeout_s": self.test_timeout_s,
                "timeout_multiplier": self.timeout_multiplier,
            }
        )


def _field(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...], origin: str, default: Any = None) -> Any:
    value = data.get(name, default)
    if not isinstance(value, kind):
        raise CampaignError(f"{origin}: field {name}: expected {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def _variants(raw: Any, origin: str) -> tuple[Variant, ...]:
    if not isinstance(raw, list) or not raw:
        raise CampaignError(f"{origin}: field variants: expected a non-empty list")
    variants = []
    for index, item in enumerate(raw):
        where = f"{origin}: variants[{index}]"
        if not isinstance(item, Mapping):
            raise CampaignError(f"{where}: expected a mapping with name and agent")
        name, agent = str(item.get("name", "")), str(item.get("agent", ""))
        if not _NAME.match(name):
            raise CampaignError(f"{where}: field name: {name!r} must be letters, digits and underscores")
        variant = Variant(name=name, agent=agent, params=dict(item.get("params") or {}))
        try:
            variant.make_agent()
        except (ValueError, TypeError) as error:
            raise CampaignError(f"{where} ({name}): field agent/params: {error}") from None
        variants.append(variant)
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise CampaignError(f"{origin}: field variants: duplicate variant names {names}")
    return tuple(variants)


def _baseline(raw: Any, variants: tuple[Variant, ...], origin: str) -> str:
    """`baseline:` names the variant others are compared with; the first variant when absent."""
    if raw is None:
        return variants[0].name
    names = [variant.name for variant in variants]
    if raw not in names:
        raise CampaignError(f"{origin}: field baseline: {raw!r} is not a variant ({', '.join(names)})")
    return raw


def _gates(raw: Any, variants: tuple[Variant, ...], origin: str, base_dir: Path | None) -> tuple[GatePolicy, ...]:
    """`gates:` a list of policy files (relative to the campaign file), one per environment."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(path, str) for path in raw):
        raise CampaignError(f"{origin}: field gates: expected a list of policy file paths, got {raw!r}")
    try:
        policies = tuple(load_policy((base_dir or Path.cwd()) / path) for path in raw)
    except GatePolicyError as error:
        raise CampaignError(f"{origin}: field gates: {error}") from None
    names = [variant.name for variant in variants]
    for path, policy in zip(raw, policies, strict=True):
        if policy.candidate not in names:
            raise CampaignError(f"{origin}: field gates: {path}: candidate {policy.candidate!r} is not a variant")
    environments = [policy.environment for policy in policies]
    if len(set(environments)) != len(environments):
        raise CampaignError(f"{origin}: field gates: more than one policy for an environment: {environments}")
    return policies


def _exclude(raw: Any, origin: str, base_dir: Path | None) -> dict[str, str]:
    """`exclude:` instances to leave out, `instances` by id and the `quarantine` of the report `validation`
    (relative to the campaign file); id -> why."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or set(raw) - {"instances", "validation"}:
        raise CampaignError(
            f"{origin}: field exclude: expected a mapping with instances and/or validation, got {raw!r}"
        )
    ids = raw.get("instances", [])
    if not isinstance(ids, list) or not all(isinstance(instance_id, str) for instance_id in ids):
        raise CampaignError(f"{origin}: field exclude.instances: expected a list of instance ids, got {ids!r}")
    reasons = {}
    if "validation" in raw:
        if not isinstance(raw["validation"], str):
            raise CampaignError(f"{origin}: field exclude.validation: expected a file path, got {raw['validation']!r}")
        try:
            reasons.update(read_quarantine((base_dir or Path.cwd()) / raw["validation"]))
        except ValidationFileError as error:
            raise CampaignError(f"{origin}: field exclude.validation: {error}") from None
    reasons.update(dict.fromkeys(ids, "listed in the campaign's exclude.instances"))
    return reasons


def _seeds(raw: Any, origin: str) -> tuple[int, ...]:
    """`seeds: 3` means seeds 0, 1, 2; a list names them."""
    if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0:
        return tuple(range(raw))
    if isinstance(raw, list) and raw and all(isinstance(s, int) and s >= 0 for s in raw) and len(set(raw)) == len(raw):
        return tuple(raw)
    raise CampaignError(f"{origin}: field seeds: expected a positive count or a list of distinct seeds, got {raw!r}")


def _resolve_paths(benchmark: Mapping[str, Any], base_dir: Path | None) -> dict[str, Any]:
    """Relative dataset and mirror paths are relative to the campaign file, as users expect."""
    resolved = dict(benchmark)
    for name in ("path", "mirror_dir"):
        if base_dir and isinstance(resolved.get(name), str) and not Path(resolved[name]).is_absolute():
            resolved[name] = str((base_dir / resolved[name]).resolve())
    return resolved


def _slices(data: Mapping[str, Any], origin: str, base_dir: Path | None) -> dict[str, dict[str, Any]]:
    """`slices: {name: source}`, or one `benchmark: source` as the slice `default`."""
    if ("slices" in data) == ("benchmark" in data):
        raise CampaignError(
            f"{origin}: give either benchmark (one dataset) or slices (a portfolio), not both or neither"
        )
    if "benchmark" in data:
        return {DEFAULT_SLICE: _resolve_paths(_field(data, "benchmark", Mapping, origin), base_dir)}
    raw = _field(data, "slices", Mapping, origin)
    if not raw:
        raise CampaignError(f"{origin}: field slices: expected at least one slice")
    slices = {}
    for name, source in raw.items():
        if not isinstance(name, str) or not _SLICE_NAME.match(name):
            raise CampaignError(f"{origin}: field slices: {name!r} must be letters, digits, '-' and '_'")
        if not isinstance(source, Mapping):
            raise CampaignError(f"{origin}: field slices.{name}: expected a dataset source with a kind")
        slices[name] = _resolve_paths(source, base_dir)
    return slices


def _positive(data: Mapping[str, Any], name: str, default: float, origin: str) -> float:
    value = data.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise CampaignError(f"{origin}: field timeouts.{name}: expected a positive number, got {value!r}")
    return float(value)


def _settings(data: Mapping[str, Any], name: str, kind: type, origin: str) -> Any:
    """A settings section as its dataclass; the error names the section and the field."""
    raw = _field(data, name, Mapping, origin, {})
    unknown = set(raw) - set(kind.__dataclass_fields__)
    if unknown:
        raise CampaignError(f"{origin}: field {name}: unknown field(s) {sorted(unknown)}")
    for field_name, value in raw.items():
        expected = type(getattr(kind, field_name))
        accepted = (int, float) if expected is float else expected  # an int is a fine float
        if isinstance(value, bool) or not isinstance(value, accepted):
            raise CampaignError(f"{origin}: field {name}.{field_name}: expected {expected.__name__}, got {value!r}")
        if expected in (int, float) and value < 0:
            raise CampaignError(f"{origin}: field {name}.{field_name}: must not be negative, got {value!r}")
    return kind(**raw)


def _nightly(data: Mapping[str, Any], origin: str) -> NightlySettings | None:
    if "nightly" not in data:
        return None
    nightly = _settings(data, "nightly", NightlySettings, origin)
    if len(nightly.cron.split()) != 5:
        raise CampaignError(f"{origin}: field nightly.cron: expected five cron fields, got {nightly.cron!r}")
    if nightly.workers < 1:
        raise CampaignError(f"{origin}: field nightly.workers: must be at least 1")
    return nightly


def parse_campaign(data: Any, origin: str, base_dir: Path | None = None) -> Campaign:
    """Build a Campaign from parsed YAML; `origin` names the file in error messages."""
    if not isinstance(data, Mapping):
        raise CampaignError(f"{origin}: expected a mapping at the top level")
    unknown = set(data) - _KNOWN_FIELDS
    if unknown:
        raise CampaignError(f"{origin}: unknown field(s) {sorted(unknown)}")
    name = _field(data, "name", str, origin)
    if not _NAME.match(name):
        raise CampaignError(f"{origin}: field name: {name!r} must be letters, digits and underscores")
    try:
        sandbox = SandboxSettings.from_mapping(_field(data, "sandbox", Mapping, origin, {}))
    except (ValueError, TypeError) as error:
        raise CampaignError(f"{origin}: field sandbox: {error}") from None
    if sandbox.backend not in BACKENDS:
        raise CampaignError(
            f"{origin}: field sandbox.backend: unknown backend {sandbox.backend!r} (known: {', '.join(BACKENDS)})"
        )
    timeouts = _field(data, "timeouts", Mapping, origin, {})
    try:
        limits = ResourceLimits.from_mapping(_field(data, "resources", Mapping, origin, {}))
    except (ValueError, TypeError) as error:
        raise CampaignError(f"{origin}: field resources: {error}") from None
    variants = _variants(data.get("variants"), origin)
    return Campaign(
        name=name,
        description=str(data.get("description", "")),
        slices=_slices(data, origin, base_dir),
        variants=variants,
        baseline=_baseline(data.get("baseline"), variants, origin),
        gates=_gates(data.get("gates"), variants, origin, base_dir),
        exclude=_exclude(data.get("exclude"), origin, base_dir),
        seeds=_seeds(data.get("seeds", 1), origin),
        sandbox=sandbox,
        resources=limits,
        test_timeout_s=_positive(timeouts, "tests_s", Campaign.test_timeout_s, origin),
        timeout_multiplier=_positive(timeouts, "multiplier", 1.0, origin),
        retries=_settings(data, "retries", RetrySettings, origin),
        nightly=_nightly(data, origin),
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
    except yaml.YAMLError as error:
        raise CampaignError(f"{origin}: not valid YAML: {error}") from None
    return parse_campaign(data, origin, base_dir)
