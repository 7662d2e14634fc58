"""The shared rerank: features per candidate, the final score, order and subgraph
(MSPR.md section 10)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .bfs import EdgeKey
from .config import RetrievalConfig
from .graph import ContextGraph, Embedding
from .scope import Scope, confirmed, tenant_skipped
from .seeds import Payload
from .text import cosine, lexical_overlap, tokens

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
    resolved: dict[str, Payload] = {}
    if missing and resolver is not None:
        resolved = {cid: p for cid, p in resolver(missing).items() if p}
    query_tokens = tokens(query)
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
            lexical=lexical_overlap(query_tokens, payload.get("memory", "")),
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
        c.score = final_score(cfg, c)
    return candidates


def rank(candidates: list[Candidate], limit: int) -> list[Candidate]:
    """Stable sort by score, descending (ties keep candidate order), cut to max(1, limit)."""
    return sorted(candidates, key=lambda c: c.score, reverse=True)[:max(1, limit)]


def subgraph(edges_used: Mapping[EdgeKey, float], candidates: Sequence[Candidate],
             scope: Scope) -> list[SubgraphEdge]:
    """Walked edges; with a scope only those joining two candidates that survived."""
    kept = {c.id for c in candidates}
    return [SubgraphEdge(src, dst, kind, weight)
            for (src, dst, kind), weight in edges_used.items()
            if not scope or (src in kept and dst in kept)]
