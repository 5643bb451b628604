"""Batches of trials: how pending partitions become runs, and how a batch retries and runs its trials."""

import threading
from dataclasses import dataclass, field

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.config.campaign import RetrySettings
from eval_pipeline.defs.partitions import (
    RANGE_END_TAG,
    RANGE_START_TAG,
    SMALLEST_BATCH,
    PartitionBatch,
    trial_batches,
)
from eval_pipeline.trial.generation import Generation
from eval_pipeline.trial.run import Trial, TrialResult, backoff_s, run_trials
from eval_pipeline.trial.spec import TrialSpec

ORDER = ("a-s0", "a-s1", "a-s2", "b-s0", "b-s1")
RETRIES = RetrySettings(max_retries=2, delay_s=1.0)


def test_pending_partitions_become_batches_of_one_instance_consecutive_in_dagsters_order():
    pending = ["x|b-s0", "y|a-s0", "x|a-s0", "x|a-s1", "x|b-s1", "x|a-s2"]
    batches = trial_batches(pending, ORDER, size=2)
    assert [(b.instance_id, b.trials) for b in batches] == [
        ("x", ("a-s0", "a-s1")),
        ("x", ("a-s2", "b-s0")),
        ("x", ("b-s1",)),
        ("y", ("a-s0",)),
    ]
    gap = trial_batches(["x|a-s0", "x|a-s2"], ORDER, size=16)
    assert [b.trials for b in gap] == [("a-s0",), ("a-s2",)], "a range never covers a trial it was not asked for"


def test_batches_shrink_toward_the_end_so_that_the_runs_at_once_finish_together():
    order = [f"v-s{seed}" for seed in range(24)]
    pending = [f"{instance}|{trial}" for instance in "abc" for trial in order]
    batches = trial_batches(pending, order, size=64, spread=2)
    sizes = [len(batch.trials) for batch in batches]
    assert sum(sizes) == 72 and sorted(key for b in batches for key in b.partitions()) == sorted(pending)
    # Two runs at once: each batch at most half of what is not yet batched, so an instance's 24 while 72 and 48
    # are left, then 12 of the last 24, then 6, and the last 6 together: a batch of the smallest size would
    # leave 2 for a run of their own.
    assert sizes == [24, 24, 12, 6, 6]
    assert min(sizes) >= SMALLEST_BATCH
    assert [len(b.trials) for b in trial_batches(pending, order, size=8, spread=2)][:3] == [8, 8, 8]


def test_a_batch_is_a_dagster_partition_range_and_reads_back_from_its_run_tags():
    batch = PartitionBatch("x", ("a-s1", "a-s2", "b-s0"))
    tags = batch.range_tags()
    assert (tags[RANGE_START_TAG], tags[RANGE_END_TAG]) == ("x|a-s1", "x|b-s0")
    assert PartitionBatch.from_tags(tags, ORDER) == batch
    assert batch.partitions() == ["x|a-s1", "x|a-s2", "x|b-s0"]
    assert PartitionBatch.from_tags({}, ORDER) is None


class ScriptedTrial(Trial):
    """A trial whose every attempt ends on the next outcome scripted for its partition: what `Trial.run` and
    `run_trials` make of the attempts is what is tested."""

    def __init__(self, partition: str, script: "Script") -> None:
        spec = TrialSpec("c", "s", *partition.split("|", 1), "v", "null", 0, "h", "g", "e", 1.0, {})
        fields = {name: None for name in Trial.__dataclass_fields__} | {"spec": spec, "retries": RETRIES}
        super().__init__(**fields)
        object.__setattr__(self, "script", script)

    def attempt(self, tries: int, generation: Generation | None = None) -> TrialResult:
        outcome = self.script.next(self.spec)
        return TrialResult(self.spec, outcome, outcome.value, None, None, tries)


@dataclass
class Script:
    """Each partition's outcomes, one per attempt, and the attempts made."""

    outcomes: dict[str, list[Outcome]]
    calls: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    together: threading.Barrier | None = None  # trials that must be running at the same time to get through

    def next(self, spec: TrialSpec) -> Outcome:
        if self.together:
            self.together.wait()
        partition = f"{spec.instance_id}|{spec.trial}"
        with self.lock:
            self.calls.append(partition)
            return self.outcomes[partition].pop(0)


def test_infrastructure_is_retried_with_growing_backoff_and_an_agent_outcome_is_final():
    script = Script(
        {"i|lost": [Outcome.SANDBOX_LOST, Outcome.OOM_KILLED, Outcome.RESOLVED], "i|bad": [Outcome.UNRESOLVED]}
    )
    waits: list[float] = []
    result = ScriptedTrial("i|lost", script).run(sleep=waits.append)
    assert (result.outcome, result.tries) == (Outcome.RESOLVED, 3)
    assert len(waits) == 2 and 0.75 <= waits[0] <= 1.25 and 1.5 <= waits[1] <= 2.5
    assert ScriptedTrial("i|bad", script).run(sleep=waits.append).tries == 1 and len(waits) == 2

    exhausted = Script({"i|down": [Outcome.ENGINE_ERROR] * 3})
    result = ScriptedTrial("i|down", exhausted).run(sleep=lambda _: None)
    assert (result.outcome, result.tries) == (Outcome.ENGINE_ERROR, 3), "max_retries 2: three attempts in all"
    assert backoff_s(RetrySettings(delay_s=0.0), 3) == 0.0


def test_a_batch_runs_every_trial_once_concurrently_and_ends_each_on_its_own():
    script = {f"i|t{n}": [Outcome.RESOLVED if n % 2 else Outcome.GRADING_ERROR] for n in range(9)}
    scripted = Script(script, together=threading.Barrier(3, timeout=30))  # only 3 at once pass it
    trials = [ScriptedTrial(key, scripted) for key in script]
    results = list(run_trials(trials, concurrency=3, sleep=lambda _: None))
    assert sorted(f"i|{r.spec.trial}" for r in results) == sorted(script)
    assert sorted(scripted.calls) == sorted(script), "a harness outcome is not retried"
    assert {f"i|{r.spec.trial}": r.outcome for r in results}["i|t1"] == Outcome.RESOLVED
    assert sum(r.outcome is Outcome.GRADING_ERROR for r in results) == 5
