"""A batch of trials run together: each one generated then graded, its infrastructure outcomes retried with
backoff, several at once.

One Dagster run materializes a whole batch of trial partitions (defs/assets.py),
so that Dagster's cost per run is paid once per batch rather than once per
trial. Each trial still ends on its own: `run_batch` yields one `BatchItemResult`
per trial as it finishes, and a trial whose outcome is not scored fails alone,
never its neighbours. Retries happen here, per trial, because a step retry
would re-run the whole batch.
"""

import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace

from eval_pipeline.common.outcomes import InfrastructureError, Outcome
from eval_pipeline.config.campaign import Campaign, RetrySettings, VariantSeed
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.sandbox import EnvironmentHandle, SandboxBackend
from eval_pipeline.store.artifacts import ArtifactStore
from eval_pipeline.tasks.task import Task
from eval_pipeline.trial.evaluation import Evaluation, evaluate
from eval_pipeline.trial.generation import Generation, generate


@dataclass(frozen=True)
class BatchItem:
    """One trial of a batch: its partition key, instance and (variant, seed)."""

    partition: str
    instance: Task
    trial: VariantSeed


@dataclass(frozen=True)
class BatchItemResult:
    """How one trial ended. `generation` is None when generating failed on infrastructure every time, and
    `evaluation` then too; `tries` counts the attempts the batch made."""

    work: BatchItem
    outcome: Outcome
    detail: str
    generation: Generation | None
    evaluation: Evaluation | None
    tries: int


@dataclass(frozen=True)
class BatchSetup:
    """What every trial of a batch shares: the campaign, its portfolio and store, a sandbox per instance, and
    the environments of the batch's instances, by instance id."""

    campaign: Campaign
    portfolio: Portfolio
    store: ArtifactStore
    sandbox_for: Callable[[Task], SandboxBackend]
    environments: Mapping[str, EnvironmentHandle]

    def run_once(self, work: BatchItem, generation: Generation | None = None) -> BatchItemResult:
        """Generate (or reuse the stored patch) unless `generation` is given, then grade (or reuse the stored
        verdict), once."""
        instance, environment = work.instance, self.environments[work.instance.instance_id]
        sandbox = self.sandbox_for(instance)
        if generation is None:
            agent = work.trial.variant.make_agent()
            try:
                generation = generate(
                    instance,
                    agent,
                    work.trial.seed,
                    environment,
                    sandbox,
                    self.store,
                    self.campaign.timeout_multiplier,
                    work.trial.variant.network,
                    self.campaign.test_timeout_for(instance),
                )
            except InfrastructureError as error:
                return BatchItemResult(work, error.outcome, f"generation: {error}", None, None, 1)
        evaluation = evaluate(
            instance,
            self.portfolio.environment_for(instance),
            generation,
            environment,
            sandbox,
            self.store,
            self.campaign.test_timeout_for(instance),
            self.campaign.retries.reference_repeats,
        )
        return BatchItemResult(work, evaluation.outcome_type, evaluation.detail, generation, evaluation, 1)


def backoff_s(retries: RetrySettings, retry: int) -> float:
    """The wait before the `retry`-th retry (from 1): `delay_s` doubled each time, give or take a quarter, so
    that trials failed by one outage do not all come back at once."""
    return float(retries.delay_s * 2 ** (retry - 1) * random.uniform(0.75, 1.25))


def run_with_retries(
    setup: BatchSetup, work: BatchItem, sleep: Callable[[float], None] = time.sleep
) -> BatchItemResult:
    """Run a trial, again after an infrastructure outcome, up to the campaign's `retries.max_retries` times:
    from its grading when its generation was stored, so a patch is made once. Every attempt is in the attempt
    log, and an agent or harness outcome is final at once."""
    retries = setup.campaign.retries
    result = setup.run_once(work)
    for retry in range(1, retries.max_retries + 1):
        if not result.outcome.is_retried:
            break
        sleep(backoff_s(retries, retry))
        result = replace(setup.run_once(work, result.generation), tries=retry + 1)
    return result


def run_batch(
    setup: BatchSetup, works: Iterable[BatchItem], concurrency: int, sleep: Callable[[float], None] = time.sleep
) -> Iterator[BatchItemResult]:
    """Every trial of the batch, `concurrency` at a time, each result as soon as its trial has ended."""
    works = list(works)
    if concurrency <= 1 or len(works) <= 1:
        yield from (run_with_retries(setup, work, sleep) for work in works)
        return
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="trial") as pool:
        futures = [pool.submit(run_with_retries, setup, work, sleep) for work in works]
        for future in as_completed(futures):
            yield future.result()
