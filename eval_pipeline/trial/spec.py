"""One trial's specification: who it is, and every key its artifacts are stored under.

A trial is one instance of a campaign under one (variant, seed). Everything that names its artifacts is known
before anything runs: its generation's key (instance content, agent config, seed, the task's limit on the
agent, network, the walls), its environment's key (the sandbox's), and what its evaluation's key is made of
(generation, environment, resources, test timeout, grading version; only the patch's hash waits for the
generation). This module's functions are the only makers of these keys and the scored marker's: `TrialSpec`
carries them for the pending scan, the results and the per-trial folders, and `generate` and `evaluate` call
the same functions for the very keys they store under, so stored artifacts are found and reused. (What a
trial's keys do not cover has keys of its own: an environment's, made by its sandbox; the limit evidence an
instance's reference leaves, made by trial/limits.py.)
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from eval_pipeline.agents.base import agent_task
from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.grading.verdict import GRADING_VERSION
from eval_pipeline.sandbox import SandboxBackend
from eval_pipeline.store.artifacts import ArtifactStore
from eval_pipeline.store.mac import matches
from eval_pipeline.tasks.task import Task

__all__ = [
    "GENERATION_VERSION",
    "SCORED",
    "AgentConfigs",
    "TrialSpec",
    "agent_configs",
    "agent_timeout_s",
    "authentic_marker",
    "evaluation_key",
    "generation_key",
    "scored_id",
    "scored_marker_key",
    "task_generation_key",
    "task_trial_specs",
    "trial_spec",
    "trial_specs",
]

# Bump when the generation procedure changes in a way that changes its results.
GENERATION_VERSION = "1"


def generation_key(
    content_hash: str,
    agent_config: dict[str, Any],
    seed: int,
    agent_timeout_s: float | None,
    network: bool = False,
    isolation: str = "",
) -> str:
    """The generation's key from what determines it: the task's content, the agent, the seed, the task's
    own limit on the agent, whether its variant opted into network and the walls it worked within
    (SandboxBackend.isolation); each of the last three can change what the agent produces, and joins the key
    only when set, so other keys stay as they were."""
    identity = {"version": GENERATION_VERSION, "instance": content_hash, "agent": agent_config, "seed": seed}
    if agent_timeout_s is not None:
        identity["agent_timeout_s"] = agent_timeout_s
    if network:
        identity["network"] = True
    if isolation:
        identity["isolation"] = isolation
    return f"generation/{stable_hash(identity)}.json"


def agent_timeout_s(task: Task, timeout_multiplier: float = 1.0) -> float | None:
    """The task's own limit on the agent, scaled by the campaign's multiplier: the same for every seed."""
    return agent_task(task, 0, timeout_multiplier).timeout_s


def task_generation_key(
    task: Task,
    agent_config: dict[str, Any],
    seed: int,
    timeout_multiplier: float,
    network: bool,
    isolation: str,
    content_hash: str | None = None,
) -> str:
    """The generation key of `task`'s trial of an agent and seed (`content_hash`: the task's, when known)."""
    timeout_s = agent_timeout_s(task, timeout_multiplier)
    return generation_key(content_hash or task.content_hash, agent_config, seed, timeout_s, network, isolation)


SCORED = "scored"


def _evaluation_identity(
    generation_key: str, environment_key: str, resources: dict[str, Any], test_timeout_s: float
) -> dict[str, Any]:
    """What determines a trial's evaluation, less its patch: all known before anything runs."""
    return {
        "version": GRADING_VERSION,
        "generation": generation_key,
        "environment": environment_key,
        "resources": resources,
        "test_timeout_s": test_timeout_s,
    }


def evaluation_key(
    generation_key: str, patch_sha256: str, environment_key: str, resources: dict[str, Any], test_timeout_s: float
) -> str:
    """Where the final evaluation of this generation's patch, graded so, is stored."""
    identity = _evaluation_identity(generation_key, environment_key, resources, test_timeout_s)
    return f"evaluation/{stable_hash({**identity, 'patch': patch_sha256})}.json"


def scored_id(generation_key: str, environment_key: str, resources: dict[str, Any], test_timeout_s: float) -> str:
    """The hash that names a trial's scored marker: computable before the trial runs."""
    return stable_hash(_evaluation_identity(generation_key, environment_key, resources, test_timeout_s))


def scored_marker_key(
    store: ArtifactStore, trial_scored_id: str, evaluation_key: str, evaluation_fingerprint: str
) -> str:
    """The marker that names the trial, its final evaluation, the fingerprint of that evaluation's stored bytes
    and a MAC of the three, so that one listing of `scored/` and one of `evaluation/` tell which trials are done,
    intact, and a marker written without the results key is not believed."""
    seal = store.mac.of_marker(trial_scored_id, evaluation_key, evaluation_fingerprint)
    name = evaluation_key.removeprefix("evaluation/")
    return f"{SCORED}/{trial_scored_id}-{name}~{evaluation_fingerprint}~{seal}"


