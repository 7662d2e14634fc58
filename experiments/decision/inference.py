"""Paired inference for one candidate against its reference: the estimate, its standard
error and degrees of freedom, and every test and interval the decision reads from them.

Everything here is a t statistic on one `Estimate`, so the test, the interval, the
equivalence test and the minimum detectable effect of a row all rest on the same standard
error and degrees of freedom, and agree with one another exactly (no Monte Carlo error):

- unit "query" (every question counts once): the per-query differences d_i (candidate
  minus reference query means); delta = mean(d), se = sd(d) / sqrt(n), df = n - 1: the
  paired t-test (`scipy.stats.ttest_rel`), its t-interval, statsmodels' `ttost_paired` and
  `TTestPower` (the tests check each against them).
- unit "search" (weighted by traffic): query totals T_g of the per-search differences and
  the queries' search counts w_g; delta = sum(T) / sum(w), the CR1 cluster-robust standard
  error with queries as clusters, df = G - 1 (Cameron and Miller 2015): the same t machinery
  with that se. With one search per query it is the paired t-test.

A caller with an estimate of its own (a counterfactual IPS/SNIPS estimate, say) builds an
`Estimate` from its per-query contributions (`Estimate.of_contributions`) or directly from
its delta, se and df, and gets the same tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, stats

__all__ = ["Estimate", "interval", "lower_bound", "mde", "noninferiority_p", "paired_estimate",
           "queries_needed",
           "tost_p", "two_sided_p"]

Unit = Literal["query", "search"]


@dataclass(frozen=True)
class Estimate:
    """A paired difference (candidate - reference) with what its t-test needs.

    delta: the estimate; se: its standard error; df: the t reference's degrees of freedom;
    n: pairs in the unit (queries, or searches for unit "search"); n_queries: queries
    (clusters); unit: "query" or "search"; identical: every per-query difference is exactly
    0 (the two arms rank alike on every query: nothing to test).
    """

    delta: float
    se: float
    df: int
    n: int
    n_queries: int
    unit: str = "query"
    identical: bool = False

    @classmethod
    def of_contributions(cls, values: ArrayLike, *, unit: str = "query") -> Estimate:
        """The mean of per-query contributions (differences, or a counterfactual estimator's
        per-query terms) with the standard error of a mean."""
        d = np.asarray(values, dtype=np.float64)
        d = d[~np.isnan(d)]
        n = int(d.size)
        if n == 0:
            return cls(math.nan, math.nan, 0, 0, 0, unit)
        delta = float(d.mean())
        se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
        if n > 1 and _constant(d):
            se = 0.0
        return cls(delta, se, n - 1, n, n, unit, identical=bool(np.all(d == 0)))

    @property
    def testable(self) -> bool:
        """A t statistic exists: two queries or more and differences that vary."""
        return self.n_queries >= 2 and math.isfinite(self.se) and self.se > 0

    @property
    def why_untestable(self) -> str:
        if self.testable:
            return ""
        if self.n_queries < 2:
            return f"{self.n_queries} query(ies) with a value on both sides: nothing to test"
        if self.identical:
            return "identical: every per-query difference is 0"
        return "every per-query difference is the same: no variance to test against"


def _constant(x: np.ndarray) -> bool:
    """All values equal up to rounding (a constant shift leaves ~1e-17 differences)."""
    return bool(np.ptp(x) <= 10 * np.finfo(np.float64).eps * max(abs(float(x.mean())), 1e-300))


def paired_estimate(candidate: ArrayLike, reference: ArrayLike,
                    searches: ArrayLike | None = None, *, unit: Unit = "query") -> Estimate:
    """The paired difference of per-query values.

    candidate, reference : ndarray, shape (n_queries,). Unit "query": each query's mean
        over its searches; unit "search": each query's total over its searches.
    searches : ndarray, shape (n_queries,), the searches each query total sums (unit
        "search" only). Queries with a NaN on either side are left out.

    >>> e = paired_estimate([0.5, 0.7, 0.4], [0.4, 0.5, 0.4])
    >>> round(e.delta, 4), round(e.se, 4), e.df
    (0.1, 0.0577, 2)
    """
    a = np.asarray(candidate, dtype=np.float64)
    b = np.asarray(reference, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"candidate and reference must be 1-d of one length, got shapes "
                         f"{a.shape} and {b.shape}")
    keep = ~(np.isnan(a) | np.isnan(b))
    if unit == "query":
        return Estimate.of_contributions(a[keep] - b[keep])
    if unit != "search":
        raise ValueError(f"unit must be 'query' or 'search', got {unit!r}")
    if searches is None:
        raise ValueError("unit 'search' needs `searches`, each query's search count")
    w = np.asarray(searches, dtype=np.float64)
    if w.shape != a.shape or np.any(w[keep] <= 0):
        raise ValueError("searches must be positive counts, one per query")
    totals, w = a[keep] - b[keep], w[keep]
    g = int(totals.size)
    n = int(w.sum())
    if g == 0:
        return Estimate(math.nan, math.nan, 0, 0, 0, unit)
    delta = float(totals.sum() / w.sum())
    identical = bool(np.all(totals == 0))
    if g < 2:
        return Estimate(delta, math.nan, 0, n, g, unit, identical)
    residual = totals - delta * w
    se = math.sqrt(g / (g - 1) * float(residual @ residual)) / float(w.sum())
    if identical or _constant(totals / w):
        se = 0.0
    return Estimate(delta, se, g - 1, n, g, unit, identical)


def _t(estimate: Estimate, shift: float = 0.0) -> float:
    return (estimate.delta + shift) / estimate.se


def two_sided_p(estimate: Estimate) -> float:
    """The two-sided p of delta = 0 (NaN when not testable)."""
    if not estimate.testable:
        return math.nan
    return float(2 * stats.t.sf(abs(_t(estimate)), estimate.df))


def interval(estimate: Estimate, level: float) -> tuple[float, float]:
    """The two-sided t-interval at `level` (e.g. 1 - alpha / m): it excludes 0 exactly when
    the two-sided p is below 1 - level (away from ties)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if not estimate.testable:
        if estimate.n_queries >= 2 and estimate.se == 0:
            return estimate.delta, estimate.delta
        return math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, estimate.df)) * estimate.se
    return estimate.delta - half, estimate.delta + half


