"""IR metrics computed from the ranks of judged (search, memory) pairs, vectorised with NumPy.

The batch scorer gives, per trial, the 0-based rank at which each judged pair appears in
the returned ranking (-1 when it was not returned) and the length of each returned list.
That is all a metric needs: unjudged memories count as non-relevant (but in the measures
for incomplete judgments below, which skip them), and the relevant memories that are not
candidates still count in the ideal ranking (`Judged.ideal`).
`evaluate` scores one trial (`ranks` of shape (N,)) or T trials at once ((T, N)) with a few
segmented sums over the N pairs; it never builds a dict per query. bpref and the condensed
lists need each list's judged pairs in rank order: one sort of the returned pairs per block
of trials, shared by those metrics.

Semantics are trec_eval's (EVALUATION.md), checked against pytrec_eval in
tests/test_metrics.py. A memory is relevant when its grade is > 0.

- ndcg@k: DCG with linear gain (grade) and discount log2(rank + 2) over the top k, divided
  by the DCG of the query's ideal ranking (all its judged-relevant memories, from the
  qrels) cut at k; trec_eval's `ndcg_cut_k`. `ndcg` without k uses the whole list.
  `ndcg_exp` is the same with the exponential gain 2^grade - 1.
- recall@k: relevant memories returned in the top k / relevant memories of the query.
- precision@k: relevant in the top k / k, even when fewer than k were returned (`P_k`).
- mrr: 1 / (rank + 1) of the first relevant memory returned, 0 if none (`recip_rank`);
  `mrr@k` counts only the top k.
- map: trec_eval's `map`: the sum of precision at the rank of each relevant memory
  returned, divided by the number of relevant memories of the query; `map@k` is
  `map_cut_k`.
- hit@k: 1 if any relevant memory is in the top k (`success_k`).
- judged@k: judged memories in the top k / min(k, number returned), as ir_measures'
  `Judged@k` divides since its PR #48 (NaN when nothing was returned).

For incomplete judgments (most memories never judged), measures that skip the unjudged
memories instead of counting them non-relevant:

- bpref: trec_eval's `bpref` (Buckley and Voorhees 2004). R = judged-relevant memories of
  the query, N = its judged non-relevant ones (grade 0, from the qrels, returned or not:
  `Judged.n_nonrelevant`); for each relevant memory returned, n = judged non-relevant
  memories returned above it, and bpref = (1/R) * sum of (1 - min(n, R) / min(R, N)),
  a term being 1 when n = 0 (so when N = 0). No cutoff.
- ndcg_condensed@k (`ndcg'@k`) and precision_condensed@k (`P'@k`): Sakai's nDCG' and P'
  (SIGIR 2007, "Alternatives to bpref"): ndcg@k and precision@k of the condensed list,
  the returned list with its unjudged memories removed; a judged memory's condensed rank
  is the number of judged memories returned above it. The ideal is ndcg@k's (all
  judged-relevant memories of the query), precision divides by k. They equal trec_eval's
  ndcg_cut_k and P_k with -J (judged documents only), and ndcg@k / precision@k when every
  returned memory is judged. `ndcg_condensed` without k uses the whole condensed list.

A query whose qrels hold no relevant memory has no defined value for any metric but
judged@k: `evaluate` gives NaN there, and aggregation excludes it and counts it apart
("no relevant memory"). trec_eval would score it 0 and average the zeros in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, TypeVar, cast

import numpy as np
import polars as pl

__all__ = ["KINDS", "Judged", "Metric", "accepted_forms", "evaluate", "judged_from_frames",
           "parse_metric"]


_T = TypeVar("_T")


@dataclass(frozen=True)
class _Kind:
    cutoff: Literal["required", "optional", "none"]
    aliases: tuple[str, ...]  # other names accepted by parse_metric (in any case)
    description: str
    # Reads the judged memories only: an unjudged one is skipped, not counted non-relevant.
    judged_only: bool = False


KINDS: dict[str, _Kind] = {
    "ndcg": _Kind("optional", (), "NDCG, linear gain (trec_eval ndcg_cut_K)"),
    "ndcg_exp": _Kind("optional", (), "NDCG with exponential gain 2^grade - 1"),
    "recall": _Kind("optional", (), "recall within the top K (trec_eval recall_K)"),
    "precision": _Kind("required", ("P",), "precision at K, divided by K (trec_eval P_K)"),
    "mrr": _Kind("optional", ("recip_rank", "rr"), "reciprocal rank of the first relevant"),
    "map": _Kind("optional", ("AP",), "average precision (trec_eval map, map_cut_K)"),
    "hit": _Kind("required", ("success",), "1 if a relevant memory is in the top K"),
    "judged": _Kind("required", (), "judged share of the top K (ir_measures Judged@K)"),
    "bpref": _Kind("none", (), "binary preference, unjudged memories skipped (trec_eval bpref)",
                   judged_only=True),
    "ndcg_condensed": _Kind("optional", ("ndcg'",),
                            "NDCG of the condensed list, unjudged memories removed (nDCG')",
                            judged_only=True),
    "precision_condensed": _Kind("required", ("P'",),
                                 "precision at K of the condensed list (P'@K)", judged_only=True),
}
_SPELLINGS = {name.lower(): kind for kind, info in KINDS.items()
              for name in (kind, *info.aliases)}
# name@K, trec_eval's name_cut_K / name_cut.K / name_K / name.K, or a bare name; a name may
# end in ' (Sakai's nDCG', P').
_PATTERN = re.compile(r"(?P<name>[a-z_]+?'?)(?:(?:@|_cut_|_cut\.|_|\.)(?P<k>\d+))?")


def accepted_forms() -> str:
    """The metric spellings parse_metric accepts, generated from KINDS."""
    forms = []
    for kind, info in KINDS.items():
        form = {"required": f"{kind}@K", "optional": f"{kind}[@K]", "none": kind}[info.cutoff]
        if info.aliases:
            form += f" (also {', '.join(info.aliases)})"
        forms.append(form)
    return ("; ".join(forms) + ". K is a positive integer; trec_eval's NAME_K, NAME.K and "
            "NAME_cut_K spellings work too, in any case (NDCG@10, ndcg_cut_10, P_5).")


@dataclass(frozen=True)
class Metric:
    """What is measured: a kind from KINDS and a cutoff k (None: the whole returned list).

    `name` is the canonical spelling ("ndcg@10", "mrr") used as dict key and report column;
    `key` is the MLflow-safe form ("ndcg_at_10"), since MLflow rejects '@' and '='.
    """

    kind: str
    k: int | None = None
    name: str = field(init=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Metric.kind must be one of {sorted(KINDS)}, got {self.kind!r}")
        cutoff = KINDS[self.kind].cutoff
        if self.k is None:
            if cutoff == "required":
                raise ValueError(f"{self.kind} needs a cutoff k, e.g. {self.kind}@10")
        elif cutoff == "none":
            raise ValueError(f"{self.kind} takes no cutoff (it reads the whole returned list)")
        elif isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"Metric.k must be an integer >= 1 or None, got {self.k!r}")
        object.__setattr__(self, "name", self.kind if self.k is None else f"{self.kind}@{self.k}")

    @property
    def key(self) -> str:
        return self.name.replace("@", "_at_")


def parse_metric(text: str) -> Metric:
    """A Metric from "ndcg@10", "NDCG@10", "ndcg_cut_10", "P@5", "recip_rank", ...

    Raises ValueError listing the accepted forms for anything else.
    """
    match = _PATTERN.fullmatch(text.strip().lower())
    kind = _SPELLINGS.get(match["name"]) if match else None
    if match is None or kind is None:
        raise ValueError(f"unknown metric {text!r}; accepted: {accepted_forms()}")
    try:
        return Metric(kind, None if match["k"] is None else int(match["k"]))
    except ValueError as exc:
        raise ValueError(f"metric {text!r}: {exc}; accepted: {accepted_forms()}") from None


@dataclass(frozen=True, eq=False)
class Judged:
    """Judged (search, memory) pairs, grouped by search, plus each search's ideal grades.

    search : int64 array, shape (N,), non-decreasing, values in 0..n_searches-1.
    grade : int64 array, shape (N,), >= 0 (0 = judged non-relevant); one row per distinct
        judged (search, memory) pair that is a candidate of that search.
    ideal : int64 array, shape (n_searches, G): grades of all judged-relevant memories of
        the search's query (from the qrels, not only the candidates), sorted descending,
        zero-padded.
    n_nonrelevant : int64 array, shape (n_searches,): judged non-relevant memories of the
        search's query (from the qrels, candidates or not), bpref's N. Default: the grade-0
        pairs of each search, right when every judged memory of the query is a pair.

    The arrays are copied and made read-only, so that derived quantities (segment starts,
    ideal DCG per cutoff) can be cached on the object; equality is identity.
    """

    search: np.ndarray
    grade: np.ndarray
    ideal: np.ndarray
    n_nonrelevant: np.ndarray | None = None
    _cache: dict[Any, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        for name, ndim in (("search", 1), ("grade", 1), ("ideal", 2)):
            array = np.asarray(getattr(self, name))
            if array.ndim != ndim or (array.size and not np.issubdtype(array.dtype, np.integer)):
                raise ValueError(f"Judged.{name} must be a {ndim}-d integer array, got "
                                 f"shape {array.shape} dtype {array.dtype}")
            array = np.array(array, dtype=np.int64)  # a copy, frozen below
            array.flags.writeable = False
            object.__setattr__(self, name, array)
        search, grade, ideal = self.search, self.grade, self.ideal
        if search.shape != grade.shape:
            raise ValueError(f"Judged.search and Judged.grade must have the same shape, got "
                             f"{search.shape} and {grade.shape}")
        if search.size and (search[0] < 0 or search[-1] >= ideal.shape[0]
                            or np.any(np.diff(search) < 0)):
            raise ValueError(f"Judged.search must be non-decreasing in 0..{ideal.shape[0] - 1} "
                             f"(one row of `ideal` per search)")
        if np.any(grade < 0) or np.any(ideal < 0):
            raise ValueError("grades must be >= 0 (0 = judged non-relevant)")
        if ideal.shape[1] > 1 and np.any(np.diff(ideal, axis=1) > 0):
            raise ValueError("each row of Judged.ideal must be sorted descending")
        self._set_n_nonrelevant()

    def _set_n_nonrelevant(self) -> None:
        paired = np.bincount(self.search[self.grade == 0], minlength=self.n_searches)
        given = paired if self.n_nonrelevant is None else np.asarray(self.n_nonrelevant)
        if given.shape != (self.n_searches,) or (
                given.size and not np.issubdtype(given.dtype, np.integer)):
            raise ValueError(f"Judged.n_nonrelevant must be an integer array of shape "
                             f"({self.n_searches},), got shape {given.shape} dtype {given.dtype}")
        # The grade-0 pairs are judged non-relevant memories of the query: fewer is a mix-up.
        if np.any(given < paired):
            raise ValueError("Judged.n_nonrelevant must count at least each search's grade-0 "
                             "pairs (it counts every judged non-relevant memory of the query)")
        array = np.array(given, dtype=np.int64)
        array.flags.writeable = False
        object.__setattr__(self, "n_nonrelevant", array)

    @property
    def n_searches(self) -> int:
        return int(self.ideal.shape[0])

    def _cached(self, key: Any, compute: Callable[[], _T]) -> _T:
        if key not in self._cache:
            self._cache[key] = compute()
        return cast(_T, self._cache[key])

    @property
    def n_relevant(self) -> np.ndarray:
        """Relevant memories per search (from the qrels), shape (n_searches,)."""
        return self._cached("n_relevant", lambda: np.count_nonzero(self.ideal > 0, axis=1))

    def ideal_dcg(self, k: int | None, gain: str) -> np.ndarray:
        """DCG of each search's ideal ranking cut at k, shape (n_searches,)."""
        def compute() -> np.ndarray:
            gains = _GAINS[gain](self.ideal[:, :k])
            return np.asarray(gains @ _discounts(gains.shape[1])[:-1])
        return self._cached(("ideal_dcg", k, gain), compute)

    def segment_ids(self, trials: int) -> np.ndarray:
        """Row i of trial t belongs to segment t * n_searches + search[i]: shape (T * N,)."""
        def compute() -> np.ndarray:
            offsets = self.n_searches * np.arange(trials, dtype=np.int64)[:, None]
            ids = (self.search + offsets).ravel()
            ids.flags.writeable = False
            return ids
        return self._cached(("segment_ids", trials), compute)


