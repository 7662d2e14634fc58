"""The positional path (engine/positional.py) against the object path it stands in for:
`expand_bfs` then `featurize`, candidate for candidate and bit for bit, on random graphs,
scopes, tenants, seeds, query vectors, providers and weights; and whole searches with it
on and off, on the bench's graphs and through random writes between searches."""

from __future__ import annotations

import random
from operator import attrgetter
from typing import Any

import numpy as np
import pytest
from test_engine_fast_paths import bits, candidate_bits, random_graph, random_scope

from msprlab.engine import EngineConfig, new_state
from msprlab.engine.bfs import expand_bfs
from msprlab.engine.config import RetrievalConfig
from msprlab.engine.graph import Embedding
from msprlab.engine.positional import CandidateCache, expand_and_score
from msprlab.engine.rerank import featurize, subgraph
from msprlab.engine.search import _Positional, resolve_payloads, search
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
    cache = CandidateCache(state.graph)
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
    for _ in range(2):  # a cache that starts empty, then the same one again
        scored = expand_and_score(state.graph, cache, state.payloads, cfg,
                                  peak=state.graph.peak_access_count(), want_edges=True, **kw)
        assert scored is not None
        stored = [state.payloads.get(cid) for cid in scored.ids]
        got = _Positional(scored, kw["seeds"], stored).all()  # as the search makes them
        assert [candidate_bits(c) for c in got] == [candidate_bits(c) for c in want]
        assert list(scored.edges_used.items()) == list(used.items())
        assert scored.subgraph == subgraph(used, want, kw["scope"])


def fallback(state: EngineState, seeds: dict[str, Any]) -> bool:
    return expand_and_score(
        state.graph, CandidateCache(state.graph), state.payloads, RetrievalConfig(),
        query="q", seeds=seeds, scope={}, query_embedding=None, personal=None, success=None,
        tenant_id=None, sub_tenant_id=None, include_archived=False, peak=0) is None


def test_an_owner_that_is_not_a_str_sends_searches_to_the_object_path() -> None:
    state = random_state(random.Random(1))
    seeds = random_seeds(random.Random(1), state)
    assert not fallback(state, seeds)
    node = next(n for n in state.graph.nodes.values() if n is not None)
    node.user_id = 42  # type: ignore[assignment]  # str() would have to stand in for it
    assert fallback(state, seeds)


def test_a_seed_outside_the_graph_falls_back() -> None:
    state = random_state(random.Random(2))
    assert fallback(state, {"nowhere": {"id": "nowhere", "memory": "", "score": 0.5}})


# ---- whole searches ----------------------------------------------------------------------


def bench_world(n: int, seed: int) -> tuple[Any, list[Any]]:
    from bench import bench_engine

    rng = np.random.default_rng(seed)
    world = bench_engine.generate(n, rng)
    return world, bench_engine.requests(world, rng, 40)


def outcome_bits(outcome: Any) -> tuple[Any, ...]:
    return ([candidate_bits(c) for c in outcome.candidates],
            [(e.src, e.dst, e.type, bits(e.weight)) for e in outcome.subgraph],
            [candidate_bits(c) for c in outcome.results], outcome.telemetry,
            outcome.intent, outcome.notes)


@pytest.mark.parametrize("seed", range(3))
def test_whole_searches_match_the_object_path(seed: int) -> None:
    """The bench's graphs and requests, all signals on, each request twice (the searches
    count accesses, so the second time differs): one state searched over positions, one
    over the objects; every outcome the same, bit for bit."""
    from bench import bench_engine

    world, reqs = bench_world(400, seed)
    plain, indexed = (bench_engine.build(world, "bfs") for _ in range(2))
    plain.positional_search = False
    now = bench_engine.NOW
    used = 0
    for req in reqs + reqs:
        want = search(plain, req, now=now)
        got = search(indexed, req, now=now)
        used += callable(got._candidates)  # the positional path ran: candidates not yet made
        assert outcome_bits(got) == outcome_bits(want)
        assert got.columns is not None and column_bits(got.columns) == [
            (c.id, c.was_seed, *map(bits, attrgetter(*VALUES)(c))) for c in got.candidates]
    assert used == 2 * len(reqs)


VALUES = ("dense", "lexical", "graph", "frequency", "personal", "success", "relevance",
          "score")


def column_bits(scored: Any) -> list[tuple[Any, ...]]:
    """`SearchOutcome.columns`, candidate by candidate."""
    return [(m, seed, *map(bits, values)) for m, seed, *values in zip(
        scored.ids, scored.was_seed, *attrgetter(*VALUES)(scored), strict=True)]


# ---- writes between searches -------------------------------------------------------------


def _replace_payload(state: EngineState, rng: random.Random, mid: str) -> None:
    state.payloads[mid] = {**state.payloads.get(mid, {}), "data": rng.choice(WORDS),
                           "user_id": rng.choice(OWNERS)}


def _edit_payload(state: EngineState, rng: random.Random, mid: str) -> None:
    stored = state.payloads.get(mid)
    if stored is not None:
        stored[rng.choice(["data", "user_id", "agent_id"])] = rng.choice(WORDS + OWNERS)


