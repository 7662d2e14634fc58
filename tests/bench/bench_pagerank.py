"""Time msprlab's personalised PageRank against networkx.pagerank on a large random digraph.

Not collected by pytest. Run: python tests/bench/bench_pagerank.py [--nodes 50000] [--edges 250000]
Needs networkx (the msprlab[parity] extra). Graph construction is not timed; both sides
get the same graph, networkx as a DiGraph and msprlab as edge arrays in `edges` order.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from msprlab.engine.pagerank import personalized_pagerank

ALPHA, MAX_ITER, TOL = 0.85, 200, 1e-6


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Median wall time over `repeats` calls, and the last result."""
    times = []
    result: object = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50_000)
    parser.add_argument("--edges", type=int, default=250_000)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5, help="networkx runs (msprlab: 4x)")
    parser.add_argument("--rng-seed", type=int, default=0)
    args = parser.parse_args()

    import networkx as nx

    rng = np.random.default_rng(args.rng_seed)
    n, m = args.nodes, args.edges
    flat = rng.choice(n * n, size=m, replace=False)  # random insertion order
    weights = 1.0 - rng.random(m)  # (0, 1]
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_weighted_edges_from(
        zip((flat // n).tolist(), (flat % n).tolist(), weights.tolist(), strict=True)
    )
    seeds = rng.choice(n, size=args.seeds, replace=False)
    personalization = dict(zip(seeds.tolist(), rng.random(args.seeds).tolist(), strict=True))

    triples = list(graph.edges(data="weight"))
    src = np.array([u for u, _, _ in triples], dtype=np.int64)
    dst = np.array([v for _, v, _ in triples], dtype=np.int64)
    weight = np.array([w for _, _, w in triples], dtype=np.float64)
    p = np.zeros(n)
    p[seeds] = [personalization[s] for s in seeds.tolist()]

    def run_networkx() -> dict[int, float]:
        return nx.pagerank(graph, alpha=ALPHA, personalization=personalization,
                           max_iter=MAX_ITER, tol=TOL, weight="weight")

    def run_msprlab() -> object:
        return personalized_pagerank(n, src, dst, weight, p,
                                     alpha=ALPHA, max_iter=MAX_ITER, tol=TOL)

    t_nx, expected = timed(run_networkx, args.repeats)
    t_ours, ours = timed(run_msprlab, 4 * args.repeats)
    assert isinstance(expected, dict)
    scores = getattr(ours, "scores", None)
    same = scores is not None and np.array_equal(
        scores.view(np.uint64), np.array(list(expected.values())).view(np.uint64)
    )
    dangling = int(np.count_nonzero(np.bincount(src, minlength=n) == 0))
    print(f"graph: {n} nodes, {m} edges, {dangling} dangling, {args.seeds} seeds; "
          f"iterations: {getattr(ours, 'iterations', None)}")
    print(f"networkx.pagerank: {t_nx * 1e3:9.1f} ms (median of {args.repeats})")
    print(f"msprlab          : {t_ours * 1e3:9.1f} ms (median of {4 * args.repeats})")
    print(f"speed-up         : {t_nx / t_ours:9.1f}x; bitwise identical: {same}")


if __name__ == "__main__":
    main()
