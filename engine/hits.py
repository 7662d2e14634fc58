"""The vector hits a search starts from: `seed_payload`, and per-memory templates of it.

A hit is a fresh dict per search, built from the memory's stored payload (core fields,
promoted keys, the rest nested under "metadata"). Building one walks the whole payload;
`HitTemplates` keeps, per memory, the hit without its score and copies it instead, a
fraction of the cost. A template holds while the memory's stored payload is unchanged,
which the payload store's change log (engine/stores.py) says: a memory it names since the
last search is built afresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .stores import PayloadStore

Payload = dict[str, Any]

# Payload keys a vector hit copies flat; every other non-core key goes under "metadata".
PROMOTED_KEYS = ("user_id", "agent_id", "run_id", "actor_id", "role")
_CORE_KEYS = frozenset({"data", "hash", "created_at", "updated_at", "id", *PROMOTED_KEYS})


def seed_payload(memory_id: str, stored: Mapping[str, Any], score: float | None) -> Payload:
    """A vector hit as the library builds it: core fields, promoted keys, the rest nested."""
    get = stored.get
    hit: Payload = {"id": memory_id, "memory": get("data", ""), "hash": get("hash"),
                    "metadata": None, "score": score, "created_at": get("created_at"),
                    "updated_at": get("updated_at")}
    for key in PROMOTED_KEYS:
        if key in stored:
            hit[key] = stored[key]
    extra = {k: v for k, v in stored.items() if k not in _CORE_KEYS}
    if extra:
        hit["metadata"] = extra
    return hit


class HitTemplates:
    """Per memory id, its hit with no score (and its metadata), for one `PayloadStore`.

    `follow` drops the templates of the memories the store's log names since the last
    call (all of them, for a log that started afresh); call it before the hits of a search.
    """

    __slots__ = ("epoch", "known", "read", "store")

    def __init__(self, store: PayloadStore) -> None:
        self.store = store
        self.epoch = store.epoch
        self.read = len(store.changes)
        self.known: dict[str, tuple[Payload, Payload | None]] = {}

    def follow(self) -> None:
        store = self.store
        if store.epoch != self.epoch:
            self.known.clear()
            self.epoch = store.epoch
        else:
            pop = self.known.pop
            for memory_id in store.changes[self.read:]:
                pop(memory_id, None)
        self.read = len(store.changes)

    def hit(self, memory_id: str, stored: Mapping[str, Any], score: float | None) -> Payload:
        """`seed_payload(memory_id, stored, score)`, `stored` being the store's own."""
        known = self.known.get(memory_id)
        if known is None:
            template = seed_payload(memory_id, stored, None)
            known = self.known[memory_id] = (template, template["metadata"])
        hit = known[0].copy()
        hit["score"] = score
        if known[1] is not None:
            hit["metadata"] = known[1].copy()
        return hit
