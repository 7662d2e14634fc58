"""What the per-query explorer shows, computed once per run from the scorers of the test
window: each arm's top of every search with the parts of each score, and where each
relevant memory that the top does not hold was lost.

The ranking and the scores come from `Scorer.ranked`, the path the bundle's TREC runs are
written by, so the lists are the runs' lists. The parts are the batch scorer's arithmetic
(MSPR.md section 10.4-10.5, `engine.batch`): the six weighted terms, each a feature of the
candidate table times the weight the search scored with (the arm's weights, moved by the
search's intent label when the arm routes intent), added left to right (a term whose weight
is 0 is not added), times the relevance multiplier; then, for an arm with a soft role
policy, the returned score times the role multiplier (section 12: 0 for a denied memory).
So each shown score is ((term_1 + ... + term_6) x relevance) x role.

Frames (fixed columns, one schema each below):

- lists: arm, event_id, rank (1-based), memory_id, seed (a dense seed, else reached
  through the graph), score, relevance, role, grade (null: unjudged), and per feature
  `FEATURE` (the table's value) and `FEATURE_term` (times its weight);
- lost: arm, event_id, memory_id, grade, fate (`FATES`), rank (1-based, in the pool's
  order; null when not in the pool), pool (candidates of the search), seed;
- searches: event_id, query_id (the question), occurrence (the labelled query id), query,
  ts, intent, question_type, limit;
- weights: arm, event_id, the six weights the search scored with (the arm's, moved by the
  label its table scored the search with when the arm routes intent);
- memories: memory_id, text (cut to `TEXT_CHARS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from msprlab.engine.batch import FEATURES, INTENTS, WEIGHTS, intent_weights

from ..measures.scoring import Arm, Scorer
from ..replay import question_of

__all__ = ["DEPTH", "FATES", "LISTS", "LOST", "MEMORIES", "SEARCHES", "TERMS", "TEXT_CHARS",
           "WEIGHT_COLUMNS", "Explored", "explore_arms"]

DEPTH = 10          # the top shown per arm and search
TEXT_CHARS = 240    # a memory's text is cut here in the bundle (the page and explain cut more)
TERMS = tuple(f"{f}_term" for f in FEATURES)
# Where a relevant memory that an arm's top does not show was lost, per arm and search.
FATES = {
    "ranked": "in the pool, ranked below the top shown",
    "not_in_pool": "not in the pool: never a dense seed, not reached through the graph",
    "not_added_yet": "not in the store yet: added after this search",
    "deleted": "deleted before this search",
}

LISTS = pl.Schema({
    "arm": pl.String, "event_id": pl.Int64, "rank": pl.Int64, "memory_id": pl.String,
    "seed": pl.Boolean, "score": pl.Float64, "relevance": pl.Float64, "role": pl.Float64,
    "grade": pl.Int64, **{f: pl.Float64 for f in FEATURES}, **{t: pl.Float64 for t in TERMS}})
LOST = pl.Schema({
    "arm": pl.String, "event_id": pl.Int64, "memory_id": pl.String, "grade": pl.Int64,
    "fate": pl.String, "rank": pl.Int64, "pool": pl.Int64, "seed": pl.Boolean})
SEARCHES = pl.Schema({
    "event_id": pl.Int64, "query_id": pl.String, "occurrence": pl.String, "query": pl.String,
    "ts": pl.Datetime("us"), "intent": pl.String, "question_type": pl.String,
    "limit": pl.Int64})
WEIGHT_COLUMNS = pl.Schema({"arm": pl.String, "event_id": pl.Int64,
                            **{w: pl.Float64 for w in WEIGHTS}})
MEMORIES = pl.Schema({"memory_id": pl.String, "text": pl.String})


@dataclass(frozen=True)
class Explored:
    """The explorer's frames (module docstring), as the bundle holds them."""

    lists: pl.DataFrame
    lost: pl.DataFrame
    searches: pl.DataFrame
    weights: pl.DataFrame
    memories: pl.DataFrame


def explore_arms(scorers: Mapping[str, Scorer], arms: Mapping[str, Arm],
                 memories: pl.DataFrame, *, depth: int = DEPTH) -> Explored:
    """The explorer's frames of `arms` (name -> arm), each scored on `scorers[name]`, all
    on the same searches; `memories`: the store's memories (memory_id, text, created_at,
    deleted_at), for the texts and the fates of relevant memories outside the pool."""
    first = scorers[next(iter(arms))].table.searches
    for name in arms:
        other = scorers[name].table.searches
        if not other["event_id"].equals(first["event_id"]):
            raise ValueError(f"explore: arm {name!r} is scored on other searches")
    lists, lost, weights = [], [], []
    for name, arm in arms.items():
        rows, pool = _arm_rows(scorers[name], arm, name)
        lists.append(rows.filter(pl.col("rank").is_between(1, depth)).select(LISTS.names()))
        lost.append(_lost(scorers[name], pool, memories, name, depth))
        weights.append(_weights(scorers[name], arm, name))
    lists_frame = pl.concat(lists).sort("arm", "event_id", "rank", maintain_order=True)
    shown = lists_frame.get_column("memory_id").unique()
    lost_frame = pl.concat(lost).sort("arm", "event_id", "memory_id")
    needed = pl.concat([shown, lost_frame.get_column("memory_id")]).unique().implode()
    texts = (memories.filter(pl.col("memory_id").is_in(needed))
             .select("memory_id", text=pl.col("text").str.slice(0, TEXT_CHARS))
             .sort("memory_id"))
    return Explored(lists_frame, lost_frame, _searches(first), pl.concat(weights), texts)


