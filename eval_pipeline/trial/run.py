"""One trial's whole lifecycle: generate, then evaluate, each stored as it ends; the infrastructure's failures
retried, the agent's final at once.

`Trial.run` is what every caller runs: the `trials` asset (defs/trials.py) for each partition of a batch, the
command line through it, the tests. A `Trial` is a `TrialSpec` (who the trial is and every key it stores under,
trial/spec.py) with what it runs with, resolved before it starts (`TrialSetup.trial`): the task, the agent, the
environment, the sandbox and the store.

1. Generation (trial/generation.py): the agent works in a fresh workspace, and its patch is stored under the
   spec's generation key, or the stored one is reused (never made twice).
2. Evaluation (trial/evaluation.py): the patch is graded by the task's own grading in a fresh workspace (or by
   its verifier's run in the agent's container), the verdict stored under the evaluation key, and the trial
   marked scored.
3. An infrastructure outcome (the engine, the store, a lost environment) is retried up to the campaign's
   `retries.max_retries` times with backoff, from the grading when the generation was stored, so that a patch
   is made once. Every attempt is kept in the attempt log (store/attempts.py); an agent's or the harness's
   outcome is final.

One Dagster run materializes a batch of trial partitions, so that Dagster's cost per run is paid once per batch
rather than once per trial: `run_trials` runs them `concurrency` at a time and yields each result as its trial
ends, and a trial whose outcome is not scored fails alone, never its neighbours. Retries happen here, per trial,
because a step retry would re-run the whole batch.
"""

import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from eval_pipeline.agents.base import Agent
from eval_pipeline.common.outcomes import InfrastructureError, Outcome
from eval_pipeline.config.campaign import Campaign, RetrySettings
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.sandbox import EnvironmentHandle, SandboxBackend
from eval_pipeline.store.artifacts import ArtifactStore
from eval_pipeline.tasks.environment import EnvironmentSpec
from eval_pipeline.tasks.task import Task
from eval_pipeline.trial.evaluation import Evaluation, evaluate
from eval_pipeline.trial.generation import Generation, generate
from eval_pipeline.trial.spec import TrialSpec

__all__ = ["Trial", "TrialResult", "TrialSetup", "backoff_s", "run_trials"]


@dataclass(frozen=True)
class TrialResult:
    """How one trial ended. `generation` is None when generating failed on infrastructure every time, and
    `evaluation` then too; `tries` counts the attempts."""

    spec: TrialSpec
    outcome: Outcome
    detail: str
    generation: Generation | None
    evaluation: Evaluation | None
    tries: int


def backoff_s(retries: RetrySettings, retry: int) -> float:
    """The wait before the `retry`-th retry (from 1): `delay_s` doubled each time, give or take a quarter, so
    that trials failed by one outage do not all come back at once."""
    return float(retries.delay_s * 2 ** (retry - 1) * random.uniform(0.75, 1.25))


@dataclass(frozen=True)
class Trial:
    """A planned trial and everything it runs with."""

    spec: TrialSpec
    task: Task
    environment_spec: EnvironmentSpec
    agent: Agent
    environment: EnvironmentHandle
    sandbox: SandboxBackend
    store: ArtifactStore
    timeout_multiplier: float
    retries: RetrySettings

    def run(self, sleep: Callable[[float], None] = time.sleep) -> TrialResult:
        """The trial, start to end (the module's docstring): its generation and evaluation, stored, with every
        infrastructure outcome retried."""
        result = self.attempt(tries=1)
        for retry in range(1, self.retries.max_retries + 1):
            if not result.outcome.is_retried:
                break
            sleep(backoff_s(self.retries, retry))
            result = self.attempt(tries=retry + 1, generation=result.generation)
        return result

    def attempt(self, tries: int, generation: Generation | None = None) -> TrialResult:
        """One attempt: generate (unless `generation` is the stored one), then evaluate."""
        spec = self.spec
        if generation is None:
            try:
                generation = generate(
                    self.task,
                    self.agent,
                    spec.seed,
                    self.environment,
                    self.sandbox,
                    self.store,
                    self.timeout_multiplier,
                    spec.network,
                    spec.test_timeout_s,
                )
            except InfrastructureError as error:
                return TrialResult(spec, error.outcome, f"generation: {error}", None, None, tries)
        evaluation = evaluate(
            self.task,
            self.environment_spec,
            generation,
            self.environment,
            self.sandbox,
            self.store,
            spec.test_timeout_s,
            self.retries.reference_repeats,
        )
        return TrialResult(spec, evaluation.outcome_type, evaluation.detail, generation, evaluation, tries)


@dataclass(frozen=True)
class TrialSetup:
    """What the trials of a batch share: the campaign, its portfolio and store, a sandbox per task, and the
    environments of the batch's instances, by instance id."""

    campaign: Campaign
    portfolio: Portfolio
    store: ArtifactStore
    sandbox_for: Callable[[Task], SandboxBackend]
    environments: Mapping[str, EnvironmentHandle]

    def trial(self, spec: TrialSpec) -> Trial:
        """The trial `spec` names, with a fresh agent of its variant."""
        task = self.portfolio.instance(spec.instance_id)
        return Trial(
            spec=spec,
            task=task,
            environment_spec=self.portfolio.environment_for(task),
            agent=self.campaign.trial(spec.trial).variant.make_agent(),
            environment=self.environments[spec.instance_id],
            sandbox=self.sandbox_for(task),
            store=self.store,
            timeout_multiplier=self.campaign.timeout_multiplier,
            retries=self.campaign.retries,
        )


def run_trials(
    trials: Iterable[Trial], concurrency: int, sleep: Callable[[float], None] = time.sleep
) -> Iterator[TrialResult]:
    """Every trial, `concurrency` at a time, each result as soon as its trial has ended."""
    trials = list(trials)
    if concurrency <= 1 or len(trials) <= 1:
        yield from (trial.run(sleep) for trial in trials)
        return
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="trial") as pool:
        futures = [pool.submit(trial.run, sleep) for trial in trials]
        for future in as_completed(futures):
            yield future.result()
