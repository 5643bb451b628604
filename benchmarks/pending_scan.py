"""Measure the pending scan (which trials still need running) at campaign scale, old way against new.

    python benchmarks/pending_scan.py [--trials 1000 16000] [--repeats 3]

A synthetic campaign of null-agent trials (32 seeds per instance, as issue 20's
16k = 500 x 32) on a local artifact store: every trial has a stored
generation, one evaluation attempt and its final evaluation (with its
`scored/` marker), except one in 50, whose generation the infrastructure cut
short (a kept attempt, nothing final); one instance in 100 has a failed
environment attempt. Nothing runs: records are written directly.

- old: the scan as the runner did it before trial identities (results'
  per-trial reading): the generation, the generation's attempts, the
  environment's failures, the evaluation's attempts and the final evaluation,
  each listed or read per trial.
- new: `trial/pending.py: pending_trials`, one listing of `scored/` and `evaluation/`
  (and of `generation/` for the trials still pending) plus one read per
  unfinished trial with a stored generation.
- verified: the same with `verify=True`, as `eval-pipeline run` scans: each
  marked evaluation's fingerprint in the listing must be its marker's. On S3
  the listing has them (ETags); this local store hashes its files, so its
  seconds include reading every finished evaluation once.

Figures: store reads (get) and listings (keys), the requests S3 would count
for them (a listing costs one per 1,000 keys), and wall-clock seconds (the
fastest of `--repeats`); also the time to compute the trial identities, which
both ways need.
"""

import argparse
import json
import tempfile
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from unittest import mock

from eval_pipeline.config.campaign import Campaign, parse_campaign
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline.store.artifacts import LocalArtifactStore, attempts_prefix
from eval_pipeline.store.attempts import Attempt, Stage, environment_artifact_key, keep_attempt
from eval_pipeline.tasks.dataset import Benchmark
from eval_pipeline.tasks.swebench.instance import Instance
from eval_pipeline.trial.evaluation import Evaluation, mark_scored
from eval_pipeline.trial.generation import Generation
from eval_pipeline.trial.pending import pending_trials
from eval_pipeline.trial.spec import TrialSpec, trial_specs
from eval_pipeline_tests.support.counting_store import CountingStore

SEEDS = 32


