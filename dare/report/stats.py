"""Statistics over seeds (``dare compare``, ``dare sweep``): a group's mean and its interval, the paired difference of
two groups run on the same seeds with a verdict, the power of that test, test-item uncertainty and an aggregate over
benchmarks.

* **A group's mean** (:func:`summarize`): the Student-t interval ``mean ± t_{n-1, 0.975} · s / sqrt(n)``
  (:func:`scipy.stats.t.interval`); with :data:`BCA_MIN_SEEDS` seeds or more, the BCa bootstrap interval
  (:func:`scipy.stats.bootstrap`, ``method="BCa"``; Efron & Tibshirani, *An Introduction to the Bootstrap* (1993),
  ch. 14). The method is recorded with the interval. A percentile bootstrap over 3 seeds is ``[min, max]``
  and covers the mean 75 % of the time, the t-interval 95 % (for normal per-seed scores).
* **A paired difference** ``b - a`` (:func:`paired_difference`): the paired t-test (:func:`scipy.stats.ttest_rel`)
  and its t-interval. A verdict needs :data:`MIN_SEEDS` common seeds (fewer: "too few seeds to test", with the
  power the test would have at a 1-sd effect); equal per-seed differences have no variance to test
  ("cannot assess: identical differences"). The p-values of one comparison are adjusted with Holm's step-down
  correction (:func:`holm`; Holm, *Scand. J. Statist.* 6 (1979) 65-70) before the verdict.
* **Power** (:func:`power`, :func:`seeds_for_power`): the two-sided paired t-test's power from the noncentral t
  distribution, ``P(|T| > t_{n-1, 1-alpha/2})`` with ``T ~ t'(n - 1, delta sqrt(n))`` and ``delta`` the effect in
  standard deviations of the per-seed difference (Cohen, *Statistical Power Analysis* (1988), ch. 2).
* **Test items** (:func:`item_bootstrap`): every seed scores the same test items, so the scores share the items'
  sampling error. The two-level bootstrap resamples seeds and items (the same items for both settings: paired)
  and gives an interval that holds for a new draw of both (Bouthillier et al., *Accounting for Variance in
  Machine Learning Benchmarks*, arXiv 2103.03098, §3).
* **Several benchmarks** (:func:`iqm`): the interquartile mean over every run x benchmark score with a stratified
  bootstrap (runs resampled within each benchmark), as rliable (Agarwal et al., arXiv 2108.13264, §4, and
  ``rliable/metrics.py: aggregate_iqm`` = :func:`scipy.stats.trim_mean` at 25 %).

Every resampling draws from :func:`numpy.random.default_rng` keyed by ``random_state``, so a report is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

__all__ = ["Summary", "Difference", "summarize", "paired_difference", "holm", "apply_holm", "power", "seeds_for_power",
           "item_bootstrap", "iqm", "CONFIDENCE", "ALPHA", "MIN_SEEDS", "BCA_MIN_SEEDS", "N_RESAMPLES",
           "ITEM_RESAMPLES", "TARGET_POWER"]

#: confidence level of every interval
CONFIDENCE = 0.95
#: significance level of the paired t-test (after Holm's correction)
ALPHA = 0.05
#: common seeds a verdict needs (below it: "too few seeds to test")
MIN_SEEDS = 5
#: seeds from which a group's interval is the BCa bootstrap instead of the t-interval
BCA_MIN_SEEDS = 20
#: resamples of the BCa bootstrap (scipy's default)
N_RESAMPLES = 9999
#: resamples of the two-level (seeds x items) bootstrap and of the IQM's stratified bootstrap
ITEM_RESAMPLES = 2000
#: the power ``seeds_for_power`` sizes a sweep for
TARGET_POWER = 0.8

#: Difference.status values
TESTED, TOO_FEW, IDENTICAL = "tested", "too few seeds", "identical differences"


def _finite_1d(values, what: str) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"{what} needs a non-empty 1-D array of finite numbers, got {values!r}")
    return x


@dataclass(frozen=True)
class Summary:
    """One group's values (one per seed): count, mean, sample standard deviation (ddof=1; 0.0 for one value) and the
    interval of the mean, ``method`` ``"t"`` (Student-t) or ``"bca"`` (BCa bootstrap); None for fewer than 2 values."""

    n: int
    mean: float
    std: float
    ci_low: float | None
    ci_high: float | None
    method: str | None

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(values, confidence: float = CONFIDENCE, random_state: int = 0) -> Summary:
    """Mean, standard deviation and the interval of the mean of ``values`` (one number per seed).

    :param values: ``[n]`` floats (accuracy or mean reward per seed).
    :returns: the t-interval below :data:`BCA_MIN_SEEDS` values, else the BCa bootstrap (``N_RESAMPLES`` resamples,
        ``random_state``); ``[mean, mean]`` when every value is equal.
    :raises ValueError: no values, or a non-finite value.
    """
    from scipy import stats

    x = _finite_1d(values, "summarize")
    n, mean = int(x.size), float(x.mean())
    if n == 1:
        return Summary(1, mean, 0.0, None, None, None)
    std = float(x.std(ddof=1))
    if std == 0.0:  # every seed gave the same value: no spread to widen the interval
        return Summary(n, mean, 0.0, mean, mean, "t")
    if n >= BCA_MIN_SEEDS:
        res = stats.bootstrap((x,), np.mean, confidence_level=confidence, n_resamples=N_RESAMPLES, method="BCa",
                              random_state=random_state)
        return Summary(n, mean, std, float(res.confidence_interval.low), float(res.confidence_interval.high), "bca")
    low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=std / math.sqrt(n))
    return Summary(n, mean, std, float(low), float(high), "t")


def power(effect_sd: float, n: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired t-test with ``n`` seeds against an effect of ``effect_sd`` standard deviations
    of the per-seed difference (noncentral t; equals ``statsmodels.stats.power.TTestPower().power``).

    :raises ValueError: ``n < 2``.
    """
    from scipy import stats

    if n < 2:
        raise ValueError(f"power needs at least 2 seeds, got {n}")
    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = effect_sd * math.sqrt(n)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def seeds_for_power(effect: float, sd: float, target: float = TARGET_POWER, alpha: float = ALPHA,
                    max_seeds: int = 100_000) -> int | None:
    """The fewest seeds (>= 2) whose paired t-test detects a difference of ``effect`` (score units) with power
    ``target``, when the per-seed differences have standard deviation ``sd`` (a pilot sweep's).

    :returns: None when ``max_seeds`` are not enough; 2 when ``sd`` is 0 and ``effect`` is not.
    :raises ValueError: ``effect`` is 0 or not finite, or ``sd`` is negative or not finite.
    """
    if not (math.isfinite(effect) and effect != 0.0):
        raise ValueError(f"the effect to detect must be a non-zero number (score units, e.g. 0.02), got {effect!r}")
    if not (math.isfinite(sd) and sd >= 0.0):
        raise ValueError(f"the standard deviation must be a finite number >= 0, got {sd!r}")
    if sd == 0.0:
        return 2
    delta = abs(effect) / sd
    lo, hi = 2, 2
    while power(delta, hi, alpha) < target:  # power grows with n: double, then bisect
        if hi >= max_seeds:
            return None
        lo, hi = hi, min(2 * hi, max_seeds)
    while lo < hi:
        mid = (lo + hi) // 2
        if power(delta, mid, alpha) >= target:
            hi = mid
        else:
            lo = mid + 1
    return hi


