"""Lexical overlap and cosine exactly as the library computes them (MSPR.md section 10.2)."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from sys import intern

import numpy as np

from .graph import Embedding, FloatArray

_TOKEN = re.compile(r"\w+", re.UNICODE)
_NO_TOKENS: frozenset[str] = frozenset()
# Distinct texts whose tokens are kept; a memory's text is tokenized once, not per search.
TOKEN_CACHE_SIZE = 1 << 15


def tokens(text: object) -> frozenset[str]:
    """Lower-cased `\\w+` tokens; "Alice's" gives {alice, s}, "nut-free" gives {nut, free}."""
    if not text or not isinstance(text, str):
        return _NO_TOKENS
    return frozenset(_tokens_of(text))


@functools.lru_cache(maxsize=TOKEN_CACHE_SIZE)
def _tokens_of(text: str) -> tuple[str, ...]:
    """The tokens of a non-empty str, repeats included: a bag, whose set is `tokens(text)`.

    Cached by the text itself, so a payload whose text changes is simply tokenized anew.
    A tuple rather than a set: the garbage collector stops tracking a tuple of strings, so
    a large cache adds nothing to its passes; set operations take it as it is. Tokens are
    interned, so the cache holds each distinct word once, not once per memory.
    """
    if text.isascii():
        # Lower-casing ASCII first finds the same tokens: it maps A-Z to a-z only, and
        # both are word characters. (Not so beyond ASCII: "İ".lower() is two characters,
        # the second not a word character.)
        if text.replace(" ", "").replace("_", "").isalnum():
            # Only [A-Za-z0-9_] and spaces: the \w+ runs are the space-separated words.
            return tuple(map(intern, text.lower().split()))
        return tuple(map(intern, _TOKEN.findall(text.lower())))
    return tuple([intern(t.lower()) for t in _TOKEN.findall(text)])


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


def cosines(query: Embedding, stored: Sequence[Embedding]) -> list[float]:
    """`[cosine(query, s) for s in stored]`, bit for bit, with one NumPy pass.

    Every row's dot product is still summed left to right: `np.add.accumulate` along the
    rows of a C-contiguous matrix adds each row's products in order, as `cosine` does.
    """
    q = query.vector
    if q.size == 0 or query.norm_sq == 0.0:
        return [0.0] * len(stored)
    size = q.size
    vectors = [s.vector for s in stored]
    norms = [s.norm_sq for s in stored]
    rows: list[int] | None = None  # None: every row has a cosine to compute
    if any(v.size != size for v in vectors) or 0.0 in norms:
        rows = [i for i, (v, n) in enumerate(zip(vectors, norms, strict=True))
                if v.size == size and n != 0.0]  # the others are 0.0
        if not rows:
            return [0.0] * len(stored)
        vectors = [vectors[i] for i in rows]
        norms = [norms[i] for i in rows]
    matrix: FloatArray = np.array(vectors, dtype=np.float64)
    dots = np.add.accumulate(matrix * q, axis=1)[:, -1]
    denominators = math.sqrt(query.norm_sq) * np.sqrt(np.array(norms, dtype=np.float64))
    if not denominators.all():  # an underflow to 0: let `cosine` raise as it would
        return [cosine(query, s) for s in stored]
    values: list[float] = (dots / denominators).tolist()
    if rows is None:
        return values
    out = [0.0] * len(stored)
    for i, value in zip(rows, values, strict=True):
        out[i] = value
    return out
