"""Trial identities, the pending scan, the attempt log and per-trial folders, on demo rows."""

import json
from dataclasses import replace

import pytest

from eval_pipeline.agents import make_agent
from eval_pipeline.agents.base import agent_task
from eval_pipeline.common.hashing import stable_hash
from eval_pipeline.common.outcomes import ImageBuildFailed
from eval_pipeline.config.campaign import parse_campaign
from eval_pipeline.grading.verdict import GRADING_VERSION
from eval_pipeline.results.export import FILES, export_trials
from eval_pipeline.results.markdown import render_markdown
from eval_pipeline.results.report import build_report
from eval_pipeline.results.warehouse import collect_warehouse, read_rejected_table, write_warehouse
from eval_pipeline.store.artifacts import Rejection, attempts_prefix
from eval_pipeline.store.attempts import AttemptLog, attempts, environment_artifact_key, environment_attempt
from eval_pipeline.trial.evaluation import evaluate
from eval_pipeline.trial.generation import generate
from eval_pipeline.trial.pending import pending_trials
from eval_pipeline.trial.selection import TrialSelection
from eval_pipeline.trial.spec import GENERATION_VERSION, SCORED, trial_spec, trial_specs
from eval_pipeline_tests.support.counting_store import CountingStore
from eval_pipeline_tests.support.demo_trials import CAMPAIGN, CAMPAIGN_FIELDS, first_code_issue, run_trial
from eval_pipeline_tests.support.stored_records import overwrite, raw, rehashed


@pytest.fixture
def counting_store(tmp_path) -> CountingStore:
    return CountingStore(tmp_path / "artifacts")


def old_generation_key(task, agent, seed, timeout_multiplier):
    """The generation key as the harness computed it before trial identities."""
    identity = {"version": GENERATION_VERSION, "instance": task.content_hash, "agent": agent.config, "seed": seed}
    agent_timeout_s = agent_task(task, seed, timeout_multiplier).timeout_s
    if agent_timeout_s is not None:
        identity["agent_timeout_s"] = agent_timeout_s
    return f"generation/{stable_hash(identity)}.json"


def old_evaluation_key(generation, environment_key, sandbox, test_timeout_s):
    """The evaluation key as the harness computed it before trial identities: stored artifacts depend on it."""
    identity = {
        "version": GRADING_VERSION,
        "generation": generation.key,
        "patch": generation.patch_sha256,
        "environment": environment_key,
        "resources": sandbox.resources_record(),
        "test_timeout_s": test_timeout_s,
    }
    return f"evaluation/{stable_hash(identity)}.json"


def test_every_planned_trial_has_one_identity(identities, portfolio, shared_sandbox):
    assert len(identities) == len(portfolio.instances) * len(CAMPAIGN.trials)
    assert len({(i.instance_id, i.trial) for i in identities}) == len(identities)
    assert {i.slice for i in identities} == {"code-issues", "terminal"}
    terminal = next(i for i in identities if i.slice == "terminal")
    assert terminal.test_timeout_s == portfolio.instance(terminal.instance_id).verifier_timeout_s
    one = trial_spec(CAMPAIGN, portfolio, lambda task: shared_sandbox, terminal.instance_id, "none-s1")
    assert one in identities and (one.instance_id, one.variant, one.seed) == (terminal.instance_id, "none", 1)
    with pytest.raises(KeyError, match="no-such-trial"):
        trial_spec(CAMPAIGN, portfolio, lambda task: shared_sandbox, terminal.instance_id, "no-such-trial")


@pytest.mark.parametrize("slice_name", ["code-issues", "terminal"])
def test_identity_keys_are_the_keys_stored_artifacts_have(identities, portfolio, shared_sandbox, store, slice_name):
    identity = next(i for i in identities if i.slice == slice_name and i.variant == "none")
    generation, evaluation = run_trial(identity, portfolio, shared_sandbox, store)
    assert identity.generation_key == generation.key
    task = portfolio.instance(identity.instance_id)
    assert generation.key == old_generation_key(task, make_agent("null"), identity.seed, CAMPAIGN.timeout_multiplier)
    assert identity.agent_config_hash == make_agent("null").config_hash == generation.agent_config_hash
    assert identity.evaluation_key(generation.patch_sha256) == evaluation.key
    assert evaluation.key == old_evaluation_key(
        generation, identity.environment_key, shared_sandbox, identity.test_timeout_s
    )
    assert store.get(evaluation.key) is not None and evaluation.outcome_type.is_scored