def _drop_payload(state: EngineState, rng: random.Random, mid: str) -> None:
    state.payloads.pop(mid, None)


def _node_fields(state: EngineState, rng: random.Random, mid: str) -> None:
    node = state.graph.get(mid)
    if node is not None:
        setattr(node, rng.choice(["user_id", "tenant_id", "sub_tenant_id", "agent_id"]),
                rng.choice(["u1", "u2", "t0", "t1", None]))
        node.access_count = rng.randrange(0, 30)
        node.relevance = rng.choice([0.2, 1.0, 1.5])
        node.archived = rng.random() < 0.3


def _replace_node(state: EngineState, rng: random.Random, mid: str) -> None:
    from bench.bench_engine import NOW

    from msprlab.engine.graph import MemoryNode

    state.graph.add_node(MemoryNode(mid, "", NOW, NOW, user_id=rng.choice(OWNERS),
                                    tenant_id="t0", access_count=rng.randrange(5)))


def _new_memory(state: EngineState, rng: random.Random, mid: str) -> None:
    from bench.bench_engine import NOW

    from msprlab.engine.graph import EdgeType, MemoryEdge, MemoryNode

    new = f"new{rng.randrange(1_000_000)}"
    state.payloads[new] = {"data": rng.choice(WORDS), "user_id": rng.choice(OWNERS)}
    state.graph.add_node(MemoryNode(new, "", NOW, NOW, user_id=rng.choice(OWNERS),
                                    tenant_id="t0"))
    state.graph.set_embedding(new, [rng.uniform(-1, 1) for _ in range(32)])
    state.graph.upsert_edge(MemoryEdge(mid, new, EdgeType.REFINES, rng.random(), NOW, NOW))


def _edges(state: EngineState, rng: random.Random, mid: str) -> None:
    from bench.bench_engine import NOW

    from msprlab.engine.graph import EdgeType, MemoryEdge

    edges = list(state.graph.incident(mid))
    if edges and rng.random() < 0.5:
        state.graph.remove_edge(rng.choice(edges))
    elif edges:
        rng.choice(edges).weight = rng.choice([0.05, 0.5, 1.0])
    other = f"m{rng.randrange(400)}"
    state.graph.upsert_edge(MemoryEdge(mid, other, rng.choice(list(EdgeType)), rng.random(),
                                       NOW, NOW))


def _late_payload(state: EngineState, rng: random.Random, mid: str) -> None:
    """A payload and an embedding stored for a memory whose node comes later (or never)."""
    late = f"late{rng.randrange(8)}"
    state.payloads[late] = {"data": rng.choice(WORDS), "user_id": rng.choice(OWNERS)}
    state.graph.set_embedding(late, [rng.uniform(-1, 1) for _ in range(32)])


def _late_node(state: EngineState, rng: random.Random, mid: str) -> None:
    """The node of such a memory, joined to `mid`."""
    from bench.bench_engine import NOW

    from msprlab.engine.graph import EdgeType, MemoryEdge, MemoryNode

    late = f"late{rng.randrange(8)}"
    if late in state.payloads and state.graph.get(late) is None:
        state.graph.add_node(MemoryNode(late, "", NOW, NOW, user_id=rng.choice(OWNERS),
                                        tenant_id="t0"))
        state.graph.upsert_edge(MemoryEdge(mid, late, EdgeType.REFINES, 0.9, NOW, NOW))


def _embedding(state: EngineState, rng: random.Random, mid: str) -> None:
    state.graph.set_embedding(mid, [rng.uniform(-1, 1) for _ in range(32)])


WORDS = ["what is w1 w2", "w3 w4 w5", "w1", "", "Alice's w2 seat"]
OWNERS = ["u1", "u2", "u3", None]
WRITES = [_replace_payload, _edit_payload, _drop_payload, _node_fields, _replace_node,
          _new_memory, _edges, _embedding, _late_payload, _late_node, _late_node]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("store", ["logged", "plain dict"])
def test_searches_between_writes_match_the_object_path(seed: int, store: str) -> None:
    """Random writes of every kind between searches, the same on both states: what the
    positional path reads (columns, adjacency, its cache) must follow each of them, from
    the stores' change logs. Payloads in a plain dict have no log: every search takes the
    object path, with the same outcomes."""
    from bench import bench_engine

    world, reqs = bench_world(400, seed)
    plain, indexed = (bench_engine.build(world, "bfs") for _ in range(2))
    plain.positional_search = False
    if store == "plain dict":
        for state in (plain, indexed):
            state.payloads = {k: dict(v) for k, v in state.payloads.items()}
    now = bench_engine.NOW
    rng = random.Random(seed)
    used = 0
    for step in range(120):
        req = rng.choice(reqs)
        if step % 2:
            write = rng.choice(WRITES)
            targets = [s.id for s in req.seeds] + [f"m{rng.randrange(400)}"]
            mid = rng.choice(targets)
            state = rng.getstate()
            write(plain, rng, mid)
            rng.setstate(state)  # the same draws for the other state
            write(indexed, rng, mid)
            continue
        try:
            want = search(plain, req, now=now)
        except Exception as error:  # a write may leave a seed without its payload
            with pytest.raises(type(error)):
                search(indexed, req, now=now)
            continue
        got = search(indexed, req, now=now)
        used += callable(got._candidates)
        assert outcome_bits(got) == outcome_bits(want)
    if store == "plain dict":
        assert used == 0
    else:
        assert used >= 20


