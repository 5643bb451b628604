"""Every statistic on hand-made inputs whose answers were worked out by hand."""

import math

import pytest

from eval_pipeline.statistics import instance_means, resolved_rate

T_975_DOF_3 = 3.182446305284263
T_975_DOF_1 = 12.706204736174698

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
