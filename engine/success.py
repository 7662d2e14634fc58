"""Per-query success history: query hashing and the hit rate (MSPR.md section 14)."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime


def hash_query(query: object) -> str | None:
    """First 16 hex chars of sha256(strip().lower()); None for a falsy or blank query."""
    if not query or not isinstance(query, str):
        return None
    return _hash_text(query) if type(query) is str else _hash(query)


def _hash(query: str) -> str | None:
    norm = query.strip().lower()
    if not norm:
        return None
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()[:16]


# A search hashes its query, and so does each verdict on it; logs repeat their queries.
_hash_text = functools.lru_cache(maxsize=4096)(_hash)


@dataclass(frozen=True, slots=True)
class SuccessRow:
    """One `query_success` row; `feedback_id` links it to the verdict it came from."""

    id: int
    query_hash: str
    memory_id: str
    user_id: str | None
    helpful: bool
    timestamp: datetime
    feedback_id: int | None


class SuccessStore:
    """The `query_success` table in memory with (total, helpful) counts per pair."""

    def __init__(self) -> None:
        self.rows: list[SuccessRow] = []
        self._next_id = 1
        self._counts: dict[tuple[str, str, str | None], list[int]] = {}
        # the same counts by (query hash, user or None), then memory: a pair that is not
        # here has no rates to read
        self._by_pair: dict[tuple[str, str | None], dict[str, list[int]]] = {}

    def record(self, *, query_hash: str, memory_id: str, helpful: bool, user_id: str | None,
               timestamp: datetime, feedback_id: int | None) -> int:
        row = SuccessRow(self._next_id, query_hash, memory_id, user_id, helpful, timestamp,
                         feedback_id)
        self._next_id += 1
        self.rows.append(row)
        self._count(row)
        return row.id

    def _count(self, row: SuccessRow) -> None:
        keys: list[tuple[str, str, str | None]] = [(row.query_hash, row.memory_id, None)]
        if row.user_id is not None:
            keys.append((row.query_hash, row.memory_id, row.user_id))
        for key in keys:
            counts = self._counts.get(key)
            if counts is None:
                counts = self._counts[key] = [0, 0]
                self._by_pair.setdefault((key[0], key[2]), {})[key[1]] = counts
            counts[0] += 1
            counts[1] += int(row.helpful)

    def hit_rate(self, query_hash: str | None, memory_id: str, *, user_id: str | None,
                 min_samples: int) -> float:
        """helpful / total for the pair (one user's rows when given), 0 below min_samples."""
        if not query_hash or not memory_id:
            return 0.0
        counts = self._counts.get((query_hash, memory_id, user_id))
        if counts is None or counts[0] < max(1, min_samples):
            return 0.0
        return max(0.0, min(1.0, counts[1] / counts[0]))

    def hit_rates(self, query_hash: str | None, *, user_id: str | None,
                  min_samples: int) -> Rates | None:
        """`lambda memory_id: self.hit_rate(query_hash, memory_id, ...)`, for one search
        (as `Rates`); None when no memory has counts for the query (and user): every rate
        is then 0, and a search reads none."""
        counts = self._by_pair.get((query_hash, user_id)) if query_hash else None
        if counts is None:
            return None
        return Rates(counts, max(1, min_samples))

    def reset(self, user_id: str | None = None) -> int:
        kept = [r for r in self.rows if user_id is not None and r.user_id != user_id]
        removed = len(self.rows) - len(kept)
        self.rows = kept
        self._counts.clear()
        self._by_pair.clear()
        for row in kept:
            self._count(row)
        return removed


class Rates:
    """`SuccessStore.hit_rate` of one search's query and user, per memory id: called with
    one id, or `many` for a list of them."""

    __slots__ = ("counts", "need")

    def __init__(self, counts: Mapping[str, list[int]], need: int) -> None:
        self.counts = counts  # memory id -> (total, helpful), of the query and user
        self.need = need      # the fewest samples a rate is read from

    def __call__(self, memory_id: str) -> float:
        counts = self.counts.get(memory_id) if memory_id else None
        if counts is None or counts[0] < self.need:
            return 0.0
        return max(0.0, min(1.0, counts[1] / counts[0]))

    def many(self, memory_ids: list[str]) -> list[float]:
        """The rate of each id, its counts read in one C loop (most have none)."""
        need = self.need
        return [0.0 if counts is None or not memory_id or counts[0] < need
                else max(0.0, min(1.0, counts[1] / counts[0]))
                for memory_id, counts in zip(memory_ids, map(self.counts.get, memory_ids),
                                             strict=True)]