def test_the_pending_scan_lists_the_store_and_reads_no_finished_trial(
    identities, portfolio, shared_sandbox, counting_store
):
    instance_id = first_code_issue(identities).instance_id
    finished = [i for i in identities if i.instance_id == instance_id]
    for identity in finished:
        run_trial(identity, portfolio, shared_sandbox, counting_store)
    counting_store.reset()
    pending = pending_trials(identities, counting_store)
    assert pending == [i for i in identities if i.instance_id != instance_id]
    assert counting_store.gets == 0, "finished trials are found by listing, not read"
    assert counting_store.listings == 3, "scored/, evaluation/, and generation/ for the trials still pending"


def test_a_store_written_before_markers_is_scanned_through_generations_and_marked(
    identities, portfolio, shared_sandbox, counting_store
):
    identity = first_code_issue(identities)
    run_trial(identity, portfolio, shared_sandbox, counting_store)
    markers = list((counting_store.root / "scored").iterdir())
    assert markers
    for marker in markers:
        marker.unlink()
    assert identity not in pending_trials(identities, counting_store), "found through its generation"
    counting_store.reset()
    assert identity not in pending_trials(identities, counting_store)
    assert counting_store.gets == 0, "the first scan left the marker"


def test_a_trial_whose_final_evaluation_was_quarantined_is_pending_again(identities, portfolio, shared_sandbox, store):
    identity = first_code_issue(identities)
    _, evaluation = run_trial(identity, portfolio, shared_sandbox, store)
    (store.root / evaluation.key).write_text("truncated")
    assert store.get(evaluation.key) is None, "moved to quarantine"
    assert identity in pending_trials(identities, store)


def test_a_verifying_scan_reads_no_finished_trial_and_finds_a_damaged_one(
    identities, portfolio, shared_sandbox, counting_store
):
    identity = first_code_issue(identities)
    _, evaluation = run_trial(identity, portfolio, shared_sandbox, counting_store)
    counting_store.reset()
    assert identity not in pending_trials(identities, counting_store, verify=True)
    assert counting_store.gets == 0, "fingerprints come with the listing (S3's ETags), no read per trial"
    path = counting_store.root / evaluation.key
    path.write_text(path.read_text().replace("resolved", "RESOLVED", 1))  # as long as before, one byte changed
    assert identity not in pending_trials(identities, counting_store), "a listing of keys alone cannot see it"
    assert identity in pending_trials(identities, counting_store, verify=True)
    path.write_text("truncated")
    assert identity in pending_trials(identities, counting_store, verify=True)


def test_trials_never_run_failed_to_build_or_not_scored_are_pending(portfolio, shared_sandbox, store):
    impatient = parse_campaign({**CAMPAIGN_FIELDS, "timeouts": {"tests_s": 0.5}}, "test")
    identities = trial_specs(impatient, portfolio, lambda task: shared_sandbox)
    identity = next(i for i in identities if i.slice == "code-issues" and i.variant == "oracle")
    with pytest.raises(ImageBuildFailed), environment_attempt(store, identity.instance_id, identity.environment_key):
        raise ImageBuildFailed("no such base image")
    task = portfolio.instance(identity.instance_id)
    spec = portfolio.environment_for(task)
    environment = shared_sandbox.prepare(task, spec, portfolio.source_for(task))
    generation = generate(task, make_agent("oracle"), identity.seed, environment, shared_sandbox, store)
    slow = replace(spec, test_cmd="sleep 30; " + spec.test_cmd)
    evaluation = evaluate(task, slow, generation, environment, shared_sandbox, store, identity.test_timeout_s)
    assert evaluation.outcome == "test_timeout" and evaluation.key == identity.evaluation_key(generation.patch_sha256)
    assert pending_trials(identities, store) == identities


