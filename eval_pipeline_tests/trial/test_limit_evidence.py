"""Limits hit by the patch's own code are scored: a test run stopped by the memory ceiling or the time limit is
a failure where the instance's reference passed within the very same limits, and infrastructure otherwise.

Real trials on the local backend: an oracle variant and a hostile command agent whose patch makes the code
under test allocate until the ceiling kills it (or hang until the time limit does), run through the batch's
retries as the campaign's assets run them, then read back into the warehouse and the report.
"""

from pathlib import Path

import pytest

from eval_pipeline.common.outcomes import Outcome
from eval_pipeline.config.campaign import parse_campaign
from eval_pipeline.datasets.portfolio import Portfolio
from eval_pipeline.grading.verdict import Verdict
from eval_pipeline.results.markdown import render_markdown
from eval_pipeline.results.report import build_report
from eval_pipeline.results.warehouse import collect_warehouse
from eval_pipeline.sandbox import ResourceLimits, SandboxSettings
from eval_pipeline.sandbox.local import LocalSandbox
from eval_pipeline.sandbox.patches import patch_paths
from eval_pipeline.trial.limits import (
    CAMPAIGN,
    VALIDATION,
    GradingConditions,
    record_reference_pass,
    reference_pass,
    scored_at_limits,
)
from eval_pipeline.trial.run import TrialResult, TrialSetup
from eval_pipeline.trial.spec import trial_spec
from eval_pipeline.trial.validation import InstanceValidation, leave_limit_evidence, validate_task
from eval_pipeline_tests.support.result_rows import trial

CEILING_MB = 300
TEST_TIMEOUT_S = 30.0
MAX_RETRIES = 2
# Appended to the module the tests import: allocate until the memory ceiling stops it, or never return.
MEMORY_HOG = "_held = []\nwhile True:\n    _held.append(b'y' * 2**23)\n    _time.sleep(0.005)\n"
HANG = "while True:\n    _time.sleep(1)\n"


def hostile_command(module_path: str, code: str) -> str:
    """A command agent's line that appends `code` (with `time` imported) to the module the instance fixes."""
    return f"printf '\\nimport time as _time\\n%s' \"{code}\" >> {module_path}"


@pytest.fixture
def instance(demo_benchmark):
    return next(i for i in demo_benchmark.instances if patch_paths(i.reference_patch) == ["calclib/arith.py"])


@pytest.fixture
def portfolio(demo_benchmark) -> Portfolio:
    return Portfolio({"code-issues": demo_benchmark})


def make_campaign(test_timeout_s: float = TEST_TIMEOUT_S, hostile_code: str = MEMORY_HOG):
    return parse_campaign(
        {
            "name": "limits",
            "benchmark": {"kind": "demo"},
            "variants": [
                {"name": "oracle", "agent": "oracle"},
                {
                    "name": "hostile",
                    "agent": "command",
                    "params": {"command": hostile_command("calclib/arith.py", hostile_code)},
                },
            ],
            "sandbox": {"allow_untrusted_agents_locally": True},  # the hostile agent is the test's own
            "timeouts": {"tests_s": test_timeout_s},
            "retries": {"max_retries": MAX_RETRIES, "delay_s": 0},
        },
        "test",
    )


def sandbox_at(root: Path, ceiling_mb: int) -> LocalSandbox:
    """A local sandbox with this memory ceiling; sandboxes on one root share their environments."""
    return LocalSandbox(root, ResourceLimits(memory_floor_mb=128, memory_ceiling_mb=ceiling_mb), SandboxSettings(), "t")


def setup_for(campaign, portfolio, instance, sandbox, store) -> TrialSetup:
    environment = sandbox.prepare(instance, portfolio.environment_for(instance), portfolio.source_for(instance))
    return TrialSetup(campaign, portfolio, store, lambda task: sandbox, {instance.instance_id: environment})


def run(setup: TrialSetup, instance, variant: str) -> TrialResult:
    spec = trial_spec(setup.campaign, setup.portfolio, setup.sandbox_for, instance.instance_id, f"{variant}-s0")
    return setup.trial(spec).run(sleep=lambda seconds: None)


