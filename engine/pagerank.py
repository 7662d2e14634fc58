"""Personalised PageRank, bit-identical to the library's `networkx.pagerank` (MSPR.md section 9).

The library calls `networkx.pagerank(view, alpha, personalization, max_iter, tol,
weight="weight")`, which in networkx 3.6 runs a SciPy power iteration. This module does the
same floating-point operations in the same order, so the scores agree bit for bit (checked
against networkx 3.6.1 and SciPy 1.17.1 by `tests/test_pagerank.py`), without building a
networkx graph or walking it in Python:

* networkx builds the adjacency as a COO array in edge order and converts it to CSR, which
  sorts every row by column. Here the edges are sorted by (src, dst) once, so the CSR arrays
  are built directly and the edge order given does not matter.
* Out-weights are the row sums of that CSR, taken with the same SciPy call.
* Row-normalising with a diagonal matrix product gives `0 + (1 / out_weight) * weight` per
  entry, which is the plain product; zero products are dropped, as SciPy drops them.
* `x @ A` runs SciPy's CSC mat-vec on the transpose, which adds the terms of each entry of
  the result in ascending source order. The transpose is built once, and the same kernel is
  called on it.
* The dangling mass is Python's `sum` over the dangling entries, strictly left to right:
  `np.cumsum` adds in that order, where `ndarray.sum` would add pairwise.
* The step and the L1 test use the same element-wise NumPy operations, some in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sps

FloatArray = npt.NDArray[np.float64]
IndexArray = npt.NDArray[np.integer[Any]]

__all__ = ["PageRankResult", "Transition", "pagerank_on", "personalized_pagerank", "transition"]


@dataclass(frozen=True, slots=True)
class PageRankResult:
    """Outcome of one power iteration.

    Attributes
    ----------
    scores
        PageRank per node, shape (n,); None when the iteration did not converge or the
        personalisation sums to zero (networkx raises in both cases).
    iterations
        Power-iteration steps run.
    error
        None on success, otherwise a short reason.
    """

    scores: FloatArray | None
    iterations: int
    error: str | None


def personalized_pagerank(
    n: int,
    src: IndexArray,
    dst: IndexArray,
    weight: FloatArray,
    personalization: FloatArray,
    *,
    alpha: float,
    max_iter: int,
    tol: float,
) -> PageRankResult:
    """PageRank of a simple weighted digraph with a personalisation vector.

    Parameters
    ----------
    n
        Number of nodes; nodes are 0..n-1 in the networkx node order.
    src, dst
        Integer arrays, shape (m,): the edges. At most one edge per (src, dst); self loops
        are allowed. Any order gives the same result.
    weight
        Finite float64 edge weights, shape (m,).
    personalization
        Float64, shape (n,): the personalisation value per node, 0 for nodes without one.
        Renormalised to sum 1 here, as networkx does; the input is not modified.
    alpha, max_iter, tol
        Damping factor, iteration cap and per-node tolerance, as for `networkx.pagerank`:
        the iteration stops once the L1 change is below `n * tol`.

    Returns
    -------
    PageRankResult
        `scores` equals `networkx.pagerank(...)` bit for bit (values in node order). Where
        networkx raises `PowerIterationFailedConvergence` or `ZeroDivisionError`, `scores`
        is None and `error` says why.

    Raises
    ------
    ValueError
        If the arrays have the wrong shapes, a node index is outside 0..n-1, a weight is
        not finite, or an edge occurs twice.
    """
    src_a, dst_a, weight_a, p = _check_inputs(n, src, dst, weight, personalization)
    if n == 0:
        return PageRankResult(np.zeros(0, dtype=np.float64), 0, None)

    total = p.sum()
    if total == 0:
        return PageRankResult(None, 0, "personalization sums to zero")
    p /= total

    transition_t, dangling = _transition_transpose(n, src_a, dst_a, weight_a)
    return _power_iteration(transition_t, dangling, p, alpha=alpha, max_iter=max_iter, tol=tol)


@dataclass(frozen=True, slots=True)
class Transition:
    """The transposed, row-normalised adjacency `personalized_pagerank` builds, kept so that
    one graph can be ranked for many personalisation vectors.

    Attributes
    ----------
    n
        Number of nodes.
    matrix
        A transposed, as CSC (`matrix @ x` computes `x @ A`).
    dangling
        The nodes with zero out-weight, ascending.
    """

    n: int
    matrix: sps.csc_array
    dangling: npt.NDArray[np.intp]

    def with_isolated(self, k: int) -> Transition:
        """The same graph with `k` isolated nodes appended as nodes n..n+k-1.

        They have no edges, so they are dangling, and every stored entry keeps its place:
        `pagerank_on` gives what `personalized_pagerank` gives on the n+k node graph.
        """
        if k <= 0:
            return self
        m = self.matrix
        indptr = np.concatenate([m.indptr, np.full(k, m.indptr[-1], dtype=m.indptr.dtype)])
        n = self.n + k
        matrix = sps.csc_array((m.data, m.indices, indptr), shape=(n, n))
        dangling = np.concatenate([self.dangling, np.arange(self.n, n, dtype=np.intp)])
        return Transition(n, matrix, dangling)


def transition(n: int, src: IndexArray, dst: IndexArray, weight: FloatArray) -> Transition:
    """Validate a simple weighted digraph and build its transition once.

    Same arguments and errors as `personalized_pagerank` (less the personalisation).
    """
    src_a, dst_a, weight_a, _ = _check_inputs(n, src, dst, weight, np.zeros(n))
    matrix, dangling = _transition_transpose(n, src_a, dst_a, weight_a)
    return Transition(n, matrix, dangling)


def pagerank_on(
    graph: Transition,
    personalization: FloatArray,
    *,
    alpha: float,
    max_iter: int,
    tol: float,
) -> PageRankResult:
    """`personalized_pagerank` on a prebuilt transition: the same floats, bit for bit."""
    p = np.array(personalization, dtype=np.float64)  # a copy: it is normalised in place
    if p.shape != (graph.n,):
        raise ValueError(f"personalization must have shape ({graph.n},), got {p.shape}")
    if graph.n == 0:
        return PageRankResult(np.zeros(0, dtype=np.float64), 0, None)
    total = p.sum()
    if total == 0:
        return PageRankResult(None, 0, "personalization sums to zero")
    p /= total
    return _power_iteration(graph.matrix, graph.dangling, p, alpha=alpha, max_iter=max_iter,
                            tol=tol)


def _check_inputs(
    n: int,
    src: IndexArray,
    dst: IndexArray,
    weight: FloatArray,
    personalization: FloatArray,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], FloatArray, FloatArray]:
    """Validate and convert; returns int64 src/dst, float64 weights, a copy of p."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    src_a = np.asarray(src)
    dst_a = np.asarray(dst)
    weight_a = np.ascontiguousarray(weight, dtype=np.float64)
    p = np.array(personalization, dtype=np.float64)  # a copy: it is normalised in place
    if src_a.ndim != 1 or src_a.shape != dst_a.shape or src_a.shape != weight_a.shape:
        raise ValueError(
            "src, dst and weight must be 1-D arrays of one length, got shapes "
            f"{src_a.shape}, {dst_a.shape} and {weight_a.shape}"
        )
    if p.shape != (n,):
        raise ValueError(f"personalization must have shape ({n},), got {p.shape}")
    for name, idx in (("src", src_a), ("dst", dst_a)):
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"{name} must hold integers, got dtype {idx.dtype}")
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(
                f"{name} must lie in 0..{n - 1}, got values from {idx.min()} to {idx.max()}"
            )
    if not np.isfinite(weight_a).all():
        bad = int(np.flatnonzero(~np.isfinite(weight_a))[0])
        raise ValueError(f"edge weights must be finite, got {weight_a[bad]} at edge {bad}")
    return np.asarray(src_a, dtype=np.int64), np.asarray(dst_a, dtype=np.int64), weight_a, p


