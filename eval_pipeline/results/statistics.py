"""The numbers reports promise, exactly as defined in docs/STATISTICS.md.

Seeds are not independent samples: each instance's seeds are averaged first
(m_i), and the standard error is taken over instances, which clusters it by
instance. Where instances share repositories, a second interval clusters by
repository. Only scored trials enter; infrastructure outcomes show in coverage.

Every function takes plain mappings (instance id -> scored trials' resolved
flags, or seed -> flag) so that each number can be checked by hand.
"""

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np


@dataclass(frozen=True)
class RateEstimate:
    """A resolved rate over n instances with its 95% intervals (None where undefined)."""

    rate: float
    n: int
    se: float | None
    ci_low: float | None
    ci_high: float | None
    n_repos: int
    se_repo: float | None = None
    ci_repo_low: float | None = None
    ci_repo_high: float | None = None


@functools.cache
def _special() -> ModuleType:
    """scipy.special, imported when a number first needs it; its distribution functions are what scipy.stats's
    `t` and `norm` call. Not scipy.stats itself: its import took 0.5 s (1 s on a busy worker) against 0.2 s,
    at the end of every campaign, and every run worker and command would pay it at start-up if imported there."""
    from scipy import special

    return special


@functools.cache
def _mde_multiplier() -> float:
    """z(0.975) + z(0.80): a two-sided test at alpha 0.05 with power 0.8."""
    return float(_special().ndtri(0.975) + _special().ndtri(0.80))


def instance_means(scores: Mapping[str, Sequence[bool]]) -> dict[str, float]:
    """m_i: each instance's mean over its scored trials; instances with none are left out."""
    return {instance: float(np.mean(values)) for instance, values in scores.items() if len(values)}


def _interval(centre: float, se: float, dof: int) -> tuple[float, float]:
    half = float(_special().stdtrit(dof, 0.975)) * se  # Student's t quantile, scipy.stats.t.ppf(0.975, dof)
    return centre - half, centre + half


def resolved_rate(scores: Mapping[str, Sequence[bool]], repo_of: Mapping[str, str]) -> RateEstimate | None:
    """Rate, clustered SE and 95% CIs for one variant; None when no instance was scored.

    `scores` maps instance id -> the scored trials' resolved flags; `repo_of`
    maps instance id -> repository, for the repository-clustered interval.
    """
    means = instance_means(scores)
    n = len(means)
    if n == 0:
        return None
    m = np.array(list(means.values()))
    rate = float(m.mean())
    repos = sorted({repo_of[instance] for instance in means})
    estimate: dict[str, Any] = {
        "rate": rate,
        "n": n,
        "n_repos": len(repos),
        "se": None,
        "ci_low": None,
        "ci_high": None,
    }
    if n >= 2:
        se = float(m.std(ddof=1)) / math.sqrt(n)
        estimate["se"] = se
        estimate["ci_low"], estimate["ci_high"] = _interval(rate, se, n - 1)
    clusters = len(repos)
    if 2 <= clusters < n:
        residual_sums = np.array(
            [sum(mean - rate for instance, mean in means.items() if repo_of[instance] == repo) for repo in repos]
        )
        se_repo = math.sqrt(clusters / (clusters - 1) * float(np.sum(residual_sums**2))) / n
        estimate["se_repo"] = se_repo
        estimate["ci_repo_low"], estimate["ci_repo_high"] = _interval(rate, se_repo, clusters - 1)
    return RateEstimate(**estimate)


@dataclass(frozen=True)
class SeedSpread:
    """How much the rate moves between seeds: each seed's rate over the instances, summarised."""

    seeds: tuple[int, ...]
    rates: tuple[float, ...]
    min: float
    max: float
    sd: float | None  # None with fewer than two seeds


