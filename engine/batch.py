"""The batch scorer: any weight vector, for every search of a replay at once, vectorised.

A replay records, per candidate, every weight-independent input of the final score
(`CandidateBlock`). Scoring a weight vector is then the library's formula on arrays,

    score = (α·dense + β·lexical + γ·graph + ε·frequency + δ·personal + ζ·success) × relevance

with the additions left to right (NumPy's elementwise IEEE operations in the same order
give the same doubles as the sequential engine), α/β/γ/δ moved per intent label and
clamped to [0, 1] by `override_weights` (the arithmetic of `apply_weight_override`), and
the gates the engine applies: a term whose weight is 0 is not added (the engine adds
0·0.0; only the sign of a zero score can differ, which no comparison sees).

The ranking is the engine's: a stable sort by score, descending (ties keep discovery
order), cut to max(1, limit); then, where a soft role policy is on, each returned score is
multiplied by its role multiplier (0 for a denied memory) and the returned list is stably
sorted again. `ranks_of` computes the final rank of chosen rows (the judged ones) by
counting, per row, the candidates ahead of it: no per-search sort on the hot path.
`row_ranks` sorts everything (run export, tests).

Searches are stored grouped by intent label, so each label's weights apply to one
contiguous slice of rows as scalars.

`scores` and `ranks_of` run as two loops compiled by numba (`_score_rows`, `_rank_rows`):
one pass over the rows instead of two NumPy passes per term, and each rank counted over the
row's own search. They are compiled without fastmath, so each multiplication and addition
is the IEEE operation, in the order written, never contracted into a fused multiply-add:
the doubles are those of the NumPy formulation (`scores_numpy`, `ranks_of_numpy`, kept as
the kernels' test oracle) and of the sequential engine. numba is imported, and the kernels
compiled or loaded from numba's on-disk cache (`cache=True`), on first use only (or
ahead of it: `warm_up`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from .config import WEIGHTS, RetrievalConfig, Weights
from .intent import Intent, override_weights
from .jit import exact_njit

__all__ = ["FEATURES", "INTENTS", "WEIGHTS", "CandidateBlock", "RowPlan", "Weights",
           "intent_weights", "plan_rows", "ranks_of", "ranks_of_numpy", "row_ranks", "scores",
           "scores_numpy", "warm_up"]

# Feature k is multiplied by weight k, and the terms are added in this order (MSPR.md 10.5).
FEATURES = ("dense", "lexical", "graph", "frequency", "personal", "success")
INTENTS: tuple[Intent, ...] = tuple(Intent)

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


def intent_weights(weights: Sequence[float] | Floats, *, intent: bool = True) -> Floats:
    """(len(INTENTS), 6): the weights each intent label scores with, in `WEIGHTS` order.

    With `intent` False every label keeps the base weights (routing off).
    """
    base = [float(w) for w in weights]
    if len(base) != len(WEIGHTS):
        raise ValueError(f"expected {len(WEIGHTS)} weights ({', '.join(WEIGHTS)}), "
                         f"got {len(base)}")
    if not intent:
        return np.tile(np.array(base), (len(INTENTS), 1))
    # Validates the weights (range errors name the key); the overrides need no config.
    named = Weights(*base)._asdict()
    RetrievalConfig(**named)
    rows = [list(override_weights(label, named).values())
            for label in INTENTS]
    return np.array(rows, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class CandidateBlock:
    """Candidates of many searches, rows grouped by search, searches grouped by intent.

    Build it with `CandidateBlock.build`; `order` maps internal rows back to the rows given.
    """

    features: Floats          # (6, N), FEATURES order
    relevance: Floats         # (N,)
    role: Floats              # (N,) soft-role multiplier: 1 no effect, 0 denied
    search: Ints              # (N,) internal search index of each row
    position: Ints            # (N,) discovery order within the search
    starts: Ints              # (S + 1,) rows of internal search s: starts[s]:starts[s + 1]
    cut: Ints                 # (S,) max(1, limit)
    intent_rows: Ints         # (len(INTENTS) + 1,) rows of label k: intent_rows[k]:[k + 1]
    searches: Ints            # (S,) the caller's search id of each internal search
    order: Ints               # (N,) internal row -> the caller's row
    width: int                # most candidates of one search
    role_searches: Ints = field(repr=False)  # internal searches with a multiplier != 1
    _buffers: dict[str, Floats] = field(default_factory=dict, repr=False)

    def scratch(self, size: int, *, name: str = "term") -> Floats:
        """A reusable work array of `size` floats (contents undefined): trials in a loop
        would otherwise allocate, and fault in, megabytes per call."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size != size:
            buffer = self._buffers[name] = np.empty(size)
        return buffer

    @staticmethod
    def build(*, search: npt.ArrayLike, features: Floats, relevance: npt.ArrayLike,
              role: npt.ArrayLike, search_intent: npt.ArrayLike,
              search_limit: npt.ArrayLike) -> CandidateBlock:
        """Rows in any order with `search` ids 0..S-1, rows of one search in discovery
        order; per search its intent index (into INTENTS) and its limit."""
        search_ids = np.asarray(search, dtype=np.int64)
        feats = np.asarray(features, dtype=np.float64)
        rel = np.asarray(relevance, dtype=np.float64)
        mult = np.asarray(role, dtype=np.float64)
        labels = np.asarray(search_intent, dtype=np.int64)
        limits = np.asarray(search_limit, dtype=np.int64)
        n_searches = labels.size
        if feats.shape != (len(FEATURES), search_ids.size) or rel.shape != search_ids.shape \
                or mult.shape != search_ids.shape or limits.shape != labels.shape:
            raise ValueError("CandidateBlock.build: features must be (6, N) and relevance, "
                             "role (N,), matching search; intent and limit (S,)")
        if search_ids.size and (search_ids.min() < 0 or search_ids.max() >= n_searches):
            raise ValueError("CandidateBlock.build: search ids must be in 0..S-1")
        if not (np.isfinite(feats).all() and np.isfinite(rel).all() and np.isfinite(mult).all()):
            raise ValueError("CandidateBlock.build: features, relevance and role multipliers "
                             "must be finite")
        # Searches by (intent, search id); rows by (that order, their given order).
        by_intent = np.lexsort((np.arange(n_searches), labels))
        rank_of_search = np.empty(n_searches, dtype=np.int64)
        rank_of_search[by_intent] = np.arange(n_searches)
        internal = rank_of_search[search_ids]
        order = np.lexsort((np.arange(search_ids.size), internal))
        internal = internal[order]
        counts = np.bincount(internal, minlength=n_searches)
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        position = np.arange(internal.size) - starts[internal]
        sorted_labels = labels[by_intent]
        label_searches = np.searchsorted(sorted_labels, np.arange(len(INTENTS) + 1))
        mult = mult[order]
        active = np.unique(internal[mult != 1.0])
        return CandidateBlock(
            features=np.ascontiguousarray(feats[:, order]), relevance=rel[order], role=mult,
            search=internal, position=position, starts=starts,
            cut=np.maximum(1, limits[by_intent]), intent_rows=starts[label_searches],
            searches=by_intent.astype(np.int64), order=order.astype(np.int64),
            width=int(counts.max()) if counts.size else 0, role_searches=active)

    @property
    def n_rows(self) -> int:
        return int(self.search.size)

    @property
    def n_searches(self) -> int:
        return int(self.cut.size)

    def returned(self) -> Ints:
        """(S,) length of each internal search's returned list: weight-independent."""
        counts: Ints = np.minimum(np.diff(self.starts), self.cut)
        return counts

    def internal_rows(self, rows: npt.ArrayLike) -> Ints:
        """The internal row of each of the caller's rows."""
        inverse = np.empty_like(self.order)
        inverse[self.order] = np.arange(self.order.size)
        found: Ints = inverse[np.asarray(rows, dtype=np.int64)]
        return found


