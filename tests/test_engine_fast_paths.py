"""The engine's fast paths against slow, simple oracles: the same values, bit for bit.

The oracles are the plain versions the fast paths replaced (token sets, cosine per
candidate, BFS over `graph.neighbours`, the two-pass featurize, the eager PPR view); every
comparison is exact: same keys, same order, same float bits.
"""

from __future__ import annotations

import math
import random
import re
import struct
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msprlab.engine import search
from msprlab.engine.bfs import expand_bfs
from msprlab.engine.config import FrequencyConfig, MsprConfig, RetrievalConfig
from msprlab.engine.edges import archive
from msprlab.engine.graph import (
    ContextGraph,
    EdgeType,
    Embedding,
    MemoryEdge,
    MemoryNode,
    row_norms_sq,
)
from msprlab.engine.pagerank import pagerank_on, personalized_pagerank, transition
from msprlab.engine.ppr import _edge_table, _skip_mask, expand_ppr, stable_top_prefix
from msprlab.engine.rerank import (
    Candidate,
    _frequency_term,
    featurize,
    frequency_term,
    subgraph,
)
from msprlab.engine.scope import UNVERIFIABLE, Scope, confirmed, conflicts, tenant_skipped
from msprlab.engine.seeds import seed_score
from msprlab.engine.state import EngineState
from msprlab.engine.text import clear_token_cache, cosine, cosines, split_tokens, tokens

from spec_fixture import NO_DECAY, add_edge, add_memory, fixture, request, with_retrieval
from spec_fixture import T0 as T_FIXTURE

T0 = datetime(2026, 1, 1)
_TOKEN = re.compile(r"\w+", re.UNICODE)


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


def same_floats(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(bits(x) == bits(y) for x, y in zip(a, b, strict=True))


# ---- tokens ------------------------------------------------------------------------------

# "\x0b" and "\x1f" are whitespace to str.split but, like "\t", break the ASCII fast path.
TEXT = st.text(alphabet=st.sampled_from([*"aZ9_ -'\t\n\x0b\x1f.,éİßΣσ", "\u0307", "ǅ", "²"]),
               max_size=30)


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_token_sets_match_the_regex_oracle(text: str) -> None:
    found = split_tokens(text)
    assert sorted(found) == sorted(t.lower() for t in _TOKEN.findall(text))
    assert tokens(text) == frozenset(t.lower() for t in _TOKEN.findall(text))


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=40))
def test_ascii_tokens_are_the_regex_tokens_in_order(text: str) -> None:
    assert split_tokens(text) == [t.lower() for t in _TOKEN.findall(text)]


@pytest.mark.parametrize("text", ["", None, 3, ["a"], "Alice's nut-free MEAL_2", "İx", "a\tb",
                                  "a\x1cb c", "w1  W2 ", " _x_ 9 "])
def test_token_edge_cases(text: Any) -> None:
    expected = (frozenset(t.lower() for t in _TOKEN.findall(text))
                if text and isinstance(text, str) else frozenset())
    assert tokens(text) == expected


# ---- cosine ------------------------------------------------------------------------------

FLOATS = st.one_of(st.floats(-1e3, 1e3, allow_nan=False), st.just(0.0), st.just(-0.0),
                   st.floats(-1e-300, 1e-300), st.sampled_from([1e-160, 5e-324, 1e200]))


@settings(max_examples=300, deadline=None)
@given(st.lists(FLOATS, min_size=0, max_size=6),
       st.lists(st.lists(FLOATS, min_size=0, max_size=6), min_size=1, max_size=8))
def test_cosines_match_cosine_per_row(query: list[float], rows: list[list[float]]) -> None:
    with np.errstate(all="ignore"):
        q = Embedding.of(query)
        stored = [Embedding.of(r) for r in rows]
        try:
            expected: list[float] | type[Exception] = [cosine(q, s) for s in stored]
        except ZeroDivisionError:
            expected = ZeroDivisionError
        if expected is ZeroDivisionError:
            with pytest.raises(ZeroDivisionError):
                cosines(q, stored)
            return
        got = cosines(q, stored)
    assert isinstance(expected, list)
    assert same_floats(got, expected)