def _transition_transpose(
    n: int,
    src: npt.NDArray[np.int64],
    dst: npt.NDArray[np.int64],
    weight: FloatArray,
) -> tuple[sps.csc_array, npt.NDArray[np.intp]]:
    """The row-normalised adjacency, transposed (as CSC), and the dangling nodes."""
    key = src * n + dst
    if key.size > 1 and not (key[1:] > key[:-1]).all():
        # Stable sort is timsort for int64, fast on the runs of an edge list grouped by src.
        order = np.argsort(key, kind="stable")
        key, weight = key.take(order), weight.take(order)
        src, dst = src.take(order), dst.take(order)
        repeated = np.flatnonzero(key[1:] == key[:-1])
        if repeated.size:
            i = repeated[0]
            raise ValueError(
                f"edges must be unique, got {src[i]} -> {dst[i]} more than once; "
                "merge parallel edges first"
            )
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])

    # The same call networkx makes on the same CSR (rows sorted by column), so the
    # summation order of each row, and hence every bit of the out-weight, is the same.
    scale = np.asarray(sps.csr_array((weight, dst, indptr), shape=(n, n)).sum(axis=1))
    scale[scale != 0] = 1.0 / scale[scale != 0]
    dangling = np.flatnonzero(scale == 0)

    data = scale[src] * weight
    kept = data != 0
    if not kept.all():
        data, dst, src = data[kept], dst[kept], src[kept]
        indptr[1:] = np.cumsum(np.bincount(src, minlength=n))
    # Column j of the CSC is row j of A, so this is A transposed, and `@ x` computes x @ A.
    return sps.csc_array((data, dst, indptr), shape=(n, n)), dangling


def _power_iteration(
    transition_t: sps.csc_array,
    dangling: npt.NDArray[np.intp],
    p: FloatArray,
    *,
    alpha: float,
    max_iter: int,
    tol: float,
) -> PageRankResult:
    """x <- alpha * (x @ A + dangling mass * p) + (1 - alpha) * p until the L1 change < n * tol."""
    n = p.shape[0]
    x = np.repeat(1.0 / n, n)
    teleport = (1 - alpha) * p
    change = np.empty(n, dtype=np.float64)
    for step in range(1, max_iter + 1):
        nxt: FloatArray = transition_t @ x
        # With no dangling node networkx adds `0 * p`: zeros, which change nothing here
        # because the mat-vec starts from +0.0 and so never yields -0.0.
        if dangling.size:
            nxt += np.cumsum(x[dangling])[-1] * p
        nxt *= alpha
        nxt += teleport
        np.subtract(nxt, x, out=change)
        np.absolute(change, out=change)
        x = nxt
        if change.sum() < n * tol:
            return PageRankResult(x, step, None)
    return PageRankResult(None, max(max_iter, 0), f"did not converge in {max_iter} iterations")