def scores(block: CandidateBlock, weights: Sequence[float] | Floats, *,
           intent: bool = True, out: Floats | None = None) -> Floats:
    """(N,) final scores before the role pass, internal row order (into `out` if given)."""
    table = intent_weights(weights, intent=intent)
    if out is None:
        out = np.empty(block.n_rows)
    # The kernel writes unchecked: anything but a C-contiguous float64 (N,) goes via scratch.
    target = out if _c_floats(out, block.n_rows) else block.scratch(block.n_rows,
                                                                     name="scores")
    _kernels().score(block.features, block.relevance, block.intent_rows, table, target)
    if target is not out:
        out[...] = target
    return out


def scores_numpy(block: CandidateBlock, weights: Sequence[float] | Floats, *,
                 intent: bool = True, out: Floats | None = None) -> Floats:
    """`scores` as NumPy passes over each label's slice, term by term: the same doubles
    (the compiled kernel's test oracle)."""
    table = intent_weights(weights, intent=intent)
    f = block.features
    if out is None:
        out = np.empty(block.n_rows)
    term = block.scratch(block.n_rows)
    for k in range(len(INTENTS)):
        lo, hi = int(block.intent_rows[k]), int(block.intent_rows[k + 1])
        if lo == hi:
            continue
        w = table[k]
        acc, tmp = out[lo:hi], term[lo:hi]
        np.multiply(f[0, lo:hi], w[0], out=acc)
        for j in range(1, len(FEATURES)):
            if w[j] != 0.0:  # the engine adds 0.0 (or gates the feature off): nothing moves
                np.multiply(f[j, lo:hi], w[j], out=tmp)
                np.add(acc, tmp, out=acc)
        np.multiply(acc, block.relevance[lo:hi], out=acc)
    return out


