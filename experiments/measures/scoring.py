"""Score weight vectors on a candidate table and measure them, per query.

`Scorer.of(table, metrics)` prepares a table (or a split of it) once: the batch scorer's
block, the judged pairs and their rows. Then each weight vector costs one vectorised score
pass, the ranks of the judged rows and the metrics, with no per-query Python:

>>> scorer = Scorer.of(table, [parse_metric("ndcg@10")])          # doctest: +SKIP
>>> scorer.mean(Arm("tuned", weights), "ndcg@10")                   # doctest: +SKIP

An `Arm` is what a configuration changes on one table: the six weights, whether intent
routing moves them, and whether a soft role policy rescores the results.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from msprlab.engine import EngineConfig
from msprlab.engine.batch import (
    WEIGHTS,
    CandidateBlock,
    RowPlan,
    Weights,
    plan_rows,
    ranks_of,
    row_ranks,
    scores,
    warm_up,
)

from ..replay import CandidateTable, question_of
from .metrics import Judged, Metric, evaluate, judged_from_frames

__all__ = ["Arm", "Scorer", "arm_of", "per_search_frame", "ranked_lists", "ranking_values",
           "weights_of"]

GROUP_COLUMNS = ("intent", "question_type")


def weights_of(config: EngineConfig) -> tuple[float, ...]:
    """The six weights of a configuration, in `WEIGHTS` order."""
    return tuple(float(getattr(config.retrieval, name)) for name in WEIGHTS)


@dataclass(frozen=True)
class Arm:
    """One ranker to score: a name, the six weights (`WEIGHTS` order), intent and roles."""

    name: str
    weights: tuple[float, ...]
    intent: bool = False
    roles: bool = False

    def __post_init__(self) -> None:
        if len(self.weights) != len(WEIGHTS):
            raise ValueError(f"arm {self.name!r}: expected {len(WEIGHTS)} weights "
                             f"({', '.join(WEIGHTS)}), got {len(self.weights)}")
        for name, value in zip(WEIGHTS, self.weights, strict=True):
            if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
                raise ValueError(f"arm {self.name!r}: {name} must be in [0, 1], got {value!r}")

    @property
    def named_weights(self) -> Weights:
        return Weights(*self.weights)

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, **self.named_weights._asdict(),
                "intent": self.intent, "roles": self.roles}


def arm_of(name: str, config: EngineConfig) -> Arm:
    """The arm a full configuration scores as on a table built for it."""
    mspr = config.mspr
    return Arm(name, weights_of(config), intent=mspr.enabled and mspr.intent.enabled,
               roles=mspr.enabled and mspr.role.enabled)


@dataclass(frozen=True, eq=False)
class Scorer:
    """A candidate table prepared for scoring many arms."""

    table: CandidateTable
    block: CandidateBlock
    judged: Judged
    plan: RowPlan             # the judged pairs' internal block rows, in `judged` order
    returned: np.ndarray      # (S,) returned-list length per search (table order)
    metrics: tuple[Metric, ...]
    _bound: tuple[float, ...] | None = field(default=None, repr=False)

    @staticmethod
    def of(table: CandidateTable, metrics: Sequence[Metric], *,
           limit: int | None = None) -> Scorer:
        """Prepare `table`; `limit` overrides the searches' own limits."""
        if not metrics:
            raise ValueError("Scorer.of: name at least one metric")
        block = table.block(limit=limit)
        pairs = table.candidates.with_row_index("_row").filter(pl.col("grade").is_not_null())
        judged = judged_from_frames(table.searches.select("search", "query_id"),
                                    pairs.select("search", "memory_id", "grade"), table.qrels)
        rows = block.internal_rows(pairs["_row"].cast(pl.Int64).to_numpy())
        returned = np.empty(block.n_searches, dtype=np.int64)
        returned[block.searches] = block.returned()
        warm_up()   # compile the batch kernels (or load numba's cache) before any trial
        bound = None
        if table.meta.get("weights_bound"):
            config = table.meta["config"]["retrieval"]
            bound = tuple(float(config[name]) for name in WEIGHTS)
        return Scorer(table, block, judged, plan_rows(block, rows), returned, tuple(metrics),
                      bound)

    @property
    def n_searches(self) -> int:
        return self.block.n_searches

    def _check(self, arm: Arm) -> None:
        if self._bound is not None and arm.weights != self._bound:
            raise ValueError(f"arm {arm.name!r}: this table comes from a closed-loop replay, "
                             f"bound to the weights {self._bound}; replay again for other "
                             "weights (or use the logged frequency mode)")

    def ranks(self, arm: Arm) -> np.ndarray:
        """Rank of each judged pair in its search's returned list (-1: not returned)."""
        self._check(arm)
        score = scores(self.block, arm.weights, intent=arm.intent,
                       out=self.block.scratch(self.block.n_rows, name="score"))
        return ranks_of(self.block, score, self.plan, roles=arm.roles)

    def values(self, arm: Arm) -> dict[str, np.ndarray]:
        """Metric name -> per-search values (table order; NaN: no relevant memory)."""
        return evaluate(self.judged, self.ranks(arm), self.metrics, n_returned=self.returned)

    def mean(self, arm: Arm, metric: str) -> float:
        """Mean of one metric over the searches that have a relevant memory."""
        column = self.values(arm)[metric]
        kept = column[~np.isnan(column)]
        return float(kept.mean()) if kept.size else math.nan

    def frame(self, arm: Arm) -> pl.DataFrame:
        """One row per search: search, event_id, query_id, intent, question_type and one
        column per metric (named as `Metric.name`)."""
        return per_search_frame(self.table.searches, self.values(arm), self.metrics)

    def ranked(self, arm: Arm) -> tuple[np.ndarray, np.ndarray]:
        """Every candidate's score before the role pass and its final rank (-1: cut), in
        the block's internal row order: what `rankings` (the TREC runs) and the per-query
        explorer (`experiments.explore`) read, so both show one ranking."""
        self._check(arm)
        score = scores(self.block, arm.weights, intent=arm.intent)
        return score, row_ranks(self.block, score, roles=arm.roles)

    def rankings(self, arm: Arm) -> list[list[str]]:
        """Each search's returned memory ids in rank order (the slow, full-sort path)."""
        return ranked_lists(self.table, self.block, self.ranked(arm)[1])

    def match_rate(self, arm: Arm, *, rankings: list[list[str]] | None = None
                   ) -> tuple[int, int]:
        """(searches whose ranking equals the logged one, searches with a logged ranking);
        `rankings`: the arm's `rankings`, when the caller has them already."""
        logged = self.table.searches["logged"].to_list()
        ranked = self.rankings(arm) if rankings is None else rankings
        pairs = [(a, b) for a, b in zip(ranked, logged, strict=True)
                 if b is not None]
        return sum(a == b for a, b in pairs), len(pairs)


