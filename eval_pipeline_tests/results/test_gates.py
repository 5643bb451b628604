"""Release gates on hand-made reports: floors per slice, regressions against the baseline, hard violations."""

import pytest

from eval_pipeline.config.gates import GatePolicyError, load_policy, parse_policy
from eval_pipeline.results.gates import evaluate_gate
from eval_pipeline.results.report import build_report
from eval_pipeline_tests.support.gate_results import POLICY, RESULTS, slice_results
from eval_pipeline_tests.support.result_rows import trial


def report_of(results):
    return build_report("c", "d", "p", results, baseline="base")


def test_a_slice_under_its_floor_fails_the_gate_while_the_overall_rate_rises():
    report = report_of(RESULTS)
    assert report.variants["cand"].resolved_rate > report.variants["base"].resolved_rate
    decision = evaluate_gate(parse_policy(POLICY, "prod.yaml"), report)
    assert not decision.passed
    assert [(v.rule, v.slice, v.value, v.limit) for v in decision.violations] == [("floor", "terminal", 0.25, 0.5)]
    record = decision.model_dump(mode="json")
    assert record["violations"][0]["message"].startswith("terminal: resolved rate 0.25 is below the floor 0.5")


def test_the_gate_passes_when_every_slice_meets_its_floor():
    decision = evaluate_gate(parse_policy({**POLICY, "floors": {"*": 0.25}}, "staging.yaml"), report_of(RESULTS))
    assert decision.passed and decision.violations == ()


def test_a_regression_beyond_the_tolerance_fails_even_above_the_floor():
    policy = parse_policy({**POLICY, "floors": {}, "max_regression": {"resolved_rate": 0.1}}, "prod.yaml")
    decision = evaluate_gate(policy, report_of(RESULTS))
    # terminal: d = (0, -.5, 0, 0), mean -.125
    assert [(v.rule, v.slice) for v in decision.violations] == [("max_regression.resolved_rate", "terminal")]
    assert decision.violations[0].value == pytest.approx(-0.125)


def test_duration_and_cost_regressions_are_relative_to_the_baseline():
    results = [
        *slice_results("code", "base", ["1", "1"], cost_usd=1.0),
        *slice_results("code", "cand", ["1", "1"], cost_usd=1.5, generation_duration_s=3.0),
    ]
    policy = parse_policy(
        {**POLICY, "floors": {}, "max_regression": {"p95_duration": 0.5, "cost_per_resolved": 0.4}}, "x"
    )
    decision = evaluate_gate(policy, report_of(results))
    # durations 2 s vs 4 s: +100%; cost per resolved 1.0 vs 1.5: +50%
    assert {v.rule: pytest.approx(v.value) for v in decision.violations} == {
        "max_regression.cost_per_resolved": 0.5,
        "max_regression.p95_duration": 1.0,
    }


def test_any_hard_violation_fails_by_default():
    results = [*slice_results("code", "base", ["1"]), trial("c0", "cand", 0, "resolved", test_infrastructure_changes=1)]
    decision = evaluate_gate(parse_policy({"environment": "prod", "candidate": "cand"}, "x"), report_of(results))
    assert [(v.rule, v.value) for v in decision.violations] == [("max_hard_violations", 1)]


def test_a_slice_without_the_candidate_fails():
    results = [*slice_results("code", "base", ["1"])]
    decision = evaluate_gate(parse_policy(POLICY, "x"), report_of(results))
    assert [v.rule for v in decision.violations] == ["candidate"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"candidate": None}, "field candidate"),
        ({"floors": {"code": -1}}, "field floors.code"),
        ({"max_regression": {"latency": 1}}, "field max_regression.latency: Input should be 'resolved_rate', "),
        ({"max_hard_violations": 0.5}, "field max_hard_violations"),
        ({"min_coverage": True}, "field min_coverage: Input should be a valid number"),
        ({"typo": 1}, "field typo: unknown field; allowed: environment, candidate"),
    ],
)
def test_bad_policies_name_the_file_and_field(change, message):
    with pytest.raises(GatePolicyError, match=r"prod\.yaml: " + message):
        parse_policy({**POLICY, **change}, "prod.yaml")


def test_policy_files_load_and_name_their_errors(tmp_path):
    path = tmp_path / "prod.yaml"
    path.write_text("environment: prod\ncandidate: cand\nfloors: {'*': 0.3}\nmax_regression:\n")
    policy = load_policy(path)
    assert (policy.floor_for("anything"), policy.max_regression) == (0.3, {}), "an empty field is no rule"
    path.write_text("- environment: prod\n")
    with pytest.raises(GatePolicyError, match="prod.yaml: Input should be a valid dictionary"):
        load_policy(path)
    path.write_text("environment: [\n")
    with pytest.raises(GatePolicyError, match="prod.yaml: not valid YAML"):
        load_policy(path)
