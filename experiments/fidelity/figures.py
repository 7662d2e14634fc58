"""How close a replay came to production: its end state and its rankings, in shares.

`measure` compares one replay (its end state and its candidate table, ranked as the
production arm ranks) with `Production`:

- **nodes**: share of production's nodes whose relevance and relevance floor the replay
  reaches within `tolerance` and whose archived flag it matches;
- **edges**: share of the edges of either side (by src, dst, type) present on both with
  weights within `tolerance` (an edge decay pruned on one side only counts as unequal);
- **deltas**: share of production's verdicts whose `delta_applied` the replay applied too
  (matched by memory, time, user and verdict; within `tolerance`);
- **success**: share of production's verdicts for which the replay writes a success row
  exactly when production's success store holds one (where that store was ingested);
- **in top k**: share of the verdicts labelling the replayed searches whose memory is in
  the production arm's replayed top k (production showed every one of them), and of the
  helpful ones;
- **ranks**: where the application recorded `metadata.rank`, the share of those verdicts
  whose memory the replay ranks exactly there (and the mean distance, a memory outside the
  returned list counted at k + 1);
- **access counts**: share of nodes whose access count the replay reaches. Not held to a
  threshold: the artifacts keep no log of the searches without a verdict, whose results
  the library counted, so a replay reaches production's counts only when it counted none.

Under decay, the end state is compared as of production's last tick (one more tick there
when the replay's last came earlier: `stage._align_state`).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl

from msprlab.engine import EngineConfig
from msprlab.engine.state import EngineState

from ..measures.metrics import parse_metric
from ..measures.scoring import Scorer, arm_of
from ..replay import CandidateTable
from .production import Production

__all__ = ["FIGURES", "Figures", "Ranked", "below", "measure", "ranking_figures",
           "reconstructed_lists"]

# The figures held to a threshold, in the order they are printed.
FIGURES = ("nodes", "edges", "deltas", "success", "in_top", "ranks")


@dataclass(frozen=True)
class Ranked:
    """The ranking figures of one arm on one table (`Figures` has their meaning)."""

    in_top: float | None
    in_top_helpful: float | None
    in_top_n: int
    ranks: float | None
    ranks_n: int
    rank_distance: float | None


@dataclass(frozen=True)
class Figures(Ranked):
    """One replay's fidelity (module docstring): the end state's figures beside the
    ranking's (`Ranked`); a share is None where nothing could be compared (no verdict
    records, no recorded rank)."""

    k: int
    nodes: float
    nodes_n: int
    edges: float
    edges_n: int
    edges_missing: int   # production's edges the replay does not hold at the end
    edges_extra: int     # the replay's edges production does not hold
    deltas: float | None
    deltas_n: int
    success: float | None
    access: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def short(self) -> str:
        """One line: every figure with its n."""
        def pct(value: float | None) -> str:
            return "n/a" if value is None else f"{value:.1%}"
        helpful = "" if self.in_top_helpful is None else f" (helpful {pct(self.in_top_helpful)})"
        return (f"nodes {pct(self.nodes)} of {self.nodes_n:,}, edges {pct(self.edges)} of "
                f"{self.edges_n:,}, deltas {pct(self.deltas)} of {self.deltas_n:,}, success "
                f"rows {pct(self.success)}, verdicted "
                f"memories in the top {self.k} {pct(self.in_top)}{helpful} of "
                f"{self.in_top_n:,}, recorded ranks {pct(self.ranks)} of {self.ranks_n:,}")


def _node_shares(production: Production, state: EngineState,
                 tolerance: float) -> tuple[float, float]:
    equal = access = 0
    for memory_id, relevance, floor, archived, count in production.nodes.select(
            "memory_id", "relevance", "relevance_floor", "archived", "access_count"
            ).iter_rows():
        node = state.graph.get(memory_id)
        if node is None:
            continue
        equal += (abs(node.relevance - relevance) <= tolerance
                  and abs(node.relevance_floor - floor) <= tolerance
                  and bool(node.archived) == bool(archived))
        access += node.access_count == count
    n = production.nodes.height
    return equal / n, access / n


def _edge_share(production: Production, state: EngineState,
                tolerance: float) -> tuple[float, int, int, int]:
    ours = {(e.src, e.dst, e.type.value): e.weight for e in state.graph.edges()}
    theirs = {(s, d, t): w for s, d, t, w in production.edges.iter_rows()}
    equal = sum(1 for key, w in theirs.items()
                if key in ours and abs(ours[key] - w) <= tolerance)
    union = len(ours.keys() | theirs.keys())
    missing = len(theirs.keys() - ours.keys())
    extra = len(ours.keys() - theirs.keys())
    return (equal / union if union else 1.0), union, missing, extra


def _delta_share(production: Production, state: EngineState,
                 tolerance: float) -> float | None:
    records = production.records
    if not records.height:
        return None
    applied: dict[tuple[Any, ...], list[float]] = {}
    for row in state.feedback.rows if state.feedback is not None else []:
        key = (row.memory_id, row.timestamp, row.user_id, row.helpful)
        applied.setdefault(key, []).append(row.delta_applied)
    seen: Counter[tuple[Any, ...]] = Counter()
    equal = 0
    for memory_id, ts, user, helpful, delta in records.select(
            "memory_id", "ts", "user_id", "helpful", "delta_applied").iter_rows():
        key = (memory_id, ts, user, helpful)
        found = applied.get(key, [])
        k = seen[key]
        seen[key] += 1
        equal += k < len(found) and abs(found[k] - delta) <= tolerance
    return equal / records.height


def _success_share(production: Production, state: EngineState) -> float | None:
    records = production.records.filter(pl.col("success_row").is_not_null())
    if not records.height:
        return None
    written: Counter[tuple[Any, ...]] = Counter(
        (row.memory_id, row.timestamp, row.user_id, row.helpful)
        for row in (state.success.rows if state.success is not None else []))
    equal = 0
    for memory_id, ts, user, helpful, rowed in records.select(
            "memory_id", "ts", "user_id", "helpful", "success_row").iter_rows():
        key = (memory_id, ts, user, helpful)
        has = written[key] > 0
        written[key] -= has
        equal += has == rowed
    return equal / records.height


def _occurrence_ranks(production: Production, table: CandidateTable,
                      events: pl.DataFrame) -> pl.DataFrame:
    """The recorded ranks with the replayed search each belongs to: the record's feedback
    event gives its question (the query hash); its search is that user's latest search of
    that question before it (the occurrence the verdict labels)."""
    recorded = production.records.filter(pl.col("rank").is_not_null())
    feedback = (events.filter(pl.col("kind") == "feedback", pl.col("query_id").is_not_null())
                .select("memory_id", pl.col("ts").cast(pl.Datetime("us")), "user_id",
                        "helpful", question="query_id").unique(
                    ["memory_id", "ts", "user_id", "helpful"], keep="first"))
    asked = recorded.join(feedback, on=["memory_id", "ts", "user_id", "helpful"],
                          how="inner", nulls_equal=True)
    searches = table.searches.select("search", pl.col("ts").cast(pl.Datetime("us")),
                                     "user_id", "question").sort("ts")
    return asked.sort("ts").join_asof(searches, on="ts", by=["user_id", "question"],
                                      strategy="backward", check_sortedness=False).filter(
        pl.col("search").is_not_null())


def reconstructed_lists(table: CandidateTable, config: EngineConfig) -> list[list[str]]:
    """What production showed at each search of `table`, as the replay reconstructs it:
    the returned memory ids, best first, of `config` (production's [engine]) scored on the
    table. Trust it as far as the fidelity figures say (`in_top`, `ranks`)."""
    if not table.searches.height:
        return []
    return Scorer.of(table, [parse_metric("judged@10")]).rankings(arm_of("production", config))


def ranking_figures(production: Production, table: CandidateTable, events: pl.DataFrame,
                    config: EngineConfig, *, k: int) -> Ranked:
    """Where `config`'s ranking on `table` puts the verdicted memories and the recorded
    ranks."""
    rankings = reconstructed_lists(table, config)
    position = [{m: r for r, m in enumerate(ids)} for ids in rankings]
    search_of = dict(table.searches.select("query_id", "search").iter_rows())
    in_top, helpful = [], []
    for query_id, memory_id, relevance in table.qrels.select(
            "query_id", "memory_id", "relevance").iter_rows():
        rank = position[search_of[query_id]].get(memory_id)
        shown = rank is not None and rank < k
        in_top.append(shown)
        if relevance > 0:
            helpful.append(shown)
    same = distance = None
    n_ranks = 0
    ranks = _occurrence_ranks(production, table, events) if production.ranked else None
    if ranks is not None and ranks.height:
        replayed = np.minimum(np.array([position[s].get(m, k) + 1 for s, m in ranks.select(
            "search", "memory_id").iter_rows()]), k + 1)
        recorded = ranks["rank"].to_numpy()
        same = float(np.mean(replayed == recorded))
        distance = float(np.mean(np.abs(replayed - recorded)))
        n_ranks = ranks.height
    return Ranked(float(np.mean(in_top)) if in_top else None,
                  float(np.mean(helpful)) if helpful else None, len(in_top), same, n_ranks,
                  distance)


def measure(production: Production, state: EngineState, table: CandidateTable,
            events: pl.DataFrame, config: EngineConfig, *, k: int,
            tolerance: float) -> Figures:
    """The fidelity of one replay: its end `state`, its `table` (verdict labelled, with
    `question` per search) ranked as `config` ranks, the timeline it replayed (`events`)."""
    nodes, access = _node_shares(production, state, tolerance)
    edges, union, missing, extra = _edge_share(production, state, tolerance)
    ranked = ranking_figures(production, table, events, config, k=k)
    return Figures(k=k, nodes=nodes, nodes_n=production.nodes.height, edges=edges,
                   edges_n=union, edges_missing=missing, edges_extra=extra,
                   deltas=_delta_share(production, state, tolerance),
                   deltas_n=production.records.height,
                   success=_success_share(production, state), access=access,
                   **asdict(ranked))


def below(figures: Figures, thresholds: dict[str, float]) -> list[str]:
    """The figures under their threshold (a figure that could not be measured never is)."""
    out = []
    for name in FIGURES:
        value = getattr(figures, name)
        if value is not None and not math.isnan(value) and value < thresholds[name]:
            out.append(name)
    return out