def test_cosines_on_realistic_vectors() -> None:
    rng = np.random.default_rng(3)
    q = Embedding.of(rng.normal(size=64).tolist())
    stored = [Embedding.of(rng.normal(size=64).tolist()) for _ in range(200)]
    assert same_floats(cosines(q, stored), [cosine(q, s) for s in stored])


def oracle_cosines(query: Embedding, stored: list[Embedding]) -> list[float]:
    """cosines as it was: every vector's size tested, then `np.array` of the right ones."""
    q = query.vector
    if q.size == 0 or query.norm_sq == 0.0:
        return [0.0] * len(stored)
    vectors = [s.vector for s in stored]
    norms = [s.norm_sq for s in stored]
    rows: list[int] | None = None
    if any(v.size != q.size for v in vectors) or 0.0 in norms:
        rows = [i for i, (v, n) in enumerate(zip(vectors, norms, strict=True))
                if v.size == q.size and n != 0.0]
        if not rows:
            return [0.0] * len(stored)
        vectors = [vectors[i] for i in rows]
        norms = [norms[i] for i in rows]
    matrix = np.array(vectors, dtype=np.float64)
    dots = np.add.accumulate(matrix * q, axis=1)[:, -1]
    denominators = math.sqrt(query.norm_sq) * np.sqrt(np.array(norms, dtype=np.float64))
    if not denominators.all():
        return [cosine(query, s) for s in stored]
    values: list[float] = (dots / denominators).tolist()
    if rows is None:
        return values
    out = [0.0] * len(stored)
    for i, value in zip(rows, values, strict=True):
        out[i] = value
    return out


def outcome_of(f: Any, *args: Any) -> Any:
    try:
        return f(*args)
    except Exception as e:  # the exception type is the outcome
        return type(e)


@pytest.mark.parametrize("shapes", [[(2, 2)], [(4,), (2, 2)], [(2, 2), (2, 2)], [(4,), (1, 4)],
                                    [(1, 4), (1, 4)], [(4,), (3,), (4,)], [(4,), (0,)],
                                    [(4,), (4, 1)], [(3,), (3,)]])
def test_cosines_on_odd_shapes_do_what_they_did(shapes: list[tuple[int, ...]]) -> None:
    """Stored vectors that are not flat, or not of the query's size: the same values, or
    the same exception, as before the fast path (not always those of a per-row cosine)."""
    rng = np.random.default_rng(11)
    q = Embedding.of(rng.normal(size=4).tolist())
    stored = [Embedding(rng.normal(size=shape), 1.5) for shape in shapes]
    got, want = outcome_of(cosines, q, stored), outcome_of(oracle_cosines, q, stored)
    if isinstance(want, list):
        assert isinstance(got, list) and same_floats(got, want)
    else:
        assert got is want


def test_cosines_take_other_dtypes_and_strided_vectors_as_floats() -> None:
    rng = np.random.default_rng(12)
    q = Embedding.of(rng.normal(size=6).tolist())
    wide = rng.normal(size=12)
    stored = [Embedding.of(rng.normal(size=6).tolist()),
              Embedding(rng.normal(size=6).astype(np.float32), 2.0),
              Embedding(np.arange(6), 55.0),
              Embedding(wide[::2], 3.0)]
    assert same_floats(cosines(q, stored), [cosine(q, s) for s in stored])


# ---- random graphs -----------------------------------------------------------------------

USERS = ["alice", "bob", None]


