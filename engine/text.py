"""Lexical overlap and cosine exactly as the library computes them (MSPR.md section 10.2)."""

from __future__ import annotations

import math
import re
import string
from collections.abc import Sequence

import numpy as np

from .graph import Embedding, FloatArray

_TOKEN = re.compile(r"\w+", re.UNICODE)
_NO_TOKENS: frozenset[str] = frozenset()
# Per byte: an ASCII word character (what \w matches below 128) lower-cased, any other
# ASCII byte a space (bytes past 127 never occur in the ASCII texts it is used on).
_ASCII_WORDS = bytes(
    ord(c.lower()) if c in string.ascii_letters + string.digits + "_" else ord(" ")
    for c in map(chr, range(128))) + bytes(range(128, 256))
# text -> its token set, so that a memory's text is tokenized once, not per search. Keyed
# by the text itself, so a payload whose text changes is simply tokenized anew; emptied
# when it holds this many texts (a 12-word text's set takes about 1.4 kB with its tokens).
TOKEN_SETS: dict[str, frozenset[str]] = {}
_TOKEN_SETS_SIZE = 1 << 16


def tokens(text: object) -> frozenset[str]:
    """Lower-cased `\\w+` tokens; "Alice's" gives {alice, s}, "nut-free" gives {nut, free}."""
    if not text or not isinstance(text, str):
        return _NO_TOKENS
    found = TOKEN_SETS.get(text)
    return token_set(text) if found is None else found


def token_set(text: str) -> frozenset[str]:
    """`tokens(text)` for a non-empty str not found in TOKEN_SETS, remembered there."""
    if len(TOKEN_SETS) >= _TOKEN_SETS_SIZE:
        TOKEN_SETS.clear()
    found = TOKEN_SETS[text] = frozenset(split_tokens(text))
    return found


def split_tokens(text: str) -> list[str]:
    """The lower-cased `\\w+` tokens of a str, repeats included (uncached).

    The tokens are not interned (`sys.intern`): that would more than double the cost of
    tokenizing, which is most of the lexical term in a search over memories not seen
    before; the size of TOKEN_SETS bounds the memory instead.
    """
    if not text.isascii():
        return [t.lower() for t in _TOKEN.findall(text)]
    # In ASCII the \w+ runs are the runs of [A-Za-z0-9_]: with every other byte made a
    # space they are the space-separated words, and lower-casing maps A-Z to a-z only.
    # (Not so beyond ASCII: "İ".lower() is two characters, the second not a word
    # character.) One byte table does both, with no per-character Unicode lookups.
    return text.encode().translate(_ASCII_WORDS).decode().split()


def clear_token_cache() -> None:
    TOKEN_SETS.clear()


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
    products: FloatArray | None = None
    if 0.0 not in norms and q.ndim == 1:
        # The usual case, flat vectors of the query's size, needs no test of each vector:
        # the matrix has shape (len(vectors), size) exactly when they all are.
        try:
            matrix: FloatArray = np.array(vectors, dtype=np.float64)
        except (TypeError, ValueError):  # e.g. ragged: the general path sorts them out
            pass
        else:
            if matrix.shape == (len(vectors), size):
                products = np.multiply(matrix, q, out=matrix)  # the matrix is a fresh copy
    if products is None:
        if any(v.size != size for v in vectors) or 0.0 in norms:
            rows = [i for i, (v, n) in enumerate(zip(vectors, norms, strict=True))
                    if v.size == size and n != 0.0]  # the others are 0.0
            if not rows:
                return [0.0] * len(stored)
            vectors = [vectors[i] for i in rows]
            norms = [norms[i] for i in rows]
        products = np.array(vectors, dtype=np.float64) * q
    dots = np.add.accumulate(products, axis=1)[:, -1]
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