def tost_p(estimate: Estimate, margin: float) -> float:
    """Two one-sided tests of |delta| >= margin (equivalence within +-margin): the larger
    of the two one-sided p-values, as statsmodels' `ttost_paired(x1, x2, -margin,
    margin)` gives it on per-query values. Below alpha: equivalent ("no effect")."""
    _margin(margin)
    if not estimate.testable:
        return math.nan
    lower = stats.t.sf(_t(estimate, margin), estimate.df)      # H0: delta <= -margin
    upper = stats.t.cdf(_t(estimate, -margin), estimate.df)    # H0: delta >= +margin
    return float(max(lower, upper))


def noninferiority_p(estimate: Estimate, margin: float) -> float:
    """One-sided p of H0: delta <= -margin. Below alpha: non-inferior within the margin
    (the one-sided 1 - alpha lower bound is above -margin)."""
    _margin(margin)
    if not estimate.testable:
        return math.nan
    return float(stats.t.sf(_t(estimate, margin), estimate.df))


def lower_bound(estimate: Estimate, alpha: float) -> float:
    """The one-sided 1 - alpha lower confidence bound of delta."""
    if not estimate.testable:
        return estimate.delta if estimate.n_queries >= 2 and estimate.se == 0 else math.nan
    return estimate.delta - float(stats.t.ppf(1 - alpha, estimate.df)) * estimate.se


def _margin(margin: float) -> None:
    if not (math.isfinite(margin) and margin > 0):
        raise ValueError(f"margin must be a finite number > 0, got {margin!r}")


def _power(nc: float, df: int, crit: float) -> float:
    """Power of the two-sided t-test at noncentrality nc (statsmodels' `ttest_power`). The
    far tail's SciPy value can be NaN where it underflows (df 2, nc 9): it is 0 there."""
    far = float(stats.nct.cdf(-crit, df, nc))
    return float(stats.nct.sf(crit, df, nc)) + (0.0 if math.isnan(far) else far)


def mde(estimate: Estimate, alpha: float, power: float) -> float:
    """The minimum detectable effect: the smallest |delta| the two-sided test at `alpha`
    detects with probability `power`, at this row's se and df. For unit "query" it equals
    statsmodels' `TTestPower().solve_power(nobs=n, alpha=alpha, power=power)` (a Cohen's d)
    times the per-query sd; in general it is the noncentrality solving the power equation
    of a t(df) test, times se. NaN where the row cannot be tested."""
    if not (0 < alpha < 1 and alpha < power < 1):
        raise ValueError(f"`0 < alpha < power < 1` must hold, but got alpha {alpha} and "
                         f"power {power}")
    if not estimate.testable:  # no variance (or too few queries): nothing to detect with
        return math.nan
    df = estimate.df
    crit = float(stats.t.ppf(1 - alpha / 2, df))
    high = crit + float(stats.norm.ppf(power)) + 1.0
    while _power(high, df, crit) < power:
        high *= 2
    nc = optimize.brentq(lambda x: _power(x, df, crit) - power, 0.0, high, xtol=1e-12,
                         rtol=4 * np.finfo(np.float64).eps)
    return float(nc) * estimate.se


def queries_needed(estimate: Estimate, effect: float, alpha: float, power: float) -> float:
    """How many queries the two-sided test at `alpha` would need to detect a true |delta| of
    `effect` with probability `power`, at this row's spread per query (se times the square
    root of its queries; df = queries - 1): a planning figure, as statsmodels'
    `TTestPower().solve_power(effect_size=effect / sd, alpha=alpha, power=power)` gives it
    (a real number, at least 2; round it up; inf for an effect vanishingly small against
    the spread). NaN where the row cannot be tested or `effect` is 0."""
    if not (0 < alpha < 1 and alpha < power < 1):
        raise ValueError(f"`0 < alpha < power < 1` must hold, but got alpha {alpha} and "
                         f"power {power}")
    if not estimate.testable or not math.isfinite(effect) or effect == 0:
        return math.nan
    d = abs(effect) / (estimate.se * math.sqrt(estimate.n_queries))

    def gap(n: float) -> float:
        crit = float(stats.t.ppf(1 - alpha / 2, n - 1))
        return _power(d * math.sqrt(n), n - 1, crit) - power  # type: ignore[arg-type]

    # The normal approximation brackets the root; beyond 10^9 queries it is the figure (a
    # planning figure that large says "not at this effect size" either way).
    ratio = float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) / d
    if ratio > 1e100:  # an effect this small needs more queries than a float says
        return math.inf
    normal = ratio**2
    if normal > 1e9:
        return float(normal)
    if gap(2.0) >= 0:  # two queries already (a paired t-test needs two)
        return 2.0
    low, high = max(2.0, normal / 2), max(4.0, 2 * normal + 10)
    while low > 2.0 and gap(low) > 0:
        low = max(2.0, low / 2)
    while gap(high) < 0:
        low, high = high, high * 2
    return float(optimize.brentq(gap, low, high, xtol=1e-9))
