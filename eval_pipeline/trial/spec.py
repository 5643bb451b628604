"""A trial's identity, computed once, and the scan that finds the trials still to run.

A trial is one (instance, variant, seed) of a campaign. Everything that names
its artifacts is known before anything runs: the agent's config hash, its
generation's key, and what its evaluation's key is made of (environment,
resources, test timeout; only the patch's hash waits for the generation).
`trial_identities` computes them in one place for the runner, the assets, the
results and the per-trial folders, with the very keys that `generate` and
`evaluate` store under, so stored artifacts are found and reused.

The pending scan lists the store instead of reading it per trial: one listing
of `scored/` (each final evaluation's marker) and one of `evaluation/` (so a
marker whose evaluation was quarantined as corrupt does not count), whatever
the number of trials.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from eval_pipeline.agents.base import agent_task
from eval_pipeline.config.campaign import Campaign
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.sandbox import SandboxBackend
from eval_pipeline.tasks.task import Task
from eval_pipeline.trial.evaluation import final_evaluation_key, scored_id
from eval_pipeline.trial.generation import task_generation_key


@dataclass(frozen=True)
class TrialIdentity:
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
        return final_evaluation_key(
            self.generation_key, patch_sha256, self.environment_key, self.resources, self.test_timeout_s
        )

    @cached_property
    def scored_id(self) -> str:
        """What names the marker of this trial's final evaluation (a hash: cached, as scans ask often)."""
        return scored_id(self.generation_key, self.environment_key, self.resources, self.test_timeout_s)


def trial_identities(
    campaign: Campaign,
    portfolio: Portfolio,
    sandbox_for: Callable[[Task], SandboxBackend],
    instance_id: str | None = None,
) -> list[TrialIdentity]:
    """Every planned trial's identity (or only `instance_id`'s), by instance id then trial, in the campaign's
    trial order; `sandbox_for` gives a task's sandbox (terminal tasks set their own resources)."""
    tasks = [portfolio.instance(instance_id)] if instance_id else portfolio.instances
    agents = {variant.name: variant.make_agent() for variant in campaign.variants}
    configs = {name: (agent.config, agent.config_hash) for name, agent in agents.items()}
    identities = []
    for task in sorted(tasks, key=lambda t: t.instance_id):
        sandbox = sandbox_for(task)
        environment_key = sandbox.environment_key(task, portfolio.environment_for(task))
        resources = sandbox.resources_record()
        content_hash = task.content_hash  # hashes the whole row: once per task, not per trial
        # The task's own limit on the agent, the same for every seed (generation_key asks per trial).
        agent_timeout_s = agent_task(task, 0, campaign.timeout_multiplier).timeout_s
        for trial in campaign.trials:
            agent_config, agent_config_hash = configs[trial.variant.name]
            identities.append(
                TrialIdentity(
                    campaign=campaign.name,
                    slice=portfolio.slice_of(task.instance_id),
                    instance_id=task.instance_id,
                    trial=trial.key,
                    variant=trial.variant.name,
                    agent=trial.variant.agent,
                    seed=trial.seed,
                    agent_config_hash=agent_config_hash,
                    generation_key=task_generation_key(
                        content_hash,
                        agent_config,
                        trial.seed,
                        agent_timeout_s,
                        trial.variant.network,
                        sandbox.isolation,
                    ),
                    environment_key=environment_key,
                    test_timeout_s=campaign.test_timeout_for(task),
                    resources=resources,
                    network=trial.variant.network,
                )
            )
    return identities


def trial_identity(
    campaign: Campaign,
    portfolio: Portfolio,
    sandbox_for: Callable[[Task], SandboxBackend],
    instance_id: str,
    trial_key: str,
) -> TrialIdentity:
    """One trial's identity (a trial partition's), computed as for the whole campaign."""
    for identity in trial_identities(campaign, portfolio, sandbox_for, instance_id):
        if identity.trial == trial_key:
            return identity
    raise KeyError(f"campaign {campaign.name!r} has no trial {trial_key!r}")