def seed_spread(scores_by_seed: Mapping[str, Mapping[int, bool]]) -> SeedSpread | None:
    """rate_k = mean over instances of s_ik, for every seed k scored on every instance that has a score.

    None when no seed was scored on all of them (or nothing was scored).
    """
    instances = [seeds for seeds in scores_by_seed.values() if seeds]
    if not instances:
        return None
    common = sorted(set.intersection(*(set(seeds) for seeds in instances)))
    if not common:
        return None
    rates = tuple(float(np.mean([seeds[k] for seeds in instances])) for k in common)
    return SeedSpread(
        seeds=tuple(common),
        rates=rates,
        min=min(rates),
        max=max(rates),
        sd=float(np.std(rates, ddof=1)) if len(rates) >= 2 else None,
    )


def pass_at_k(scores: Mapping[str, Sequence[bool]]) -> dict[int, float]:
    """The unbiased pass@k (1 - C(N-c, k) / C(N, k) per instance, averaged), for k = 1..min N_i."""
    counts = [(len(values), sum(map(bool, values))) for values in scores.values() if len(values)]
    if not counts:
        return {}
    return {
        k: float(np.mean([1 - math.comb(n - c, k) / math.comb(n, k) for n, c in counts]))
        for k in range(1, min(n for n, _ in counts) + 1)
    }


@dataclass(frozen=True)
class PairedDifference:
    """Variant A minus variant B on the instances scored for both, with its interval and p-value."""

    diff: float
    n: int
    se: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    correlation: float | None  # Pearson's r of the instance means; None where either is constant
    mde: float | None  # the smallest difference this design detects (alpha 0.05, power 0.8)


def paired_difference(
    scores_a: Mapping[str, Sequence[bool]], scores_b: Mapping[str, Sequence[bool]]
) -> PairedDifference | None:
    """d_i = m_i^A - m_i^B over the instances both scored; the paired t-test on them. None with no overlap."""
    means_a, means_b = instance_means(scores_a), instance_means(scores_b)
    shared = sorted(means_a.keys() & means_b.keys())
    if not shared:
        return None
    a = np.array([means_a[i] for i in shared])
    b = np.array([means_b[i] for i in shared])
    d = a - b
    n = len(shared)
    diff = float(d.mean())
    if n < 2:
        return PairedDifference(diff, n, None, None, None, None, None, None)
    se = float(d.std(ddof=1)) / math.sqrt(n)
    ci_low, ci_high = _interval(diff, se, n - 1)
    if se == 0:
        p_value = 1.0 if diff == 0 else 0.0
    else:
        # the paired t-test's two-sided p-value (scipy.stats.ttest_rel): twice the tail beyond |t|
        p_value = float(2 * _special().stdtr(n - 1, -abs(diff / se)))
    constant = a.std() == 0 or b.std() == 0
    correlation = None if constant else float(np.clip(np.corrcoef(a, b)[0, 1], -1.0, 1.0))  # as pearsonr clips
    return PairedDifference(diff, n, se, ci_low, ci_high, p_value, correlation, _mde_multiplier() * se)


def planning_mde(scores: Mapping[str, Sequence[bool]]) -> float | None:
    """The minimum detectable effect for a paired comparison on these instances, before one exists.

    sd(m, ddof=1) stands in for sd(d): SE_d = sd(m) / sqrt(n). None with fewer than two instances.
    """
    means = np.array(list(instance_means(scores).values()))
    if len(means) < 2:
        return None
    return _mde_multiplier() * float(means.std(ddof=1)) / math.sqrt(len(means))


@dataclass(frozen=True)
class Distribution:
    """Median and 95th percentile (linear interpolation) of a quantity over scored trials."""

    median: float | None
    p95: float | None


def distribution(values: Sequence[float]) -> Distribution:
    if not len(values):
        return Distribution(None, None)
    median, p95 = np.percentile(np.asarray(values, dtype=float), [50, 95])
    return Distribution(float(median), float(p95))


def per_resolved(total: float, resolved: int) -> float | None:
    """A total over scored trials divided by the number resolved; None (never 0 or infinity) when none was."""
    return total / resolved if resolved else None
