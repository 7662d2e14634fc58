"""The positional path (engine/positional.py) against the object path it stands in for:
`expand_bfs` then `featurize`, candidate for candidate and bit for bit, on random graphs,
scopes, tenants, seeds, query vectors, providers and weights."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from test_engine_fast_paths import bits, candidate_bits, random_graph, random_scope

from msprlab.engine import EngineConfig, new_state
from msprlab.engine.bfs import expand_bfs
from msprlab.engine.config import RetrievalConfig
from msprlab.engine.graph import Embedding
from msprlab.engine.positional import PositionalIndex, expand_and_score
from msprlab.engine.rerank import featurize
from msprlab.engine.search import resolve_payloads, search
from msprlab.engine.state import EngineState

CASES = 300


def random_state(rng: random.Random) -> EngineState:
    graph, payloads = random_graph(rng, rng.randrange(5, 40), rng.randrange(0, 150))
    state = new_state(EngineConfig())
    state.graph = graph
    for memory_id, payload in payloads.items():
        roll = rng.random()
        if roll < 0.1:
            payload["user_id"] = rng.choice([None, "alice", "bob"])  # not the node's owner
        elif roll < 0.15:
            payload = {}  # stored but empty: the resolver skips it
        elif roll < 0.2:
            payload["data"] = rng.choice([None, 7, "", "ALICE's seat"])
        state.payloads[memory_id] = payload
    for node in graph.nodes.values():
        if node is not None and rng.random() < 0.2:
            node.sub_tenant_id = rng.choice(["s0", "s1"])
    return state


def random_seeds(rng: random.Random, state: EngineState) -> dict[str, dict[str, Any]]:
    known = [mid for mid in state.graph.nodes if state.graph.nodes[mid] is not None]
    seeds: dict[str, dict[str, Any]] = {}
    for _ in range(rng.randrange(1, 5)):
        sid = rng.choice(known)
        stored = state.payloads.get(sid) or {}
        seeds[sid] = {"id": sid, "memory": stored.get("data", ""),
                      "score": rng.choice([0.9, 0.4, 0.0, None, 1, -0.5])}
    return seeds


def random_config(rng: random.Random) -> RetrievalConfig:
    return RetrievalConfig(
        alpha_dense=rng.random(), beta_bm25=rng.random(), gamma_graph=rng.random(),
        delta_personal=rng.choice([0.0, rng.random()]),
        epsilon_frequency=rng.choice([0.0, rng.random()]),
        zeta_success=rng.choice([0.0, rng.random()]),
        expansion_depth=rng.choice([0, 1, 2, 3]), max_candidates=rng.choice([1, 5, 30, 100]),
        edge_weight_floor=rng.choice([0.0, 0.1, 0.5]))


def object_path(state: EngineState, cfg: RetrievalConfig, **kw: Any) -> tuple[Any, Any]:
    reach, used = expand_bfs(state.graph, kw["seeds"], kw["scope"], depth=cfg.expansion_depth,
                             max_candidates=cfg.max_candidates,
                             edge_floor=cfg.edge_weight_floor,
                             include_archived=kw["include_archived"])
    candidates = featurize(
        state.graph, cfg, query=kw["query"], seeds=kw["seeds"], reach=reach,
        query_embedding=kw["query_embedding"], resolver=lambda ids: resolve_payloads(state, ids),
        personal=kw["personal"], success=kw["success"], tenant_id=kw["tenant_id"],
        sub_tenant_id=kw["sub_tenant_id"], scope=kw["scope"])
    return candidates, used


@pytest.mark.parametrize("case", range(CASES))
def test_positional_path_matches_the_object_path(case: int) -> None:
    rng = random.Random(7_000 + case)
    state = random_state(rng)
    index = PositionalIndex.build(state)
    assert index is not None
    table = {f"m{i}": rng.choice([0.0, -2.0, 3.0, rng.uniform(-1, 1), rng.random()])
             for i in range(40)}
    cfg = random_config(rng)
    kw: dict[str, Any] = {
        "query": rng.choice(["Which seat does Alice like?", "", "w1 W2 nut", "zzz"]),
        "seeds": random_seeds(rng, state), "scope": random_scope(rng),
        "query_embedding": rng.choice([None, Embedding.of([0.5, -0.1, 0.3, 0.9]),
                                       Embedding.of([0.0, 0.0, 0.0, 0.0]),
                                       Embedding.of(np.array([1e-3, 2.0, -4.0, 0.25]))]),
        "personal": rng.choice([None, lambda mid: table.get(mid, 0.0)]),
        "success": rng.choice([None, lambda mid: table.get(mid, 0.0)]),
        "tenant_id": rng.choice([None, "t0", "t1", "t9"]),
        "sub_tenant_id": rng.choice([None, None, "s0"]),
        "include_archived": rng.random() < 0.3}
    want, used = object_path(state, cfg, **kw)
    scored = expand_and_score(index, cfg, peak=state.graph.peak_access_count(), **kw)
    assert scored is not None
    got = scored.candidates(kw["seeds"],
                            lambda cid: resolve_payloads(state, [cid]).get(cid))
    assert [candidate_bits(c) for c in got] == [candidate_bits(c) for c in want]
    assert list(scored.edges_used.items()) == list(used.items())


def test_an_index_is_refused_where_the_columns_cannot_vouch() -> None:
    state = random_state(random.Random(1))
    node = next(n for n in state.graph.nodes.values() if n is not None)
    node.user_id = 42  # type: ignore[assignment]  # str() would have to stand in for it
    assert PositionalIndex.build(state) is None


def test_a_seed_outside_the_graph_falls_back() -> None:
    state = random_state(random.Random(2))
    index = PositionalIndex.build(state)
    assert index is not None
    seeds = {"nowhere": {"id": "nowhere", "memory": "", "score": 0.5}}
    assert expand_and_score(index, RetrievalConfig(), query="q", seeds=seeds, scope={},
                            query_embedding=None, personal=None, success=None, tenant_id=None,
                            sub_tenant_id=None, include_archived=False, peak=0) is None


# ---- whole searches ----------------------------------------------------------------------


def bench_world(n: int, seed: int) -> tuple[Any, list[Any]]:
    from msprlab.experiments import bench_engine

    rng = np.random.default_rng(seed)
    world = bench_engine.generate(n, rng)
    return world, bench_engine.requests(world, rng, 40)


def outcome_bits(outcome: Any) -> tuple[Any, ...]:
    return ([candidate_bits(c) for c in outcome.candidates],
            [(e.src, e.dst, e.type, bits(e.weight)) for e in outcome.subgraph],
            [candidate_bits(c) for c in outcome.results], outcome.telemetry,
            outcome.intent, outcome.notes)


@pytest.mark.parametrize("seed", range(3))
def test_searches_over_a_kept_index_match_the_object_path(seed: int) -> None:
    """The bench's graphs and requests, all signals on, each request twice: one state
    searched with an index built after the first search (kept current by the searches'
    access counting), one without; every outcome the same, bit for bit."""
    from msprlab.experiments import bench_engine

    world, reqs = bench_world(400, seed)
    plain, indexed = (bench_engine.build(world, "bfs") for _ in range(2))
    now = bench_engine.NOW
    assert outcome_bits(search(plain, reqs[0], now=now)) == outcome_bits(
        search(indexed, reqs[0], now=now))
    indexed.positional = PositionalIndex.build(indexed)
    assert indexed.positional is not None
    used = 0
    for req in reqs + reqs:
        want = search(plain, req, now=now)
        got = search(indexed, req, now=now)
        used += callable(got._candidates)  # the positional path ran: candidates not yet made
        assert outcome_bits(got) == outcome_bits(want)
    assert used == 2 * len(reqs)
