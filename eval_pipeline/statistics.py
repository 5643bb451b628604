"""The numbers reports promise, exactly as defined in STATISTICS.md.

Seeds are not independent samples: each instance's seeds are averaged first
(m_i), and the standard error is taken over instances, which clusters it by
instance. Where instances share repositories, a second interval clusters by
repository. Only scored trials enter; infrastructure outcomes show in coverage.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


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


def instance_means(scores: Mapping[str, Sequence[bool]]) -> dict[str, float]:
    """m_i: each instance's mean over its scored trials; instances with none are left out."""
    return {instance: float(np.mean(values)) for instance, values in scores.items() if len(values)}


def _interval(centre: float, se: float, dof: int) -> tuple[float, float]:
    half = float(stats.t.ppf(0.975, dof)) * se
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
    estimate = {"rate": rate, "n": n, "n_repos": len(repos), "se": None, "ci_low": None, "ci_high": None}
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
