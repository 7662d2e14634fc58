"""MSPR.md section 17: zero MSPR weights, or MSPR switched off, leave the CGL ranking alone.

Property A: MSPR on (feedback, success and frequency enabled; intent and role off) with
δ = ε = ζ = 0 ranks exactly as MSPR off (`MsprConfig()`), ids, order and float scores
compared with `==`, given the same graph state. Feedback and access counting do change that
state (relevance, floors, access counts, recency), so the baseline state is synced from the
MSPR state before every search: the property is about the ranking, not the side effects.

Property B: with the master switch off, the feedback/success/frequency blocks are inert even
with non-zero δ/ε/ζ: same ranking as `MsprConfig()`, `record_feedback` returns None and no
access is counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msprlab.engine import EngineConfig, SearchRequest, Seed, new_state, record_feedback, search
from msprlab.engine.config import (
    DecayConfig,
    FeedbackConfig,
    FrequencyConfig,
    MsprConfig,
    RetrievalConfig,
    SuccessConfig,
)
from msprlab.engine.graph import EdgeType
from msprlab.engine.state import EngineState

from spec_fixture import T0, add_edge, add_memory

WORDS = ("alice", "seat", "flight", "tokyo", "hotel", "peanut", "window", "passport", "the")
unit = st.floats(0.0, 1.0, allow_nan=False)
coordinate = st.sampled_from([0.0, 0.0, 0.5, 1.0, -0.3]) | st.floats(-1.0, 1.0)
embedding = st.none() | st.lists(coordinate, min_size=3, max_size=3)
text = st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join)


@dataclass(frozen=True)
class World:
    users: list[str]
    memories: list[tuple[str, str, list[float] | None, str | None, int]]
    edges: list[tuple[str, str, EdgeType, float]]
    feedback: list[tuple[str, bool, str | None, str | None]]
    searches: list[tuple[str, list[Seed], list[float] | None, str, int, int]]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    users = [f"u{i}" for i in range(draw(st.integers(1, 3)))]
    n = draw(st.integers(3, 25))
    ids = [f"m{i}" for i in range(n)]
    memories = [(mid, draw(text), draw(embedding), draw(st.none() | st.sampled_from(users)),
                 draw(st.integers(0, 30))) for mid in ids]
    memory_id = st.sampled_from(ids)
    edges = draw(st.lists(st.tuples(memory_id, memory_id, st.sampled_from(list(EdgeType)),
                                    unit), max_size=3 * n))
    query = text | st.sampled_from(["What is Alice's seat?", "tokyo hotel"])
    feedback = draw(st.lists(st.tuples(memory_id, st.booleans(),
                                       st.none() | st.sampled_from(users), st.none() | query),
                             max_size=10))
    seed = st.builds(Seed, memory_id, st.none() | st.floats(-0.5, 1.0))
    searches = draw(st.lists(st.tuples(
        query, st.lists(seed, min_size=1, max_size=14), st.none() | st.lists(coordinate,
                                                                               min_size=3,
                                                                               max_size=3),
        st.sampled_from(users), st.integers(0, 12), st.integers(0, 3)), min_size=1,
        max_size=3))
    return World(users, memories, edges, feedback, searches)


def build(world: World, config: EngineConfig) -> EngineState:
    state = new_state(config)
    for memory_id, body, vector, user, access in world.memories:
        add_memory(state, memory_id, body, vector, user)
        node = state.graph.nodes[memory_id]
        assert node is not None
        node.access_count = access
    for src, dst, kind, weight in world.edges:
        add_edge(state, src, dst, kind, weight)
    state.graph.changed()
    return state


def sync(source: EngineState, target: EngineState) -> None:
    """Copy every per-node value a search reads or decay uses from source into target."""
    for memory_id, node in source.graph.nodes.items():
        other = target.graph.nodes[memory_id]
        assert node is not None and other is not None
        other.relevance = node.relevance
        other.relevance_floor = node.relevance_floor
        other.access_count = node.access_count
        other.last_accessed_at = node.last_accessed_at
        other.archived = node.archived
    target.graph.last_decay_tick = source.graph.last_decay_tick
    target.graph.changed()


def edge_table(state: EngineState) -> list[tuple[str, str, str, float]]:
    return [(e.src, e.dst, e.type, e.weight) for e in state.graph.edges()]


def ranking(state: EngineState, req: SearchRequest, now: datetime) -> list[tuple]:
    out = search(state, req, now=now)
    return [(c.id, c.score, c.dense, c.lexical, c.graph, c.was_seed) for c in out.results]


def retrieval(algorithm: str, top_k: int, *, delta=0.0, epsilon=0.0, zeta=0.0):
    return RetrievalConfig(algorithm=algorithm, seed_top_k=top_k, delta_personal=delta,
                           epsilon_frequency=epsilon, zeta_success=zeta)


BLOCKS = dict(feedback=FeedbackConfig(enabled=True), success=SuccessConfig(enabled=True),
              frequency=FrequencyConfig(enabled=True))
SETTINGS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
common = dict(world=worlds(), algorithm=st.sampled_from(["bfs", "ppr"]),
              decay=st.booleans(), top_k=st.integers(1, 6))


def run_searches(world: World, subject: EngineState, baseline: EngineState) -> None:
    now = T0
    for query, seeds, q_vec, user, limit, hours in world.searches:
        now += timedelta(hours=hours)
        sync(subject, baseline)
        req = SearchRequest(query=query, seeds=seeds, query_embedding=q_vec, user_id=user,
                            limit=limit)
        assert ranking(subject, req, now) == ranking(baseline, req, now)
        assert edge_table(subject) == edge_table(baseline)


@SETTINGS
@given(**common)
def test_a_zero_weights_rank_as_mspr_off(world, algorithm, decay, top_k):
    base = EngineConfig(decay=DecayConfig(enabled=decay),
                        retrieval=retrieval(algorithm, top_k))
    mspr = build(world, replace(base, mspr=MsprConfig(enabled=True, **BLOCKS)))
    baseline = build(world, base)
    for memory_id, helpful, user, query in world.feedback:
        assert record_feedback(mspr, memory_id, helpful=helpful, user_id=user, query=query,
                               now=T0) is not None
    run_searches(world, mspr, baseline)


@SETTINGS
@given(**common, delta=unit, epsilon=unit, zeta=unit)
def test_b_master_switch_off_makes_the_blocks_inert(world, algorithm, decay, top_k, delta,
                                                    epsilon, zeta):
    base = EngineConfig(decay=DecayConfig(enabled=decay),
                        retrieval=retrieval(algorithm, top_k, delta=delta, epsilon=epsilon,
                                            zeta=zeta))
    off = build(world, replace(base, mspr=MsprConfig(enabled=False, **BLOCKS)))
    baseline = build(world, base)
    assert (off.feedback, off.success, off.intent) == (None, None, None)
    for memory_id, helpful, user, query in world.feedback:
        assert record_feedback(off, memory_id, helpful=helpful, user_id=user, query=query,
                               now=T0) is None
    counts = {k: n.access_count for k, n in off.graph.nodes.items() if n is not None}
    run_searches(world, off, baseline)
    assert {k: n.access_count for k, n in off.graph.nodes.items() if n is not None} == counts


def test_zero_weight_results_report_zero_mspr_terms():
    """A fixed instance of property A, with the MSPR terms read back: all 0.0."""
    world = World(["u0"], [("m0", "alice seat", [1.0, 0.0, 0.0], "u0", 3),
                           ("m1", "seat", [0.5, 0.5, 0.0], "u0", 9),
                           ("m2", "tokyo", None, "u0", 0)],
                  [("m0", "m1", EdgeType.REPLY_TO, 0.9), ("m1", "m2", EdgeType.CAUSAL, 0.5)],
                  [("m1", True, "u0", "alice seat")] * 3,
                  [("alice seat", [Seed("m0", 0.9)], [1.0, 0.0, 0.0], "u0", 10, 0)])
    base = EngineConfig(decay=DecayConfig(enabled=False))
    mspr = build(world, replace(base, mspr=MsprConfig(enabled=True, **BLOCKS)))
    for memory_id, helpful, user, query in world.feedback:
        record_feedback(mspr, memory_id, helpful=helpful, user_id=user, query=query, now=T0)
    out = search(mspr, SearchRequest(query="alice seat", seeds=[Seed("m0", 0.9)],
                                     query_embedding=[1.0, 0.0, 0.0], user_id="u0"), now=T0)
    assert [c.id for c in out.results] == ["m0", "m1", "m2"]
    assert {(c.frequency, c.personal, c.success) for c in out.results} == {(0.0, 0.0, 0.0)}
    assert out.telemetry is not None and out.telemetry["feedback_hits"] == 0