def synthetic_campaign(trials: int) -> tuple[Campaign, Portfolio]:
    instances = tuple(
        Instance(f"synthetic__{n}", f"owner/repo{n % 50}", f"{n:040x}", "fix it", "", "", (), ())
        for n in range(max(1, trials // SEEDS))
    )
    campaign = parse_campaign(
        {
            "name": "scan",
            "benchmark": {"kind": "demo"},
            "variants": [{"name": "null", "agent": "null"}],
            "seeds": SEEDS,
        },
        "benchmark",
    )
    return campaign, Portfolio({"synthetic": Benchmark("synthetic", instances, "v1")})


def _generation(identity: TrialSpec, status: str) -> Generation:
    return Generation(
        key=identity.generation_key,
        instance_id=identity.instance_id,
        agent_config={"agent": "null"},
        agent_config_hash=identity.agent_config_hash,
        seed=identity.seed,
        status=status,
        error="",
        patch="",
        patch_sha256="0" * 64,
        trajectory=[],
        input_tokens=0,
        output_tokens=0,
        cost_usd=0.0,
        started_at="2026-11-23T00:00:00+00:00",
        duration_s=1.0,
        harness_version="bench",
        generation_version="1",
    )


def _evaluation(identity: TrialSpec, generation: Generation) -> Evaluation:
    return Evaluation(
        key=identity.evaluation_key(generation.patch_sha256),
        attempt_id=f"{identity.instance_id}-{identity.trial}",
        generation_key=generation.key,
        instance_id=identity.instance_id,
        seed=identity.seed,
        agent_config_hash=identity.agent_config_hash,
        patch_sha256=generation.patch_sha256,
        outcome="unresolved",
        detail="",
        tests={},
        steps=[{"step": "run_tests", "exit_code": 1, "peak_memory_mb": 30.0}],
        environment_key=identity.environment_key,
        environment={},
        resources=identity.resources,
        test_timeout_s=identity.test_timeout_s,
        started_at="2026-11-23T00:00:01+00:00",
        duration_s=1.0,
        harness_version="bench",
        grading_version="3",
    )


def populate(store: LocalArtifactStore, identities: list[TrialSpec]) -> None:
    """Write every trial's records as a finished campaign leaves them (fsync skipped: setup, not measured)."""
    with mock.patch("os.fsync"):
        for number, identity in enumerate(identities):
            if number % 50 == 49:
                attempt = Attempt(stage=Stage.GENERATION, outcome="sandbox_lost", started_at="0", keys={})
                keep_attempt(store, identity.generation_key, attempt)
                continue
            generation = _generation(identity, "completed")
            store.put(generation.key, generation.payload())
            evaluation = _evaluation(identity, generation)
            attempt = Attempt(
                stage=Stage.EVALUATION,
                outcome=evaluation.outcome,
                started_at=evaluation.started_at,
                keys={"attempt_id": evaluation.attempt_id},
                record=evaluation.payload(),
            )
            keep_attempt(store, evaluation.key, attempt)
            store.put(evaluation.key, evaluation.payload())
            mark_scored(store, identity.scored_id, evaluation.key, evaluation.payload())
        for identity in identities[:: SEEDS * 100]:
            attempt = Attempt(stage=Stage.ENVIRONMENT, outcome="image_build_failed", started_at="0", keys={})
            keep_attempt(store, environment_artifact_key(identity.environment_key), attempt)


def _read_all(store: LocalArtifactStore, prefix: str) -> list[dict]:
    return [payload for key in store.keys(prefix) if (payload := store.get(key))]


def old_scan(identities: list[TrialSpec], store: LocalArtifactStore) -> list[TrialSpec]:
    """The scan's requests as the runner made them before trial identities: every kept record, per trial."""
    pending = []
    for identity in identities:
        stored = store.get(identity.generation_key)
        _read_all(store, attempts_prefix(identity.generation_key))
        _read_all(store, attempts_prefix(environment_artifact_key(identity.environment_key)))
        final = None
        if stored:
            generation = Generation.from_payload(stored, key=identity.generation_key, reused=True)
            evaluation_key = identity.evaluation_key(generation.patch_sha256)
            _read_all(store, attempts_prefix(evaluation_key))
            final = store.get(evaluation_key)
        if final is None:
            pending.append(identity)
    return pending


def measure(scan, identities: list[TrialSpec], store: CountingStore, repeats: int) -> dict:
    timings = []
    for _ in range(repeats):
        fresh = [replace(identity) for identity in identities]  # no hash cached by an earlier repeat
        store.reset()
        started = time.perf_counter()
        pending = scan(fresh, store)
        timings.append(time.perf_counter() - started)
    return {
        "seconds": round(min(timings), 3),
        "gets": store.gets,
        "listings": store.listings,
        "s3_requests": store.requests,
        "pending": len(pending),
    }


def run(trials: int, repeats: int, root: Path) -> dict:
    campaign, portfolio = synthetic_campaign(trials)
    sandbox = LocalSandbox(root / "sandbox", ResourceLimits(), SandboxSettings(), campaign.name)
    started = time.perf_counter()
    identities = trial_specs(campaign, portfolio, lambda task: sandbox)
    identities_s = time.perf_counter() - started
    store = CountingStore(root / "artifacts")
    populate(store, identities)
    old, new = measure(old_scan, identities, store, repeats), measure(pending_trials, identities, store, repeats)
    verified = measure(partial(pending_trials, verify=True), identities, store, repeats)
    assert old["pending"] == new["pending"] == verified["pending"], "every way finds the same trials pending"
    return {
        "trials": len(identities),
        "identities_s": round(identities_s, 3),
        "old": old,
        "new": new,
        "verified": verified,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[1000, 16000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        figures = [run(trials, args.repeats, Path(scratch) / str(trials)) for trials in args.trials]
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