@dataclass(frozen=True)
class Difference:
    """Paired difference ``b - a`` over ``n`` common seeds: its mean and standard deviation over seeds, the paired
    t-interval of the mean, the t-test's p-value and its Holm-adjusted value, ``status`` (``"tested"``, ``"too few
    seeds"``, ``"identical differences"``), ``power_1sd`` (the test's power at a 1-sd effect with ``n`` seeds) and
    ``significant`` (tested and the adjusted p-value below ``alpha``). ``item_low``/``item_high``: the two-level
    (seeds x test items) bootstrap interval, None without per-item scores."""

    n: int
    mean: float
    std: float
    t_low: float | None
    t_high: float | None
    p_value: float | None
    p_holm: float | None
    status: str
    power_1sd: float | None
    significant: bool
    min_seeds: int = MIN_SEEDS
    alpha: float = ALPHA
    item_low: float | None = None
    item_high: float | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "verdict": self.verdict}

    @property
    def verdict(self) -> str:
        """The markdown's words: ``significant (Holm p = 0.0123)``, ``not significant (Holm p = 0.41)``, ``too few seeds
        to test (3 < 5; power at a 1-sd effect: 0.18)`` or ``cannot assess: identical differences``."""
        if self.status == IDENTICAL:
            return "cannot assess: identical differences"
        if self.status == TOO_FEW:
            pw = f"; power at a 1-sd effect: {self.power_1sd:.2f}" if self.power_1sd is not None else ""
            return f"too few seeds to test ({self.n} < {self.min_seeds}{pw})"
        p = self.p_holm if self.p_holm is not None else self.p_value
        return f"{'significant' if self.significant else 'not significant'} (Holm p = {p:.3g})"