def test_a_payload_owner_that_is_not_a_str_falls_back_before_the_scope_test() -> None:
    """The object path compares str(owner): a payload owner 5 is confirmed by a scope of
    "5" (the node, untagged, does not block the walk). The arrays cannot code 5, so the
    search must fall back, not drop the candidate for want of an owner."""
    from bench.bench_engine import NOW

    from msprlab.engine.graph import EdgeType, MemoryEdge, MemoryNode

    state = new_state(EngineConfig())
    for mid, owner in (("a", "5"), ("b", None)):
        state.graph.add_node(MemoryNode(mid, "", NOW, NOW, user_id=owner))
        state.payloads[mid] = {"data": "w1", "user_id": owner}
    state.payloads["b"]["user_id"] = 5
    state.graph.upsert_edge(MemoryEdge("a", "b", EdgeType.REFINES, 0.9, NOW, NOW))
    kw: dict[str, Any] = {
        "query": "w1", "seeds": {"a": {"id": "a", "memory": "w1", "score": 0.5}},
        "scope": {"user_id": "5"}, "query_embedding": None, "personal": None,
        "success": None, "tenant_id": None, "sub_tenant_id": None, "include_archived": False}
    cfg = RetrievalConfig()
    want, _ = object_path(state, cfg, **kw)
    assert [c.id for c in want] == ["a", "b"]  # b is kept on its payload's owner
    assert expand_and_score(state.graph, CandidateCache(state.graph), state.payloads, cfg,
                            peak=0, **kw) is None


def test_a_node_added_after_its_payload_was_read_past_is_indexed() -> None:
    """A payload stored, a search (its log entry read while the memory had no node), then
    the node: the next search must index the new position, and rank the memory."""
    from bench import bench_engine

    from msprlab.engine.graph import EdgeType, MemoryEdge, MemoryNode

    world, reqs = bench_world(400, 0)
    req = reqs[0]
    seed = req.seeds[0].id
    assert seed is not None
    plain, indexed = (bench_engine.build(world, "bfs") for _ in range(2))
    plain.positional_search = False
    now = bench_engine.NOW
    owner = indexed.payloads[seed]["user_id"]
    outcomes = []
    for state in (plain, indexed):
        search(state, req, now=now)
        state.payloads["x"] = {"data": req.query, "user_id": owner, "tenant_id": "t0"}
        state.graph.set_embedding("x", list(req.query_embedding or []))
        search(state, req, now=now)
        state.graph.add_node(MemoryNode("x", "", now, now, user_id=owner, tenant_id="t0"))
        state.graph.upsert_edge(MemoryEdge(seed, "x", EdgeType.REFINES, 1.0, now, now))
        outcomes.append(search(state, req, now=now))
    assert outcome_bits(outcomes[1]) == outcome_bits(outcomes[0])
    assert outcomes[1].results[0].id == "x"  # the query's own text and vector: ranked first


def test_a_stored_payload_that_is_not_a_mapping_only_matters_where_it_is_a_candidate() -> None:
    """The store keeps it as it is. Indexing it must not fail the search: a search that
    does not meet it ranks as the object path does, one that meets it falls back."""
    from bench import bench_engine

    world, reqs = bench_world(400, 1)
    req = reqs[0]
    plain, indexed = (bench_engine.build(world, "bfs") for _ in range(2))
    plain.positional_search = False
    now = bench_engine.NOW
    met = {c.id for c in search(plain, req, now=now).candidates}
    far = next(mid for mid in plain.payloads if mid not in met)
    search(indexed, req, now=now)
    for state in (plain, indexed):
        state.payloads[far] = ["not", "a", "mapping"]
    want = search(plain, req, now=now)
    got = search(indexed, req, now=now)
    assert callable(got._candidates)  # the positional path ran
    assert outcome_bits(got) == outcome_bits(want)


def test_a_query_vector_given_as_an_embedding_searches_as_the_vector_does() -> None:
    """A replay hands each query's Embedding (norm summed once) instead of its vector:
    the same outcomes, on both paths; an empty one counts as no vector."""
    from dataclasses import replace

    from bench import bench_engine

    world, reqs = bench_world(200, 1)
    for positional in (True, False):
        given, summed = (bench_engine.build(world, "bfs") for _ in range(2))
        given.positional_search = summed.positional_search = positional
        for req in reqs[:20]:
            vector = np.asarray(req.query_embedding, dtype=np.float64)
            for as_given, as_embedding in ((vector, Embedding.of(vector)),
                                           (np.zeros(0), Embedding.of(np.zeros(0)))):
                want = search(given, replace(req, query_embedding=as_given),
                              now=bench_engine.NOW)
                got = search(summed, replace(req, query_embedding=as_embedding),
                             now=bench_engine.NOW)
                assert outcome_bits(got) == outcome_bits(want)