def authentic_marker(store: ArtifactStore, marker_key: str) -> tuple[str, str, str] | None:
    """A marker's (scored id, evaluation key, fingerprint) when its MAC is right, else None: a forged marker, or
    one left before markers carried a MAC, which a scan passes over (it then reads the trial's records, checked
    one by one, and leaves a marker of its own)."""
    trial_scored_id, _, rest = marker_key.removeprefix(f"{SCORED}/").partition("-")
    evaluation_name, _, sealed = rest.partition("~")
    evaluation_fingerprint, _, seal = sealed.partition("~")
    evaluation_key = f"evaluation/{evaluation_name}"
    if not matches(store.mac.of_marker(trial_scored_id, evaluation_key, evaluation_fingerprint), seal):
        return None
    return trial_scored_id, evaluation_key, evaluation_fingerprint


@dataclass(frozen=True)
class TrialSpec:
    """Who a trial is and where its artifacts are, known without running it."""

    campaign: str
    slice: str
    instance_id: str
    trial: str  # the trial's key in the campaign: `<variant>-s<seed>`
    variant: str
    agent: str
    seed: int
    agent_config_hash: str
    generation_key: str
    environment_key: str
    test_timeout_s: float
    resources: dict[str, Any] = field(hash=False)  # the sandbox's resources record, as evaluations store it
    network: bool = False  # whether its variant opted into network (its agent's workspace has one)

    def evaluation_key(self, patch_sha256: str) -> str:
        """The final evaluation's key once the generation's patch is known."""
        return evaluation_key(
            self.generation_key, patch_sha256, self.environment_key, self.resources, self.test_timeout_s
        )

    @cached_property
    def scored_id(self) -> str:
        """What names the marker of this trial's final evaluation (a hash: cached, as scans ask often)."""
        return scored_id(self.generation_key, self.environment_key, self.resources, self.test_timeout_s)


AgentConfigs = dict[str, tuple[dict[str, Any], str]]


def agent_configs(campaign: Campaign) -> AgentConfigs:
    """Each variant's agent config and its hash, by variant name."""
    agents = {variant.name: variant.make_agent() for variant in campaign.variants}
    return {name: (agent.config, agent.config_hash) for name, agent in agents.items()}


def task_trial_specs(
    campaign: Campaign,
    portfolio: Portfolio,
    task: Task,
    sandbox: SandboxBackend,
    environment_key: str,
    configs: AgentConfigs,
) -> list[TrialSpec]:
    """Every planned trial of `task`, in the campaign's trial order, its environment under `environment_key`
    (what its sandbox computes for it, or the key of the environment prepared for it)."""
    resources = sandbox.resources_record()
    content_hash = task.content_hash  # hashes the whole row: once per task, not per trial
    specs = []
    for trial in campaign.trials:
        agent_config, agent_config_hash = configs[trial.variant.name]
        specs.append(
            TrialSpec(
                campaign=campaign.name,
                slice=portfolio.slice_of(task.instance_id),
                instance_id=task.instance_id,
                trial=trial.key,
                variant=trial.variant.name,
                agent=trial.variant.agent,
                seed=trial.seed,
                agent_config_hash=agent_config_hash,
                generation_key=task_generation_key(
                    task,
                    agent_config,
                    trial.seed,
                    campaign.timeout_multiplier,
                    trial.variant.network,
                    sandbox.isolation,
                    content_hash,
                ),
                environment_key=environment_key,
                test_timeout_s=campaign.test_timeout_for(task),
                resources=resources,
                network=trial.variant.network,
            )
        )
    return specs


def trial_specs(
    campaign: Campaign,
    portfolio: Portfolio,
    sandbox_for: Callable[[Task], SandboxBackend],
    instance_id: str | None = None,
) -> list[TrialSpec]:
    """Every planned trial's identity (or only `instance_id`'s) in the campaign's order: its slices as it lists
    them, each slice's instances by id, each instance's trials in the campaign's trial order (so `--limit 1` is
    the first slice's first trial); `sandbox_for` gives a task's sandbox (terminal tasks set their own resources)."""
    tasks = [portfolio.instance(instance_id)] if instance_id else portfolio.instances
    configs = agent_configs(campaign)
    slice_rank = {name: rank for rank, name in enumerate(portfolio.slices)}
    specs = []
    for task in sorted(tasks, key=lambda t: (slice_rank[portfolio.slice_of(t.instance_id)], t.instance_id)):
        sandbox = sandbox_for(task)
        environment_key = sandbox.environment_key(task, portfolio.environment_for(task))
        specs += task_trial_specs(campaign, portfolio, task, sandbox, environment_key, configs)
    return specs


def trial_spec(
    campaign: Campaign,
    portfolio: Portfolio,
    sandbox_for: Callable[[Task], SandboxBackend],
    instance_id: str,
    trial_key: str,
) -> TrialSpec:
    """One trial's identity (a trial partition's), computed as for the whole campaign."""
    for identity in trial_specs(campaign, portfolio, sandbox_for, instance_id):
        if identity.trial == trial_key:
            return identity
    raise KeyError(f"campaign {campaign.name!r} has no trial {trial_key!r}")