def trial_row(campaign, portfolio, setup, store, instance, variant):
    """The warehouse's row of the instance's trial of `variant`, read back from the store alone."""
    rows = collect_warehouse(campaign, portfolio, setup.sandbox_for, store).trials
    return next(row for row in rows if (row.instance_id, row.variant) == (instance.instance_id, variant))


def test_tests_exhausting_memory_the_reference_passes_within_are_scored_unresolved_and_kept_as_oom(
    instance, portfolio, store, tmp_path
):
    campaign = make_campaign()
    setup = setup_for(campaign, portfolio, instance, sandbox_at(tmp_path / "sb", CEILING_MB), store)
    oracle = run(setup, instance, "oracle")
    assert oracle.outcome is Outcome.RESOLVED, oracle.detail

    hostile = run(setup, instance, "hostile")

    assert hostile.outcome is Outcome.PATCH_OOM_KILLED and hostile.outcome.is_scored, hostile.detail
    assert hostile.tries == 1, "the patch's verdict: never retried"
    evaluation = hostile.evaluation
    assert any(step.get("oom_killed") for step in evaluation.steps), "the tests really were killed at the ceiling"
    assert evaluation.limit_evidence["source"] == CAMPAIGN
    assert evaluation.limit_evidence["reference"] == oracle.evaluation.key
    assert store.get(evaluation.key) is not None, "stored as final"
    row = trial_row(campaign, portfolio, setup, store, instance, "hostile")
    assert (row.outcome, row.outcome_kind, row.scored, row.resolved) == ("patch_oom_killed", "agent", True, False)
    assert row.oom_killed and row.limit_evidence == f"campaign: {oracle.evaluation.key}"


@pytest.mark.parametrize("evidence_ceiling_mb", [None, 1024], ids=["no-evidence", "evidence-at-1GB"])
def test_without_evidence_at_these_very_limits_the_reference_graded_at_once_decides(
    instance, portfolio, store, tmp_path, evidence_ceiling_mb
):
    """A pass with more memory says nothing of these limits: the reference is graded at once under them
    (trial/evaluation.py, intention to treat), and its pass there scores the patch's OOM and is kept as evidence."""
    campaign = make_campaign()
    setup = setup_for(campaign, portfolio, instance, sandbox_at(tmp_path / "sb", CEILING_MB), store)
    if evidence_ceiling_mb is not None:  # the reference passes, in the same environment, with more memory
        roomy = setup_for(campaign, portfolio, instance, sandbox_at(tmp_path / "sb", evidence_ceiling_mb), store)
        assert roomy.environments == setup.environments
        assert run(roomy, instance, "oracle").outcome is Outcome.RESOLVED

    hostile = run(setup, instance, "hostile")

    assert hostile.outcome is Outcome.PATCH_OOM_KILLED and hostile.outcome.is_scored, hostile.detail
    assert hostile.tries == 1, "the patch's verdict: never retried"
    evidence = hostile.evaluation.limit_evidence
    assert evidence["source"] == CAMPAIGN and evidence["reference"].startswith("graded at once after generation/")
    assert evidence["resources"]["requested"]["memory_ceiling_mb"] == CEILING_MB
    row = trial_row(campaign, portfolio, setup, store, instance, "hostile")
    assert (row.outcome, row.outcome_kind, row.scored) == ("patch_oom_killed", "agent", True)


def test_a_reference_that_passed_in_validation_scores_the_limit_and_one_stopped_by_a_limit_does_not(
    instance, portfolio, store, tmp_path
):
    campaign = make_campaign()
    sandbox = sandbox_at(tmp_path / "sb", CEILING_MB)
    setup = setup_for(campaign, portfolio, instance, sandbox, store)
    environment = setup.environments[instance.instance_id]
    under = GradingConditions.of(instance, environment.key, sandbox, TEST_TIMEOUT_S)
    spec = portfolio.environment_for(instance)
    validation = validate_task(
        "code-issues", instance, spec, environment, sandbox, repeats=1, test_timeout_s=TEST_TIMEOUT_S
    )
    assert validation.gold_resolved == 1
    stopped = InstanceValidation(**{**validation.__dict__, "gold": {"resolved": 1, "oom_killed": 1}})
    leave_limit_evidence(store, stopped, under)
    assert reference_pass(store, under) is None, "a reference the ceiling stopped once is no evidence"

    leave_limit_evidence(store, validation, under)
    hostile = run(setup, instance, "hostile")

    assert hostile.outcome is Outcome.PATCH_OOM_KILLED and hostile.tries == 1, hostile.detail
    assert hostile.evaluation.limit_evidence["source"] == VALIDATION
    assert "1 of 1 reference runs resolved" in hostile.detail