def test_the_attempt_log_reads_attempts_kept_before_it_existed(identities, store):
    """Stores written by earlier harnesses keep whole Generation records and environment dicts as attempts."""
    identity = identities[0]
    legacy_generation = {"key": identity.generation_key, "status": "sandbox_lost", "error": "pod gone"}
    store.put(f"{attempts_prefix(identity.generation_key)}/a.json", {**legacy_generation, "started_at": "2"})
    environment = {"instance_id": "i", "environment_key": identity.environment_key, "outcome": "engine_error"}
    log = AttemptLog(store)
    with pytest.raises(ImageBuildFailed), environment_attempt(store, "i", identity.environment_key):
        raise ImageBuildFailed("base image gone")
    store.put(
        f"{attempts_prefix(environment_artifact_key(identity.environment_key))}/old.json",
        {**environment, "detail": "x", "started_at": "0"},
    )
    kept = attempts(store, identity.generation_key)
    assert [(a.stage, a.outcome, a.detail, a.record_version) for a in kept] == [
        ("generation", "sandbox_lost", "pod gone", 1)
    ]
    environment_attempts = AttemptLog(store).environment_attempts(identity.environment_key)
    assert [a.outcome for a in environment_attempts] == ["engine_error", "image_build_failed"], "oldest first"
    assert environment_attempts[1].keys == {"environment": identity.environment_key, "instance_id": "i"}
    assert log.environment_attempts(identity.environment_key) == [], "a log reads what was listed when it opened"


def test_results_and_folders_come_from_the_store_alone(identities, portfolio, shared_sandbox, store, tmp_path):
    code_issue = first_code_issue(identities)
    instance_id = code_issue.instance_id
    for identity in identities:
        if identity.instance_id == instance_id:
            run_trial(identity, portfolio, shared_sandbox, store)
    warehouse = collect_warehouse(CAMPAIGN, portfolio, lambda task: shared_sandbox, store)
    rows = {(row.instance_id, row.trial): row for row in warehouse.trials}
    assert len(rows) == len(identities)
    assert rows[(instance_id, "oracle-s0")].resolved and rows[(instance_id, "none-s0")].outcome == "unresolved"
    assert not any(row.scored for (other, _), row in rows.items() if other != instance_id)

    sandbox_for = lambda task: shared_sandbox  # noqa: E731 - the one sandbox of every task here
    folders = export_trials(
        CAMPAIGN, portfolio, sandbox_for, store, tmp_path / "trials", TrialSelection((instance_id,))
    )
    assert [f.relative_to(tmp_path / "trials").parts for f in folders] == [
        ("code-issues", instance_id, variant, f"seed-{seed}") for variant in ("oracle", "none") for seed in (0, 1)
    ]
    oracles = export_trials(
        CAMPAIGN,
        portfolio,
        sandbox_for,
        store,
        tmp_path / "oracles",
        TrialSelection((instance_id,), ("oracle",), limit=1),
    )
    assert [f.relative_to(tmp_path / "oracles").parts for f in oracles] == [
        ("code-issues", instance_id, "oracle", "seed-0")
    ]
    oracle = folders[0]
    assert sorted(path.name for path in oracle.iterdir()) == sorted(FILES)
    assert json.loads((oracle / "trajectory.json").read_text())[0]["action"] == "apply_reference"
    assert portfolio.instance(instance_id).problem_statement in (oracle / "instruction.md").read_text()
    assert (oracle / "patch.diff").read_text().startswith("diff --git")
    assert "run_tests" in (oracle / "test_output.txt").read_text()
    outcome = json.loads((oracle / "outcome.json").read_text())
    assert (outcome["outcome"], outcome["kind"], outcome["scored"]) == ("resolved", "agent", True)
    assert outcome["durations_s"]["evaluation"] > 0 and outcome["resources"]["requested"]["memory_ceiling_mb"] == 1024
    lineage = json.loads((oracle / "lineage.json").read_text())
    assert lineage["environment_key"] == code_issue.environment_key
    assert lineage["network"] is False, "no variant of the campaign opted into network"
    assert lineage["artifacts"]["generation"] == code_issue.generation_key
    assert lineage["grading_version"] == GRADING_VERSION and lineage["agent_config"] == make_agent("oracle").config
    kept = [json.loads(line) for line in (oracle / "attempts.jsonl").read_text().splitlines()]
    assert [(a["stage"], a["final"]) for a in kept] == [("generation", True), ("evaluation", True)]
    assert (oracle / "patch.diff").read_text() == store.get(lineage["artifacts"]["generation"])["patch"]


