"""Per-search metric values to per-query aggregates with bootstrap CIs.

Inputs are wide per-search frames: one row per search, a search key (`search` or
`event_id`), a query key (`cluster`, by default `query_id`: a distinct question), group
columns (e.g. `intent`, `question_type`, constant within a query) and one float column per
metric, NaN where the query has no relevant memory (`metrics.evaluate`'s convention). A
replayed log asks popular questions many times, and its searches are not independent
evidence, so inference is per query (EVALUATION.md, "Aggregation and significance").
Every output is a tidy frame with one row per (group, metric), where a group is
`group_by = "overall"` (all rows) or `group_by = <column>, group = <value>` for each value
of each group column (a null value is its own group, with `group` null).

Two units, named in every output's `unit` column:

- `unit="query"` (the default): every question counts once. A query's value is the mean
  over its searches (`per_query`); the mean and its percentile bootstrap CI (resampling
  queries) work on these values. `n` counts queries.
- `unit="search"`: weighted by traffic, the mean over searches (= the query means weighted
  by their search counts); its CI is a cluster bootstrap that resamples whole queries (the
  statistic: the resampled queries' value sums over their search counts, via
  `scipy.stats.bootstrap(paired=True)`). `n` counts searches.

In both units `n_queries` counts queries and `low_support` is n_queries < min_support.
`cluster=None` treats every row as its own query (a frame that is already per query).
Paired comparisons of two arms are `compare.compare` (one t-test per row); the decision's
confirmatory family is `experiments.decision`.

- `per_query`: one row per query (metric = mean over its searches, `n_searches`).
- `aggregate`: n, mean and a percentile bootstrap CI of the mean (`scipy.stats.bootstrap`).
  Percentile rather than BCa: BCa's jackknife evaluates n resamples of n - 1 values (800 MB
  at 10k queries in one batch), and it degenerates on the many ties of binary metrics.
  `ci_mc_error` is the Monte Carlo error of the CI's bounds (the larger of the two): what
  running the bootstrap again with another stream would move them by, one standard error
  (`mc_error`).
- `holm`, `adjust_pvalues`: multiple-testing adjustments.
- `noninferior`: the CI gate, lower CI bound of (new - baseline) > -margin.

NaN values are excluded per metric and counted in `n_no_relevant`, in the unit of `n`.
Degenerate cells never call SciPy, so they raise no warnings: n = 0 gives NaN everywhere;
one query gives the value and a NaN CI; values that are all equal (to rounding) give a
zero-width CI.

Randomness: every cell's bootstrap draws from its own stream, `np.random.default_rng([seed,
crc32 of (stream, group_by, group, metric)])`, where `stream` names the arm (`summaries`
passes the arm's name), so results are deterministic for a seed, no two arms share a
resample stream, and a cell's CI does not change when other metrics, groups or arms are
added.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np
import polars as pl
from numpy.typing import ArrayLike
from scipy import stats

__all__ = ["GROUPS", "adjust_pvalues", "aggregate", "holm", "mc_error", "noninferior",
           "per_query"]

Unit = Literal["query", "search"]
GROUPS = ("intent", "question_type")
CI_METHOD = "percentile bootstrap"
# Resamples held in memory at once: batch x n floats (and as many indices).
_BATCH_VALUES = 2_000_000


def _require(frame: pl.DataFrame, what: str, columns: Sequence[str], hint: str = "") -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what}: missing column(s) {missing} (found columns {frame.columns})"
                         + hint)


def _check_settings(n_resamples: int, confidence: float, seed: int, min_support: int,
                    unit: str) -> None:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if min_support < 0:
        raise ValueError(f"min_support must be >= 0, got {min_support}")
    if unit not in ("query", "search"):
        raise ValueError(f"unit must be 'query' or 'search', got {unit!r}")


def _rng(seed: int, *labels: object) -> np.random.Generator:
    """A stream of its own for one cell: seed plus a stable hash of the cell's labels."""
    return np.random.default_rng([seed, zlib.crc32(repr(labels).encode())])


def _cells(frame: pl.DataFrame,
           group_cols: Sequence[str]) -> Iterator[tuple[str, str | None, pl.DataFrame]]:
    """(group_by, group, rows): overall, then each value of each group column, sorted."""
    yield "overall", "overall", frame
    for column in group_cols:
        labels = frame.get_column(column).cast(pl.String)
        for value in labels.unique().sort(nulls_last=True):
            yield column, value, frame.filter(
                labels.is_null() if value is None else labels == value)