def random_graph(rng: random.Random, n: int, m: int) -> tuple[ContextGraph, dict[str, Any]]:
    graph = ContextGraph()
    payloads: dict[str, Any] = {}
    kinds = list(EdgeType)
    for i in range(n):
        mid = f"m{i}"
        user = rng.choice(USERS)
        tenant = rng.choice(["t0", "t0", "t1", None])
        node = MemoryNode(mid, "", T0, T0, user_id=user, tenant_id=tenant,
                          archived=rng.random() < 0.1,
                          relevance=rng.choice([1.0, 1.3, -0.2, rng.random(), rng.random()]),
                          access_count=rng.randrange(0, 5))
        graph.add_node(node)
        if rng.random() < 0.9:
            graph.set_embedding(mid, [rng.uniform(-1, 1) for _ in range(4)])
        if rng.random() < 0.9:
            words = " ".join(rng.choice(["Alice", "seat", "nut-free", "w1", "w2"])
                             for _ in range(4))
            payloads[mid] = {"data": words, "hash": "", "user_id": user, "score": None}
    for _ in range(m):
        src, dst = f"m{rng.randrange(n)}", f"m{rng.randrange(n + 2)}"  # a few bare nodes
        weight = rng.choice([0.0, 0.1, 0.5, 1.0, 1.4, rng.random(), rng.random()])
        graph.upsert_edge(MemoryEdge(src, dst, rng.choice(kinds), weight, T0, T0))
    for edge in list(graph.edges())[: m // 10]:
        if rng.random() < 0.5:
            graph.remove_edge(edge)
    return graph, payloads


def random_scope(rng: random.Random) -> Scope:
    return rng.choice([{}, {"user_id": "alice"}, {"user_id": "bob"}, {"user_id": UNVERIFIABLE},
                       {"user_id": "alice", "agent_id": "x"}])


def random_seeds(rng: random.Random, n: int) -> dict[str, dict[str, Any]]:
    seeds: dict[str, dict[str, Any]] = {}
    for _ in range(rng.randrange(1, 5)):
        sid = f"m{rng.randrange(n + 3)}"  # may be missing from the graph
        seeds[sid] = {"id": sid, "memory": "Alice seat", "score": rng.choice([0.9, 0.4, 0.0])}
    return seeds


# ---- BFS ---------------------------------------------------------------------------------


def oracle_bfs(graph: ContextGraph, seeds: Mapping[str, Any], scope: Scope, *, depth: int,
               max_candidates: int, edge_floor: float, include_archived: bool,
               priors: Mapping[EdgeType, float] | None = None,
               ) -> tuple[dict[str, float], dict[tuple[str, str, str], float]]:
    """expand_bfs as it was: `graph.neighbours` per frontier node."""
    max_candidates = max(1, max_candidates)
    reach = dict.fromkeys(seeds, 1.0)
    edges_used: dict[tuple[str, str, str], float] = {}
    frontier = [(sid, 1.0) for sid in seeds]
    out_of_scope: set[str] = set()
    judged: set[str] = set()
    for _ in range(max(0, depth)):
        if not frontier or len(reach) >= max_candidates:
            break
        next_frontier: list[tuple[str, float]] = []
        for node_id, accum in frontier:
            for edge in graph.neighbours(node_id, min_weight=edge_floor,
                                         include_archived=include_archived):
                other = edge.dst if edge.src == node_id else edge.src
                if other == node_id:
                    continue
                if scope and other not in seeds:
                    if other not in judged and other not in reach:
                        judged.add(other)
                        if conflicts(graph.get(other), scope):
                            out_of_scope.add(other)
                    if other in out_of_scope:
                        continue
                weight = edge.weight * priors.get(edge.type, 1.0) if priors else edge.weight
                propagated = accum * max(0.0, min(1.0, weight))
                if propagated <= 0.0:
                    continue
                current = reach.get(other)
                if current is None or current < propagated:
                    reach[other] = propagated
                    next_frontier.append((other, propagated))
                edges_used.setdefault((edge.src, edge.dst, edge.type.value), edge.weight)
                if len(reach) >= max_candidates:
                    break
            if len(reach) >= max_candidates:
                break
        frontier = next_frontier
    return reach, edges_used


def test_adjacent_lists_neighbours_without_self_loops() -> None:
    rng = random.Random(1)
    graph, _ = random_graph(rng, 30, 120)
    graph.upsert_edge(MemoryEdge("m1", "m1", EdgeType.CAUSAL, 0.5, T0, T0))
    for node_id in [*graph.nodes, "absent"]:
        expected = [e for e in graph.neighbours(node_id, min_weight=-1.0, include_archived=True)
                    if e.src != e.dst]
        others, edges, keys = graph.adjacent(node_id)
        assert list(edges) == expected and len(others) == len(keys) == len(edges)
        for other, edge, key in zip(others, edges, keys, strict=True):
            assert other == (edge.dst if edge.src == node_id else edge.src)
            assert key == (edge.src, edge.dst, edge.type.value)
    before = graph.adjacent("m1")[1]
    graph.upsert_edge(MemoryEdge("m1", "m2", EdgeType.REFINES, 0.5, T0, T0))
    assert len(graph.adjacent("m1")[1]) == len(before) + 1  # the version change dropped the cache


def index_entries(graph: ContextGraph, node_id: str) -> list[tuple[int, int]]:
    """`adjacency_index` for one node: (position at the other end, edge row), in order."""
    index = graph.adjacency_index()
    at = graph._position[node_id]
    entries = range(index.start[at], index.start[at] + index.count[at])
    return [(index.other[i], index.row[i]) for i in entries]


@pytest.mark.parametrize("seed", range(16))
def test_the_adjacency_index_lists_what_the_dicts_list(seed: int) -> None:
    """The index's lists, kept as edges come and go, against the graph's dicts read afresh:
    new pairs, more types of a pair, pairs emptied and joined again, self loops, bare
    ends, keys written again, and enough removals to compact the rows; read in between."""
    rng = random.Random(seed)
    graph = ContextGraph()
    ids = [f"m{i}" for i in range(rng.choice([3, 12, 60]))]
    for node_id in ids[::2]:
        graph.add_node(MemoryNode(node_id, "", T0, T0))
    kinds = list(EdgeType)[:rng.choice([1, 2, len(EdgeType)])]
    for _ in range(rng.choice([4, 12, 40])):
        for _ in range(rng.randrange(0, 120)):
            src = rng.choice(ids)
            dst = src if rng.random() < 0.05 else rng.choice(ids)
            graph.upsert_edge(MemoryEdge(src, dst, rng.choice(kinds), rng.random(), T0, T0))
        edges = list(graph.edges())
        graph.remove_edges(rng.sample(edges, rng.randrange(0, len(edges) + 1)))
        for node_id in rng.sample(ids, min(len(ids), 5)) if rng.random() < 0.7 else []:
            if node_id in graph.nodes:
                index_entries(graph, node_id)         # a walk reads some, mid-way
        for node_id in graph.nodes:
            assert index_entries(graph, node_id) == [
                (graph._position[other], edge._row)
                for other, edge in graph._adjacent_edges(node_id)]


@pytest.mark.parametrize("case", range(60))
def test_bfs_matches_the_neighbours_oracle(case: int) -> None:
    rng = random.Random(case)
    graph, _ = random_graph(rng, rng.randrange(5, 40), rng.randrange(0, 150))
    seeds = random_seeds(rng, len(graph.nodes))
    kwargs: dict[str, Any] = {
        "depth": rng.randrange(0, 4), "max_candidates": rng.choice([1, 3, 8, 50]),
        "edge_floor": rng.choice([0.0, 0.1, 0.5]), "include_archived": rng.random() < 0.3,
        "priors": rng.choice([None, {}, {EdgeType.CAUSAL: 2.0, EdgeType.REFINES: 0.5}])}
    scope = random_scope(rng)
    reach, edges = expand_bfs(graph, seeds, scope, **kwargs)
    want_reach, want_edges = oracle_bfs(graph, seeds, scope, **kwargs)
    assert list(reach) == list(want_reach) and same_floats(list(reach.values()),
                                                           list(want_reach.values()))
    assert list(edges.items()) == list(want_edges.items())


# ---- featurize ---------------------------------------------------------------------------


def oracle_featurize(graph: ContextGraph, cfg: RetrievalConfig, *, query: str,
                     seeds: Mapping[str, Any], reach: Mapping[str, float],
                     query_embedding: Embedding | None, resolver: Any, personal: Any,
                     success: Any, tenant_id: str | None, sub_tenant_id: str | None,
                     scope: Scope) -> list[Candidate]:
    """featurize as it was: two passes, one cosine and one regex tokenization per candidate."""
    def overlap(query_tokens: frozenset[str], text: object) -> float:
        if not query_tokens:
            return 0.0
        doc = (frozenset(t.lower() for t in _TOKEN.findall(text))
               if text and isinstance(text, str) else frozenset())
        return len(query_tokens & doc) / len(query_tokens) if doc else 0.0

    missing = [cid for cid in reach if cid not in seeds]
    resolved: dict[str, Any] = {}
    if missing and resolver is not None:
        resolved = {cid: p for cid, p in resolver(missing).items() if p}
    query_tokens = frozenset(t.lower() for t in _TOKEN.findall(query))
    candidates: list[Candidate] = []
    for cid, reach_score in reach.items():
        was_seed = cid in seeds
        payload = seeds[cid] if was_seed else resolved.get(cid)
        node = graph.get(cid)
        if scope and not was_seed and not confirmed(payload, node, scope):
            continue
        if payload is None:
            payload = {"id": cid, "memory": "", "score": 0.0}
        if (tenant_id is not None or sub_tenant_id is not None) and tenant_skipped(
                node, tenant_id, sub_tenant_id):
            continue
        dense = float(payload.get("score") or 0.0)
        if not was_seed and query_embedding is not None:
            stored = graph.embeddings.get(cid)
            if stored is not None:
                dense = max(dense, cosine(query_embedding, stored))
        candidates.append(Candidate(
            id=cid, payload=payload, was_seed=was_seed, dense=dense,
            lexical=overlap(query_tokens, payload.get("memory", "")),
            graph=float(reach_score), frequency=0.0, personal=0.0, success=0.0,
            relevance=1.0 if node is None else max(0.0, min(1.0, node.relevance))))
    peak = graph.peak_access_count() if cfg.epsilon_frequency > 0 else 0
    for c in candidates:
        node = graph.get(c.id)
        if node is not None and cfg.epsilon_frequency > 0:
            c.frequency = frequency_term(node.access_count, peak)
        if personal is not None and cfg.delta_personal > 0:
            c.personal = max(-1.0, min(1.0, personal(c.id)))
        if success is not None and cfg.zeta_success > 0:
            c.success = max(0.0, min(1.0, success(c.id)))
        c.score = (cfg.alpha_dense * c.dense + cfg.beta_bm25 * c.lexical
                   + cfg.gamma_graph * c.graph + cfg.epsilon_frequency * c.frequency
                   + cfg.delta_personal * c.personal + cfg.zeta_success * c.success
                   ) * c.relevance
    return candidates


def candidate_bits(c: Candidate) -> tuple[Any, ...]:
    floats = (c.dense, c.lexical, c.graph, c.frequency, c.personal, c.success, c.relevance,
              c.score)
    return (c.id, c.payload, c.was_seed, *map(bits, floats))


@pytest.mark.parametrize("case", range(100))
def test_featurize_matches_the_two_pass_oracle(case: int) -> None:
    rng = random.Random(100 + case)
    graph, payloads = random_graph(rng, rng.randrange(5, 40), rng.randrange(0, 150))
    seeds = random_seeds(rng, len(graph.nodes))
    scope = random_scope(rng)
    reach, _ = expand_bfs(graph, seeds, scope, depth=2, max_candidates=30, edge_floor=0.1,
                          include_archived=rng.random() < 0.5)
    for cid in list(reach)[:3]:  # odd reach values: ints and exact zeros
        reach[cid] = rng.choice([0, 1, 0.25, -0.0])

    def resolver(ids: list[str]) -> dict[str, Any]:
        return {cid: ({**payloads[cid], "id": cid, "memory": payloads[cid]["data"]}
                      if rng.random() < 0.9 else {}) for cid in ids if cid in payloads}

    table = {f"m{i}": rng.choice([0.0, -2.0, 3.0, float("nan"), rng.uniform(-1, 1),
                                  rng.random()]) for i in range(40)}
    cfg = RetrievalConfig(alpha_dense=rng.random(), beta_bm25=rng.random(),
                          gamma_graph=rng.random(), delta_personal=rng.choice([0.0, rng.random()]),
                          epsilon_frequency=rng.choice([0.0, rng.random()]),
                          zeta_success=rng.choice([0.0, rng.random()]))
    kwargs: dict[str, Any] = {
        "query": rng.choice(["Which seat does Alice like?", "", "w1 W2 nut"]),
        "seeds": seeds, "reach": reach,
        "query_embedding": rng.choice([None, Embedding.of([0.5, -0.1, 0.3, 0.9]),
                                       Embedding.of([0.0, 0.0, 0.0, 0.0])]),
        "personal": rng.choice([None, lambda mid: table.get(mid, 0.0)]),
        "success": rng.choice([None, lambda mid: table.get(mid, 0.0)]),
        "tenant_id": rng.choice([None, "t0"]), "sub_tenant_id": None, "scope": scope}
    state = rng.getstate()
    got = featurize(graph, cfg, resolver=resolver, **kwargs)
    rng.setstate(state)  # the resolver draws: give both sides the same answers
    want = oracle_featurize(graph, cfg, resolver=resolver, **kwargs)
    assert [candidate_bits(c) for c in got] == [candidate_bits(c) for c in want]


# ---- state changes between searches --------------------------------------------------------
# The caches that outlive a search are keyed by what they depend on: token tuples by the text
# itself, frequency terms by (count, peak), adjacency by the graph's version. A search after
# a change must therefore see exactly what a search on a state built afresh sees.


def test_remembered_frequency_terms_are_the_terms() -> None:
    for peak in (0, 1, 3, 19, 1000):
        for count in (-1, 0, 1, 2, 3, 19, 20, 5000):
            assert bits(_frequency_term(count, peak)) == bits(frequency_term(count, peak))


def _text_edited(state: EngineState) -> None:  # the stored payload mutated in place
    state.payloads["m4"]["data"] = "Alice wants a window seat on her flights"


def _owner_edited(state: EngineState) -> None:
    state.payloads["m3"]["user_id"] = "bob"


def _memory_added(state: EngineState) -> None:
    add_memory(state, "m7", "Window seat for Alice on flights", [0.95, 0.2, 0.05], "alice")
    add_edge(state, "m2", "m7", EdgeType.REFINES, 0.7)


def _memory_deleted(state: EngineState) -> None:  # as Memory.delete: payload gone, node archived
    state.payloads.pop("m4")
    archive(state.graph, "m4")


def _payload_dropped(state: EngineState) -> None:  # the node stays reachable, its payload not
    state.payloads.pop("m3")


def _memory_updated(state: EngineState) -> None:  # a new payload, node and embedding
    add_memory(state, "m3", "Alice's Tokyo hotel has a window seat lounge", [0.8, 0.4, 0.1],
               "alice")


def _edge_reweighted(state: EngineState) -> None:
    add_edge(state, "m2", "m3", EdgeType.TOPIC_SIMILAR, 0.2)


def outcome_bits(outcome: Any) -> tuple[Any, ...]:
    return ([candidate_bits(c) for c in outcome.candidates],
            [(e.src, e.dst, e.type, bits(e.weight)) for e in outcome.subgraph],
            [(c.id, bits(c.score)) for c in outcome.results])


@pytest.mark.parametrize("change", [_text_edited, _owner_edited, _memory_added, _memory_deleted,
                                    _payload_dropped, _memory_updated, _edge_reweighted])
def test_a_search_after_a_change_sees_what_a_fresh_state_sees(change: Any) -> None:
    config = replace(with_retrieval(NO_DECAY, epsilon_frequency=0.1),
                     mspr=MsprConfig(enabled=True, frequency=FrequencyConfig(enabled=True)))
    state = fixture(config)
    before = [search(state, request(), now=T_FIXTURE) for _ in range(2)]  # caches now warm
    change(state)
    counts = {mid: node.access_count for mid, node in state.graph.nodes.items()
              if node is not None}
    after = search(state, request(), now=T_FIXTURE)
    clear_token_cache()  # the fresh state starts from empty caches
    _frequency_term.cache_clear()
    fresh = fixture(config)
    change(fresh)
    for mid, count in counts.items():  # the access counts the searches above left
        node = fresh.graph.get(mid)
        assert node is not None
        node.access_count = count
    fresh.graph.changed()
    want = search(fresh, request(), now=T_FIXTURE)
    assert outcome_bits(after) == outcome_bits(want)
    assert outcome_bits(after) != outcome_bits(before[-1])  # the change shows in the outcome


# ---- PPR ---------------------------------------------------------------------------------


def oracle_ppr(graph: ContextGraph, seeds: Mapping[str, Any], scope: Scope, *,
               max_candidates: int, edge_floor: float, include_archived: bool,
               damping: float, max_iter: int, tolerance: float, undirected: bool = False,
               ) -> tuple[dict[str, float], dict[tuple[str, str, str], float], list[str]]:
    """expand_ppr as it was: the view built per search, every view edge in a dict."""
    table = _edge_table(graph)
    n_graph = len(table.ids)
    seed_pos = [table.position.get(sid, -1) for sid in seeds]
    keep = np.zeros(n_graph, dtype=bool)
    keep[[p for p in seed_pos if p >= 0]] = True
    skip = _skip_mask(table, scope, keep, include_archived)
    mask = (table.weight >= edge_floor) & ~skip[table.src] & ~skip[table.dst]
    kept = np.flatnonzero(mask)
    ks, kd, kw = table.src[kept], table.dst[kept], table.weight[kept]
    edges_used = {(e.src, e.dst, e.type.value): e.weight
                  for e in (table.edges[i] for i in kept)}
    endpoints = np.empty(2 * ks.size, dtype=np.int64)
    endpoints[0::2], endpoints[1::2] = ks, kd
    uniq, first = np.unique(endpoints, return_index=True)
    order = uniq[np.argsort(first, kind="stable")]
    local = np.full(n_graph, -1, dtype=np.int64)
    local[order] = np.arange(order.size)
    view_ids = [table.ids[i] for i in order]
    for sid in seeds:
        if sid not in view_ids:
            view_ids.append(sid)
    n_view = len(view_ids)
    src, dst, weight = local[ks], local[kd], kw
    if undirected:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        weight = np.concatenate([weight, weight])
    pair = src * max(n_view, 1) + dst
    uniq_pair, first_at, inverse = np.unique(pair, return_index=True, return_inverse=True)
    best = np.full(uniq_pair.size, -np.inf)
    np.maximum.at(best, inverse, weight)
    pair_src, pair_dst = src[first_at], dst[first_at]
    edge_order = np.lexsort((first_at, pair_src))
    raw = np.array([max(0.0, seed_score(p)) for p in seeds.values()])
    total = 0.0
    for value in raw:
        total += value
    seed_mass = raw / total if total > 0.0 else np.full(len(seeds), 1.0 / len(seeds))
    personalization = np.zeros(n_view)
    for sid, mass in zip(seeds, seed_mass, strict=True):
        personalization[view_ids.index(sid)] = mass
    reach = dict.fromkeys(seeds, 1.0)
    result = personalized_pagerank(
        n_view, pair_src[edge_order], pair_dst[edge_order], best[edge_order], personalization,
        alpha=damping, max_iter=max_iter, tol=tolerance)
    if result.scores is None:
        return reach, edges_used, [f"ppr: pagerank failed ({result.error}); ranking seeds only"]
    scores = result.scores
    non_seed = [i for i in np.argsort(-scores, kind="stable") if view_ids[i] not in reach]
    for i in non_seed[:max(0, max(1, max_candidates) - len(reach))]:
        if scores[i] > 0:
            reach[view_ids[i]] = float(scores[i])
    return reach, edges_used, []


@pytest.mark.parametrize("case", range(40))
def test_ppr_matches_the_eager_oracle(case: int) -> None:
    rng = random.Random(200 + case)
    graph, _ = random_graph(rng, rng.randrange(3, 40), rng.randrange(0, 150))
    kwargs: dict[str, Any] = {
        "max_candidates": rng.choice([1, 5, 50]), "edge_floor": rng.choice([0.0, 0.1, 0.5]),
        "include_archived": rng.random() < 0.3, "damping": 0.85,
        "max_iter": rng.choice([200, 3]), "tolerance": 1e-6, "undirected": rng.random() < 0.3}
    scope = random_scope(rng)
    for _ in range(3):  # repeated searches of one shape reuse the cached view
        seeds = random_seeds(rng, len(graph.nodes))
        reach, edges, notes = expand_ppr(graph, seeds, scope, **kwargs)
        want_reach, want_edges, want_notes = oracle_ppr(graph, seeds, scope, **kwargs)
        assert list(reach) == list(want_reach)
        assert same_floats(list(reach.values()), list(want_reach.values()))
        assert notes == want_notes
        candidates = [Candidate(cid, {}, False, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
                      for cid in reach if rng.random() < 0.8]
        assert subgraph(edges, candidates, scope) == subgraph(want_edges, candidates, scope)
        assert list(edges.items()) == list(want_edges.items())  # the lazy mapping, in full
        assert subgraph(edges, candidates, scope) == subgraph(want_edges, candidates, scope)


def test_ppr_view_cache_is_not_used_for_a_seed_that_it_skips() -> None:
    graph, _ = random_graph(random.Random(7), 30, 120)
    bob = next(n for n in graph.nodes.values() if n is not None and n.user_id == "bob"
               and not n.archived)
    kwargs: dict[str, Any] = {"max_candidates": 50, "edge_floor": 0.0, "include_archived": False,
                              "damping": 0.85, "max_iter": 200, "tolerance": 1e-6}
    scope: Scope = {"user_id": "alice"}
    for seeds in ({"m0": {"id": "m0", "score": 0.5}}, {bob.id: {"id": bob.id, "score": 0.5}},
                  {"m0": {"id": "m0", "score": 0.5}}):
        reach, edges, _ = expand_ppr(graph, seeds, scope, **kwargs)
        want_reach, want_edges, _ = oracle_ppr(graph, seeds, scope, **kwargs)
        assert list(reach.items()) == list(want_reach.items())
        assert list(edges.items()) == list(want_edges.items())


def test_transition_with_isolated_nodes_matches_a_fresh_pagerank() -> None:
    rng = np.random.default_rng(5)
    n, m = 300, 1200
    flat = rng.choice(n * n, size=m, replace=False)
    src, dst = flat // n, flat % n
    weight = 1.0 - rng.random(m)
    base = transition(n, src, dst, weight)
    for extra in (0, 1, 4):
        p = np.zeros(n + extra)
        p[rng.choice(n + extra, size=5, replace=False)] = rng.random(5)
        got = pagerank_on(base.with_isolated(extra), p, alpha=0.85, max_iter=200, tol=1e-6)
        want = personalized_pagerank(n + extra, src, dst, weight, p, alpha=0.85,
                                     max_iter=200, tol=1e-6)
        assert got.iterations == want.iterations and got.error == want.error
        assert got.scores is not None and want.scores is not None
        assert got.scores.tobytes() == want.scores.tobytes()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 0.5, 0.25, 1.0, -1.0, 3.0, math.inf, -math.inf]),
                max_size=40), st.integers(0, 45))