def test_tests_hanging_past_a_time_limit_the_reference_passes_within_are_scored_as_test_timeout(
    instance, portfolio, store, tmp_path
):
    campaign = make_campaign(test_timeout_s=8, hostile_code=HANG)
    setup = setup_for(campaign, portfolio, instance, sandbox_at(tmp_path / "sb", CEILING_MB), store)
    assert run(setup, instance, "oracle").outcome is Outcome.RESOLVED

    hostile = run(setup, instance, "hostile")

    assert hostile.outcome is Outcome.PATCH_TEST_TIMEOUT and hostile.tries == 1, hostile.detail
    assert any(step.get("timed_out") for step in hostile.evaluation.steps)


def test_a_limit_outcome_no_grading_step_recorded_is_the_machinerys_even_with_evidence(store):
    under = GradingConditions("i", "content", "environment", {"backend": "local"}, 60.0)
    record_reference_pass(store, under, CAMPAIGN, "evaluation/x.json")
    raised = Verdict(Outcome.OOM_KILLED, detail="an OutOfMemory raised outside the test run")
    stopped = Verdict(Outcome.OOM_KILLED, steps=[{"step": "run_tests", "oom_killed": True}])
    elsewhere = GradingConditions("i", "content", "environment", {"backend": "local"}, 120.0)

    assert scored_at_limits(raised, store, under) == (raised, None)
    assert scored_at_limits(stopped, store, elsewhere) == (stopped, None), "another time limit: no evidence"
    scored, evidence = scored_at_limits(stopped, store, under)
    assert scored.outcome is Outcome.PATCH_OOM_KILLED and evidence.reference == "evaluation/x.json"


def test_the_report_counts_limits_scored_and_left_as_infrastructure_per_variant():
    results = [
        trial("i1", "agent", 0, "resolved"),
        trial("i2", "agent", 0, "patch_oom_killed"),
        trial("i3", "agent", 0, "oom_killed"),
        trial("i1", "other", 0, "patch_test_timeout"),
        trial("i2", "other", 0, "test_timeout"),
        trial("i3", "other", 0, "test_timeout"),
    ]

    report = build_report("c", "d", "p", results, baseline="agent")

    agent, other = report.variants["agent"], report.variants["other"]
    assert (agent.limits_scored, agent.limits_unscored, other.limits_scored, other.limits_unscored) == (1, 1, 1, 2)
    assert (agent.scored, agent.resolved_rate, agent.n) == (2, 0.5, 2), "the scored OOM is a failure in the rate"
    assert (other.scored, other.resolved_rate) == (1, 0.0)
    markdown = render_markdown(report)
    assert "| 1 scored, 1 infra |" in markdown and "| 1 scored, 2 infra |" in markdown


@pytest.mark.slow
def test_in_a_container_an_oom_the_reference_passes_within_is_scored_at_once(
    container_sandbox, instance, portfolio, store
):
    """The cgroup's OOM kill: the reference, graded at once in the same pod under the same limits, passes, so
    the patch's verdict (trial/evaluation.py's intention to treat), with that pass kept as evidence."""
    campaign = make_campaign()
    sandbox = container_sandbox(limits=ResourceLimits(memory_floor_mb=64, memory_ceiling_mb=256, cpu_ceiling=1))
    setup = setup_for(campaign, portfolio, instance, sandbox, store)

    hostile = run(setup, instance, "hostile")

    assert hostile.outcome is Outcome.PATCH_OOM_KILLED and hostile.tries == 1, hostile.detail
    assert any(step.get("oom_killed") for step in hostile.evaluation.steps), "the cgroup's kill, for real"
    assert hostile.evaluation.resources["backend"] == "container"
    assert hostile.evaluation.limit_evidence["reference"].startswith("graded at once after generation/")
