"""The common fixture of MSPR.md section 19 (Examples A-D), built through the engine API."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from msprlab.engine import EngineConfig, SearchRequest, Seed, new_state
from msprlab.engine.config import DecayConfig, RetrievalConfig
from msprlab.engine.graph import EdgeType, MemoryEdge, MemoryNode
from msprlab.engine.state import EngineState

T0 = datetime(2026, 1, 1, 12, 0)
QUERY = "Which seat does Alice like on flights?"
QUERY_EMBEDDING = [1.0, 0.2, 0.0]
MEMORIES = {
    "m1": ("Alice prefers a window seat on long flights", [0.9, 0.3, 0.1], "alice"),
    "m2": ("Alice booked flight AA100 to Tokyo in March", [0.6, 0.6, 0.2], "alice"),
    "m3": ("Her hotel in Tokyo is near Shinjuku station", [0.3, 0.9, 0.1], "alice"),
    "m4": ("Alice is allergic to peanuts, ask the airline for a nut-free meal",
           [0.5, 0.1, 0.8], "alice"),
    "m5": ("Alice's passport expires in 2027", [0.2, 0.2, 0.9], "alice"),
    "m6": ("Bob prefers an aisle seat on flights", [0.95, 0.25, 0.0], "bob"),
}
EDGES = [
    ("m1", "m2", EdgeType.REPLY_TO, 1.0),
    ("m1", "m2", EdgeType.TEMPORAL_NEXT, 0.6),
    ("m2", "m3", EdgeType.TOPIC_SIMILAR, 0.8),
    ("m3", "m4", EdgeType.TEMPORAL_NEXT, 0.6),
    ("m1", "m4", EdgeType.DOCUMENT_LINK, 0.3),
    ("m5", "m1", EdgeType.TOPIC_SIMILAR, 0.08),
    ("m1", "m6", EdgeType.TOPIC_SIMILAR, 0.9),
]
SEEDS = [Seed("m2", 0.74), Seed("m1", 0.82)]
NO_DECAY = EngineConfig(decay=DecayConfig(enabled=False))


def add_memory(state: EngineState, memory_id: str, text: str, embedding: list[float] | None,
               user: str | None, *, extra: dict[str, Any] | None = None,
               at: datetime = T0) -> None:
    payload: dict[str, Any] = {"data": text, "hash": "", "created_at": at.isoformat(),
                               "updated_at": at.isoformat()}
    if user is not None:
        payload["user_id"] = user
    payload.update(extra or {})
    state.payloads[memory_id] = payload
    state.graph.add_node(MemoryNode(
        id=memory_id, hash="", created_at=at, updated_at=at, user_id=user,
        tenant_id=payload.get("tenant_id"), metadata=dict(payload)))
    if embedding is not None:
        state.graph.set_embedding(memory_id, embedding)


def add_edge(state: EngineState, src: str, dst: str, kind: EdgeType, weight: float,
             at: datetime = T0) -> None:
    state.graph.upsert_edge(MemoryEdge(src, dst, kind, weight, at, at))


def fixture(config: EngineConfig = NO_DECAY, **kw: Any) -> EngineState:
    state = new_state(config, **kw)
    for memory_id, (text, embedding, user) in MEMORIES.items():
        add_memory(state, memory_id, text, embedding, user)
    for src, dst, kind, weight in EDGES:
        add_edge(state, src, dst, kind, weight)
    return state


def with_retrieval(config: EngineConfig, **changes: Any) -> EngineConfig:
    return replace(config, retrieval=replace(config.retrieval, **changes))


def request(**changes: Any) -> SearchRequest:
    base = SearchRequest(query=QUERY, seeds=SEEDS, query_embedding=QUERY_EMBEDDING,
                         user_id="alice")
    return replace(base, **changes)


def ranked(outcome: Any) -> list[tuple[str, float]]:
    return [(c.id, c.score) for c in outcome.results]


__all__ = [
    "QUERY",
    "T0",
    "RetrievalConfig",
    "add_edge",
    "add_memory",
    "fixture",
    "ranked",
    "request",
    "with_retrieval",
]