def test_stable_top_is_a_prefix_of_the_stable_argsort(values: list[float], m: int) -> None:
    array = np.array(values, dtype=np.float64)
    full = np.argsort(array, kind="stable")
    top = stable_top_prefix(array, m)
    assert top.size >= min(m, array.size)
    assert np.array_equal(top, full[:top.size])


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(0, 5), dim=st.integers(0, 40), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from([1e-160, 1e-3, 1.0, 1e150]))
def test_row_norms_are_each_rows_own_norm(rows: int, dim: int, seed: int,
                                          scale: float) -> None:
    """The timeline sums every memory's norm at once: each the norm `Embedding.of` sums
    for the row alone, bit for bit (tiny and huge values included)."""
    matrix = np.random.default_rng(seed).normal(size=(rows, dim)) * scale
    assert list(map(bits, row_norms_sq(matrix))) == [
        bits(Embedding.of(row.copy()).norm_sq) for row in matrix]


@pytest.mark.parametrize("seed", range(3))
def test_a_query_without_counts_has_every_rate_zero(seed: int) -> None:
    """The search skips the success term's lookups when `hit_rates` gives no provider
    (no memory has counts for its query hash and user): that must mean every rate is 0,
    after rows are recorded and after resets; a provider gives each memory's rate."""
    from msprlab.engine.success import SuccessStore

    rng = random.Random(seed)
    store = SuccessStore()
    hashes, memories, users = ["h1", "h2", "h3", None], ["m1", "m2", "m3"], ["u1", "u2", None]
    for step in range(120):
        if step % 40 == 39:
            store.reset(rng.choice(users))
        else:
            store.record(query_hash=rng.choice(hashes[:3]), memory_id=rng.choice(memories),
                         helpful=rng.random() < 0.5, user_id=rng.choice(users),
                         timestamp=T_FIXTURE, feedback_id=None)
        for query_hash in hashes:
            for user in users:
                rates = [store.hit_rate(query_hash, m, user_id=user, min_samples=1)
                         for m in memories]
                counted = [store._counts.get((query_hash, m, user)) for m in memories]
                provider = store.hit_rates(query_hash, user_id=user, min_samples=1)
                has = provider is not None
                assert has == any(c is not None and c[0] > 0 for c in counted)
                assert has or rates == [0.0] * len(memories)
                if provider is not None:
                    assert list(map(provider, memories)) == rates