def _arm_rows(scorer: Scorer, arm: Arm, name: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Every candidate of the arm's table with its parts, final score and rank (the
    returned ones: 1-based, in the returned order; the rest: null), and the pool: every
    candidate with its 1-based rank in the pool's order (`pool_rank`: the returned list,
    then the cut candidates by score, ties in discovery order) and the pool's size."""
    table, block = scorer.table, scorer.block
    score, rank = scorer.ranked(arm)
    internal = block.internal_rows(np.arange(block.n_rows))  # table row -> internal row
    first, final = score[internal], rank[internal]
    c = table.candidates
    by_search = _labels(scorer)[c["search"].to_numpy()]
    w = intent_weights(arm.weights, intent=arm.intent)[by_search]        # (N, 6)
    f = np.stack([c[name].to_numpy() for name in FEATURES], axis=1)       # (N, 6)
    terms = np.where(w != 0.0, f * w, 0.0)   # the kernel adds no term whose weight is 0
    role = c["role"].to_numpy() if arm.roles else np.ones(c.height)
    shown = np.where(final >= 0, first * role, first)  # the role pass rescores what returns
    events = table.searches["event_id"]
    rows = c.select(
        "search", "position", "memory_id", "relevance", "grade", seed="was_seed",
    ).with_columns(
        arm=pl.lit(name), event_id=events.gather(c["search"]),
        score=pl.Series(shown), first=pl.Series(first), role=pl.Series(role),
        rank=pl.Series(final + 1),
        **{n: c[n] for n in FEATURES},
        **{t: pl.Series(terms[:, k]) for k, t in enumerate(TERMS)},
    ).with_columns(rank=pl.when(pl.col("rank") > 0).then(pl.col("rank")))
    pool = (rows.sort("search", pl.col("rank").is_null(), "rank", pl.col("first"), "position",
                      descending=[False, False, False, True, False], nulls_last=True)
            .with_columns(pool_rank=pl.int_range(1, pl.len() + 1).over("search"),
                          pool=pl.len().over("search")))
    return rows, pool


def _lost(scorer: Scorer, pool: pl.DataFrame, memories: pl.DataFrame, name: str,
          depth: int) -> pl.DataFrame:
    """Each relevant memory (grade > 0) of each search that the arm's top `depth` does not
    hold, with its fate (`FATES`)."""
    s = scorer.table.searches
    relevant = (s.select("search", "event_id", "ts", "query_id")
                .join(scorer.table.qrels.filter(pl.col("relevance") > 0), on="query_id")
                .select("search", "event_id", "ts", "memory_id", grade="relevance"))
    sizes = s.select("search", pool=pl.col("n_candidates"))
    found = relevant.join(pool.select("search", "memory_id", "rank", "pool_rank", "seed"),
                          on=["search", "memory_id"], how="left")
    times = memories.select("memory_id", "created_at", "deleted_at")
    out = (found.filter(pl.col("rank").is_null() | (pl.col("rank") > depth))
           .join(sizes, on="search").join(times, on="memory_id", how="left")
           .with_columns(fate=pl.when(pl.col("pool_rank").is_not_null()).then(pl.lit("ranked"))
                         .when(pl.col("created_at") > pl.col("ts")).then(pl.lit("not_added_yet"))
                         .when(pl.col("deleted_at") <= pl.col("ts")).then(pl.lit("deleted"))
                         .otherwise(pl.lit("not_in_pool")),
                         arm=pl.lit(name)))
    return out.select(pl.col("arm"), "event_id", "memory_id", pl.col("grade").cast(pl.Int64),
                      "fate", rank=pl.col("pool_rank").cast(pl.Int64),
                      pool=pl.col("pool").cast(pl.Int64), seed="seed")


def _labels(scorer: Scorer) -> np.ndarray:
    """Per search (table order): the index into `INTENTS` of the label its weights follow."""
    return scorer.table.searches["intent"].replace_strict(
        {label.value: i for i, label in enumerate(INTENTS)}, return_dtype=pl.Int64).to_numpy()


def _weights(scorer: Scorer, arm: Arm, name: str) -> pl.DataFrame:
    per_search = intent_weights(arm.weights, intent=arm.intent)[_labels(scorer)]
    events = scorer.table.searches["event_id"]
    return pl.DataFrame({"arm": [name] * events.len(), "event_id": events,
                         **{w: per_search[:, k] for k, w in enumerate(WEIGHTS)}},
                        schema=WEIGHT_COLUMNS)


def _searches(searches: pl.DataFrame) -> pl.DataFrame:
    return searches.select(
        "event_id", question_of(searches), pl.col("query_id").alias("occurrence"), "query",
        "ts", pl.col("intent_label").alias("intent"), "question_type", "limit",
    ).cast(dict(SEARCHES))
