"""The batch scorer ranks exactly as the sequential engine, over generated logs and weights.

One replay of a generated log gives the candidate table; for any weights, intent switch and
soft role policy, scoring that table must give, search by search, the same ranked ids as
running the engine itself with those settings over the same timeline (`engine_rankings`).
Weights come from a grid with zeros, so tied scores are common (all-zero weights tie every
candidate: the order is then discovery order).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msprlab.engine.batch import (
    WEIGHTS,
    CandidateBlock,
    intent_weights,
    ranks_of,
    row_ranks,
    scores,
)
from msprlab.experiments.replay import CandidateTable, replay, table_key

from replay_world import GRID, StripedPolicy, signals, world


def batch_rankings(table: CandidateTable, weights: tuple[float, ...], *, intent: bool,
                   roles: bool, fast: bool) -> list[list[str]]:
    block = table.block()
    score = scores(block, weights, intent=intent)
    if fast:  # ranks of every row through the judged-rows path
        rank = ranks_of(block, score, np.arange(block.n_rows), roles=roles)
    else:
        rank = row_ranks(block, score, roles=roles)
    caller = block.internal_rows(np.arange(block.n_rows))
    ranked = table.candidates.with_columns(rank=pl.Series(rank[caller]))
    lists = (ranked.filter(pl.col("rank") >= 0).sort("search", "rank")
             .group_by("search", maintain_order=True).agg("memory_id"))
    found = dict(lists.iter_rows())
    return [found.get(s, []) for s in range(table.searches.height)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from([1, 2]),
       weights=st.tuples(*[st.sampled_from(GRID) | st.floats(0.0, 1.0)] * 6),
       intent=st.booleans(), roles=st.booleans(), fast=st.booleans())
def test_batch_scorer_ranks_exactly_as_the_engine(seed, weights, intent, roles, fast) -> None:
    log, table = world(seed)
    config = signals(weights, intent=intent, roles=roles)
    assert table_key(config, "logged") == table.meta["table_key"]
    reference = replay(log, config, policy=StripedPolicy(), engine_rankings=True)
    expected = [list(x or []) for x in reference.searches["engine"].to_list()]
    assert batch_rankings(table, weights, intent=intent, roles=roles, fast=fast) == expected


def test_the_generated_world_exercises_ties_roles_and_intents() -> None:
    _, table = world(1)
    c = table.candidates
    assert (c["role"] == 0.0).any() and (c["role"] == 0.5).any()
    assert table.searches["intent"].n_unique() >= 2
    assert (c["personal"] != 0).any() and (c["success"] != 0).any()
    assert (c["frequency"] != 0).any()
    # all-zero weights: every score ties, so the ranking is discovery order, cut at limit
    ranked = batch_rankings(table, (0.0,) * 6, intent=False, roles=False, fast=True)
    firsts = (c.filter(pl.col("position") < 10).group_by("search", maintain_order=True)
              .agg("memory_id"))
    assert ranked == [list(x) for x in firsts["memory_id"].to_list()]


def test_closed_loop_replay_of_the_logging_ranker_reproduces_the_log() -> None:
    log, _ = world(2)
    logging = signals((0.55, 0.15, 0.3, 0.2, 0.3, 0.2), intent=True, roles=False)
    table = replay(log, logging, frequency="closed_loop")
    block = table.block()
    assert table.meta["weights_bound"]
    rank = row_ranks(block, scores(block, [getattr(logging.retrieval, w) for w in WEIGHTS]))
    ranked = table.candidates.with_columns(
        rank=pl.Series(rank[block.internal_rows(np.arange(block.n_rows))]))
    lists = dict(ranked.filter(pl.col("rank") >= 0).sort("search", "rank")
                 .group_by("search", maintain_order=True).agg("memory_id").iter_rows())
    logged = table.searches["logged"].to_list()
    assert [lists.get(s, []) for s in range(len(logged))] == logged


def test_intent_weights_move_and_clamp_like_the_library() -> None:
    table = intent_weights((0.95, 0.0, 0.05, 0.1, 0.2, 0.3))
    factual = table[0]  # INTENTS order: FACTUAL first
    assert factual.tolist() == [1.0, 0.1, 0.0, 0.1, 0.2, 0.3]
    assert (intent_weights((0.95, 0.0, 0.05, 0.1, 0.2, 0.3), intent=False) == [
        0.95, 0.0, 0.05, 0.1, 0.2, 0.3]).all()
    with pytest.raises(ValueError, match="expected 6 weights"):
        intent_weights((0.5,))


def test_block_rejects_inconsistent_input() -> None:
    with pytest.raises(ValueError, match="finite"):
        CandidateBlock.build(search=[0], features=np.full((6, 1), np.nan), relevance=[1.0],
                             role=[1.0], search_intent=[4], search_limit=[10])
    with pytest.raises(ValueError, match=r"0\.\.S-1"):
        CandidateBlock.build(search=[3], features=np.zeros((6, 1)), relevance=[1.0],
                             role=[1.0], search_intent=[4], search_limit=[10])
