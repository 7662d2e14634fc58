"""How much two arms' top lists share: Jaccard@k and rank-biased overlap.

RBO is Webber, Moffat and Zobel's (2010, "A similarity measure for indefinite rankings",
ACM TOIS 28(4)), the point estimate RBO_ext extrapolated from the seen prefixes: their
equation 32, which also covers lists of uneven length (the shorter list's agreement at its
end is assumed to continue; for equal lengths it is their equation 30). Persistence p =
0.9 by default: the top 10 carries about 86% of the weight. Lists hold no duplicates and no
ties (a ranking's order is the engine's). Two empty lists have no overlap to measure
(NaN); one empty list against a non-empty one is 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["P", "jaccard", "rbo_ext"]

P = 0.9


def jaccard(a: Sequence[str], b: Sequence[str]) -> float:
    """|A ∩ B| / |A ∪ B| of the two lists' sets (NaN when both are empty)."""
    union = set(a) | set(b)
    return len(set(a) & set(b)) / len(union) if union else math.nan


def rbo_ext(a: Sequence[str], b: Sequence[str], p: float = P) -> float:
    """RBO_ext of two rankings (Webber et al. 2010, eq. 32), best first."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"rbo_ext: p must be in (0, 1), got {p!r}")
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    s, n = len(short), len(long_)
    if n == 0:
        return math.nan
    if s == 0:
        return 0.0
    seen_short: set[str] = set()
    seen_long: set[str] = set()
    overlap = 0                 # X_d: |short[:min(d, s)] ∩ long[:d]|
    at_s = 0                    # X_s
    total = 0.0
    for d in range(1, n + 1):
        item = long_[d - 1]
        if d <= s:
            other = short[d - 1]
            overlap += (other == item) + (other in seen_long) + (item in seen_short)
            seen_short.add(other)
            if d == s:
                at_s = overlap
        else:
            overlap += item in seen_short
        seen_long.add(item)
        total += overlap / d * p ** d
        if d > s:
            total += at_s * (d - s) / (s * d) * p ** d
    return (1 - p) / p * total + ((overlap - at_s) / n + at_s / s) * p ** n
