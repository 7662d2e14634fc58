"""Where quality is lost between the dense seeds and the returned list: the stage funnel.

Per evaluated search, against every relevant memory of its query (qrels relevance > 0,
candidate or not, the same denominator as recall):

- `seed_recall`: the share of them among the dense seeds (`was_seed`);
- `pool_recall`: the share among all candidates (seeds plus the graph expansion);
- `ceiling`: the primary metric of the pool in ideal order (judged grades descending,
  candidates the arm's hard role filter denies left out, cut at the search's limit), with
  the same ideal DCG over every judged memory as the arm's own value: the best any weights
  could do on this pool;
- `achieved`: the arm's own value of the primary metric;
- `lost`: 1 when the pool holds no relevant memory (lost before the rerank), else 0.
  Aggregated per query it is the mean over questions of the share of each question's
  searches that lost (not the share of questions that lost every search); per search, the
  share of searches.

Every column is NaN where the query has no relevant memory, as the metrics are, so the
funnel is aggregated by `stats.aggregate` in both units like any metric; `share` is the
ratio of the means, achieved / ceiling. A funnel describes a pool, so arms that share a
replay (`replay.table_key`) share seed recall, pool recall and ceiling, unless their role
filter differs.

>>> frame = funnel_frame(table, arm_frame, metric=parse_metric("ndcg@10"),   # doctest: +SKIP
...                      roles=False)
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ..replay import CandidateTable
from .metrics import Metric
from .scoring import ranking_values

__all__ = ["FUNNEL_COLUMNS", "FUNNEL_LABEL", "funnel_frame", "ideal_rankings", "shares",
           "with_shares"]

FUNNEL_COLUMNS = ("seed_recall", "pool_recall", "ceiling", "achieved", "lost")
FUNNEL_LABEL = ("seed recall: relevant memories among the dense seeds / all relevant; pool "
                "recall: among seeds + graph expansion; ceiling: the pool in ideal order; "
                "achieved: the arm; share: achieved / ceiling (ratio of the means); lost: "
                "per query, the mean over questions of the share of each question's searches "
                "whose pool holds no relevant memory; per search, the share of searches")


def _pool(table: CandidateTable, roles: bool) -> pl.DataFrame:
    """The candidates an arm can return: all of them, less those its role filter denies."""
    c = table.candidates
    return c.filter(pl.col("role") > 0) if roles else c


def ideal_rankings(table: CandidateTable, *, roles: bool = False) -> list[list[str]]:
    """Per search (table order), the pool in ideal order: judged grade descending, then
    unjudged, ties in discovery order; at most the search's limit."""
    pool = _pool(table, roles).select("search", "position", "memory_id", "grade")
    limits = table.searches.select("search", "limit")
    ordered = (pool.join(limits, on="search")
               .sort(["search", "grade", "position"], descending=[False, True, False],
                     nulls_last=True)
               .with_columns(rank=pl.int_range(pl.len()).over("search"))
               .filter(pl.col("rank") < pl.col("limit"))
               .group_by("search", maintain_order=True).agg("memory_id"))
    found = dict(ordered.iter_rows())
    return [found.get(i, []) for i in range(table.searches.height)]


def funnel_frame(table: CandidateTable, achieved: pl.DataFrame, *, metric: Metric,
                 roles: bool = False) -> pl.DataFrame:
    """One row per search: search, event_id, query_id, intent, question_type and the
    `FUNNEL_COLUMNS`. `achieved` is the arm's per-search frame on `table` (`Scorer.frame`),
    whose `metric.name` column becomes `achieved`."""
    s = table.searches
    if achieved.height != s.height or not achieved["search"].equals(s["search"]):
        raise ValueError(f"funnel: the arm's frame has {achieved.height} searches, the "
                         f"table {s.height}; score the arm on this table")
    relevant = (s.select("search", "query_id")
                .join(table.qrels.filter(pl.col("relevance") > 0), on="query_id")
                .group_by("search").agg(relevant=pl.len()))
    hits = (_pool(table, roles).filter(pl.col("grade") > 0)
            .group_by("search").agg(pool=pl.len(), seeds=pl.col("was_seed").sum()))
    counts = (s.select("search").join(relevant, on="search", how="left")
              .join(hits, on="search", how="left").fill_null(0)
              .sort("search"))
    n = counts["relevant"].cast(pl.Float64).to_numpy()
    none = n == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        seed = counts["seeds"].to_numpy() / n
        pool = counts["pool"].to_numpy() / n
    lost = np.where(counts["pool"].to_numpy() == 0, 1.0, 0.0)
    ceiling = ranking_values(table, ideal_rankings(table, roles=roles), [metric])[metric.name]
    columns = {"seed_recall": seed, "pool_recall": pool, "ceiling": ceiling,
               "achieved": achieved[metric.name].to_numpy(), "lost": lost}
    for name, values in columns.items():
        values = values.astype(np.float64, copy=True)
        values[none] = np.nan   # no relevant memory: undefined, as every metric is
        columns[name] = values
    return achieved.select("search", "event_id", "query_id", "intent", "question_type"
                           ).with_columns(**{k: pl.Series(k, v) for k, v in columns.items()})


def shares(summary: pl.DataFrame) -> pl.DataFrame:
    """A funnel summary (`stats.aggregate` of funnel frames with an `arm` column) wide:
    one row per arm, unit and group, a column per funnel stage's mean, `n`, and `share`
    (achieved / ceiling; NaN where the ceiling is 0)."""
    keys = ["arm", "unit", "group_by", "group"]
    wide = (summary.pivot(on="metric", index=keys, values="mean", maintain_order=True)
            .join(summary.filter(pl.col("metric") == "achieved").select(*keys, "n",
                                                                         "low_support"),
                  on=keys, how="left", nulls_equal=True, maintain_order="left"))
    return wide.with_columns(share=pl.when(pl.col("ceiling") > 0)
                             .then(pl.col("achieved") / pl.col("ceiling"))
                             .otherwise(float("nan")))


def with_shares(summary: pl.DataFrame) -> pl.DataFrame:
    """A funnel summary (long) with each cell's share of the ceiling added as rows with
    `metric = "share"`: the form the bundle (`bundle.ABLATION_FUNNEL`) and MLflow hold."""
    share = shares(summary).select("arm", "unit", "group_by", "group", "n", "low_support",
                                   metric=pl.lit("share"), mean=pl.col("share"))
    return pl.concat([summary, share], how="diagonal_relaxed")