@dataclass(frozen=True, eq=False)
class RowPlan:
    """What ranking a fixed set of rows needs besides the scores, computed once per block:
    each row's search (its rows `start`:`start + count`), its `position` in it, the
    search's `cut`, and whether a role multiplier other than 1 is in the search
    (`affected`). `n_rows`: the planned block's (the kernel indexes scores unchecked)."""

    rows: Ints
    start: Ints
    count: Ints
    position: Ints
    cut: Ints
    affected: Bools
    n_rows: int
    _masks: dict[str, Bools] = field(default_factory=dict, repr=False)

    def masks(self, width: int) -> tuple[Bools, Bools]:
        """(rows, width) window cells inside the row's search, and ahead of it on a tie
        (the NumPy formulation's; built on first use)."""
        if "inside" not in self._masks or self._masks["inside"].shape[1:] != (width,):
            cells = np.arange(width)
            self._masks["inside"] = cells < self.count[:, None]
            self._masks["before"] = cells < self.position[:, None]
        return self._masks["inside"], self._masks["before"]


def plan_rows(block: CandidateBlock, rows: npt.ArrayLike) -> RowPlan:
    """The `RowPlan` of internal `rows` (for `ranks_of`)."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    search = block.search[rows]
    start = block.starts[search]
    return RowPlan(rows, start, block.starts[search + 1] - start, block.position[rows],
                   block.cut[search], np.isin(search, block.role_searches), block.n_rows)


def ranks_of(block: CandidateBlock, score: Floats, rows: npt.ArrayLike | RowPlan, *,
             roles: bool = True) -> Ints:
    """Final 0-based rank of each internal row in `rows` in its search's returned list, or
    -1 when it was cut. `roles` False ignores the role multipliers (roles off). Pass a
    `plan_rows` plan when the same rows are ranked for many weight vectors."""
    plan = rows if isinstance(rows, RowPlan) else plan_rows(block, rows)
    if score.shape != (block.n_rows,) or plan.n_rows != block.n_rows:
        raise ValueError(f"ranks_of: a block of {block.n_rows} rows, scores of shape "
                         f"{score.shape} and a plan for {plan.n_rows} rows do not match")
    out = np.empty(plan.rows.size, dtype=np.int64)
    _kernels().rank(np.ascontiguousarray(score, dtype=np.float64), block.role, plan.start,
                    plan.count, plan.position, plan.cut, plan.affected,
                    bool(roles and block.role_searches.size), out)
    return out


def ranks_of_numpy(block: CandidateBlock, score: Floats, rows: npt.ArrayLike | RowPlan, *,
                   roles: bool = True) -> Ints:
    """`ranks_of` with NumPy: every planned row against its search's window at once, the
    role pass on a grid of returned lists (the compiled kernel's test oracle)."""
    plan = rows if isinstance(rows, RowPlan) else plan_rows(block, rows)
    rows = plan.rows
    first = _first_pass_ranks(block, score, plan)
    kept = first < plan.cut
    result = np.where(kept, first, -1)
    if not roles or block.role_searches.size == 0:
        return result
    if plan.affected.any():
        result[plan.affected] = _second_pass(block, score, rows[plan.affected])
    return result


def _first_pass_ranks(block: CandidateBlock, score: Floats, plan: RowPlan) -> Ints:
    """Rank of each planned row in its search's stable descending sort (0-based, before the
    cut): the candidates scoring higher, plus the tied ones discovered earlier."""
    width = max(block.width, 1)
    inside, before = plan.masks(width)
    padded = block.scratch(block.n_rows + width, name="padded")
    padded[:block.n_rows] = score
    padded[block.n_rows:] = np.nan
    window = np.lib.stride_tricks.sliding_window_view(padded, width)[plan.start]
    mine = score[plan.rows][:, None]
    ahead = ((window > mine) & inside) | ((window == mine) & before)
    found: Ints = np.count_nonzero(ahead, axis=1).astype(np.int64)
    return found


def _second_pass(block: CandidateBlock, score: Floats, rows: Ints) -> Ints:
    """Final ranks of `rows` (all in role-affected searches) after the soft role pass."""
    searches = np.unique(block.search[rows])
    members = np.concatenate([np.arange(block.starts[s], block.starts[s + 1])
                              for s in searches])
    first = _first_pass_ranks(block, score, plan_rows(block, members))
    kept = first < block.cut[block.search[members]]
    members, first = members[kept], first[kept]
    rescored = score[members] * block.role[members]
    slot = np.searchsorted(searches, block.search[members])
    cut = int(block.cut[searches].max())
    grid = np.full((searches.size, cut), np.nan)
    grid[slot, first] = rescored  # a returned list in first-pass order
    where = {int(m): i for i, m in enumerate(members)}
    out = np.full(rows.size, -1, dtype=np.int64)
    for i, row in enumerate(rows):
        j = where.get(int(row))
        if j is None:
            continue
        line = grid[slot[j]]
        mine = rescored[j]
        out[i] = int((line > mine).sum() + ((line == mine)[:first[j]]).sum())
    return out


# The compiled kernels. Plain Python over arrays, compiled by numba on first use, without
# fastmath: every operation is the IEEE one, in the order written, never fused (no FMA).

def _score_rows(features: Floats, relevance: Floats, bounds: Ints, table: Floats,
                out: Floats) -> None:
    """out[i] = (w0·f0 + w1·f1 + ... + w5·f5) × relevance, added left to right, a term with
    weight 0 left out; the weights of label k for rows bounds[k]:bounds[k + 1]."""
    f0, f1, f2, f3, f4, f5 = (features[0], features[1], features[2], features[3],
                              features[4], features[5])
    for k in range(bounds.size - 1):
        w0, w1, w2, w3, w4, w5 = (table[k, 0], table[k, 1], table[k, 2], table[k, 3],
                                  table[k, 4], table[k, 5])
        on1, on2, on3, on4, on5 = w1 != 0.0, w2 != 0.0, w3 != 0.0, w4 != 0.0, w5 != 0.0
        for i in range(bounds[k], bounds[k + 1]):
            acc = f0[i] * w0
            if on1:
                acc = acc + f1[i] * w1
            if on2:
                acc = acc + f2[i] * w2
            if on3:
                acc = acc + f3[i] * w3
            if on4:
                acc = acc + f4[i] * w4
            if on5:
                acc = acc + f5[i] * w5
            out[i] = acc * relevance[i]


def _rank_rows(score: Floats, role: Floats, start: Ints, count: Ints, position: Ints,
               cut: Ints, affected: Bools, roles: bool, out: Ints) -> None:
    """out[r]: the final rank of row start[r] + position[r] among rows start[r]:+count[r]
    (one search), -1 when cut; see `ranks_of`."""
    for r in range(start.size):
        lo, n, p, c = start[r], count[r], position[r], cut[r]
        me = score[lo + p]
        # First pass: ahead of the row are the higher scores, and the ties found earlier.
        earlier, later = score[lo:lo + p], score[lo + p + 1:lo + n]
        ahead = 0
        for i in range(earlier.size):
            ahead += int(earlier[i] >= me)
        for i in range(later.size):
            ahead += int(later[i] > me)
        if ahead >= c:
            out[r] = -1
            continue
        if not (roles and affected[r]):
            out[r] = ahead
            continue
        # Role pass over the returned list (first-pass order), stable: ahead of the row
        # are the returned candidates rescoring higher, and the ties returned before it.
        mine = me * role[lo + p]
        window, weight = score[lo:lo + n], role[lo:lo + n]
        rank = 0
        passed = 0  # candidates after the row in the first pass, rescoring above it
        for i in range(n):
            s = window[i]
            q = s * weight[i]
            ahead_first = (s > me) | ((s == me) & (i < p))
            rank += int(ahead_first & (q >= mine))  # ahead of it, so returned too
            passed += int((not ahead_first) & (q > mine))
        if passed and n > c:  # some may have been cut: count only the returned ones
            for i in range(n):
                s = window[i]
                if (s > me) | ((s == me) & (i < p)) or not s * weight[i] > mine:
                    continue
                before = 0
                for j in range(n):
                    t = window[j]
                    before += int((t > s) | ((t == s) & (j < i)))
                passed -= int(before >= c)
        out[r] = rank + passed


class _Kernels(NamedTuple):
    score: Callable[[Floats, Floats, Ints, Floats, Floats], None]
    rank: Callable[[Floats, Floats, Ints, Ints, Ints, Ints, Bools, bool, Ints], None]


def warm_up() -> None:
    """Compile the kernels now, or load them from numba's cache: otherwise the first
    `scores` and `ranks_of` pay it (about 1 s with the cache, a few s without)."""
    block = CandidateBlock.build(search=[0, 0], features=np.ones((len(FEATURES), 2)),
                                 relevance=[1.0, 1.0], role=[1.0, 0.5], search_intent=[0],
                                 search_limit=[1])
    ranks_of(block, scores(block, np.ones(len(WEIGHTS))), [0, 1])


@cache
def _kernels() -> _Kernels:
    return _Kernels(score=exact_njit(_score_rows), rank=exact_njit(_rank_rows))


def _c_floats(a: Floats, n: int) -> bool:
    return (a.dtype == np.float64 and a.shape == (n,) and a.flags.c_contiguous
            and a.flags.writeable)


def _padded(block: CandidateBlock, values: Floats) -> Floats:
    """(S, width) values by (search, position), NaN where a search has fewer candidates."""
    width = max(block.width, 1)
    grid = np.full(block.n_searches * width, np.nan)
    grid[block.search * width + block.position] = values
    return grid.reshape(block.n_searches, width)


def row_ranks(block: CandidateBlock, score: Floats, *, roles: bool = True) -> Ints:
    """Final rank of every internal row (-1 when cut), by sorting each search."""
    grid = _padded(block, score)
    keys = np.where(np.isnan(grid), np.inf, -grid)
    order = np.argsort(keys, axis=1, kind="stable")
    first = np.empty_like(order)
    np.put_along_axis(first, order, np.arange(order.shape[1])[None, :], axis=1)
    rank: Ints = first[block.search, block.position].astype(np.int64)
    rank[rank >= block.cut[block.search]] = -1
    if roles and block.role_searches.size:
        rows = np.flatnonzero(np.isin(block.search, block.role_searches))
        rank[rows] = _second_pass_sorted(block, score, rows, rank[rows])
    return rank


def _second_pass_sorted(block: CandidateBlock, score: Floats, rows: Ints, first: Ints) -> Ints:
    out = np.full(rows.size, -1, dtype=np.int64)
    for s in np.unique(block.search[rows]):
        mine = np.flatnonzero((block.search[rows] == s) & (first >= 0))
        kept = mine[np.argsort(first[mine], kind="stable")]  # the returned list
        rescored = score[rows[kept]] * block.role[rows[kept]]
        resorted = np.argsort(-rescored, kind="stable")
        out[kept[resorted]] = np.arange(kept.size)
    return out
