"""Per-search metric values to per-query aggregates with bootstrap CIs, and paired comparisons.

Inputs are wide per-search frames: one row per search, a search key (`search` or
`event_id`), a query key (`cluster`, by default `query_id`: a distinct question), group
columns (e.g. `intent`, `question_type`, constant within a query) and one float column per
metric, NaN where the query has no relevant memory (`metrics.evaluate`'s convention). A
replayed log asks popular questions many times, and its searches are not independent
evidence, so inference is per query (EVALUATION.md, "Aggregation and significance").
Every output is a tidy frame with one row per (group, metric) (and arm, in `compare`),
where a group is `group_by = "overall"` (all rows) or `group_by = <column>, group = <value>`
for each value of each group column (a null value is its own group, with `group` null).

Two units, named in every output's `unit` column:

- `unit="query"` (the default): every question counts once. A query's value is the mean
  over its searches (`per_query`); means, the percentile bootstrap (resampling queries),
  the paired t-test (`scipy.stats.ttest_rel`) and the sign-flip permutation test all work
  on these query-level values. `n` counts queries.
- `unit="search"`: weighted by traffic, the mean over searches (= the query means weighted
  by their search counts). Its CI is a cluster bootstrap that resamples whole queries (the
  statistic: the resampled queries' value sums over their search counts, via
  `scipy.stats.bootstrap(paired=True)`); its tests are at the query level too: the
  permutation test flips the sign of a whole query's deltas together (statistic: the sum of
  the query totals, equivalent to the weighted mean difference since the weights do not
  change under flips), and the t-test is a cluster-robust (CR1) t-test of the weighted mean
  difference, df = n_queries - 1 (`_cluster_t_pvalue`). `n` counts searches.

In both units `n_queries` counts queries and `low_support` is n_queries < min_support: 30
searches of one question are one piece of evidence. `cluster=None` treats every row as its
own query (a frame that is already per query; the behaviour before per-query inference).

- `per_query`: one row per query (metric = mean over its searches, `n_searches`).
- `aggregate`: n, mean and a percentile bootstrap CI of the mean (`scipy.stats.bootstrap`).
  Percentile rather than BCa: BCa's jackknife evaluates n resamples of n - 1 values (800 MB
  at 10k queries in one batch), and it degenerates on the many ties of binary metrics.
- `compare`: per arm, group and metric, the mean paired difference (arm - base) with a
  paired bootstrap CI, a t-test and a sign-flip permutation test, then Holm (or
  Benjamini-Hochberg) across the rows that were tested.
- `permutation_count`: the permutation test's own resample count (below).
- `noninferior`: the CI gate, lower CI bound of (new - baseline) > -margin.

Multiple testing: a row is `tested` (inside the family) when its metric is in
`test_metrics`, it has n_queries >= max(2, min_support), and its query-level differences
are not all zero (a test that cannot reject). The family size m is fixed before any test
runs; untested rows keep their raw p-values (where computed) and get NaN adjusted ones.
The permutation test draws `permutation_count(m, alpha)` = max(9,999, floor(20 m / alpha))
random sign flips, the fewest for which its smallest two-sided p, 2 / (n_permutations + 1)
(SciPy's definition: the observed statistic counts as one of the resamples), times m stays
below alpha / 10 (108,000 for m = 270 at 0.05); the 9,999 floor bounds the Monte Carlo
error of p (about 0.002 at p = 0.05). A cell with 2^n <= that count (n queries) flips all
2^n sign vectors exactly instead; its smallest p is 2 / 2^n, so a group that small cannot
reach significance whatever the count. The count is in the output (`n_permutations`, and
in `permutation_test`).

NaN values are excluded per metric and counted in `n_no_relevant`, in the unit of `n` (in
`compare`, a search pair is excluded if either side is NaN; a query with no pair left is
excluded). Degenerate cells never call SciPy, so they raise no warnings: n = 0 gives NaN
everywhere; one query gives the value, a NaN CI and NaN p-values; values that are all equal
(to rounding) give a zero-width CI. In `compare`, differences that are all zero give p = 1
for both tests (and the row is not tested); constant non-zero differences (per query mean)
give a NaN t-test p (zero variance, t undefined) and a permutation p as usual.

The API, with the columns the callers rely on:

    per_query(frame, *, key="query_id", metric_cols, group_cols=GROUPS)
        -> key, *group_cols, *metric_cols, n_searches
    aggregate(values, *, metric_cols, group_cols=GROUPS, unit="query", cluster="query_id",
              n_resamples=1000, seed=0, confidence=0.95, min_support=30)
        -> group_by, group, metric, unit, n, n_queries, n_no_relevant, mean, ci_low,
           ci_high, confidence, low_support, ci_method
    compare(base, arms, *, metric_cols, group_cols=GROUPS, key="search", unit="query",
            cluster="query_id", n_resamples=1000, seed=0, confidence=0.95,
            correction="holm", min_support=30, alpha=0.05, test_metrics=None)
        -> arm, group_by, group, metric, unit, n, n_queries, n_no_relevant, mean_base,
           mean_arm, delta, ci_low, ci_high, p_t, p_perm, n_permutations, p_t_adj,
           p_perm_adj, low_support, tested, ci_method, t_test, permutation_test, correction
    permutation_count(family, alpha=0.05) -> int

In `compare`, `key` pairs the searches of base and arm (`event_id` in the pipeline) and
`cluster` names their query; the calls written before per-query inference keep working and
now get query-level inference (pass unit="search" for the traffic-weighted figures).

Randomness: every cell's bootstrap draws from its own stream, `np.random.default_rng([seed,
crc32 of (arm, group_by, group, metric)])`, so results are deterministic for a seed and a
cell's CI does not change when other metrics, groups or arms are added. The permutation
signs of a group come from the stream `("permutation", group_by, group)`, shared by that
group's arms and metrics (a query's sign is the same in every arm and metric), so that one
matrix product tests them all; a cell's p changes only with the permutation count.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl
from numpy.typing import ArrayLike
from scipy import stats

__all__ = ["adjust_pvalues", "aggregate", "compare", "holm", "noninferior", "per_query",
           "permutation_count"]

Unit = Literal["query", "search"]
GROUPS = ("intent", "question_type")
CI_METHOD = "percentile bootstrap"
# Resamples held in memory at once: batch x n floats (and as many indices).
_BATCH_VALUES = 2_000_000
# Fewest random sign flips: the Monte Carlo standard error of p at 0.05 is about 0.002.
_MIN_PERMUTATIONS = 9_999
# SciPy's relative tolerance for null statistics equal to the observed one up to rounding.
_TIES = 100 * np.finfo(np.float64).eps


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


def _bootstrap_mean(x: np.ndarray, rng: np.random.Generator, n_resamples: int,
                    confidence: float) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of x (n >= 2, not all equal)."""
    result = stats.bootstrap((x,), np.mean, n_resamples=n_resamples, vectorized=True,
                             confidence_level=confidence, method="percentile", rng=rng,
                             batch=max(1, _BATCH_VALUES // x.size))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _ratio(totals: np.ndarray, weights: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.asarray(np.sum(totals, axis=axis) / np.sum(weights, axis=axis))


def _bootstrap_ratio(totals: np.ndarray, weights: np.ndarray, rng: np.random.Generator,
                     n_resamples: int, confidence: float) -> tuple[float, float]:
    """Cluster bootstrap CI of sum(totals) / sum(weights), resampling whole queries (paired
    resampling of a query's total and weight). With unit weights it draws the same
    resamples as `_bootstrap_mean` of the totals."""
    result = stats.bootstrap((totals, weights), _ratio, paired=True, vectorized=True,
                             n_resamples=n_resamples, confidence_level=confidence,
                             method="percentile", rng=rng,
                             batch=max(1, _BATCH_VALUES // totals.size))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _mean_ci(x: np.ndarray, rng: np.random.Generator, n_resamples: int,
             confidence: float) -> tuple[float, float, float]:
    if x.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if x.size == 1:
        return mean, math.nan, math.nan
    if _constant(x):  # every resample has this mean
        return mean, mean, mean
    return (mean, *_bootstrap_mean(x, rng, n_resamples, confidence))


def _ratio_ci(totals: np.ndarray, weights: np.ndarray, rng: np.random.Generator,
              n_resamples: int, confidence: float) -> tuple[float, float, float]:
    if totals.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(_ratio(totals, weights))
    if totals.size == 1:  # one query: every resample is that query
        return mean, math.nan, math.nan
    if _constant(totals / weights):  # every query has the same mean: so has every resample
        return mean, mean, mean
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
              cluster: str | None = "query_id", n_resamples: int = 1000, seed: int = 0,
              confidence: float = 0.95, min_support: int = 30) -> pl.DataFrame:
    """Per-search values -> one row per (group, metric) with n, mean and a bootstrap CI.

    values : one row per search, with `cluster` (the query key; None: every row is a
        query), `metric_cols` (float, NaN = no relevant memory) and `group_cols`.
    unit : "query" (every query counts once: the mean of query means, a bootstrap over
        queries; n counts queries) or "search" (the mean over searches, a cluster
        bootstrap over queries; n counts searches).
    min_support : groups with fewer queries (n_queries, after excluding NaN) are kept but
        flagged `low_support`; 30 by default, the usual floor for a normal-theory mean.

    Returns columns group_by, group, metric, unit, n, n_queries, n_no_relevant (in the
    unit of n), mean, ci_low, ci_high, confidence, low_support, ci_method; rows overall
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
            rng = _rng(seed, group_by, group, metric)
            count = _column(part, f"count:{metric}")
            has = count > 0
            if unit == "query":
                mean, low, high = _mean_ci(_column(part, f"mean:{metric}")[has], rng,
                                           n_resamples, confidence)
                n, missing = int(has.sum()), int((~has).sum())
            else:
                totals = _column(part, f"sum:{metric}")[has]
                mean, low, high = _ratio_ci(totals, count[has], rng, n_resamples,
                                            confidence)
                n = int(count.sum())
                missing = int(part.get_column("n_searches").sum()) - n
            rows.append((group_by, group, metric, unit, n, int(has.sum()), missing, mean,
                         low, high, confidence, int(has.sum()) < min_support,
                         _ci_label(unit, "", n_resamples, confidence)))
    return pl.DataFrame(rows, orient="row", schema={
        "group_by": pl.String, "group": pl.String, "metric": pl.String, "unit": pl.String,
        "n": pl.Int64, "n_queries": pl.Int64, "n_no_relevant": pl.Int64, "mean": pl.Float64,
        "ci_low": pl.Float64, "ci_high": pl.Float64, "confidence": pl.Float64,
        "low_support": pl.Boolean, "ci_method": pl.String})


def _ci_label(unit: Unit, paired: str, n_resamples: int, confidence: float) -> str:
    what = (f"{paired}{CI_METHOD} over queries" if unit == "query"
            else f"{paired}cluster {CI_METHOD} (whole queries resampled), per search")
    return f"{what}, {n_resamples} resamples, {confidence:.0%}"


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


def permutation_count(family: int, alpha: float = 0.05) -> int:
    """Random sign flips for a family of `family` tested rows: the smallest two-sided p,
    2 / (count + 1), is below alpha / (10 family), so that even after Holm or Bonferroni
    (m times the smallest p) it stays below alpha / 10; at least 9,999.

    >>> permutation_count(270), 2 / (permutation_count(270) + 1) < 0.05 / 2700
    (108000, True)
    """
    if family < 0:
        raise ValueError(f"family must be >= 0, got {family}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    # 2 / (count + 1) < alpha / (10 m)  <=>  count + 1 > 20 m / alpha.
    return max(_MIN_PERMUTATIONS, math.floor(20 * family / alpha))


def _two_sided(null: Iterator[np.ndarray], observed: np.ndarray, total: int,
               adjustment: int) -> np.ndarray:
    """SciPy's two-sided permutation p (`scipy.stats.permutation_test`): 2 min(P(null <=
    observed), P(null >= observed)), each (count + adjustment) / (total + adjustment), ties
    within a relative 100 eps of the observed value counted, clipped to 1."""
    gamma = np.abs(_TIES * observed)
    less = np.zeros(observed.shape, dtype=np.int64)
    greater = np.zeros(observed.shape, dtype=np.int64)
    for batch in null:
        less += np.count_nonzero(batch <= observed + gamma, axis=0)
        greater += np.count_nonzero(batch >= observed - gamma, axis=0)
    p = 2 * np.minimum(less + adjustment, greater + adjustment) / (total + adjustment)
    return np.asarray(np.clip(p, 0.0, 1.0))


def _exact_sign_flip_pvalue(x: np.ndarray) -> float:
    """Two-sided p of the sum of x over all 2^n sign vectors (the exact test SciPy runs when
    n_resamples >= 2^n), as `scipy.stats.permutation_test((x,), np.mean,
    permutation_type="samples")` defines it."""
    n = x.size
    bits = np.arange(n)
    step = max(1, _BATCH_VALUES // n)
    total = np.array([x.sum()])

    def null() -> Iterator[np.ndarray]:
        for start in range(0, 2**n, step):
            codes = np.arange(start, min(start + step, 2**n))
            flipped = ((codes[:, None] >> bits) & 1).astype(np.float64)  # bit k: flip query k
            yield total - 2.0 * (flipped @ x)[:, None]

    return float(_two_sided(null(), total, 2**n, adjustment=0)[0])


def _random_sign_flip_pvalues(values: np.ndarray, n_permutations: int,
                              rng: np.random.Generator) -> np.ndarray:
    """Two-sided p of each column's sum under `n_permutations` random sign vectors, one
    sign per row (query) shared by all columns.

    values : ndarray, shape (n_queries, n_cells), 0 where a cell lacks the query.

    Why not `scipy.stats.permutation_test`: the family needs ~10^5 resamples per cell, and
    SciPy draws a permutation of two items per query per resample with `rng.permuted` and
    gathers the data through it, which took 2 s per 300-query cell here (9 s for 18 cells
    sharing one call); a +-1 matrix times the cells' values is one BLAS product per batch
    for every cell of a group. A flipped sum is the total minus twice the flipped part: 0/1
    flags unpacked from random bytes cost a third of drawing +-1 per entry, and flipping
    only zero differences gives the observed total bit for bit. `_two_sided` applies
    SciPy's p-value definition; tests check this against SciPy's exact result.
    """
    n_queries = values.shape[0]
    step = max(1, _BATCH_VALUES // n_queries)
    total = values.sum(axis=0)

    def null() -> Iterator[np.ndarray]:
        for start in range(0, n_permutations, step):
            size = min(step, n_permutations - start)
            random_bytes = rng.integers(0, 256, (size, (n_queries + 7) // 8), dtype=np.uint8)
            flipped = np.unpackbits(random_bytes, axis=1, count=n_queries)
            yield total - 2.0 * (flipped.astype(np.float64) @ values)

    return _two_sided(null(), total, n_permutations, adjustment=1)


def _cluster_t_pvalue(totals: np.ndarray, weights: np.ndarray) -> float:
    """Two-sided p of a cluster-robust t-test of sum(totals) / sum(weights) = 0.

    The weighted (per-search) mean difference is the intercept of a least-squares fit to
    the per-search differences. Its CR1 variance (the Liang-Zeger sandwich with queries as
    clusters, small-sample factor G / (G - 1), t reference with G - 1 df; Cameron and
    Miller 2015) is G / (G - 1) sum_g e_g^2 / W^2, where e_g = T_g - delta w_g is query g's
    residual total and W the number of searches. With one search per query it is the
    paired t-test. SciPy has no cluster-robust test; the tail is `scipy.stats.t`.
    """
    g = totals.size
    delta = totals.sum() / weights.sum()
    residual = totals - delta * weights
    se = math.sqrt(g / (g - 1) * float(residual @ residual)) / weights.sum()
    return float(2 * stats.t.sf(abs(delta / se), g - 1))


@dataclass(frozen=True)
class _Cell:
    """One (arm, group, metric) row before its tests: query-level values, kept queries
    only. `base`, `arm` are query means (unit "query") or query totals (unit "search");
    `weights` the queries' search pairs."""
    arm_name: str
    group_by: str
    group: str | None
    metric: str
    rows: np.ndarray  # (n_queries,) positions of the kept queries in the group
    base: np.ndarray
    arm: np.ndarray
    weights: np.ndarray
    n_no_relevant: int
    tested: bool

    @property
    def flips(self) -> np.ndarray:
        """The values whose signs the permutation test flips: query differences."""
        return np.asarray(self.arm - self.base)


