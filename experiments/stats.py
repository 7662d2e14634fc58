"""Per-query metric values to aggregates with bootstrap CIs, and paired comparisons.

Inputs are wide per-query frames: one row per search (or query), a key column, group
columns (e.g. `intent`, `question_type`) and one float column per metric, NaN where the
query has no relevant memory (`metrics.evaluate`'s convention). Every output is a tidy frame
with one row per (group, metric), where a group is `group_by = "overall"` (all rows) or
`group_by = <column>, group = <value>` for each value of each group column (a null value
is its own group, with `group` null).

- `aggregate`: n, mean and a percentile bootstrap CI of the mean (`scipy.stats.bootstrap`).
  Percentile rather than BCa: BCa's jackknife evaluates n resamples of n - 1 values (800 MB
  at 10k queries in one batch), and it degenerates on the many ties of binary metrics.
- `compare`: per arm, group and metric, the mean paired difference (arm - base) with a
  paired bootstrap CI, a paired t-test (`scipy.stats.ttest_rel`) and a paired permutation
  test (`scipy.stats.permutation_test`, permutation_type="samples"), then Holm (or
  Benjamini-Hochberg) across all arms x groups x metrics at once.
- `noninferior`: the CI gate, lower CI bound of (new - baseline) > -margin.

NaN values are excluded per metric and counted in `n_no_relevant` (in `compare`, a pair is
excluded if either side is NaN). Degenerate cells never call SciPy, so they raise no
warnings: n = 0 gives NaN everywhere; n = 1 gives the value, a NaN CI and NaN p-values;
values that are all equal (to rounding) give a zero-width CI. In `compare`, differences
that are all zero give p = 1 for both tests; constant non-zero differences give a NaN
t-test p (zero variance, t undefined) and a permutation p as usual. NaN p-values are left
out of the multiple-testing family and stay NaN after adjustment.

Randomness: every cell draws from its own stream, `np.random.default_rng([seed, crc32 of
(arm, group_by, group, metric)])`, so results are deterministic for a seed and a cell's CI
does not change when other metrics, groups or arms are added.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Literal

import numpy as np
import polars as pl
from numpy.typing import ArrayLike
from scipy import stats

__all__ = ["adjust_pvalues", "aggregate", "compare", "holm", "noninferior"]

CI_METHOD = "percentile bootstrap"
# Resamples held in memory at once: batch x n floats (and as many indices).
_BATCH_VALUES = 2_000_000


def _require(frame: pl.DataFrame, what: str, columns: Sequence[str], hint: str = "") -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what}: missing column(s) {missing} (found columns {frame.columns})"
                         + hint)


def _check_settings(n_resamples: int, confidence: float, seed: int, min_support: int) -> None:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if min_support < 0:
        raise ValueError(f"min_support must be >= 0, got {min_support}")


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


def _bootstrap_mean(x: np.ndarray, rng: np.random.Generator, n_resamples: int,
                    confidence: float) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of x (n >= 2, not all equal)."""
    result = stats.bootstrap((x,), np.mean, n_resamples=n_resamples, vectorized=True,
                             confidence_level=confidence, method="percentile", rng=rng,
                             batch=max(1, _BATCH_VALUES // x.size))
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


def aggregate(values: pl.DataFrame, *, metric_cols: Sequence[str],
              group_cols: Sequence[str] = ("intent", "question_type"),
              n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95,
              min_support: int = 30) -> pl.DataFrame:
    """Per-query values -> one row per (group, metric) with n, mean and a bootstrap CI.

    values : one row per query, with `metric_cols` (float, NaN = no relevant memory) and
        `group_cols`.
    min_support : groups with fewer queries (n, after excluding NaN) are kept but flagged
        `low_support`; 30 by default, the usual floor for a normal-theory mean.

    Returns columns group_by, group, metric, n, n_no_relevant, mean, ci_low, ci_high,
    confidence, low_support, ci_method; rows overall first, then by group column, group
    value (nulls last) and metric, in the order given.

    >>> frame = pl.DataFrame({"intent": ["A", "A", "B"], "ndcg@10": [0.5, 1.0, float("nan")]})
    >>> aggregate(frame, metric_cols=["ndcg@10"], group_cols=["intent"], min_support=2).select(
    ...     "group_by", "group", "n", "n_no_relevant", "mean", "low_support").rows()
    [('overall', 'overall', 2, 1, 0.75, False), ('intent', 'A', 2, 0, 0.75, False), \
('intent', 'B', 0, 1, nan, True)]
    """
    _check_settings(n_resamples, confidence, seed, min_support)
    _require(values, "values", [*metric_cols, *group_cols],
             hint="; pass group_cols=() for the overall row only")
    rows = []
    for group_by, group, part in _cells(values, group_cols):
        for metric in metric_cols:
            column = part.get_column(metric).cast(pl.Float64).fill_null(math.nan).to_numpy()
            x = column[~np.isnan(column)]
            mean, low, high = _mean_ci(x, _rng(seed, group_by, group, metric), n_resamples,
                                       confidence)
            rows.append((group_by, group, metric, x.size, column.size - x.size, mean, low,
                         high, confidence, x.size < min_support, CI_METHOD))
    return pl.DataFrame(rows, orient="row", schema={
        "group_by": pl.String, "group": pl.String, "metric": pl.String, "n": pl.Int64,
        "n_no_relevant": pl.Int64, "mean": pl.Float64, "ci_low": pl.Float64,
        "ci_high": pl.Float64, "confidence": pl.Float64, "low_support": pl.Boolean,
        "ci_method": pl.String})


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


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return np.asarray(np.mean(x - y, axis=axis))


def _paired_tests(arm: np.ndarray, base: np.ndarray, rng: np.random.Generator,
                  n_resamples: int, confidence: float) -> tuple[float, float, float, float]:
    """(ci_low, ci_high, p_t, p_perm) for paired values with n >= 2 (module doc)."""
    d = arm - base
    if np.all(d == 0):
        return 0.0, 0.0, 1.0, 1.0
    if _constant(d):
        p_t, low, high = math.nan, float(d.mean()), float(d.mean())
    else:
        p_t = float(stats.ttest_rel(arm, base).pvalue)
        low, high = _bootstrap_mean(d, rng, n_resamples, confidence)
    p_perm = stats.permutation_test(
        (arm, base), _mean_difference, permutation_type="samples", vectorized=True,
        n_resamples=n_resamples, rng=rng, batch=max(1, _BATCH_VALUES // d.size)).pvalue
    return low, high, p_t, float(p_perm)


def _paired_frame(base: pl.DataFrame, arm: pl.DataFrame, name: str, key: str,
                  metric_cols: Sequence[str], group_cols: Sequence[str]) -> pl.DataFrame:
    """Base rows with the arm's metric values beside them as `arm:<metric>`."""
    for what, frame in (("base", base), (f"arm {name!r}", arm)):
        if frame.get_column(key).is_duplicated().any():
            raise ValueError(f"{what}: {key!r} must identify one query per row; "
                             f"found duplicates")
    for what, one, other in (("base", base, arm), (f"arm {name!r}", arm, base)):
        alone = one.join(other, on=key, how="anti").get_column(key)
        if alone.len():
            raise ValueError(f"{what}: {alone.len()} {key} value(s) missing on the other side "
                             f"(e.g. {alone[0]!r}); a paired comparison needs the same "
                             f"queries in base and arm {name!r}")
    # Sorted by key, so that resampling does not depend on either frame's row order.
    return base.select(key, *group_cols, *metric_cols).join(
        arm.select(key, *(pl.col(m).alias(f"arm:{m}") for m in metric_cols)), on=key,
    ).sort(key)


def compare(base: pl.DataFrame, arms: Mapping[str, pl.DataFrame], *,
            metric_cols: Sequence[str], group_cols: Sequence[str] = ("intent", "question_type"),
            key: str = "search", n_resamples: int = 1000, seed: int = 0,
            confidence: float = 0.95, correction: Literal["holm", "bh"] = "holm",
            min_support: int = 30) -> pl.DataFrame:
    """Each arm against the base, paired per query, for every group and metric.

    base, arms : per-query frames with `key` (the same set of values on every side),
        `metric_cols`; the groups are read from `base`'s `group_cols`.
    correction : "holm" (family-wise, default) or "bh" (false discovery rate), applied
        over all arms x groups x metrics together, separately to p_t and p_perm.
    n_resamples : bootstrap resamples for the CI and permutations for p_perm. The smallest
        two-sided p_perm is 2 / (n_resamples + 1), so with Holm over m rows p_perm_adj can
        reach alpha only if n_resamples >= 2 m / alpha - 1 (about 10,000 for m = 240 at
        0.05); the t-test has no such floor. Groups with n <= log2(n_resamples) are
        permuted exactly (all sign flips).

    Returns columns arm, group_by, group, metric, n, n_no_relevant, mean_base, mean_arm,
    delta (mean of arm - base), ci_low, ci_high (paired bootstrap CI of delta), p_t,
    p_perm, p_t_adj, p_perm_adj, low_support, ci_method, t_test, permutation_test,
    correction.
    """
    _check_settings(n_resamples, confidence, seed, min_support)
    if correction not in ("holm", "bh"):
        raise ValueError(f"correction must be 'holm' or 'bh', got {correction!r}")
    if not metric_cols:
        raise ValueError("metric_cols must name at least one metric column")
    _require(base, "base", [key, *metric_cols, *group_cols],
             hint="; pass group_cols=() for the overall row only")
    rows = []
    for name, arm in arms.items():
        _require(arm, f"arm {name!r}", [key, *metric_cols])
        paired = _paired_frame(base, arm, name, key, metric_cols, group_cols)
        for group_by, group, part in _cells(paired, group_cols):
            for metric in metric_cols:
                b, a = (part.get_column(c).cast(pl.Float64).fill_null(math.nan).to_numpy()
                        for c in (metric, f"arm:{metric}"))
                keep = ~(np.isnan(a) | np.isnan(b))
                a, b = a[keep], b[keep]
                low = high = p_t = p_perm = math.nan
                if a.size >= 2:
                    low, high, p_t, p_perm = _paired_tests(
                        a, b, _rng(seed, name, group_by, group, metric), n_resamples,
                        confidence)
                means = [float(v.mean()) if v.size else math.nan for v in (b, a, a - b)]
                rows.append((name, group_by, group, metric, a.size, keep.size - a.size,
                             *means, low, high, p_t, p_perm, a.size < min_support))
    frame = pl.DataFrame(rows, orient="row", schema={
        "arm": pl.String, "group_by": pl.String, "group": pl.String, "metric": pl.String,
        "n": pl.Int64, "n_no_relevant": pl.Int64, "mean_base": pl.Float64,
        "mean_arm": pl.Float64, "delta": pl.Float64, "ci_low": pl.Float64,
        "ci_high": pl.Float64, "p_t": pl.Float64, "p_perm": pl.Float64,
        "low_support": pl.Boolean})
    family = int(frame.height)
    return frame.with_columns(
        p_t_adj=pl.Series(adjust_pvalues(frame.get_column("p_t").to_numpy(), correction)),
        p_perm_adj=pl.Series(adjust_pvalues(frame.get_column("p_perm").to_numpy(), correction)),
    ).select(
        pl.exclude("low_support"), "low_support",
        ci_method=pl.lit(f"paired {CI_METHOD}, {n_resamples} resamples, {confidence:.0%}"),
        t_test=pl.lit("paired t-test (scipy.stats.ttest_rel), two-sided"),
        permutation_test=pl.lit(f"paired permutation test (scipy.stats.permutation_test, "
                                f"samples, {n_resamples} resamples), two-sided"),
        correction=pl.lit(f"{'Holm' if correction == 'holm' else 'Benjamini-Hochberg'} "
                          f"over {family} rows (arms x groups x metrics)"),
    )


def noninferior(delta_ci_low: ArrayLike, margin: float) -> np.ndarray:
    """The CI gate: True where the lower CI bound of (new - baseline) is > -margin.

    A NaN bound (too few queries to tell) fails the gate. Returns a bool array shaped like
    the input (0-d for a scalar: use `bool(...)`).
    """
    if not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
    low = np.asarray(delta_ci_low, dtype=np.float64)
    return np.asarray(low > -margin)  # NaN compares False