def paired_difference(a, b, confidence: float = CONFIDENCE, min_seeds: int = MIN_SEEDS,
                      alpha: float = ALPHA) -> Difference:
    """The paired difference ``b - a``: ``a[i]`` and ``b[i]`` are two settings' values on the same seed.

    :param a: ``[n]`` floats, the baseline group (e.g. ``before``), in seed order. :param b: ``[n]`` floats, same seeds.
    :param min_seeds: the seeds a verdict needs. The p-value here is unadjusted (``p_holm == p_value``, one test);
        :func:`apply_holm` adjusts the differences of one comparison together.
    :returns: ``n < 2``: no interval, too few seeds; equal differences: ``"identical differences"`` (never significant,
        whatever their sign); otherwise the t-interval and p-value, a verdict from ``min_seeds`` on.
    :raises ValueError: different lengths, no values or non-finite values.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0 or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError(f"paired_difference needs two 1-D arrays of the same length of finite numbers, got {a!r}, "
                         f"{b!r}")
    d = b - a
    n, mean = int(d.size), float(d.mean())
    base = dict(min_seeds=min_seeds, alpha=alpha)
    if n < 2:
        return Difference(n, mean, 0.0, None, None, None, None, TOO_FEW, None, False, **base)
    std = float(d.std(ddof=1))
    pw = power(1.0, n, alpha)
    if std == 0.0 or np.ptp(d) <= 1e-12 * max(1.0, float(np.abs(d).max())):
        return Difference(n, mean, std, mean, mean, None, None, IDENTICAL, pw, False, **base)
    from scipy.stats import ttest_rel

    res = ttest_rel(b, a)
    t = res.confidence_interval(confidence_level=confidence)
    p = float(res.pvalue)
    status = TESTED if n >= min_seeds else TOO_FEW
    return Difference(n, mean, std, float(t.low), float(t.high), p, p, status, pw, status == TESTED and p < alpha,
                      **base)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values: sorted ascending, ``p_(k) * (m - k + 1)`` made non-decreasing and capped at
    1, returned in the input order (``statsmodels.stats.multitest.multipletests(method="holm")``'s ``pvals_corrected``).

    :raises ValueError: a p-value outside [0, 1].
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.size and (not np.all(np.isfinite(p)) or p.min() < 0 or p.max() > 1):
        raise ValueError(f"holm needs p-values in [0, 1], got {list(p_values)!r}")
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out = np.empty(m)
    out[order] = adjusted
    return [float(v) for v in out]


def apply_holm(diffs: Sequence[Difference]) -> list[Difference]:
    """The differences of one comparison with Holm-adjusted p-values and verdicts: the family is every difference
    that was tested (``status == "tested"``); the others are returned as they are."""
    tested = [i for i, d in enumerate(diffs) if d.status == TESTED]
    adjusted = holm([diffs[i].p_value for i in tested])
    out = list(diffs)
    for i, p in zip(tested, adjusted):
        out[i] = replace(diffs[i], p_holm=p, significant=p < diffs[i].alpha)
    return out


def item_bootstrap(b, a=None, confidence: float = CONFIDENCE, n_resamples: int = ITEM_RESAMPLES,
                   random_state: int = 0) -> tuple[float, float]:
    """Two-level percentile bootstrap of the mean over seeds and test items.

    :param b: ``[S, N]`` per-item scores (``S`` seeds, ``N`` items, the same items in every row).
    :param a: ``[S, N]`` the baseline's scores on the same seeds and items (paired: one resample of seeds and of items
        serves both), or None for the interval of ``b``'s mean.
    :returns: ``(low, high)``: the ``(1 - confidence) / 2`` quantiles of ``mean over resampled seeds s and items i of
        (b - a)[s, i]``, resampling seeds and items independently with replacement (``numpy.random.default_rng(
        random_state)``: seed counts first, then item counts).
    :raises ValueError: a shape mismatch, an empty axis or a non-finite score.
    """
    x = np.asarray(b, dtype=np.float64)
    if a is not None:
        base = np.asarray(a, dtype=np.float64)
        if base.shape != x.shape:
            raise ValueError(f"item_bootstrap needs two [seeds, items] arrays of one shape, got {base.shape} and "
                             f"{x.shape}")
        x = x - base
    if x.ndim != 2 or 0 in x.shape or not np.all(np.isfinite(x)):
        raise ValueError(f"item_bootstrap needs a [seeds, items] array of finite scores, got shape {x.shape}")
    s, n = x.shape
    rng = np.random.default_rng(random_state)
    ws = rng.multinomial(s, np.full(s, 1.0 / s), size=n_resamples)  # [R, S] times each seed is drawn
    wi = rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples)  # [R, N] times each item is drawn
    means = np.einsum("rs,si,ri->r", ws, x, wi) / (s * n)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def iqm(scores, confidence: float = CONFIDENCE, n_resamples: int = ITEM_RESAMPLES, random_state: int = 0
        ) -> tuple[float, float, float]:
    """Interquartile mean of ``scores`` ``[runs, benchmarks]`` with its stratified-bootstrap percentile interval.

    The IQM is the mean of the middle 50 % of every score (:func:`scipy.stats.trim_mean`, 25 % cut at each end;
    rliable's ``aggregate_iqm``); each resample draws, per benchmark, ``runs`` scores with replacement from that
    benchmark's column (``numpy.random.default_rng(random_state)``: one ``[R, runs]`` index draw per benchmark, in
    column order).

    :returns: ``(iqm, low, high)``.
    :raises ValueError: not a non-empty 2-D array of finite scores.
    """
    from scipy.stats import trim_mean

    x = np.asarray(scores, dtype=np.float64)
    if x.ndim != 2 or 0 in x.shape or not np.all(np.isfinite(x)):
        raise ValueError(f"iqm needs a [runs, benchmarks] array of finite scores, got shape {x.shape}")
    runs, benches = x.shape
    rng = np.random.default_rng(random_state)
    cols = [x[rng.integers(0, runs, size=(n_resamples, runs)), j] for j in range(benches)]  # each [R, runs]
    boot = trim_mean(np.stack(cols, axis=-1).reshape(n_resamples, -1), 0.25, axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(boot, [tail, 1 - tail])
    return float(trim_mean(x, 0.25, axis=None)), float(low), float(high)
