"""Seed trimming (MSPR.md section 6)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Payload = dict[str, Any]


def seed_score(seed: Payload) -> float:
    return float(seed.get("score") or 0.0)


def trim_seeds(seeds: Sequence[Payload], seed_top_k: int) -> dict[str, Payload]:
    """Drop id-less seeds, stable-sort by score descending, keep the first `seed_top_k`.

    The returned map is in seed order; a duplicate id keeps its first position but the
    payload of its last (lower-scored) occurrence.
    """
    kept = sorted((s for s in seeds if s.get("id")), key=seed_score, reverse=True)
    lookup: dict[str, Payload] = {}
    for seed in kept[:max(1, seed_top_k)]:
        lookup[seed["id"]] = seed
    return lookup
