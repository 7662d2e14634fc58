"""The shared rerank: features per candidate, the final score, order and subgraph
(MSPR.md section 10)."""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .bfs import EdgeKey
from .config import RetrievalConfig
from .graph import ContextGraph, Embedding
from .ppr import ViewEdges
from .scope import UNVERIFIABLE, Scope
from .seeds import Payload
from .text import TOKEN_SETS, cosine, cosines, token_set, tokens

Resolver = Callable[[Sequence[str]], Mapping[str, Payload]]
Provider = Callable[[str], float]


@dataclass(slots=True)
class Candidate:
    """One scored candidate: every input of its final score, and the score."""

    id: str
    payload: Payload
    was_seed: bool
    dense: float
    lexical: float
    graph: float
    frequency: float
    personal: float
    success: float
    relevance: float
    score: float = 0.0

    def with_score(self, score: float) -> Candidate:
        """A copy with another final score (`dataclasses.replace`, without its overhead)."""
        return Candidate(self.id, self.payload, self.was_seed, self.dense, self.lexical,
                         self.graph, self.frequency, self.personal, self.success,
                         self.relevance, score)

    def entry(self) -> dict[str, Any]:
        """The library's result dict: payload copy, final score and the breakdown."""
        out = dict(self.payload)
        out.setdefault("id", self.id)
        out["score"] = self.score
        out["context_graph"] = {
            "dense": self.dense, "lexical": self.lexical, "graph": self.graph,
            "frequency": self.frequency, "personal": self.personal, "success": self.success,
            "was_seed": self.was_seed,
        }
        return out


@dataclass(frozen=True, slots=True)
class SubgraphEdge:
    src: str
    dst: str
    type: str
    weight: float


def _edge_maker() -> Callable[[str, str, str, float], SubgraphEdge]:
    """`SubgraphEdge(src, dst, type, weight)` without the frozen `__init__`'s setattr calls:
    the slots are filled through their descriptors. Same object, a third of the time."""
    new = object.__new__
    set_src, set_dst, set_type, set_weight = (
        getattr(SubgraphEdge, name).__set__ for name in ("src", "dst", "type", "weight"))

    def make(src: str, dst: str, kind: str, weight: float) -> SubgraphEdge:
        edge = new(SubgraphEdge)
        set_src(edge, src)
        set_dst(edge, dst)
        set_type(edge, kind)
        set_weight(edge, weight)
        return edge
    return make


_subgraph_edge = _edge_maker()


def frequency_term(count: int, peak: int) -> float:
    """clamp(ln(1+c) / ln(1+P), 0, 1) with P raised to c when smaller (MSPR.md 10.4)."""
    if count <= 0:
        return 0.0
    top = peak if peak > 0 else count
    top = max(top, count)
    denominator = math.log1p(top)
    if denominator <= 0.0:
        return 0.0
    return max(0.0, min(1.0, math.log1p(count) / denominator))


# frequency_term is pure and sees few distinct (count, peak) pairs: remembered across searches.
_frequency_term = functools.lru_cache(maxsize=1 << 12)(frequency_term)


def final_score(cfg: RetrievalConfig, c: Candidate) -> float:
    """The library's arithmetic order: additions left to right, then × relevance."""
    base = (cfg.alpha_dense * c.dense + cfg.beta_bm25 * c.lexical + cfg.gamma_graph * c.graph
            + cfg.epsilon_frequency * c.frequency + cfg.delta_personal * c.personal
            + cfg.zeta_success * c.success)
    return base * c.relevance