def _paired_frame(base: pl.DataFrame, arms: Mapping[str, pl.DataFrame], key: str,
                  cluster: str, metric_cols: Sequence[str],
                  group_cols: Sequence[str]) -> pl.DataFrame:
    """Base rows with every arm's values beside them, as `base:<i>:<metric>` and
    `arm:<i>:<metric>` for the i-th arm, null where either side has no value."""
    for what, frame in (("base", base), *((f"arm {n!r}", f) for n, f in arms.items())):
        if frame.get_column(key).is_duplicated().any():
            raise ValueError(f"{what}: {key!r} must identify one search per row; "
                             f"found duplicates")
    paired = base.select(key, cluster, *group_cols)
    for i, (name, arm) in enumerate(arms.items()):
        for what, one, other in (("base", base, arm), (f"arm {name!r}", arm, base)):
            alone = one.join(other, on=key, how="anti").get_column(key)
            if alone.len():
                raise ValueError(f"{what}: {alone.len()} {key} value(s) missing on the other "
                                 f"side (e.g. {alone[0]!r}); a paired comparison needs the "
                                 f"same searches in base and arm {name!r}")
        same = [cluster] if cluster in arm.columns and cluster in base.columns else []
        if same:
            moved = base.select(key, cluster).join(arm.select(key, cluster), on=key).filter(
                pl.col(cluster).ne_missing(pl.col(f"{cluster}_right")))
            if moved.height:
                raise ValueError(f"arm {name!r}: {moved.height} search(es) belong to another "
                                 f"{cluster} than in base (e.g. {key} {moved[key][0]!r})")
        paired = paired.join(arm.select(key, *(pl.col(m).alias(f"arm:{i}:{m}")
                                               for m in metric_cols)), on=key)
        paired = paired.join(base.select(key, *(pl.col(m).alias(f"base:{i}:{m}")
                                                for m in metric_cols)), on=key)
        both = {m: _value(f"arm:{i}:{m}").is_not_null() & _value(f"base:{i}:{m}").is_not_null()
                for m in metric_cols}
        paired = paired.with_columns(
            *(pl.when(both[m]).then(_value(f"{side}:{i}:{m}")).alias(f"{side}:{i}:{m}")
              for m in metric_cols for side in ("base", "arm")))
    # Sorted by key, so that sums over a query's searches do not depend on row order.
    return paired.sort(key)