def per_search_frame(searches: pl.DataFrame, values: dict[str, np.ndarray],
                     metrics: Sequence[Metric]) -> pl.DataFrame:
    """One row per search (table order): search, event_id, query_id (the question),
    intent, question_type and one column per metric: every ranker's per-search frame."""
    return searches.select("search", "event_id", question_of(searches),
                           pl.col("intent_label").alias("intent"), "question_type"
                           ).with_columns(**{m.name: pl.Series(values[m.name]) for m in metrics})


def ranking_values(table: CandidateTable, rankings: Sequence[Sequence[str]],
                   metrics: Sequence[Metric]) -> dict[str, np.ndarray]:
    """Metric name -> per-search values of given rankings (memory ids, best first, one list
    per search in table order), against every judged memory of each search's query,
    returned or not: how a ranker outside the batch scorer is scored like an arm."""
    s = table.searches
    pairs = (s.select("search", "query_id")
             .join(table.qrels, on="query_id", maintain_order="left")
             .select("search", "memory_id", grade="relevance").sort("search", maintain_order=True))
    judged = judged_from_frames(s.select("search", "query_id"), pairs, table.qrels)
    rank_of = [{m: r for r, m in enumerate(ids)} for ids in rankings]
    ranks = np.fromiter((rank_of[k].get(m, -1) for k, m in pairs.select(
        "search", "memory_id").iter_rows()), dtype=np.int64, count=pairs.height)
    returned = np.array([len(ids) for ids in rankings], dtype=np.int64)
    return evaluate(judged, ranks, metrics, n_returned=returned)


def ranked_lists(table: CandidateTable, block: CandidateBlock,
                 rank: np.ndarray) -> list[list[str]]:
    """Each search's returned ids in rank order, from the internal-order ranks of every row
    (`engine.batch.row_ranks`)."""
    caller = block.internal_rows(np.arange(block.n_rows))
    ranked = table.candidates.select("search", "memory_id").with_columns(
        rank=pl.Series(rank[caller]))
    found = dict(ranked.filter(pl.col("rank") >= 0).sort("search", "rank")
                 .group_by("search", maintain_order=True).agg("memory_id").iter_rows())
    return [found.get(i, []) for i in range(table.searches.height)]
