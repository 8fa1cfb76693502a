"""Spread over seeds: mean, standard deviation and bootstrap confidence intervals of a group of runs, and the
paired difference of two groups run on the same seeds (``dare compare``, ``dare sweep``).

The intervals are :func:`scipy.stats.bootstrap` (percentile method, ``n_resamples`` resamples, a fixed
``random_state`` so a report is reproducible) of the mean over seeds; the paired difference resamples the
per-seed differences ``b_s - a_s`` (seeds matched by value), which is :func:`scipy.stats.bootstrap` with
``paired=True`` on ``(b, a)``. Efron & Tibshirani, *An Introduction to the Bootstrap* (1993), ch. 13
(percentile interval).

A bootstrap interval over a handful of seeds is too narrow: with 3 seeds every resample's mean lies between
the smallest and the largest value, so three differences of the same sign always give an interval that
excludes 0, which happens by chance 1 time in 4 when the two settings are equally good. A difference is
therefore called significant only when the bootstrap interval **and** the paired Student-t interval
(:func:`scipy.stats.ttest_rel`, exact for normal per-seed differences; wide for few seeds) both exclude 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["Summary", "Difference", "summarize", "paired_difference", "CONFIDENCE", "N_RESAMPLES"]

#: confidence level of every interval
CONFIDENCE = 0.95
#: bootstrap resamples (scipy's default)
N_RESAMPLES = 9999


@dataclass(frozen=True)
class Summary:
    """One group's values (one per seed): count, mean, sample standard deviation (ddof=1; 0.0 for one value)
    and the bootstrap interval of the mean (None for fewer than 2 values)."""

    n: int
    mean: float
    std: float
    ci_low: float | None
    ci_high: float | None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Difference:
    """Paired difference ``b - a`` over ``n`` common seeds: its mean, the bootstrap interval and the paired-t
    interval of that mean, and whether the difference is significant (both intervals exclude 0)."""

    n: int
    mean: float
    ci_low: float | None
    ci_high: float | None
    t_low: float | None
    t_high: float | None
    significant: bool

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def verdict(self) -> str:
        """``"significant"`` or ``"not significant"`` (the markdown's word)."""
        return "significant" if self.significant else "not significant"


def _bootstrap_mean(samples: tuple[np.ndarray, ...], statistic, paired: bool, confidence: float, n_resamples: int,
                    random_state: int) -> tuple[float, float]:
    from scipy.stats import bootstrap

    res = bootstrap(samples, statistic, paired=paired, vectorized=True, confidence_level=confidence,
                    n_resamples=n_resamples, method="percentile", random_state=random_state)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _mean(x, axis=-1):
    return np.mean(x, axis=axis)


def _mean_difference(b, a, axis=-1):
    return np.mean(b, axis=axis) - np.mean(a, axis=axis)


def summarize(values, confidence: float = CONFIDENCE, n_resamples: int = N_RESAMPLES, random_state: int = 0) -> Summary:
    """Mean, standard deviation and bootstrap interval of ``values`` (one number per seed).

    :param values: a 1-D sequence of floats (accuracy or mean reward per seed).
    :raises ValueError: no values, or a non-finite value.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"summarize needs a non-empty 1-D array of finite numbers, got {values!r}")
    mean = float(x.mean())
    if x.size == 1:
        return Summary(1, mean, 0.0, None, None)
    std = float(x.std(ddof=1))
    if std == 0.0:  # every seed gave the same value: the interval is that value
        return Summary(int(x.size), mean, 0.0, mean, mean)
    low, high = _bootstrap_mean((x,), _mean, False, confidence, n_resamples, random_state)
    return Summary(int(x.size), mean, std, low, high)


def paired_difference(a, b, confidence: float = CONFIDENCE, n_resamples: int = N_RESAMPLES, random_state: int = 0
                      ) -> Difference:
    """The paired difference ``b - a``: ``a[i]`` and ``b[i]`` are two settings' values on the same seed.

    :param a: ``[n]`` floats, the baseline group, in seed order. :param b: ``[n]`` floats, same seeds.
    :returns: with ``n < 2`` no interval and never significant; when every seed gives the same difference
        ``d`` the intervals are ``[d, d]`` (significant when ``d != 0``).
    :raises ValueError: different lengths, no values or non-finite values.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0 or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError(f"paired_difference needs two 1-D arrays of the same length of finite numbers, got {a!r}, {b!r}")
    d = b - a
    mean = float(d.mean())
    if d.size < 2:
        return Difference(int(d.size), mean, None, None, None, None, False)
    if float(d.std(ddof=1)) == 0.0:
        return Difference(int(d.size), mean, mean, mean, mean, mean, mean != 0.0)
    from scipy.stats import ttest_rel

    low, high = _bootstrap_mean((b, a), _mean_difference, True, confidence, n_resamples, random_state)
    t = ttest_rel(b, a).confidence_interval(confidence_level=confidence)
    t_low, t_high = float(t.low), float(t.high)
    significant = not (low <= 0.0 <= high) and not (t_low <= 0.0 <= t_high)
    return Difference(int(d.size), mean, low, high, t_low, t_high, significant)