def _cells_of(queries: pl.DataFrame, names: Sequence[str], unit: Unit,
              metric_cols: Sequence[str], group_cols: Sequence[str],
              test_metrics: Sequence[str],
              min_support: int) -> list[tuple[str, str | None, int, list[_Cell]]]:
    """Per group (overall first): group_by, group, its number of queries and the cells of
    every arm and metric, with `tested` set."""
    groups = []
    for group_by, group, part in _cells(queries, group_cols):
        cells = []
        for i, name in enumerate(names):
            for metric in metric_cols:
                count = _column(part, f"count:base:{i}:{metric}")
                kept = count > 0
                side = "mean" if unit == "query" else "sum"
                base, arm = (_column(part, f"{side}:{s}:{i}:{metric}")[kept]
                             for s in ("base", "arm"))
                missing = (int((~kept).sum()) if unit == "query"
                           else int(part.get_column("n_searches").sum() - count.sum()))
                tested = (metric in test_metrics and kept.sum() >= max(2, min_support)
                          and bool(np.any(arm != base)))
                cells.append(_Cell(name, group_by, group, metric, np.flatnonzero(kept), base,
                                   arm, count[kept], missing, tested))
        groups.append((group_by, group, part.height, cells))
    return groups


def _ci_and_t(cell: _Cell, unit: Unit, rng: np.random.Generator, n_resamples: int,
              confidence: float) -> tuple[float, float, float, float]:
    """(delta, ci_low, ci_high, p_t) of one cell (module doc for the degenerate cases)."""
    d = cell.flips
    if unit == "query":
        delta = float(d.mean()) if d.size else math.nan
    else:
        delta = float(_ratio(d, cell.weights)) if d.size else math.nan
    if d.size < 2:
        return delta, math.nan, math.nan, math.nan
    if np.all(d == 0):
        return delta, 0.0, 0.0, 1.0
    if unit == "query":
        if _constant(d):
            return delta, delta, delta, math.nan
        low, high = _bootstrap_mean(d, rng, n_resamples, confidence)
        return delta, low, high, float(stats.ttest_rel(cell.arm, cell.base).pvalue)
    if _constant(d / cell.weights):
        return delta, delta, delta, math.nan
    low, high = _bootstrap_ratio(d, cell.weights, rng, n_resamples, confidence)
    return delta, low, high, _cluster_t_pvalue(d, cell.weights)


