"""`Memory.record_feedback`, `reset_feedback` and `backfill_mspr` (MSPR.md section 13)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .decay import bump_relevance
from .state import EngineState
from .success import hash_query


@dataclass(frozen=True, slots=True)
class FeedbackResult:
    memory_id: str
    delta_applied: float
    new_relevance: float | None
    event_id: int
    helpful: bool


def record_feedback(state: EngineState, memory_id: str, *, helpful: bool, now: datetime,
                    user_id: str | None = None, agent_id: str | None = None,
                    run_id: str | None = None, query: str | None = None,
                    metadata: dict[str, Any] | None = None) -> FeedbackResult | None:
    """Cap, bump (with floor pinning), counters, the stored row and the success row.

    None when MSPR, feedback, the context graph or the store is off, or the memory has no
    graph node; ownership, archived state and the vector row are not checked.
    """
    cfg = state.config
    store = state.feedback
    if not (cfg.mspr.enabled and cfg.mspr.feedback.enabled and cfg.context_graph_enabled
            and store is not None):
        return None
    node = state.graph.get(memory_id)
    if node is None:
        return None
    fb = cfg.mspr.feedback
    delta = fb.boost_delta if helpful else -fb.penalty_delta
    if helpful and fb.max_boost_per_memory > 0:
        remaining = fb.max_boost_per_memory - max(0.0, store.net(memory_id, user_id))
        delta = 0.0 if remaining <= 0.0 else min(delta, remaining)
    new_relevance = None
    if abs(delta) > 0:
        new_relevance = bump_relevance(state.graph, memory_id, delta,
                                       set_floor=helpful and fb.pin_floor_on_boost)
    if helpful:
        node.helpful_count += 1
    else:
        node.unhelpful_count += 1
    node.last_feedback_at = now
    query_hash = hash_query(query)
    event_id = store.append(memory_id=memory_id, user_id=user_id, agent_id=agent_id,
                            run_id=run_id, query=query, query_hash=query_hash,
                            helpful=helpful, delta_applied=delta, timestamp=now,
                            metadata=metadata)
    if cfg.mspr.success.enabled and state.success is not None and query_hash is not None:
        state.success.record(query_hash=query_hash, memory_id=memory_id, helpful=helpful,
                             user_id=user_id, timestamp=now, feedback_id=event_id)
    return FeedbackResult(memory_id, delta, new_relevance, event_id, helpful)


def reset_feedback(state: EngineState, *, user_id: str | None = None) -> int:
    """Delete one user's (or all) feedback and success rows; relevance, floors and
    counters stay as they are (quirk 6). Returns the feedback rows deleted."""
    removed = state.feedback.reset(user_id) if state.feedback is not None else 0
    if state.success is not None:
        state.success.reset(user_id)
    return removed


@dataclass(frozen=True, slots=True)
class BackfillReport:
    success_rows: int
    feedback_rows: int


def backfill_mspr(state: EngineState) -> BackfillReport:
    """Append a success row for every feedback row with a query hash, newest first.

    Not idempotent in compat mode (quirk 7). With `corrections.idempotent_backfill`, a
    feedback row that already has a success row is skipped.
    """
    if not state.config.mspr.enabled:
        raise RuntimeError("Memory.backfill_mspr() called but mspr.enabled=False")
    if state.feedback is None or state.success is None:
        return BackfillReport(0, 0)
    events = list(reversed(state.feedback.rows))[:1_000_000]
    linked = {r.feedback_id for r in state.success.rows}
    added = 0
    for row in events:
        if not row.query_hash:
            continue
        if state.config.corrections.idempotent_backfill and row.id in linked:
            continue
        state.success.record(query_hash=row.query_hash, memory_id=row.memory_id,
                             helpful=row.helpful, user_id=row.user_id,
                             timestamp=row.timestamp, feedback_id=row.id)
        added += 1
    return BackfillReport(added, len(events))
