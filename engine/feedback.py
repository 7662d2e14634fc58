"""Feedback verdicts: the stored rows, the boost cap and the personal term (MSPR.md section 13).

Sums of `delta_applied` run in row order, plainly, as SQLite before 3.43 adds them; running
sums kept per memory (and per memory and user) are the same additions in the same order.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class FeedbackRow:
    """One `feedback_events` row (MSPR.md section 2.3)."""

    id: int
    memory_id: str
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    query: str | None
    query_hash: str | None
    helpful: bool
    delta_applied: float
    timestamp: datetime
    metadata_json: str


class FeedbackStore:
    """The `feedback_events` table in memory, with the aggregates the ranker reads."""

    def __init__(self) -> None:
        self.rows: list[FeedbackRow] = []
        self._next_id = 1
        self._net: dict[str, float] = defaultdict(float)
        self._net_of_user: dict[str, dict[str, float]] = {}  # user -> memory -> net

    def append(self, *, memory_id: str, user_id: str | None, agent_id: str | None,
               run_id: str | None, query: str | None, query_hash: str | None, helpful: bool,
               delta_applied: float, timestamp: datetime,
               metadata: dict[str, Any] | None) -> int:
        row = FeedbackRow(self._next_id, memory_id, user_id, agent_id, run_id, query,
                          query_hash, helpful, delta_applied, timestamp,
                          json.dumps(metadata or {}, sort_keys=True, default=str))
        self._next_id += 1
        self.rows.append(row)
        self._add(row)
        return row.id

    def _add(self, row: FeedbackRow) -> None:
        self._net[row.memory_id] += row.delta_applied
        if row.user_id is not None:
            nets = self._net_of_user.setdefault(row.user_id, {})
            nets[row.memory_id] = nets.get(row.memory_id, 0.0) + row.delta_applied

    def net(self, memory_id: str, user_id: str | None = None) -> float:
        """Sum of delta_applied for a memory; one user's rows, or every row when None."""
        if user_id is None:
            return self._net.get(memory_id, 0.0)
        return self._net_of_user.get(user_id, {}).get(memory_id, 0.0)

    def reset(self, user_id: str | None = None) -> int:
        """Delete one user's rows, or all rows; returns how many were deleted."""
        kept = [r for r in self.rows if user_id is not None and r.user_id != user_id]
        removed = len(self.rows) - len(kept)
        self.rows = kept
        self._net.clear()
        self._net_of_user.clear()
        for row in kept:
            self._add(row)
        return removed


def personal_boost(store: FeedbackStore, memory_id: str, user_id: str | None) -> float:
    """clamp(tanh(net / 3), -1, 1); the library calls it with user_id None (global)."""
    return max(-1.0, min(1.0, math.tanh(store.net(memory_id, user_id) / 3.0)))


def personal_boosts(store: FeedbackStore, user_id: str | None) -> Boosts:
    """`lambda memory_id: personal_boost(store, memory_id, user_id)`, for one search (as
    a `Boosts`)."""
    nets = store._net if user_id is None else store._net_of_user.get(user_id, _NO_NETS)
    return Boosts(nets)


_NO_NETS: dict[str, float] = {}


class Boosts:
    """`personal_boost` of one search's user, per memory id: called with one id, or
    `many` for a list of them (a memory without verdicts has net 0 and boost 0.0, which is
    given directly)."""

    __slots__ = ("nets",)

    def __init__(self, nets: Mapping[str, float]) -> None:
        self.nets = nets  # memory id -> net, the user's (or everyone's)

    def __call__(self, memory_id: str) -> float:
        net = self.nets.get(memory_id)
        return 0.0 if net is None else max(-1.0, min(1.0, math.tanh(net / 3.0)))

    def many(self, memory_ids: Iterable[str]) -> list[float]:
        """The boost of each id, its net read in one C loop (most are 0)."""
        return [0.0 if net is None else max(-1.0, min(1.0, math.tanh(net / 3.0)))
                for net in map(self.nets.get, memory_ids)]