_GAINS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "linear": lambda grade: grade.astype(np.float64),
    "exp": lambda grade: np.exp2(grade.astype(np.float64)) - 1.0,
}


@lru_cache(maxsize=64)
def _discounts(n: int) -> np.ndarray:
    """1 / log2(rank + 2) for ranks 0..n-1, then a 0 at index n for "outside the cut"."""
    table = np.zeros(n + 1)
    table[:n] = 1.0 / np.log2(np.arange(n) + 2.0)
    table.flags.writeable = False
    return table


def _require(frame: pl.DataFrame, what: str, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what}: missing column(s) {missing} (found columns {frame.columns})")


def judged_from_frames(searches: pl.DataFrame, pairs: pl.DataFrame,
                       qrels: pl.DataFrame) -> Judged:
    """Build `Judged` from frames.

    searches : one row per search: `search` (integer, exactly 0..n_searches-1 in any order)
        and `query_id` (the qrels' query of that search; several searches may share one).
    pairs : `search`, `memory_id`, `grade` (integer >= 0): the judged candidates of each
        search, sorted by `search`. Row i of the result is row i of `pairs`, so the batch
        scorer's ranks line up with this frame's row order.
    qrels : `query_id`, `memory_id`, `relevance`; rows with relevance > 0 make the ideal
        rankings, the others (relevance <= 0: judged non-relevant) are counted as
        `n_nonrelevant`. A (query_id, memory_id) may appear once.

    Raises ValueError on a missing column, an unsorted or out-of-range `search`, a
    negative grade, or a duplicate pair.
    """
    _require(searches, "searches", ("search", "query_id"))
    _require(pairs, "pairs", ("search", "memory_id", "grade"))
    _require(qrels, "qrels", ("query_id", "memory_id", "relevance"))
    n = searches.height
    index = searches.get_column("search").cast(pl.Int64).to_numpy()
    if not np.array_equal(np.sort(index), np.arange(n)):
        raise ValueError(f"searches: `search` must hold each of 0..{n - 1} exactly once")
    search = pairs.get_column("search").cast(pl.Int64).to_numpy()
    if search.size and (np.any(np.diff(search) < 0) or search.min() < 0 or search.max() >= n):
        raise ValueError(f"pairs: `search` must be sorted and in 0..{n - 1}; sort the frame "
                         "first (pairs.sort('search', maintain_order=True)) and align the "
                         "ranks with the sorted rows")
    for what, frame, key in (("pairs", pairs, ("search", "memory_id")),
                             ("qrels", qrels, ("query_id", "memory_id"))):
        duplicated = frame.select(pl.struct(key).is_duplicated())
        if duplicated.to_series().any():
            row = frame.filter(duplicated.to_series()).row(0, named=True)
            raise ValueError(f"{what}: duplicate {', '.join(f'{c}={row[c]!r}' for c in key)}; "
                             "each judged pair must appear once")
    by_search = searches.select(pl.col("search").cast(pl.Int64), "query_id")
    nonrelevant = (by_search.join(qrels.filter(pl.col("relevance") <= 0), on="query_id")
                   .group_by("search").len())
    n_nonrelevant = np.zeros(n, dtype=np.int64)
    n_nonrelevant[nonrelevant.get_column("search").to_numpy()] = (
        nonrelevant.get_column("len").to_numpy())
    relevant = (by_search.join(qrels.filter(pl.col("relevance") > 0), on="query_id")
                .sort(["search", "relevance"], descending=[False, True])
                .with_columns(position=pl.int_range(pl.len()).over("search")))
    position = relevant.get_column("position").to_numpy()
    ideal = np.zeros((n, int(position.max()) + 1 if position.size else 0), dtype=np.int64)
    ideal[relevant.get_column("search").to_numpy(), position] = (
        relevant.get_column("relevance").to_numpy())
    return Judged(search=search, grade=pairs.get_column("grade").to_numpy(), ideal=ideal,
                  n_nonrelevant=n_nonrelevant)