def featurize(graph: ContextGraph, cfg: RetrievalConfig, *, query: str,
              seeds: Mapping[str, Payload], reach: Mapping[str, float],
              query_embedding: Embedding | None, resolver: Resolver | None,
              personal: Provider | None, success: Provider | None,
              tenant_id: str | None, sub_tenant_id: str | None,
              scope: Scope) -> list[Candidate]:
    """Candidates in reach order with all features and final scores (not yet sorted)."""
    missing = [cid for cid in reach if cid not in seeds]
    resolved: Mapping[str, Payload] = {}
    if missing and resolver is not None:
        resolved = resolver(missing)
    # cosine(query, node) per non-seed, in reach order, None where there is nothing to compare.
    similarities = _similarities(graph, query_embedding, missing)
    next_similarity = iter(similarities).__next__ if similarities else None
    query_tokens = tokens(query)
    query_size = len(query_tokens)
    check_tenant = tenant_id is not None or sub_tenant_id is not None
    scope_items = list(scope.items())
    only_field, only_want = scope_items[0] if len(scope_items) == 1 else (None, None)
    alpha, beta, gamma = cfg.alpha_dense, cfg.beta_bm25, cfg.gamma_graph
    epsilon, delta, zeta = cfg.epsilon_frequency, cfg.delta_personal, cfg.zeta_success
    # The frequency peak is read once, before any scoring (nothing here changes it).
    peak = graph.peak_access_count() if epsilon > 0 else 0
    frequency_of: dict[int, float] = {}  # frequency_term(count, peak) per access count
    personal_of = personal if delta > 0 else None
    success_of = success if zeta > 0 else None
    node_of, resolved_of = graph.nodes.get, resolved.get
    doc_set_of = TOKEN_SETS.get
    candidates: list[Candidate] = []
    append = candidates.append
    for cid, reach_score in reach.items():
        node = node_of(cid)
        if cid in seeds:
            was_seed = True
            payload: Payload | None = seeds[cid]
            similarity = None
        else:
            was_seed = False
            payload = resolved_of(cid) or None  # the resolver's falsy entries are dropped
            similarity = next_similarity() if next_similarity is not None else None
            if only_field is not None:
                # scope.confirmed(payload, node, scope) for a scope of one owner (the usual
                # case: the search's user), inlined without the loop below.
                if only_want is UNVERIFIABLE:
                    continue
                owner = payload.get(only_field) if payload else None
                if owner is None and node is not None:
                    owner = getattr(node, only_field)
                if owner is None or (owner if type(owner) is str else str(owner)) != only_want:
                    continue
            elif scope_items:
                # scope.confirmed(payload, node, scope), inlined.
                confirmed = True
                for field_name, want in scope_items:
                    if want is UNVERIFIABLE:
                        confirmed = False
                        break
                    owner = payload.get(field_name) if payload else None
                    if owner is None and node is not None:
                        owner = getattr(node, field_name)
                    if owner is None or (owner if type(owner) is str else str(owner)) != want:
                        confirmed = False
                        break
                if not confirmed:
                    continue
        if payload is None:
            payload = {"id": cid, "memory": "", "score": 0.0}
        if check_tenant and node is not None:
            # scope.tenant_skipped(node, tenant_id, sub_tenant_id), inlined.
            tag = node.tenant_id
            if tenant_id is not None and tag is not None and tag != tenant_id:
                continue
            tag = node.sub_tenant_id
            if sub_tenant_id is not None and tag is not None and tag != sub_tenant_id:
                continue
        dense = payload.get("score") or 0.0
        if type(dense) is not float:  # float() returns an exact float itself
            dense = float(dense)
        if similarity is not None:
            if similarity is _RAISES:
                similarity = _raise_cosine(graph, query_embedding, cid)
            if similarity > dense:  # max(dense, similarity)
                dense = similarity
        lexical = 0.0
        if query_size:
            text = payload.get("memory", "")
            if text and isinstance(text, str):
                doc = doc_set_of(text)
                if doc is None:
                    doc = token_set(text)
                lexical = len(query_tokens & doc) / query_size  # |Q ∩ D| / |Q|
        frequency = 0.0
        if node is None:
            relevance = 1.0
        else:
            relevance = node.relevance  # max(0.0, min(1.0, relevance))
            relevance = relevance if relevance < 1.0 else 1.0
            relevance = relevance if relevance > 0.0 else 0.0
            if epsilon > 0:
                count = node.access_count
                known = frequency_of.get(count)
                if known is None:
                    known = frequency_of[count] = _frequency_term(count, peak)
                frequency = known
        personal_term = 0.0
        if personal_of is not None:  # max(-1.0, min(1.0, boost))
            value = personal_of(cid)
            value = value if value < 1.0 else 1.0
            personal_term = value if value > -1.0 else -1.0
        success_term = 0.0
        if success_of is not None:  # max(0.0, min(1.0, rate))
            value = success_of(cid)
            value = value if value < 1.0 else 1.0
            success_term = value if value > 0.0 else 0.0
        graph_term = reach_score if type(reach_score) is float else float(reach_score)
        # final_score, inlined: the same additions left to right, then × relevance.
        score = (alpha * dense + beta * lexical + gamma * graph_term + epsilon * frequency
                 + delta * personal_term + zeta * success_term) * relevance
        append(Candidate(cid, payload, was_seed, dense, lexical, graph_term, frequency,
                         personal_term, success_term, relevance, score))
    return candidates


_RAISES = float("nan")  # marks a cosine that raises; compared by identity only


def _similarities(graph: ContextGraph, query_embedding: Embedding | None,
                  ids: Sequence[str]) -> Sequence[float | None]:
    """cosine(query, node) for each id (None without a stored embedding), in one NumPy pass;
    an empty list when there is no query embedding or no stored one.

    Computed before the scope and tenant checks drop anyone, which changes nothing, as
    cosine has no side effects; when the batch meets a cosine that would raise, every entry
    is `_RAISES` and the raise is left to the candidates that are actually scored.
    """
    if query_embedding is None or not ids:
        return []
    found = list(map(graph.embeddings.get, ids))
    stored = [e for e in found if e is not None]
    if not stored:
        return []
    try:
        values: list[float] = cosines(query_embedding, stored)
    except ZeroDivisionError:
        values = [_RAISES] * len(stored)
    if len(stored) == len(ids):
        return values
    computed = iter(values)
    return [None if e is None else next(computed) for e in found]


def _raise_cosine(graph: ContextGraph, query_embedding: Embedding | None, cid: str) -> float:
    assert query_embedding is not None
    return cosine(query_embedding, graph.embeddings[cid])


def rank(candidates: list[Candidate], limit: int) -> list[Candidate]:
    """Stable sort by score, descending (ties keep candidate order), cut to max(1, limit)."""
    return sorted(candidates, key=_by_score, reverse=True)[:max(1, limit)]


_by_score = operator.attrgetter("score")


def subgraph(edges_used: Mapping[EdgeKey, float], candidates: Sequence[Candidate],
             scope: Scope) -> list[SubgraphEdge]:
    """Walked edges; with a scope only those joining two candidates that survived."""
    make = _subgraph_edge
    if not scope:
        return [make(src, dst, kind, weight) for (src, dst, kind), weight in edges_used.items()]
    kept = {c.id for c in candidates}
    if isinstance(edges_used, ViewEdges):  # a PPR view: pick the edges without a full pass
        return [make(src, dst, kind, weight)
                for (src, dst, kind), weight in edges_used.between(kept)]
    return [make(src, dst, kind, weight)
            for (src, dst, kind), weight in edges_used.items()
            if src in kept and dst in kept]