@pytest.fixture(params=["local", "s3"])
def either_store(request):
    return request.getfixturevalue("store" if request.param == "local" else "s3_store")


def test_a_forged_verdict_is_reported_never_counted_and_graded_again(
    identities, portfolio, shared_sandbox, either_store, tmp_path
):
    issue = first_code_issue(identities).instance_id
    null, oracle = (
        next(i for i in identities if i.instance_id == issue and i.variant == v) for v in ("none", "oracle")
    )
    _, forged = run_trial(null, portfolio, shared_sandbox, either_store)
    run_trial(oracle, portfolio, shared_sandbox, either_store)
    assert forged.outcome == "unresolved"
    overwrite(either_store, forged.key, rehashed(raw(either_store, forged.key), outcome="resolved"))

    assert null in pending_trials(identities, either_store, verify=True), "the resume runs it again"
    warehouse = collect_warehouse(CAMPAIGN, portfolio, lambda task: shared_sandbox, either_store)
    rows = {(row.instance_id, row.trial): row for row in warehouse.trials}
    assert not rows[issue, null.trial].scored and not rows[issue, null.trial].resolved
    assert rows[issue, oracle.trial].scored and rows[issue, oracle.trial].resolved, "its neighbour still counts"
    assert [(r.trial, r.key, r.reason) for r in warehouse.rejected] == [(null.trial, forged.key, Rejection.FORGED)]
    path = write_warehouse(warehouse, tmp_path / "results.duckdb")
    assert read_rejected_table(path) == warehouse.rejected
    report = build_report("ids", portfolio.version, "plan", warehouse.trials, rejected=read_rejected_table(path))
    assert f"| `{issue}` | `{null.trial}` | forged | `{forged.key}` |" in render_markdown(report)
    assert report.summary()["rejected_records"] == 1

    _, again = run_trial(null, portfolio, shared_sandbox, either_store)
    assert not again.reused and again.outcome == "unresolved", "graded again, not read back as resolved"
    assert null not in pending_trials(identities, either_store, verify=True)


def test_a_pass_planted_with_a_marker_of_its_own_is_not_believed(identities, portfolio, shared_sandbox, store):
    """What a process that can write the store but has no key would plant for a trial that never ran: a
    resolved final evaluation under the trial's key and a marker naming it, with a MAC it had to guess."""
    identity = next(i for i in identities if i.slice == "code-issues" and i.variant == "none")
    _, evaluation = run_trial(identity, portfolio, shared_sandbox, store)
    assert evaluation.outcome == "unresolved"
    planted = rehashed(raw(store, evaluation.key), outcome="resolved")
    for key in (evaluation.key, *store.keys(SCORED)):
        (store.root / key).unlink()
    overwrite(store, evaluation.key, planted)
    fingerprint = stable_hash(planted)  # any value: without the key the marker's MAC is a guess
    (
        store.root
        / SCORED
        / f"{identity.scored_id}-{evaluation.key.removeprefix('evaluation/')}~{fingerprint}~{'0' * 32}"
    ).touch()
    assert identity in pending_trials(identities, store), (
        "the marker's MAC is wrong; the evaluation is read, and refused"
    )
    assert [(r.key, r.reason) for r in store.rejected()] == [(evaluation.key, Rejection.FORGED)]
