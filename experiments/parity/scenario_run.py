"""Replay a scenario file through the engine and write the `ck-mspr-oracle-output/1` format."""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from importlib import metadata
from typing import Any

import numpy as np

from msprlab.datasets.scenario import (
    FeedbackEvent,
    Scenario,
    ScenarioMemory,
    SearchEvent,
    parse_scenario,
)
from msprlab.engine import SearchError, SearchRequest, Seed, new_state, record_feedback, search
from msprlab.engine.graph import Embedding, MemoryNode
from msprlab.engine.roles import policy_from_name
from msprlab.engine.state import EngineState

OUTPUT_FORMAT = "ck-mspr-oracle-output/1"
# The cyclic collector's youngest generation while a scenario loads and runs (`spaced_gc`).
YOUNG_GENERATION = 50_000


@contextmanager
def spaced_gc(young: int = YOUNG_GENERATION) -> Iterator[None]:
    """Inside, the collector looks at the young objects every `young` allocations instead
    of every 700 (Python's default), and so at the old ones far less often.

    Loading a scenario and building its state allocate millions of objects that all live
    on (records, nodes, edges, their payload dicts) and next to no cyclic garbage; at the
    default the collector walks all of them again and again as the heap grows: a fifth of
    a run at 10,000 memories. Nothing is left uncollected: the generations only fill up
    before they are looked at. The thresholds are put back on the way out; a collector
    turned off stays off.
    """
    before = gc.get_threshold()
    if gc.isenabled() and 0 < before[0] < young:
        gc.set_threshold(young, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _payload(m: ScenarioMemory) -> dict[str, Any]:
    """The vector-store row `Memory.add` would store: metadata keys first, then the tenant
    and role tags, then truthy owner ids, then text, hash and times (later keys win)."""
    payload: dict[str, Any] = dict(m.metadata)
    for key in ("tenant_id", "sub_tenant_id", "role", "allowed_roles"):
        if getattr(m, key) is not None:
            payload[key] = getattr(m, key)
    for key in ("user_id", "agent_id", "run_id"):
        if getattr(m, key):
            payload[key] = getattr(m, key)
    payload.update(data=m.text, hash=hashlib.md5(m.text.encode("utf-8")).hexdigest(),
                   created_at=m.created_at.isoformat(), updated_at=m.updated_at.isoformat())
    return payload


def _embeddings(memories: list[ScenarioMemory]) -> dict[str, Embedding]:
    """`Embedding.of(m.embedding)` for every graph memory with one, made a length at a time:
    the vectors of one length as the rows of one matrix, every row's squares summed left to
    right by `np.add.accumulate` along the rows, as `sequential_sum` sums one vector."""
    by_length: dict[int, list[ScenarioMemory]] = {}
    for m in memories:
        if m.in_graph and m.embedding is not None:
            by_length.setdefault(len(m.embedding), []).append(m)
    found: dict[str, Embedding] = {}
    for length, group in by_length.items():
        matrix = np.array([m.embedding for m in group], dtype=np.float64).reshape(
            len(group), length)
        norms = (np.add.accumulate(matrix * matrix, axis=1)[:, -1].tolist() if length
                 else [0.0] * len(group))
        found.update(zip((m.id for m in group), map(Embedding, matrix, norms), strict=True))
    return found


def build_state(scenario: Scenario) -> EngineState:
    """Memories, nodes with their scenario state, and edges in list order."""
    state = new_state(scenario.config, policy=policy_from_name(
        scenario.role.policy, treat_global_as_visible=scenario.role.treat_global_as_visible,
        treat_unrestricted_as_visible=scenario.role.treat_unrestricted_as_visible))
    graph = state.graph
    embeddings = _embeddings(scenario.memories)
    for m in scenario.memories:
        payload = _payload(m)
        if m.in_vector_store:
            state.payloads[m.id] = payload
        if not m.in_graph:
            continue
        graph.add_node(MemoryNode(
            id=m.id, hash=hashlib.sha256(m.text.encode("utf-8")).hexdigest(),
            created_at=m.created_at, updated_at=m.updated_at, relevance=m.relevance,
            relevance_floor=m.relevance_floor, archived=m.archived,
            user_id=payload.get("user_id"), agent_id=payload.get("agent_id"),
            run_id=payload.get("run_id"), last_accessed_at=m.last_accessed_at,
            access_count=m.access_count, tenant_id=payload.get("tenant_id"),
            sub_tenant_id=payload.get("sub_tenant_id"), metadata=dict(payload)))
        embedding = embeddings.get(m.id)
        if embedding is not None:
            graph.put_embedding(m.id, embedding)
    now = scenario.now
    edges = scenario.edges
    # In list order, as an `upsert_edge` each (`upsert_edges`), stamped with its own
    # updated_at (else now) up front, which is what stamping it now and setting updated_at
    # after the upsert left, for a new key or a repeated one.
    graph.upsert_edges([e.src for e in edges], [e.dst for e in edges], [e.type for e in edges],
                       [max(0.0, min(1.0, e.weight)) for e in edges], [now] * len(edges),
                       [now if e.updated_at is None else e.updated_at for e in edges])
    graph.changed()
    return state


def _versions() -> dict[str, str]:
    out = {}
    for package in ("msprlab", "numpy", "scipy"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "unknown"
    return out


def run_parsed(scenario: Scenario, *, with_subgraph: bool = False) -> dict[str, Any]:
    state = build_state(scenario)
    clock: datetime = scenario.now
    events: list[dict[str, Any]] = []
    for index, event in enumerate(scenario.events):
        if event.at is not None:
            clock = event.at
        if isinstance(event, FeedbackEvent):
            result = record_feedback(
                state, event.memory_id, helpful=event.helpful, now=clock,
                user_id=event.user_id, agent_id=event.agent_id, run_id=event.run_id,
                query=event.query, metadata=event.metadata)
            events.append({"index": index, "type": "feedback", "result": None if result is None
                           else {"memory_id": result.memory_id,
                                 "delta_applied": result.delta_applied,
                                 "new_relevance": result.new_relevance,
                                 "event_id": result.event_id, "helpful": result.helpful}})
            continue
        events.append(_search_event(state, index, event, clock, with_subgraph))
    return {
        "format": OUTPUT_FORMAT, "scenario": scenario.name, "library": _versions(),
        "events": events,
        "final_nodes": {
            node.id: {"relevance": node.relevance, "relevance_floor": node.relevance_floor,
                      "access_count": node.access_count, "helpful_count": node.helpful_count,
                      "unhelpful_count": node.unhelpful_count, "archived": node.archived}
            for node in state.graph.nodes.values() if node is not None},
    }


def _search_event(state: EngineState, index: int, event: SearchEvent, clock: datetime,
                  with_subgraph: bool) -> dict[str, Any]:
    request = SearchRequest(
        query=event.query, seeds=[Seed(sid, score) for sid, score in event.seeds],
        query_embedding=event.query_embedding, user_id=event.user_id,
        agent_id=event.agent_id, run_id=event.run_id, filters=event.filters,
        limit=event.limit, threshold=event.threshold,
        include_archived=event.include_archived)
    out: dict[str, Any] = {"index": index, "type": "search"}
    try:
        outcome = search(state, request, now=clock)
    except SearchError as exc:
        out["error"] = str(exc)
        return out
    out["results"] = [{"id": c.id, "score": c.score, "dense": c.dense, "lexical": c.lexical,
                       "graph": c.graph, "frequency": c.frequency, "personal": c.personal,
                       "success": c.success, "was_seed": c.was_seed}
                      for c in outcome.results]
    if outcome.intent is not None:
        out["intent"] = outcome.intent.label.value
    if with_subgraph:
        out["subgraph"] = [{"src": e.src, "dst": e.dst, "type": e.type, "weight": e.weight}
                           for e in outcome.subgraph]
    if outcome.notes:
        out["swallowed"] = list(outcome.notes)
    return out


def run_scenario(scenario: dict[str, Any], *, with_subgraph: bool = False) -> dict[str, Any]:
    """Run a scenario given as parsed JSON; raises ScenarioError when it is malformed."""
    return run_parsed(parse_scenario(scenario), with_subgraph=with_subgraph)
