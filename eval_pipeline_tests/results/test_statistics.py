"""Every statistic on hand-made inputs whose answers were worked out by hand."""

import math

import numpy as np
import pytest

from eval_pipeline.results.statistics import (
    distribution,
    instance_means,
    paired_difference,
    pass_at_k,
    per_resolved,
    planning_mde,
    resolved_rate,
    seed_spread,
)

T_975_DOF_3 = 3.182446305284263
T_975_DOF_1 = 12.706204736174698
Z_975_PLUS_Z_80 = 1.959963984540054 + 0.8416212335729143

SCORES = {"i1": [True, True], "i2": [False, True], "i3": [False], "i4": [True, False, False, False], "i5": []}
REPO_OF = {"i1": "A", "i2": "A", "i3": "B", "i4": "B", "i5": "B"}


def test_instance_means_average_seeds_and_drop_unscored_instances():
    assert instance_means(SCORES) == {"i1": 1.0, "i2": 0.5, "i3": 0.0, "i4": 0.25}


def test_rate_and_instance_clustered_interval():
    estimate = resolved_rate(SCORES, REPO_OF)
    # m = (1, .5, 0, .25): rate 1.75/4; squared deviations sum to 0.546875
    se = math.sqrt(0.546875 / 3) / 2
    assert estimate.n == 4
    assert estimate.rate == pytest.approx(0.4375, abs=1e-12)
    assert estimate.se == pytest.approx(se, abs=1e-12)
    assert estimate.ci_low == pytest.approx(0.4375 - T_975_DOF_3 * se, abs=1e-9)
    assert estimate.ci_high == pytest.approx(0.4375 + T_975_DOF_3 * se, abs=1e-9)


def test_repository_clustered_interval():
    estimate = resolved_rate(SCORES, REPO_OF)
    # residual sums per repo: A = .5625 + .0625 = .625, B = -.625; sqrt(2/1 * .78125) / 4
    assert estimate.n_repos == 2
    assert estimate.se_repo == pytest.approx(0.3125, abs=1e-12)
    assert estimate.ci_repo_low == pytest.approx(0.4375 - T_975_DOF_1 * 0.3125, abs=1e-9)
    assert estimate.ci_repo_high == pytest.approx(0.4375 + T_975_DOF_1 * 0.3125, abs=1e-9)


def test_one_instance_has_a_rate_but_no_interval():
    estimate = resolved_rate({"i1": [True, False]}, {"i1": "A"})
    assert estimate.rate == 0.5 and estimate.n == 1
    assert estimate.se is None and estimate.ci_low is None and estimate.se_repo is None


def test_no_repo_interval_when_every_instance_has_its_own_repo():
    estimate = resolved_rate({"i1": [True], "i2": [False], "i3": [True]}, {"i1": "A", "i2": "B", "i3": "C"})
    assert estimate.se_repo is None and estimate.se is not None


def test_identical_means_give_a_zero_width_interval():
    estimate = resolved_rate({"i1": [True], "i2": [True]}, {"i1": "A", "i2": "A"})
    assert (estimate.rate, estimate.se, estimate.ci_low, estimate.ci_high) == (1.0, 0.0, 1.0, 1.0)


def test_nothing_scored_gives_no_estimate():
    assert resolved_rate({"i1": []}, {"i1": "A"}) is None


def test_seed_spread_uses_the_seeds_every_scored_instance_has():
    spread = seed_spread({"i1": {0: True, 1: True, 2: False}, "i2": {0: False, 1: True}, "i3": {0: False, 1: False}})
    # seed 2 is missing on i2 and i3; rate_0 = 1/3, rate_1 = 2/3
    assert spread.seeds == (0, 1)
    assert spread.rates == pytest.approx((1 / 3, 2 / 3), abs=1e-12)
    assert (spread.min, spread.max) == pytest.approx((1 / 3, 2 / 3), abs=1e-12)
    assert spread.sd == pytest.approx((1 / 3) / math.sqrt(2), abs=1e-12)


def test_seed_spread_of_one_seed_has_no_sd_and_of_nothing_is_none():
    assert seed_spread({"i1": {0: True}, "i2": {0: False}}).sd is None
    assert seed_spread({"i1": {}}) is None
    assert seed_spread({"i1": {0: True}, "i2": {1: True}}) is None


