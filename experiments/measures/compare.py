"""Paired comparisons of per-search frames: each arm against a base, per group and metric,
one test per row, corrected within its own breakdown.

Inputs are the wide per-search frames of `stats` (a search key, a query key `cluster`,
group columns, one float column per metric, NaN = no relevant memory). Every row pairs the
arm's and the base's query-level values and reads one t statistic
(`decision.inference.paired_estimate`), whose null matches the estimand:

- unit "query": the paired t-test on per-query differences (every question counts once);
- unit "search": the cluster-robust (CR1, queries as clusters, df = queries - 1) t-test of
  the traffic-weighted mean difference.

The interval is the t-interval from the same standard error and degrees of freedom. A
breakdown (one metric, overall or one group column: e.g. every arm by intent) is its own
multiple-testing family: its rows with at least max(2, min_support) queries and
differences that vary. `correction`:

- "bonferroni" (default): p_adj = min(1, m p) and the interval at 1 - alpha / m, which
  pair exactly (the interval excludes 0 exactly when p_adj < alpha);
- "holm" or "bh": adjusted p-values (Holm 1979; Benjamini-Hochberg), with the interval at
  1 - alpha, unadjusted, as the `correction` column says (they do not pair).

These rows are exploratory (the confirmatory family is `experiments.decision`'s); every
`correction` label says which breakdown it corrects over and how many rows it holds.

    compare(base, arms, *, metric_cols, group_cols=GROUPS, key="search", unit="query",
            cluster="query_id", alpha=0.05, correction="bonferroni", min_support=30,
            test_metrics=None)
        -> arm, group_by, group, metric, unit, n, n_queries, n_no_relevant, mean_base,
           mean_arm, delta, ci_low, ci_high, ci_level, p_t, p_t_adj, family_size,
           low_support, tested, ci_method, t_test, correction
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

from ..decision.inference import Estimate, interval, paired_estimate, two_sided_p
from .stats import (
    GROUPS,
    Unit,
    _cells,
    _column,
    _queries,
    _require,
    _sums,
    _value,
    adjust_pvalues,
)

__all__ = ["CORRECTIONS", "FAMILY_KEYS", "SCHEMA", "T_TESTS", "compare", "families",
           "families_caption"]

CORRECTIONS = ("bonferroni", "holm", "bh")
T_TESTS = {"query": "paired t-test on query means (scipy.stats.ttest_rel), two-sided",
           "search": "cluster-robust t-test of the per-search mean (CR1, queries as clusters, "
                     "df = n_queries - 1), two-sided"}


# A family: one breakdown (metric, overall or one group column) of one comparison (the
# reference and unit a `compare` call makes; columns the callers add).
FAMILY_KEYS = ("reference", "unit", "metric", "group_by")
SCHEMA = {
    "arm": pl.String, "group_by": pl.String, "group": pl.String, "metric": pl.String,
    "unit": pl.String, "n": pl.Int64, "n_queries": pl.Int64, "n_no_relevant": pl.Int64,
    "mean_base": pl.Float64, "mean_arm": pl.Float64, "delta": pl.Float64,
    "ci_low": pl.Float64, "ci_high": pl.Float64, "ci_level": pl.Float64,
    "p_t": pl.Float64, "p_t_adj": pl.Float64, "family_size": pl.Int64,
    "low_support": pl.Boolean, "tested": pl.Boolean, "correction": pl.String,
    "se": pl.Float64, "df": pl.Int64, "confirmatory": pl.Boolean, "mark": pl.String,
}


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


def _estimate(cell: _Cell, unit: Unit):  # type: ignore[no-untyped-def]
    if unit == "query":
        return paired_estimate(cell.arm, cell.base)
    return paired_estimate(cell.arm, cell.base, cell.weights, unit="search")


def _label(correction: str, group_by: str, metric: str, m: int, alpha: float,
           min_support: int) -> str:
    where = "overall rows" if group_by == "overall" else f"rows by {group_by}"
    rows = (f"the {m} tested {where} of {metric} (n_queries >= {max(2, min_support)}, "
            "differences that vary)")
    if correction == "bonferroni":
        return (f"exploratory: Bonferroni over {rows}; CI: t-interval at 1 - {alpha:g}/{m}, "
                "paired with the adjusted p")
    name = "Holm" if correction == "holm" else "Benjamini-Hochberg"
    return (f"exploratory: {name} over {rows}; CI: t-interval at {1 - alpha:.0%}, not "
            "adjusted (it does not pair with the adjusted p)")


_LABEL = re.compile(r"^exploratory: (?P<name>.+?) over the (?P<m>\d+) tested (?:overall rows|rows "
                    r"by \S+) of \S+ \((?P<cond>[^)]*)\); CI: (?P<ci>.*)$")


def _family_namer(rows: pl.DataFrame) -> Callable[[Mapping[str, object]], str]:
    """A family's name in a caption: what sets it apart from the table's other families
    (its metric, reference, unit and breakdown, each where the table's rows have several)."""
    varies = {c: c in rows.columns and rows.get_column(c).n_unique() > 1
              for c in ("reference", "unit")}

    def name(r: Mapping[str, object]) -> str:
        parts = [f"against {r['reference']}"] if varies["reference"] else []
        parts += [f"per {r['unit']}"] if varies["unit"] else []
        if r["group_by"] != "overall" or not parts:
            parts.append("overall" if r["group_by"] == "overall" else f"by {r['group_by']}")
        return ", ".join(parts)
    return name


def families_caption(rows: pl.DataFrame,
                     name: Callable[[Mapping[str, object]], str] | None = None) -> str:
    """What the families of `rows` (comparison rows of one table) are, said once: the rows
    with a verdict table's figures (marked C or V, `decision.detail`) and the exploratory
    families' method,
    condition, interval and sizes (m per family, named by `name(row)`; default: the
    breakdown, and the reference and unit where the rows have several)."""
    if not rows.height:
        return ""
    parts = []
    marked = (rows.get_column("confirmatory").fill_null(False) if "confirmatory" in rows.columns
              else pl.Series([False] * rows.height))
    decided, exploratory = rows.filter(marked), rows.filter(~marked)
    marks = (decided.get_column("mark").fill_null("C") if "mark" in decided.columns
             else pl.Series(["C"] * decided.height))
    for letter, what in (("C", "the decision table's (confirmatory"),
                         ("V", "the per-intent verdicts' (exploratory")):
        mine = decided.filter(marks.replace("", "C") == letter)
        if not mine.height:
            continue
        r = mine.row(0, named=True)
        swapped = any("the other way round" in c for c in mine["correction"])
        parts.append(
            f"{letter}: {what}, Bonferroni over {r['family_size']} rows, CI at "
            f"{r['ci_level']:.2%}) figures for the same question, outside the other families"
            + (" (read negated where the arms are swapped)" if swapped else ""))
    if not exploratory.height:
        return "; ".join(parts)
    labels = exploratory.get_column("correction").unique(maintain_order=True).to_list()
    parsed = [_LABEL.match(label) for label in labels]
    if not all(parsed):  # a bundle written before these labels: each as it is
        return "; ".join([*parts, *labels])
    named = name or _family_namer(rows)
    sizes: dict[str, dict[str, int]] = {  # metric -> family -> m, metrics in the rows' order
        m: {} for m in rows.get_column("metric").unique(maintain_order=True).to_list()}
    for r in exploratory.iter_rows(named=True):
        if r["family_size"]:  # (a family with no tested row tests nothing)
            sizes.setdefault(r["metric"], {}).setdefault(named(r), r["family_size"])
    first = parsed[0]
    assert first is not None
    methods = sorted({match["name"] for match in parsed if match is not None})
    ci = re.sub(r"/\d+", "/m", first["ci"])
    several = sum(bool(families) for families in sizes.values()) > 1
    listed = "; ".join((f"{metric}: " if several else "") + ", ".join(
        f"{m} ({family})" for family, m in families.items())
        for metric, families in sizes.items() if families)
    parts.append(f"exploratory: {' / '.join(methods)} within each family, over its rows "
                 f"tested ({first['cond']}); CI: {ci}; m = {listed}")
    return "; ".join(parts)


def compare(base: pl.DataFrame, arms: Mapping[str, pl.DataFrame], *,
            metric_cols: Sequence[str], group_cols: Sequence[str] = GROUPS,
            key: str = "search", unit: Unit = "query", cluster: str | None = "query_id",
            alpha: float = 0.05, correction: Literal["bonferroni", "holm", "bh"] = "bonferroni",
            min_support: int = 30, test_metrics: Sequence[str] | None = None) -> pl.DataFrame:
    """Each arm against the base, paired per query, for every group and metric (module doc).

    base, arms : per-search frames with `key` (one search per row, the same set of values
        on every side) and `metric_cols`; the queries (`cluster`; None: every row is its
        own query) and groups are read from `base`.
    test_metrics : the metrics whose rows are tested (default: all); the others get
        estimates and intervals at 1 - alpha, no p.
    """
    if unit not in ("query", "search"):
        raise ValueError(f"unit must be 'query' or 'search', got {unit!r}")
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got "
                         f"{correction!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if min_support < 0:
        raise ValueError(f"min_support must be >= 0, got {min_support}")
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
    cells = [cell for *_, part in groups for cell in part]
    estimates = [_estimate(cell, unit) for cell in cells]
    out = []
    for cell, e in zip(cells, estimates, strict=True):
        base_mean, arm_mean = ((float(v.mean()) if unit == "query"
                                else float(v.sum() / cell.weights.sum())) if v.size
                               else math.nan for v in (cell.base, cell.arm))
        out.append((cell.arm_name, cell.group_by, cell.group, cell.metric, unit,
                    int(cell.rows.size if unit == "query" else cell.weights.sum()),
                    int(cell.rows.size), cell.n_no_relevant, base_mean, arm_mean,
                    e.delta if e.n_queries else math.nan, math.nan, math.nan, math.nan,
                    float(two_sided_p(e)) if cell.metric in tested_metrics else math.nan,
                    math.nan, 0, cell.rows.size < min_support, cell.tested and e.testable,
                    "", e.se, e.df, False, ""))
    frame = pl.DataFrame(out, orient="row", schema=SCHEMA)
    return families(frame, alpha=alpha, correction=correction, min_support=min_support
                    ).with_columns(ci_method=pl.lit(f"t-interval ({T_TESTS[unit]})"),
                                   t_test=pl.lit(T_TESTS[unit]))


def families(frame: pl.DataFrame, *, alpha: float, correction: str, min_support: int,
             by: Sequence[str] = FAMILY_KEYS) -> pl.DataFrame:
    """The exploratory families of a comparison frame (`compare`'s columns), formed again:
    within each group of the `by` columns present (one breakdown of one comparison), the
    rows `tested` and not `confirmatory`; each row's adjusted p, family size, interval level
    and interval (from its delta, se and df) and correction label follow its family's size.
    Confirmatory rows (the decision table's, `decision.detail`) keep their figures."""
    keys = [k for k in by if k in frame.columns]
    rows = frame.to_dicts()
    members: dict[tuple[object, ...], list[int]] = {}
    for i, r in enumerate(rows):
        if not r["confirmatory"]:
            members.setdefault(tuple(r[k] for k in keys), [])
            if r["tested"]:
                members[tuple(r[k] for k in keys)].append(i)
    for family in members.values():
        if family:
            p = np.array([rows[i]["p_t"] for i in family], dtype=np.float64)
            adjusted = (np.minimum(1.0, len(family) * p) if correction == "bonferroni"
                        else adjust_pvalues(p, correction))  # type: ignore[arg-type]
            for i, value in zip(family, adjusted, strict=True):
                rows[i]["p_t_adj"] = float(value)
    for i, r in enumerate(rows):
        if r["confirmatory"]:
            continue
        m = len(members[tuple(r[k] for k in keys)])
        level = 1 - alpha / m if correction == "bonferroni" and m else 1 - alpha
        estimate = Estimate(r["delta"], r["se"], r["df"], r["n"], r["n_queries"])
        low, high = interval(estimate, level)
        rows[i] |= {"ci_low": low, "ci_high": high, "ci_level": level, "family_size": m,
                    "correction": _label(correction, r["group_by"], r["metric"], m, alpha,
                                         min_support)}
        if not r["tested"]:
            rows[i]["p_t_adj"] = math.nan
    return pl.DataFrame(rows, schema=frame.schema, orient="row") if rows else frame