def _constant(x: np.ndarray) -> bool:
    """All values equal up to rounding (as SciPy's catastrophic-cancellation check sees it:
    a constant shift of 0.1 leaves differences that are equal only to ~1e-17)."""
    return bool(np.ptp(x) <= 10 * np.finfo(np.float64).eps * abs(x.mean()))


def _value(column: str) -> pl.Expr:
    """A metric column as Float64 with null for "no value" (NaN or null)."""
    return pl.col(column).cast(pl.Float64).fill_nan(None)


def _queries(frame: pl.DataFrame, cluster: str | None, what: str,
             group_cols: Sequence[str]) -> tuple[pl.DataFrame, str]:
    """The frame with a query key (a row index when cluster is None), checked for group
    columns that change within a query."""
    if cluster is None:
        cluster = "__row__"
        return frame.with_row_index(cluster), cluster
    _require(frame, what, [cluster], hint="; pass cluster=None if every row is a query "
                                          "of its own")
    if group_cols:
        varying = frame.group_by(cluster).agg(pl.col(c).n_unique() for c in group_cols)
        for column in group_cols:
            bad = varying.filter(pl.col(column) > 1).get_column(cluster).sort()
            if bad.len():
                values = (frame.filter(pl.col(cluster) == bad[0]).get_column(column)
                          .unique(maintain_order=True).to_list())
                raise ValueError(
                    f"{what}: group column {column!r} must be constant within a query, but "
                    f"{cluster} {bad[0]!r} has values {values} ({bad.len()} such "
                    f"{cluster} value(s)); a query's groups come from its question")
    return frame, cluster


def per_query(frame: pl.DataFrame, *, key: str = "query_id", metric_cols: Sequence[str],
              group_cols: Sequence[str] = GROUPS) -> pl.DataFrame:
    """Per-search values -> one row per query: the mean over the query's searches.

    frame : one row per search with `key`, `group_cols` (constant within a query, else a
        ValueError names the query) and `metric_cols` (float, NaN = no relevant memory).

    Returns columns key, group_cols, metric_cols, n_searches (the query's search count,
    its traffic weight), sorted by key. A metric is the mean over the searches that have a
    value (qrels are per query, so usually all or none do), NaN when none does.

    >>> frame = pl.DataFrame({"query_id": ["b", "a", "b"], "intent": ["X", "Y", "X"],
    ...                       "mrr": [1.0, 0.5, 0.0]})
    >>> per_query(frame, metric_cols=["mrr"], group_cols=["intent"]).rows()
    [('a', 'Y', 0.5, 1), ('b', 'X', 0.5, 2)]
    """
    _require(frame, "per_query", [key, *metric_cols, *group_cols])
    frame, key = _queries(frame, key, "per_query", group_cols)
    return frame.group_by(key).agg(
        *(pl.col(c).first() for c in group_cols),
        *(_value(m).mean().fill_null(math.nan).alias(m) for m in metric_cols),
        n_searches=pl.len().cast(pl.Int64),
    ).sort(key)


def mc_error(distribution: np.ndarray, confidence: float) -> float:
    """The Monte Carlo standard error of a percentile CI's bounds read from `distribution`
    (the bootstrap statistics), the larger of the two bounds'.

    The empirical q-quantile of B draws has standard error sqrt(q (1 - q) / B) / f(x_q),
    f the statistic's density at the quantile (the binomial count of draws below it); f is
    read from the draws as 2h over the spread between their (q - h) and (q + h) quantiles,
    with h three of those standard errors in probability (on simulated bootstraps of 2,000
    and 10,000 draws this estimate is unbiased within 5% and varies by 10-15%)."""
    values = np.asarray(distribution, dtype=np.float64)
    if values.size < 2:
        return math.nan
    worst = 0.0
    for q in ((1 - confidence) / 2, (1 + confidence) / 2):
        se_q = math.sqrt(q * (1 - q) / values.size)
        h = min(3 * se_q, 0.99 * q, 0.99 * (1 - q))
        low, high = np.quantile(values, [q - h, q + h])
        worst = max(worst, se_q * float(high - low) / (2 * h))
    return worst