def test_pass_at_k_is_the_unbiased_estimator_up_to_the_fewest_trials():
    scores = {"i1": [True, False, False], "i2": [True, True], "i3": [False] * 4, "i4": []}
    # k=1: (1 - 2/3, 1, 0) / 3; k=2: (1 - C(2,2)/C(3,2), 1, 0) / 3; k stops at min N = 2
    assert pass_at_k(scores) == pytest.approx({1: 4 / 9, 2: 5 / 9}, abs=1e-12)
    assert pass_at_k({"i1": []}) == {}


PAIRED_A = {"i1": [True, True], "i2": [True, False], "i3": [False, False], "i4": [True, True], "i5": [True]}
PAIRED_B = {"i1": [True, False], "i2": [False, False], "i3": [False, False], "i4": [True, True]}


def test_paired_difference_on_the_shared_instances():
    paired = paired_difference(PAIRED_A, PAIRED_B)
    # m^A = (1, .5, 0, 1), m^B = (.5, 0, 0, 1) on i1..i4 (i5 only in A); d = (.5, .5, 0, 0)
    se = math.sqrt(0.25 / 3) / 2
    assert paired.n == 4
    assert paired.diff == pytest.approx(0.25, abs=1e-12)
    assert paired.se == pytest.approx(se, abs=1e-12)
    assert (paired.ci_low, paired.ci_high) == pytest.approx((0.25 - T_975_DOF_3 * se, 0.25 + T_975_DOF_3 * se))
    # t = sqrt(3) on 3 degrees of freedom: the two-sided p is exactly 1/2 - 1/pi
    assert paired.p_value == pytest.approx(0.5 - 1 / math.pi, abs=1e-9)
    assert paired.correlation == pytest.approx(9 / 11, abs=1e-12)
    assert paired.mde == pytest.approx(Z_975_PLUS_Z_80 * se, abs=1e-9)


def test_paired_difference_with_constant_differences():
    same = paired_difference(PAIRED_B, PAIRED_B)
    assert (same.diff, same.se, same.p_value) == (0.0, 0.0, 1.0)
    always = paired_difference({"i1": [True], "i2": [True]}, {"i1": [False], "i2": [False]})
    assert (always.diff, always.se, always.p_value, always.correlation) == (1.0, 0.0, 0.0, None)


def test_paired_difference_needs_shared_instances_for_an_interval():
    assert paired_difference({"i1": [True]}, {"i2": [True]}) is None
    one = paired_difference({"i1": [True]}, {"i1": [False]})
    assert (one.diff, one.n, one.se, one.p_value) == (1.0, 1, None, None)


def test_planning_mde_from_the_spread_of_instance_means():
    # m = (1, .5, 0, .25): sd = sqrt(0.546875 / 3), over sqrt(4)
    assert planning_mde(SCORES) == pytest.approx(Z_975_PLUS_Z_80 * math.sqrt(0.546875 / 3) / 2, abs=1e-12)
    assert planning_mde({"i1": [True]}) is None


def test_median_and_p95_interpolate_linearly():
    spread = distribution([4.0, 1.0, 10.0, 3.0, 2.0])
    assert (spread.median, spread.p95) == pytest.approx((3.0, 8.8), abs=1e-12)  # p95: 4 + 0.8 * (10 - 4)
    assert distribution([]).median is None


def test_cost_per_resolved_is_undefined_without_a_resolved_trial():
    assert per_resolved(6.0, 4) == 1.5
    assert per_resolved(6.0, 0) is None


def test_the_paired_test_agrees_with_scipy_stats_on_random_campaigns():
    """The p-value, interval and correlation come from scipy.special's distribution functions (a lighter import
    than scipy.stats): they are scipy.stats's paired t-test, t quantile and Pearson correlation."""
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    for _ in range(100):
        n = int(rng.integers(3, 40))
        a = {f"i{k}": list(rng.random(3) < 0.5) for k in range(n)}
        b = {f"i{k}": list(rng.random(3) < 0.4) for k in range(n)}
        paired = paired_difference(a, b)
        means_a = np.array([np.mean(a[f"i{k}"]) for k in range(n)])
        means_b = np.array([np.mean(b[f"i{k}"]) for k in range(n)])
        if not paired.se:
            continue
        assert paired.p_value == pytest.approx(stats.ttest_rel(means_a, means_b).pvalue, abs=1e-12)
        assert paired.ci_high - paired.diff == pytest.approx(stats.t.ppf(0.975, n - 1) * paired.se, abs=1e-12)
        if paired.correlation is not None:
            assert paired.correlation == pytest.approx(stats.pearsonr(means_a, means_b).statistic, abs=1e-12)
