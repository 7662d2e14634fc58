"""Several search settings scored in one walk over the timeline: each variant's table is
that of a replay of its configuration alone, bit for bit; settings that cannot reach a
table leave its key alone (and the table too); the settings split and its refusals."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from msprlab.engine import EngineConfig
from msprlab.engine.roles import policy_from_name
from msprlab.experiments.errors import ExperimentError
from msprlab.experiments.replay import CandidateTable, replay, replay_variants, table_key
from msprlab.experiments.variants.settings import (
    LIMIT,
    SETTINGS,
    reaching,
    state_of,
    value_of,
    with_values,
)

from replay_world import StripedPolicy, signals, world

FULL = signals((0.0,) * 6, intent=True, roles=True)
SOFT = replace(FULL, mspr=replace(FULL.mspr, role=replace(FULL.mspr.role, hard_filter=False)))
HARD = replace(FULL, mspr=replace(FULL.mspr, role=replace(FULL.mspr.role, hard_filter=True)))
FAST_DECAY = replace(FULL, decay=replace(FULL.decay, half_life_days=0.2))  # prunes in hours
# base configuration -> the role policy its replays install
BASES: dict[str, tuple[EngineConfig, Any]] = {
    "soft roles": (SOFT, StripedPolicy()),
    "hard roles": (HARD, policy_from_name("composite")),
    "fast decay": (FAST_DECAY, None),
}


def same_table(got: CandidateTable, want: CandidateTable) -> None:
    assert_frame_equal(got.searches, want.searches, check_exact=True)
    assert_frame_equal(got.candidates, want.candidates, check_exact=True)
    assert_frame_equal(got.qrels, want.qrels, check_exact=True)
    assert got.meta["table_key"] == want.meta["table_key"]


search_values = st.fixed_dictionaries({
    "context_graph.retrieval.seed_top_k": st.integers(1, 14),
    "context_graph.retrieval.expansion_depth": st.integers(0, 4),
    "context_graph.retrieval.max_candidates": st.integers(1, 60),
    "context_graph.retrieval.edge_weight_floor": st.sampled_from([0.0, 0.05, 0.1, 0.3, 0.9]),
    "context_graph.retrieval.algorithm": st.sampled_from(["bfs", "bfs", "ppr"]),
    "context_graph.retrieval.ppr_damping": st.sampled_from([0.5, 0.85, 0.95]),
    "mspr.success.min_sample_size": st.integers(1, 4),
})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from([1, 2]), base=st.sampled_from(sorted(BASES)),
       variants=st.lists(st.tuples(search_values, st.none() | st.integers(1, 14)),
                         min_size=2, max_size=4))
def test_a_variant_scored_in_a_shared_walk_is_its_replay_alone(
        seed: int, base: str, variants: list[tuple[dict[str, Any], int | None]]) -> None:
    log, _ = world(seed)
    config, policy = BASES[base]
    configs = [with_values(config, values) for values, _ in variants]
    limits = [limit for _, limit in variants]
    walked = replay_variants(log, configs, limits=limits, policy=policy)
    for one, limit, got in zip(configs, limits, walked, strict=True):
        same_table(got, replay(log, one, limit=limit, policy=policy))
        assert got.meta["cost"]["walk_variants"] == len(configs)
        assert got.meta["cost"]["ms_per_search"] > 0
    assert walked[0].candidates.height > 0


def test_the_variants_order_in_a_walk_changes_no_table() -> None:
    log, _ = world(1)
    configs = [with_values(SOFT, {"context_graph.retrieval.expansion_depth": depth,
                                  "context_graph.retrieval.algorithm": algorithm})
               for depth, algorithm in ((0, "bfs"), (3, "bfs"), (2, "ppr"))]
    forward = replay_variants(log, configs, policy=StripedPolicy())
    backward = replay_variants(log, configs[::-1], policy=StripedPolicy())
    for got, want in zip(forward, backward[::-1], strict=True):
        same_table(got, want)
    assert len({t.candidates.height for t in forward}) == 3  # the variants differ


# (the two configurations, replay kwargs): each pair differs only in settings that cannot
# reach the table, so both keys and both tables are equal.
UNREACHED: dict[str, tuple[EngineConfig, EngineConfig, dict[str, Any]]] = {
    "ppr settings under bfs": (FULL, with_values(FULL, {
        "context_graph.retrieval.ppr_damping": 0.5, "context_graph.retrieval.ppr_max_iter": 5,
        "context_graph.retrieval.ppr_tolerance": 0.5}), {}),
    "the undirected walk under bfs": (FULL, replace(FULL, corrections=replace(
        FULL.corrections, ppr_undirected=True)), {}),
    "depth under ppr": (with_values(FULL, {"context_graph.retrieval.algorithm": "ppr"}),
                        with_values(FULL, {"context_graph.retrieval.algorithm": "ppr",
                                           "context_graph.retrieval.expansion_depth": 0}), {}),
    "seed_top_k above the logged limits": (
        with_values(FULL, {"context_graph.retrieval.seed_top_k": 10}),
        with_values(FULL, {"context_graph.retrieval.seed_top_k": 60}), {}),
    "seed_top_k above the limit": (
        with_values(FULL, {"context_graph.retrieval.seed_top_k": 4}),
        with_values(FULL, {"context_graph.retrieval.seed_top_k": 30}), {"limit": 4}),
    "the sample size without success": (
        replace(FULL, mspr=replace(FULL.mspr, success=replace(FULL.mspr.success,
                                                              enabled=False))),
        replace(FULL, mspr=replace(FULL.mspr, success=replace(
            FULL.mspr.success, enabled=False, min_sample_size=9))), {}),
    "feedback settings without feedback": (
        replace(FULL, mspr=replace(FULL.mspr, feedback=replace(FULL.mspr.feedback,
                                                               enabled=False))),
        replace(FULL, mspr=replace(FULL.mspr, feedback=replace(
            FULL.mspr.feedback, enabled=False, boost_delta=0.9, penalty_delta=0.9,
            max_boost_per_memory=0.1, pin_floor_on_boost=False))), {}),
    "decay settings without decay": (
        replace(FAST_DECAY, decay=replace(FAST_DECAY.decay, enabled=False)),
        replace(FAST_DECAY, decay=replace(FAST_DECAY.decay, enabled=False, half_life_days=9.0,
                                          min_edge_weight=0.5, min_node_relevance=0.5)), {}),
    "decay settings without the tick on read": (
        replace(FAST_DECAY, decay=replace(FAST_DECAY.decay, tick_on_read=False)),
        replace(FAST_DECAY, decay=replace(FAST_DECAY.decay, tick_on_read=False,
                                          half_life_days=9.0, min_edge_weight=0.5)), {}),
}


@pytest.mark.parametrize("name", sorted(UNREACHED))
def test_a_setting_that_cannot_reach_the_table_leaves_its_key_and_table_alone(
        name: str) -> None:
    log, _ = world(1)
    one, other, kwargs = UNREACHED[name]
    assert one != other
    first = replay(log, one, **kwargs)
    second = replay(log, other, **kwargs)
    same_table(second, first)
    assert first.meta["config"] != second.meta["config"]  # each says what it ran


def test_the_seed_count_beyond_the_limit_is_kept_when_the_limits_are_not_known() -> None:
    low = with_values(FULL, {"context_graph.retrieval.seed_top_k": 10})
    high = with_values(FULL, {"context_graph.retrieval.seed_top_k": 60})
    assert table_key(low, "logged") != table_key(high, "logged")
    assert table_key(low, "logged", max_limit=10) == table_key(high, "logged", max_limit=10)
    assert table_key(low, "logged", max_limit=20) != table_key(high, "logged", max_limit=20)


def test_configurations_recording_different_states_need_walks_of_their_own() -> None:
    log, _ = world(1)
    other = with_values(FULL, {"mspr.feedback.boost_delta": 0.5})
    with pytest.raises(ExperimentError, match="record different states"):
        replay_variants(log, [FULL, other])
    with pytest.raises(ExperimentError, match="logged frequency mode"):
        replay_variants(log, [FULL, FULL], frequency="closed_loop")
    with pytest.raises(ExperimentError, match="2 configurations but 1 limits"):
        replay_variants(log, [FULL, FULL], limits=[None])


def test_the_settings_split() -> None:
    searched = {k for k, s in SETTINGS.items() if s.touches == "search"}
    assert "mspr.success.min_sample_size" in searched  # read at search time (MSPR.md 14)
    assert LIMIT in searched
    assert {k for k in SETTINGS if k not in searched} == {
        "mspr.feedback.boost_delta", "mspr.feedback.penalty_delta",
        "mspr.feedback.max_boost_per_memory", "mspr.feedback.pin_floor_on_boost",
        "context_graph.decay.half_life_days", "context_graph.decay.min_edge_weight",
        "context_graph.decay.min_node_relevance"}
    changed = with_values(FULL, {k: v for k, v in (
        ("context_graph.retrieval.seed_top_k", 3), ("context_graph.retrieval.algorithm", "ppr"),
        ("mspr.success.min_sample_size", 7))})
    assert state_of(changed) == state_of(FULL)
    assert value_of(changed, "context_graph.retrieval.algorithm") == "ppr"
    assert value_of(changed, LIMIT, 12) == 12
    assert state_of(with_values(FULL, {"mspr.feedback.boost_delta": 0.5})) != state_of(FULL)
    assert reaching(FULL) == reaching(reaching(FULL))


@pytest.mark.parametrize("key, value, message", [
    ("context_graph.retrieval.expansion_depth", 5,
     "context_graph.retrieval.expansion_depth must be in [0, 4], got 5"),
    ("context_graph.retrieval.ppr_damping", 1.0,
     "context_graph.retrieval.ppr_damping must be in (0, 1), got 1.0"),
    ("context_graph.retrieval.algorithm", "dfs", "must be one of 'bfs', 'ppr'"),
    ("mspr.feedback.boost_delta", -0.1, "mspr.feedback.boost_delta must be in [0, 1]"),
    ("mspr.success.min_sample_size", 0, "mspr.success.min_sample_size must be in [1, inf]"),
    ("context_graph.decay.half_life_days", 0, "half_life_days must be in (0, inf]"),
    (LIMIT, 0, "search.limit must be an integer >= 1"),
    ("context_graph.retrieval.alpha_dense", 0.5, "'context_graph.retrieval.alpha_dense' is "
                                                 "not a ranking setting"),
])
def test_a_value_the_library_refuses_is_refused_naming_the_key(key: str, value: Any,
                                                               message: str) -> None:
    with pytest.raises(ExperimentError, match=message.replace("(", r"\(").replace(
            ")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        with_values(FULL, {key: value})


def test_the_store_replays_each_state_once_and_caches_by_what_reaches_the_table(
        tmp_path: Any) -> None:
    from msprlab.experiments.variants.tables import Point, TableStore
    log, _ = world(1)
    R = "context_graph.retrieval."
    searched = [with_values(SOFT, {R + "expansion_depth": d}) for d in (0, 1, 2)]
    boosted = with_values(SOFT, {"mspr.feedback.boost_delta": 0.4})
    points = [Point(c) for c in searched] + [
        Point(with_values(SOFT, {R + "expansion_depth": 1, R + "ppr_damping": 0.5})),  # = #1
        Point(searched[0], limit=4), Point(boosted)]
    walks: list[tuple[int, int]] = []
    store = TableStore(log, tmp_path, frequency="logged", policy=StripedPolicy(),
                       on_walk=lambda n, size: walks.append((n, size)))
    tables = store.tables(points)
    assert walks == [(1, 4), (2, 1)]  # the depths and the limit share a walk
    assert store.stats.as_dict()["variants_in_shared_walks"] == 4
    assert tables[3] is tables[1]  # the damping cannot reach a BFS table
    for point, table in zip(points, tables, strict=True):
        same_table(table, replay(log, point.config, limit=point.limit, policy=StripedPolicy()))
    again = store.tables(points[:2])
    assert again[0] is tables[0] and store.stats.in_memory == 2 and store.stats.walks == 2
    fresh = TableStore(log, tmp_path, frequency="logged", policy=StripedPolicy())
    for got, want in zip(fresh.tables(points), tables, strict=True):
        same_table(got, want)
    assert (fresh.stats.walks, fresh.stats.loaded) == (0, 5)