def _permutation_pvalues(cells: Sequence[_Cell], n_queries: int, n_permutations: int,
                         rng: np.random.Generator) -> list[tuple[float, int | None, bool]]:
    """(p_perm, sign vectors used, exact) per cell of one group: exact for 2^n <=
    n_permutations, else random sign vectors over the group's queries, shared by its
    cells."""
    out: list[tuple[float, int | None, bool]] = [(math.nan, None, False)] * len(cells)
    random = []
    for j, cell in enumerate(cells):
        d = cell.flips
        if d.size < 2:
            continue
        if np.all(d == 0):
            out[j] = (1.0, None, False)
        elif 2**d.size <= n_permutations:
            out[j] = (_exact_sign_flip_pvalue(d), 2**d.size, True)
        else:
            random.append(j)
    if random:
        values = np.zeros((n_queries, len(random)))
        for column, j in enumerate(random):
            values[cells[j].rows, column] = cells[j].flips
        for j, p in zip(random, _random_sign_flip_pvalues(values, n_permutations, rng),
                        strict=True):
            out[j] = (float(p), n_permutations, False)
    return out


def compare(base: pl.DataFrame, arms: Mapping[str, pl.DataFrame], *,
            metric_cols: Sequence[str], group_cols: Sequence[str] = GROUPS,
            key: str = "search", unit: Unit = "query", cluster: str | None = "query_id",
            n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95,
            correction: Literal["holm", "bh"] = "holm", min_support: int = 30,
            alpha: float = 0.05, test_metrics: Sequence[str] | None = None) -> pl.DataFrame:
    """Each arm against the base, paired per query, for every group and metric.

    base, arms : per-search frames with `key` (one search per row, the same set of values
        on every side) and `metric_cols`; the queries (`cluster`; None: every row is its
        own query) and groups are read from `base`.
    unit : "query" (default; differences of query means, every query counts once) or
        "search" (the traffic-weighted difference; cluster bootstrap and cluster-level
        tests, module doc).
    n_resamples : bootstrap resamples for the CI.
    correction : "holm" (family-wise, default) or "bh" (false discovery rate), over the
        tested rows (module doc), separately to p_t and p_perm.
    alpha : the level the permutation count is chosen for (`permutation_count`).
    test_metrics : the metrics whose rows form the family (default: all); the others get
        CIs and raw p-values but are not tested.

    Returns columns arm, group_by, group, metric, unit, n (pairs of the unit), n_queries,
    n_no_relevant (in the unit of n), mean_base, mean_arm, delta (mean of arm - base),
    ci_low, ci_high (paired bootstrap CI of delta), p_t, p_perm, n_permutations (sign
    vectors used: 2^n when exact), p_t_adj, p_perm_adj, p_perm_bound (p_perm sits at the
    count's smallest p, so it and p_perm_adj are upper bounds: print them as "<="),
    low_support, tested, ci_method,
    t_test, permutation_test, correction.
    """
    _check_settings(n_resamples, confidence, seed, min_support, unit)
    if correction not in ("holm", "bh"):
        raise ValueError(f"correction must be 'holm' or 'bh', got {correction!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not metric_cols:
        raise ValueError("metric_cols must name at least one metric column")
    tested_metrics = list(metric_cols if test_metrics is None else test_metrics)
    if unknown := [m for m in tested_metrics if m not in metric_cols]:
        raise ValueError(f"test_metrics {unknown} are not in metric_cols {list(metric_cols)}")
    _require(base, "base", [key, *metric_cols, *group_cols],
             hint="; pass group_cols=() for the overall row only")
    for name, arm in arms.items():
        _require(arm, f"arm {name!r}", [key, *metric_cols])
    base, query = _queries(base, cluster, "base", group_cols)
    paired = _paired_frame(base, arms, key, query, metric_cols, group_cols)
    sides = [f"{s}:{i}:{m}" for i in range(len(arms)) for m in metric_cols
             for s in ("base", "arm")]
    groups = _cells_of(_sums(paired, query, sides, group_cols), list(arms), unit, metric_cols,
                       group_cols, tested_metrics, min_support)
    family = sum(cell.tested for *_, cells in groups for cell in cells)
    n_permutations = permutation_count(family, alpha)

    rows = []
    for group_by, group, n_queries, cells in groups:
        perm = _permutation_pvalues(cells, n_queries, n_permutations,
                                    _rng(seed, "permutation", group_by, group))
        for cell, (p_perm, flips, exact) in zip(cells, perm, strict=True):
            delta, low, high, p_t = _ci_and_t(
                cell, unit, _rng(seed, cell.arm_name, group_by, group, cell.metric),
                n_resamples, confidence)
            base_mean, arm_mean = ((float(v.mean()) if unit == "query"
                                    else float(_ratio(v, cell.weights))) if v.size
                                   else math.nan for v in (cell.base, cell.arm))
            rows.append((cell.arm_name, group_by, group, cell.metric, unit,
                         int(cell.rows.size if unit == "query" else cell.weights.sum()),
                         int(cell.rows.size), cell.n_no_relevant, base_mean, arm_mean, delta,
                         low, high, p_t, p_perm, flips, cell.rows.size < min_support,
                         cell.tested, _permutation_label(unit, flips, exact, n_permutations),
                         _at_floor(p_perm, flips, exact)))
    frame = pl.DataFrame(rows, orient="row", schema={
        "arm": pl.String, "group_by": pl.String, "group": pl.String, "metric": pl.String,
        "unit": pl.String, "n": pl.Int64, "n_queries": pl.Int64, "n_no_relevant": pl.Int64,
        "mean_base": pl.Float64, "mean_arm": pl.Float64, "delta": pl.Float64,
        "ci_low": pl.Float64, "ci_high": pl.Float64, "p_t": pl.Float64, "p_perm": pl.Float64,
        "n_permutations": pl.Int64, "low_support": pl.Boolean, "tested": pl.Boolean,
        "permutation_test": pl.String, "p_perm_bound": pl.Boolean})
    tested = frame.get_column("tested").to_numpy()
    adjusted = {}
    for column in ("p_t", "p_perm"):
        p = np.where(tested, frame.get_column(column).to_numpy(), math.nan)
        adjusted[f"{column}_adj"] = pl.Series(adjust_pvalues(p, correction))
    t_family = int(np.count_nonzero(~np.isnan(np.where(tested, frame["p_t"].to_numpy(),
                                                       math.nan))))
    return frame.with_columns(**adjusted).select(
        "arm", "group_by", "group", "metric", "unit", "n", "n_queries", "n_no_relevant",
        "mean_base", "mean_arm", "delta", "ci_low", "ci_high", "p_t", "p_perm",
        "n_permutations", "p_t_adj", "p_perm_adj", "p_perm_bound", "low_support", "tested",
        ci_method=pl.lit(_ci_label(unit, "paired ", n_resamples, confidence)),
        t_test=pl.lit(T_TESTS[unit]),
        permutation_test="permutation_test",
        correction=pl.lit(_correction_label(correction, family, t_family, min_support,
                                            tested_metrics, metric_cols)),
    )


T_TESTS = {"query": "paired t-test on query means (scipy.stats.ttest_rel), two-sided",
           "search": "cluster-robust t-test of the per-search mean (CR1, queries as clusters, "
                     "df = n_queries - 1), two-sided"}


def _at_floor(p_perm: float, flips: int | None, exact: bool) -> bool:
    """True when no random sign vector was as extreme as the data: p_perm is then the
    smallest p the count can give, 2 / (flips + 1), an upper bound of the true p (and so is
    its adjusted value); exact tests give the p itself."""
    if exact or flips is None or math.isnan(p_perm):
        return False
    return p_perm <= 2.0 / (flips + 1) * (1 + 1e-12)


def _permutation_label(unit: Unit, flips: int | None, exact: bool, n_permutations: int) -> str:
    what = ("sign-flip permutation test on query mean differences" if unit == "query"
            else "sign-flip permutation test flipping whole queries (query totals)")
    if exact and flips is not None:
        how = f"exact, all 2^n sign flips (n = {flips.bit_length() - 1})"
    else:
        how = f"{n_permutations} random sign flips, smallest p 2/{n_permutations + 1}"
    return f"{what}, {how}, two-sided"


def _correction_label(correction: str, family: int, t_family: int, min_support: int,
                      tested_metrics: Sequence[str], metric_cols: Sequence[str]) -> str:
    name = "Holm" if correction == "holm" else "Benjamini-Hochberg"
    which = "" if list(tested_metrics) == list(metric_cols) else \
        f", metrics {', '.join(tested_metrics) or 'none'}"
    t_note = "" if t_family == family else f"; {t_family} with a t-test p"
    return (f"{name} over {family} tested rows (n_queries >= {max(2, min_support)}, "
            f"differences not all zero{which}{t_note})")


def noninferior(delta_ci_low: ArrayLike, margin: float) -> np.ndarray:
    """The CI gate: True where the lower CI bound of (new - baseline) is > -margin.

    A NaN bound (too few queries to tell) fails the gate. Returns a bool array shaped like
    the input (0-d for a scalar: use `bool(...)`).
    """
    if not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
    low = np.asarray(delta_ci_low, dtype=np.float64)
    return np.asarray(low > -margin)  # NaN compares False
