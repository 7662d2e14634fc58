"""Replay: the timeline rules, the frequency modes, the cache, subsets and errors; the
Scorer's fast metrics against the slow path."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from msprlab.engine.batch import WEIGHTS
from msprlab.experiments.errors import ExperimentError
from msprlab.experiments.measures.metrics import evaluate, judged_from_frames, parse_metric
from msprlab.experiments.measures.scoring import Arm, Scorer
from msprlab.experiments.replay import (
    CandidateTable,
    cached_replay,
    derive_table,
    replay,
    success_twin,
    table_key,
)

from replay_world import StripedPolicy, signals, world

FULL = signals((0.0,) * 6, intent=True, roles=True)
METRICS = [parse_metric(m) for m in ("ndcg@10", "recall@10", "mrr", "map", "judged@5")]


def test_every_search_with_a_query_is_evaluated_in_timeline_order() -> None:
    log, table = world(1)
    searches = log.events.filter(pl.col("kind") == "search")
    assert table.searches["event_id"].to_list() == searches["event_id"].to_list()
    assert table.searches["ts"].is_sorted()
    assert table.meta["frequency"] == "logged"
    assert "frozen" in table.meta["feedback_policy"]
    assert table.meta["seeds"].startswith("stored query vectors")
    c = table.candidates
    assert c.group_by("search").agg(pl.col("position").diff().drop_nulls().eq(1).all())[
        "position"].all()


def test_feedback_and_access_at_a_search_timestamp_come_after_it() -> None:
    """Move every feedback and access event onto the timestamp of the search before it:
    with (ts, kind) ordering they still apply after that search, so nothing it sees
    changes, while later searches see them as before."""
    log, table = world(1)
    events = log.events
    search_ts = pl.when(pl.col("kind") == "search").then(pl.col("ts")).forward_fill()
    moved = events.with_columns(
        ts=pl.when(pl.col("kind").is_in(["feedback", "access"])).then(search_ts)
        .otherwise(pl.col("ts")))
    from msprlab.datasets.simulate import order_events
    shifted = replace(log, events=order_events(moved))
    again = replay(shifted, FULL, policy=StripedPolicy())
    features = ["memory_id", "personal", "success", "frequency"]
    assert again.candidates.select(features).equals(table.candidates.select(features))
    assert (table.candidates["personal"] != 0).any()
    # Moved one event later than its search instead, it would be seen: the test can fail.
    early = events.with_columns(ts=pl.when(pl.col("kind") == "feedback")
                                .then(search_ts - pl.duration(microseconds=1))
                                .otherwise(pl.col("ts")))
    sooner = replay(replace(log, events=order_events(early)), FULL, policy=StripedPolicy())
    assert not sooner.candidates.select(features).equals(table.candidates.select(features))


def test_logged_frequency_follows_the_access_events_only() -> None:
    log, table = world(2)
    no_access = replace(log, events=log.events.filter(pl.col("kind") != "access")
                        .with_columns(event_id=pl.int_range(pl.len(), dtype=pl.Int64),
                                      seq=pl.int_range(pl.len(), dtype=pl.Int64)))
    quiet = replay(no_access, FULL, policy=StripedPolicy())
    assert (table.candidates["frequency"] > 0).any()
    assert (quiet.candidates["frequency"] == 0).all()
    closed = replay(no_access, signals((0.55, 0.15, 0.3, 0.2, 0.0, 0.0), intent=False,
                                       roles=False), frequency="closed_loop")
    assert (closed.candidates["frequency"] > 0).any()  # its own results feed the counts


def test_cache_is_reused_and_keyed(tmp_path) -> None:
    log, _ = world(1)
    first, cached = cached_replay(log, FULL, tmp_path, policy=StripedPolicy())
    again, cached_again = cached_replay(log, FULL, tmp_path, policy=StripedPolicy())
    assert (cached, cached_again) == (False, True)
    assert again.candidates.equals(first.candidates) and again.searches.equals(first.searches)
    # other weights share the table key in logged mode: same cache entry
    other = replace(FULL, retrieval=replace(FULL.retrieval, zeta_success=0.7))
    assert cached_replay(log, other, tmp_path, policy=StripedPolicy())[1]
    # a hard role filter changes the candidates: a new replay
    hard = replace(FULL, mspr=replace(FULL.mspr, role=replace(FULL.mspr.role,
                                                              hard_filter=True)))
    assert not cached_replay(log, hard, tmp_path, policy=StripedPolicy())[1]
    assert len(list(tmp_path.iterdir())) == 2


def test_subset_renumbers_and_keeps_qrels() -> None:
    _, table = world(1)
    keep = np.arange(table.searches.height) % 3 == 0
    part = table.subset(keep)
    assert part.searches["search"].to_list() == list(range(part.searches.height))
    assert part.searches["event_id"].to_list() == table.searches.filter(
        pl.Series(keep))["event_id"].to_list()
    assert set(part.candidates["search"].unique().to_list()) <= set(range(part.searches.height))
    assert set(part.qrels["query_id"].to_list()) <= set(part.searches["query_id"].to_list())


def test_scorer_metrics_equal_metrics_of_the_full_rankings() -> None:
    _, table = world(2)
    scorer = Scorer.of(table, METRICS)
    arm = Arm("x", (0.5, 0.25, 0.0, 1.0, 0.5, 0.25), intent=True, roles=True)
    fast = scorer.values(arm)
    rankings = scorer.rankings(arm)  # full sort, then the ranks of the judged pairs
    pairs = table.candidates.filter(pl.col("grade").is_not_null()).select(
        "search", "memory_id", "grade")
    judged = judged_from_frames(table.searches.select("search", "query_id"), pairs, table.qrels)
    rank_of = {(s, m): r for s, ids in enumerate(rankings) for r, m in enumerate(ids)}
    ranks = np.array([rank_of.get((s, m), -1) for s, m in
                      pairs.select("search", "memory_id").iter_rows()])
    slow = evaluate(judged, ranks, METRICS,
                    n_returned=np.array([len(r) for r in rankings]))
    for name in fast:
        np.testing.assert_array_equal(fast[name], slow[name])
    assert np.nanmean(fast["ndcg@10"]) > 0


def test_closed_loop_table_is_bound_to_its_weights() -> None:
    log, _ = world(2)
    config = signals((0.55, 0.15, 0.3, 0.2, 0.0, 0.0), intent=False, roles=False)
    table = replay(log, config, frequency="closed_loop")
    scorer = Scorer.of(table, METRICS[:1])
    own = Arm("own", tuple(getattr(config.retrieval, w) for w in WEIGHTS))
    assert scorer.mean(own, "ndcg@10") >= 0
    with pytest.raises(ValueError, match="closed-loop replay"):
        scorer.values(Arm("other", (1.0, 0.0, 0.0, 0.0, 0.0, 0.0)))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_table_without_success_is_its_success_twins_with_success_zero(seed: int) -> None:
    """The derived table equals the replayed one bit for bit: success moves nothing but its
    own term (a success row that fed relevance or access counts would fail this)."""
    log, twin_table = world(seed)
    off = replace(FULL, mspr=replace(FULL.mspr, success=replace(FULL.mspr.success,
                                                                    enabled=False)))
    assert success_twin(off, "logged") == FULL
    replayed = replay(log, off, policy=StripedPolicy())
    derived = derive_table(twin_table, off, "logged", has_policy=True)
    assert_frame_equal(derived.searches, replayed.searches, check_exact=True)
    assert_frame_equal(derived.candidates, replayed.candidates, check_exact=True)
    assert_frame_equal(derived.qrels, replayed.qrels, check_exact=True)
    assert twin_table.candidates["success"].max() > 0  # the twin's success is not all 0
    assert derived.meta["table_key"] == replayed.meta["table_key"] == table_key(
        off, "logged", has_policy=True)
    # the engine time per search is measured in a replay: the derived table has its twin's
    assert derived.meta["cost"]["measured_on"] == "the success twin"
    assert ({k: v for k, v in derived.meta.items() if k not in ("derived", "cost")}
            == {k: v for k, v in replayed.meta.items() if k != "cost"})


def test_only_a_logged_table_with_success_off_has_a_success_twin() -> None:
    assert success_twin(FULL, "logged") is None  # success is on
    off = replace(FULL, mspr=replace(FULL.mspr, success=replace(FULL.mspr.success,
                                                                    enabled=False)))
    assert success_twin(off, "closed_loop") is None  # success moves the counted accesses
    assert success_twin(replace(off, mspr=replace(off.mspr, enabled=False)), "logged") is None
    with pytest.raises(ExperimentError, match="success twin"):
        derive_table(world(1)[1], FULL, "logged", has_policy=True)


def test_replays_inside_shared_by_replays_share_what_they_read_and_give_the_same_tables(
        ) -> None:
    from msprlab.datasets.timeline import corpus_of, shared_by_replays
    log, table = world(2)
    off = replace(FULL, mspr=replace(FULL.mspr, enabled=False))
    alone = replay(log, off, policy=StripedPolicy())
    assert corpus_of(log) is not corpus_of(log)  # outside: made each time
    with shared_by_replays(log):
        assert corpus_of(log) is corpus_of(log)
        again = replay(log, FULL, policy=StripedPolicy())
        off_again = replay(log, off, policy=StripedPolicy())
    assert corpus_of(log) is not corpus_of(log)  # and forgotten after
    for got, want in ((again, table), (off_again, alone)):
        assert_frame_equal(got.searches, want.searches, check_exact=True)
        assert_frame_equal(got.candidates, want.candidates, check_exact=True)


def test_timelines_inside_shared_by_replays_make_each_payload_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each memory's payload and node hash are made once for the replays inside (the store
    keeps its own copy of a payload put in it); the states equal one built alone."""
    from msprlab.datasets import timeline
    from msprlab.engine import new_state
    log, _ = world(1)
    made, payload = [], timeline._payload
    monkeypatch.setattr(timeline, "_payload", lambda row: made.append(row) or payload(row))

    def advanced() -> Any:
        state = new_state(FULL)
        timeline.Timeline(log, timeline.corpus_of(log), state).advance(1 << 62)
        return state
    alone = advanced()
    with timeline.shared_by_replays(log):
        first, second = advanced(), advanced()
    assert len(made) == 2 * log.memories.height
    for state in (first, second):
        assert state.payloads == alone.payloads and len(alone.payloads) > 0
        assert [(n.id, n.hash, n.created_at, n.updated_at, n.user_id, n.metadata)
                for n in state.graph.nodes.values() if n is not None] == [
            (n.id, n.hash, n.created_at, n.updated_at, n.user_id, n.metadata)
            for n in alone.graph.nodes.values() if n is not None]