def _bootstrap_mean(x: np.ndarray, rng: np.random.Generator, n_resamples: int,
                    confidence: float) -> tuple[float, float, float]:
    """Percentile bootstrap CI of the mean of x (n >= 2, not all equal) and the Monte Carlo
    error of its bounds."""
    result = stats.bootstrap((x,), np.mean, n_resamples=n_resamples, vectorized=True,
                             confidence_level=confidence, method="percentile", rng=rng,
                             batch=max(1, _BATCH_VALUES // x.size))
    return (float(result.confidence_interval.low), float(result.confidence_interval.high),
            mc_error(result.bootstrap_distribution, confidence))


def _ratio(totals: np.ndarray, weights: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.asarray(np.sum(totals, axis=axis) / np.sum(weights, axis=axis))


def _bootstrap_ratio(totals: np.ndarray, weights: np.ndarray, rng: np.random.Generator,
                     n_resamples: int, confidence: float) -> tuple[float, float, float]:
    """Cluster bootstrap CI of sum(totals) / sum(weights), resampling whole queries (paired
    resampling of a query's total and weight), and the Monte Carlo error of its bounds.
    With unit weights it draws the same resamples as `_bootstrap_mean` of the totals."""
    result = stats.bootstrap((totals, weights), _ratio, paired=True, vectorized=True,
                             n_resamples=n_resamples, confidence_level=confidence,
                             method="percentile", rng=rng,
                             batch=max(1, _BATCH_VALUES // totals.size))
    return (float(result.confidence_interval.low), float(result.confidence_interval.high),
            mc_error(result.bootstrap_distribution, confidence))


def _mean_ci(x: np.ndarray, rng: np.random.Generator, n_resamples: int,
             confidence: float) -> tuple[float, float, float, float]:
    """(mean, CI low, CI high, Monte Carlo error of the bounds)."""
    if x.size == 0:
        return math.nan, math.nan, math.nan, math.nan
    mean = float(x.mean())
    if x.size == 1:
        return mean, math.nan, math.nan, math.nan
    if _constant(x):  # every resample has this mean
        return mean, mean, mean, 0.0
    return (mean, *_bootstrap_mean(x, rng, n_resamples, confidence))


def _ratio_ci(totals: np.ndarray, weights: np.ndarray, rng: np.random.Generator,
              n_resamples: int, confidence: float) -> tuple[float, float, float, float]:
    if totals.size == 0:
        return math.nan, math.nan, math.nan, math.nan
    mean = float(_ratio(totals, weights))
    if totals.size == 1:  # one query: every resample is that query
        return mean, math.nan, math.nan, math.nan
    if _constant(totals / weights):  # every query has the same mean: so has every resample
        return mean, mean, mean, 0.0
    return (mean, *_bootstrap_ratio(totals, weights, rng, n_resamples, confidence))


def _sums(frame: pl.DataFrame, cluster: str, columns: Sequence[str],
          group_cols: Sequence[str]) -> pl.DataFrame:
    """Per query: group columns, per column the `mean:`, `sum:` and `count:` of its values,
    and n_searches."""
    return frame.group_by(cluster).agg(
        *(pl.col(c).first() for c in group_cols),
        *(_value(c).mean().alias(f"mean:{c}") for c in columns),
        *(_value(c).sum().alias(f"sum:{c}") for c in columns),
        *(_value(c).count().alias(f"count:{c}") for c in columns),
        n_searches=pl.len().cast(pl.Int64),
    ).sort(cluster)


def _column(frame: pl.DataFrame, name: str) -> np.ndarray:
    return frame.get_column(name).cast(pl.Float64).fill_null(math.nan).to_numpy()


def aggregate(values: pl.DataFrame, *, metric_cols: Sequence[str],
              group_cols: Sequence[str] = GROUPS, unit: Unit = "query",
              cluster: str | None = "query_id", n_resamples: int = 10_000, seed: int = 0,
              confidence: float = 0.95, min_support: int = 30, stream: str = ""
              ) -> pl.DataFrame:
    """Per-search values -> one row per (group, metric) with n, mean and a bootstrap CI.

    values : one row per search, with `cluster` (the query key; None: every row is a
        query), `metric_cols` (float, NaN = no relevant memory) and `group_cols`.
    unit : "query" (every query counts once: the mean of query means, a bootstrap over
        queries; n counts queries) or "search" (the mean over searches, a cluster
        bootstrap over queries; n counts searches).
    stream : names the resample stream (the arm): two arms never share one.
    min_support : groups with fewer queries (n_queries, after excluding NaN) are kept but
        flagged `low_support`; 30 by default, the usual floor for a normal-theory mean.

    Returns columns group_by, group, metric, unit, n, n_queries, n_no_relevant (in the
    unit of n), mean, ci_low, ci_high, confidence, low_support, ci_method, ci_mc_error
    (the Monte Carlo error of the bounds, `mc_error`; 0 where no resampling was needed,
    NaN where there is no CI); rows overall
    first, then by group column, group value (nulls last) and metric, in the order given.

    >>> frame = pl.DataFrame({"query_id": ["q1", "q1", "q2", "q3"],
    ...                       "intent": ["A", "A", "A", "B"],
    ...                       "ndcg@10": [0.5, 0.5, 1.0, float("nan")]})
    >>> aggregate(frame, metric_cols=["ndcg@10"], group_cols=["intent"], min_support=2).select(
    ...     "group_by", "group", "n", "n_no_relevant", "mean", "low_support").rows()
    [('overall', 'overall', 2, 1, 0.75, False), ('intent', 'A', 2, 0, 0.75, False), \
('intent', 'B', 0, 1, nan, True)]
    >>> aggregate(frame, metric_cols=["ndcg@10"], group_cols=(), unit="search").select(
    ...     "unit", "n", "n_queries", "mean").rows()
    [('search', 3, 2, 0.6666666666666666)]
    """
    _check_settings(n_resamples, confidence, seed, min_support, unit)
    _require(values, "values", [*metric_cols, *group_cols],
             hint="; pass group_cols=() for the overall row only")
    values, key = _queries(values, cluster, "values", group_cols)
    queries = _sums(values, key, metric_cols, group_cols)
    rows = []
    for group_by, group, part in _cells(queries, group_cols):
        for metric in metric_cols:
            rng = _rng(seed, stream, group_by, group, metric)
            count = _column(part, f"count:{metric}")
            has = count > 0
            if unit == "query":
                mean, low, high, error = _mean_ci(_column(part, f"mean:{metric}")[has], rng,
                                                  n_resamples, confidence)
                n, missing = int(has.sum()), int((~has).sum())
            else:
                totals = _column(part, f"sum:{metric}")[has]
                mean, low, high, error = _ratio_ci(totals, count[has], rng, n_resamples,
                                                   confidence)
                n = int(count.sum())
                missing = int(part.get_column("n_searches").sum()) - n
            rows.append((group_by, group, metric, unit, n, int(has.sum()), missing, mean,
                         low, high, confidence, int(has.sum()) < min_support,
                         _ci_label(unit, "", n_resamples, confidence), error))
    return pl.DataFrame(rows, orient="row", schema={
        "group_by": pl.String, "group": pl.String, "metric": pl.String, "unit": pl.String,
        "n": pl.Int64, "n_queries": pl.Int64, "n_no_relevant": pl.Int64, "mean": pl.Float64,
        "ci_low": pl.Float64, "ci_high": pl.Float64, "confidence": pl.Float64,
        "low_support": pl.Boolean, "ci_method": pl.String, "ci_mc_error": pl.Float64})


def _ci_label(unit: Unit, paired: str, n_resamples: int, confidence: float) -> str:
    what = (f"{paired}{CI_METHOD} over queries" if unit == "query"
            else f"{paired}cluster {CI_METHOD} (whole queries resampled), per search")
    return f"{what}, {n_resamples:,} resamples, {confidence:.0%}"


def holm(p: ArrayLike) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979), in the input order.

    Sorted ascending, p_(i) becomes max over j <= i of min(1, (m - j + 1) p_(j)); reject
    H_i at level alpha when the adjusted p_i <= alpha. SciPy has no Holm adjustment.
    """
    p = np.asarray(p, dtype=np.float64)
    order = np.argsort(p, kind="stable")
    stepped = (p.size - np.arange(p.size)) * p[order]
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(stepped))
    return adjusted


def adjust_pvalues(p: ArrayLike, method: Literal["holm", "bh"]) -> np.ndarray:
    """Holm or Benjamini-Hochberg (`scipy.stats.false_discovery_control`) adjustment over
    the finite p-values together; NaN stays NaN and is not counted in the family."""
    if method not in ("holm", "bh"):
        raise ValueError(f"correction must be 'holm' or 'bh', got {method!r}")
    p = np.asarray(p, dtype=np.float64)
    adjusted = np.full_like(p, math.nan)
    finite = ~np.isnan(p)
    if finite.any():
        adjusted[finite] = (holm(p[finite]) if method == "holm"
                            else stats.false_discovery_control(p[finite], method="bh"))
    return adjusted


def noninferior(delta_ci_low: ArrayLike, margin: float) -> np.ndarray:
    """The CI gate: True where the lower CI bound of (new - baseline) is > -margin.

    A NaN bound (too few queries to tell) fails the gate. Returns a bool array shaped like
    the input (0-d for a scalar: use `bool(...)`).
    """
    if not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
    low = np.asarray(delta_ci_low, dtype=np.float64)
    return np.asarray(low > -margin)  # NaN compares False