def _segment_sum(values: np.ndarray, judged: Judged) -> np.ndarray:
    """Sum values (T, N) over each search's rows -> float64 (T, n_searches)."""
    t, s = values.shape[0], judged.n_searches
    # bincount, not np.add.reduceat: reduceat pays ~20 ns per segment, 4x slower here.
    sums = np.bincount(judged.segment_ids(t), weights=values.ravel(), minlength=t * s)
    return sums.reshape(t, s)


def _check_shapes(judged: Judged, ranks: np.ndarray,
                  n_returned: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, s = judged.search.size, judged.n_searches
    if ranks.ndim not in (1, 2) or ranks.shape[-1] != n:
        raise ValueError(f"ranks must have shape ({n},) or (T, {n}), got {ranks.shape}")
    if n_returned.shape not in ((s,), (*ranks.shape[:-1], s)):
        raise ValueError(f"n_returned must have shape ({s},) or (T, {s}) to match ranks "
                         f"{ranks.shape}, got {n_returned.shape}")
    for name, array in (("ranks", ranks), ("n_returned", n_returned)):
        if array.size and not np.issubdtype(array.dtype, np.integer):
            raise ValueError(f"{name} must hold integers, got dtype {array.dtype}")
    if n_returned.size and n_returned.min() < 0:
        raise ValueError(f"n_returned must be >= 0, got {n_returned.min()}")
    return (np.atleast_2d(ranks).astype(np.int64, copy=False),
            np.atleast_2d(n_returned).astype(np.int64, copy=False))


# Trials evaluated together: (8, N) temporaries stay in cache; one pass over (100, N) took
# about twice as long per trial at N = 20k (measured while writing bench_metrics).
_TRIALS_PER_BLOCK = 8


def evaluate(judged: Judged, ranks: np.ndarray, metrics: Sequence[Metric], *,
             n_returned: np.ndarray) -> dict[str, np.ndarray]:
    """Per-search metric values from the ranks of the judged pairs.

    ranks : int array, shape (N,) or (T, N): 0-based rank of each judged pair in its
        search's returned list, -1 if not returned. A rank >= n_returned also counts as
        not returned.
    n_returned : int array, shape (n_searches,) or (T, n_searches): length of each
        returned list (with 2-d ranks, a 1-d n_returned applies to every trial).

    Returns metric name -> float64 array of shape (n_searches,) or (T, n_searches); NaN
    where the query has no relevant memory (all metrics but judged@k), and for judged@k
    where nothing was returned.

    >>> j = Judged(search=np.array([0, 0, 1]), grade=np.array([1, 0, 2]),
    ...            ideal=np.array([[1, 1], [2, 0]]))
    >>> out = evaluate(j, np.array([1, 0, -1]), [Metric("recall", 10), Metric("mrr")],
    ...                n_returned=np.array([5, 5]))
    >>> out["recall@10"].tolist(), out["mrr"].tolist()
    ([0.5, 0.0], [0.5, 0.0])
    """
    ranks = np.asarray(ranks)
    trials = ranks.ndim == 2
    ranks, n_returned = _check_shapes(judged, ranks, np.asarray(n_returned))
    if ranks.shape[0] > _TRIALS_PER_BLOCK:
        blocks = [evaluate(judged, ranks[i:i + _TRIALS_PER_BLOCK], metrics,
                           n_returned=n_returned[i:i + _TRIALS_PER_BLOCK]
                           if n_returned.shape[0] > 1 else n_returned[0])
                  for i in range(0, ranks.shape[0], _TRIALS_PER_BLOCK)]
        return {m.name: np.concatenate([block[m.name] for block in blocks]) for m in metrics}
    top = _Top(judged, ranks, n_returned)
    no_relevant = judged.n_relevant == 0
    out: dict[str, np.ndarray] = {}
    for metric in metrics:
        values = _KERNELS[metric.kind](metric, judged, ranks, n_returned, top)
        if metric.kind != "judged":
            values[:, no_relevant] = np.nan
        out[metric.name] = values if trials else values[0]
    return out


@dataclass(frozen=True)
class _Order:
    """The returned judged pairs of one block of trials, each list in rank order.

    flat : index into the flattened (T, N) ranks; lists (segments) stay in segment order.
    segment : the list's segment id (t * n_searches + search).
    rank : condensed rank, 0-based: the judged pairs of the same list returned above it.
    first : index (into these arrays) of the list's first pair.
    pair : the row of `Judged` (flat modulo N).
    """

    flat: np.ndarray
    segment: np.ndarray
    rank: np.ndarray
    first: np.ndarray
    pair: np.ndarray


class _Top:
    """The returned lists of one block of trials: which pairs are returned within a cutoff
    (a mask per cutoff, cached), and on demand their rank order and the condensed lists."""

    def __init__(self, judged: Judged, ranks: np.ndarray, n_returned: np.ndarray) -> None:
        self.judged, self.ranks, self.n_returned = judged, ranks, n_returned
        self._limit = n_returned[:, judged.search]  # (T or 1, N): at or beyond: not returned
        # As unsigned, rank -1 is the largest value, so one comparison tests 0 <= rank < limit.
        self._unsigned = ranks.view(np.uint64)
        self.max_returned = int(n_returned.max(initial=0))
        self._masks: dict[int, np.ndarray] = {}
        self._order: _Order | None = None
        self._condensed: _Top | None = None

    def __call__(self, k: int | None) -> tuple[int, np.ndarray]:
        """(cut, mask (T, N) of the pairs returned within the top k)."""
        cut = self.max_returned if k is None else min(k, self.max_returned)
        if cut not in self._masks:
            self._masks[cut] = self._unsigned < np.minimum(self._limit, cut).view(np.uint64)
        return cut, self._masks[cut]

    def order(self) -> _Order:
        """The returned judged pairs, each list sorted by rank (one sort for the block)."""
        if self._order is None:
            t, n = self.ranks.shape
            flat = np.flatnonzero(self(None)[1])
            segment = self.judged.segment_ids(t)[flat]
            # Segment ids are non-decreasing in flat order, so sorting segment * (cut + 1) +
            # rank orders each list by rank and keeps the lists where they were.
            by_rank = np.argsort(segment * (self.max_returned + 1) + self.ranks.ravel()[flat],
                                 kind="stable")
            flat, segment = flat[by_rank], segment[by_rank]
            count = np.bincount(segment, minlength=t * self.judged.n_searches)
            first = (np.cumsum(count) - count)[segment]
            self._order = _Order(flat, segment, np.arange(flat.size) - first, first,
                                 flat % max(n, 1))
        return self._order

    def condensed(self) -> _Top:
        """The same lists with the unjudged memories removed (Sakai's condensed lists):
        each returned pair at its condensed rank, each list as long as its judged pairs."""
        if self._condensed is None:
            order = self.order()
            ranks = np.full(self.ranks.shape, -1, dtype=np.int64)
            np.put(ranks, order.flat, order.rank)
            t, s = ranks.shape[0], self.judged.n_searches
            lengths = np.bincount(order.segment, minlength=t * s).reshape(t, s)
            self._condensed = _Top(self.judged, ranks, lengths)
        return self._condensed


def _dcg(gain: str) -> Callable[..., np.ndarray]:
    def kernel(metric: Metric, judged: Judged, ranks: np.ndarray, n_returned: np.ndarray,
               top: _Top) -> np.ndarray:
        cut, inside = top(metric.k)
        gains = judged._cached(("gain", gain), lambda: _GAINS[gain](judged.grade))
        discount = _discounts(cut)[np.where(inside, ranks, cut)]
        return _divide(_segment_sum(gains * discount, judged), judged.ideal_dcg(metric.k, gain))
    return kernel


def _divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, NaN where both are 0 (no relevant memory), no warning."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(np.true_divide(numerator, denominator), dtype=np.float64)


def _relevant_within(metric: Metric, judged: Judged, top: _Top) -> np.ndarray:
    _, inside = top(metric.k)
    return _segment_sum(inside & (judged.grade > 0), judged)


def _recall(metric: Metric, judged: Judged, ranks: np.ndarray, n_returned: np.ndarray,
            top: _Top) -> np.ndarray:
    return _divide(_relevant_within(metric, judged, top), judged.n_relevant)


def _precision(metric: Metric, judged: Judged, ranks: np.ndarray, n_returned: np.ndarray,
               top: _Top) -> np.ndarray:
    assert metric.k is not None  # Metric requires a cutoff for precision
    return _relevant_within(metric, judged, top) / metric.k


def _hit(metric: Metric, judged: Judged, ranks: np.ndarray, n_returned: np.ndarray,
         top: _Top) -> np.ndarray:
    return (_relevant_within(metric, judged, top) > 0).astype(np.float64)


def _judged(metric: Metric, judged: Judged, ranks: np.ndarray, n_returned: np.ndarray,
            top: _Top) -> np.ndarray:
    assert metric.k is not None  # Metric requires a cutoff for judged
    _, inside = top(metric.k)
    return _divide(_segment_sum(inside, judged), np.minimum(n_returned, metric.k))


def _mrr(metric: Metric, judged: Judged, ranks: np.ndarray, n_returned: np.ndarray,
         top: _Top) -> np.ndarray:
    cut, inside = top(metric.k)
    t, s = ranks.shape[0], judged.n_searches
    first = np.full(t * s, cut)  # cut: no relevant memory returned within it
    np.minimum.at(first, judged.segment_ids(t), np.where(inside & (judged.grade > 0), ranks,
                                                         cut).ravel())
    return np.where(first < cut, 1.0 / (first + 1.0), 0.0).reshape(t, s)


def _map(metric: Metric, judged: Judged, ranks: np.ndarray, n_returned: np.ndarray,
         top: _Top) -> np.ndarray:
    cut, inside = top(metric.k)
    t, s = ranks.shape[0], judged.n_searches
    hits = (inside & (judged.grade > 0)).ravel()
    segment, rank = judged.segment_ids(t)[hits], ranks.ravel()[hits]
    # Segment ids are non-decreasing, so sorting segment * (cut + 1) + rank orders each
    # segment's relevant memories by rank and keeps the segments where they were.
    order = np.sort(segment * (cut + 1) + rank)
    rank = order - segment * (cut + 1)
    count = np.bincount(segment, minlength=t * s)
    among = np.arange(segment.size) - (np.cumsum(count) - count)[segment]  # 0-based
    total = np.bincount(segment, weights=(among + 1.0) / (rank + 1.0), minlength=t * s)
    return _divide(total.reshape(t, s), judged.n_relevant)


def _bpref(metric: Metric, judged: Judged, ranks: np.ndarray, n_returned: np.ndarray,
           top: _Top) -> np.ndarray:
    assert judged.n_nonrelevant is not None  # set by Judged.__post_init__
    order = top.order()
    relevant = judged.grade[order.pair] > 0
    # Judged non-relevant pairs returned above each pair: a running count within its list.
    nonrelevant = np.cumsum(~relevant) - ~relevant
    above = nonrelevant - nonrelevant[order.first]
    search = judged.search[order.pair]
    r, n = judged.n_relevant[search], judged.n_nonrelevant[search]
    # n >= above, so the floor of 1 only changes terms with above == 0: those are 1, as in
    # trec_eval's special case (no judged non-relevant seen yet; always so when N = 0).
    wrong = np.minimum(above, r) / np.maximum(np.minimum(n, r), 1)
    t, s = ranks.shape[0], judged.n_searches
    total = np.bincount(order.segment[relevant], weights=1.0 - wrong[relevant],
                        minlength=t * s)
    return _divide(total.reshape(t, s), judged.n_relevant)


def _condensed(kernel: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """`kernel` on the condensed lists: the judged pairs at their condensed ranks, each
    list as long as its returned judged pairs."""
    def on_condensed(metric: Metric, judged: Judged, ranks: np.ndarray,
                     n_returned: np.ndarray, top: _Top) -> np.ndarray:
        lists = top.condensed()
        return kernel(metric, judged, lists.ranks, lists.n_returned, lists)
    return on_condensed


_NDCG = _dcg("linear")
_KERNELS: dict[str, Callable[..., np.ndarray]] = {
    "ndcg": _NDCG, "ndcg_exp": _dcg("exp"), "recall": _recall,
    "precision": _precision, "mrr": _mrr, "map": _map, "hit": _hit, "judged": _judged,
    "bpref": _bpref, "ndcg_condensed": _condensed(_NDCG),
    "precision_condensed": _condensed(_precision),
}