def test_bad_input_is_refused_with_a_reason() -> None:
    log, _ = world(1)
    with pytest.raises(ValueError, match=r"context_graph\.enabled"):
        replay(log, replace(FULL, context_graph_enabled=False))
    with pytest.raises(ValueError, match="no memory embeddings"):
        replay(replace(log, embeddings=log.embeddings.clear()), FULL)
    with pytest.raises(ValueError, match="frequency must be one of"):
        replay(log, FULL, frequency="sometimes")  # type: ignore[arg-type]
    assert isinstance(world(1)[1], CandidateTable)


def test_qdrant_seeds_match_the_exact_seeds() -> None:
    """Seeds from a Qdrant index (owner filters, memories not yet added dropped) are the
    exact seeds up to float32 scores."""
    from msprlab.datasets.sidecars import memory_index
    log, table = world(1)
    with memory_index(log) as index:
        qdrant = replay(log, FULL, policy=StripedPolicy(), seed_index=index)
    assert "QdrantIndex" in qdrant.meta["seeds"]
    exact = table.candidates.filter(pl.col("was_seed")).select("search", "memory_id", "dense")
    found = qdrant.candidates.filter(pl.col("was_seed")).select("search", "memory_id", "dense")
    joined = exact.join(found, on=["search", "memory_id"], how="full", suffix=":q")
    same = joined.filter(pl.col("dense").is_not_null() & pl.col("dense:q").is_not_null())
    assert same.height >= 0.95 * exact.height  # near-ties may swap at the 10th seed
    assert (same["dense"] - same["dense:q"]).abs().max() < 1e-6
