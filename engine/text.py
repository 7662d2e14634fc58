"""Lexical overlap and cosine exactly as the library computes them (MSPR.md section 10.2)."""

from __future__ import annotations

import math
import re

import numpy as np

from .graph import Embedding

_TOKEN = re.compile(r"\w+", re.UNICODE)


def tokens(text: object) -> frozenset[str]:
    """Lower-cased `\\w+` tokens; "Alice's" gives {alice, s}, "nut-free" gives {nut, free}."""
    if not text or not isinstance(text, str):
        return frozenset()
    return frozenset(t.lower() for t in _TOKEN.findall(text))


def lexical_overlap(query_tokens: frozenset[str], text: object) -> float:
    """|Q ∩ D| / |Q|, or 0 when either side has no tokens."""
    if not query_tokens:
        return 0.0
    doc = tokens(text)
    if not doc:
        return 0.0
    return len(query_tokens & doc) / len(query_tokens)


def cosine(query: Embedding, stored: Embedding) -> float:
    """Cosine with left-to-right sums; 0 for empty or unequal lengths or a zero norm."""
    q, v = query.vector, stored.vector
    if q.size == 0 or v.size == 0 or q.size != v.size:
        return 0.0
    if query.norm_sq == 0.0 or stored.norm_sq == 0.0:
        return 0.0
    dot = float(np.add.accumulate(q * v)[-1])
    return dot / (math.sqrt(query.norm_sq) * math.sqrt(stored.norm_sq))
