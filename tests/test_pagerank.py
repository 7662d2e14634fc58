"""msprlab.engine.pagerank against networkx.pagerank: same floats, bit for bit."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from msprlab.engine.pagerank import PageRankResult, personalized_pagerank

nx = pytest.importorskip("networkx")


@dataclass(frozen=True)
class Case:
    """A digraph on nodes 0..n-1 with edges in insertion order, plus the pagerank arguments."""

    n: int
    edges: list[tuple[int, int]]
    weights: list[float]
    personalization: dict[int, float]
    alpha: float
    max_iter: int
    tol: float


def build_graph(case: Case):
    graph = nx.DiGraph()
    graph.add_nodes_from(range(case.n))
    for (u, v), w in zip(case.edges, case.weights, strict=True):
        graph.add_edge(u, v, weight=w)
    return graph


def edge_arrays(graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The edges in `DiGraph.edges` order: by source node, then successor insertion order."""
    triples = list(graph.edges(data="weight"))
    src = np.array([u for u, _, _ in triples], dtype=np.int64)
    dst = np.array([v for _, v, _ in triples], dtype=np.int64)
    weight = np.array([w for _, _, w in triples], dtype=np.float64)
    return src, dst, weight


def run_ours(case: Case, graph) -> PageRankResult:
    src, dst, weight = edge_arrays(graph)
    p = np.zeros(case.n, dtype=np.float64)
    for node, value in case.personalization.items():
        p[node] = value
    return personalized_pagerank(
        case.n, src, dst, weight, p, alpha=case.alpha, max_iter=case.max_iter, tol=case.tol
    )


def run_networkx(case: Case, graph) -> np.ndarray | type[Exception]:
    try:
        scores = nx.pagerank(
            graph,
            alpha=case.alpha,
            personalization=case.personalization,
            max_iter=case.max_iter,
            tol=case.tol,
            weight="weight",
        )
    except (nx.PowerIterationFailedConvergence, ZeroDivisionError) as exc:
        return type(exc)
    assert list(scores) == list(range(case.n))
    return np.array(list(scores.values()), dtype=np.float64)


def assert_bitwise_equal(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == np.float64
    assert actual.shape == expected.shape
    # Compare the bit patterns, so -0.0 vs 0.0 or one ulp apart both fail.
    assert np.array_equal(actual.view(np.uint64), expected.view(np.uint64)), (
        f"max abs diff {np.max(np.abs(actual - expected))}"
    )


def assert_agrees_with_networkx(case: Case) -> str:
    """Run both; assert identical outcome and scores. Returns the outcome's name."""
    graph = build_graph(case)
    ours = run_ours(case, graph)
    theirs = run_networkx(case, graph)
    if theirs is nx.PowerIterationFailedConvergence:
        assert ours.scores is None
        assert ours.iterations == case.max_iter
        assert ours.error == f"did not converge in {case.max_iter} iterations"
        return "not converged"
    if theirs is ZeroDivisionError:
        assert ours.scores is None
        assert ours.error == "personalization sums to zero"
        return "personalization sums to zero"
    assert isinstance(theirs, np.ndarray)
    assert ours.error is None
    assert ours.scores is not None
    assert 1 <= ours.iterations <= case.max_iter or case.n == 0
    assert_bitwise_equal(ours.scores, theirs)
    return "converged"


unit_weights = st.floats(min_value=0.0, max_value=1.0, exclude_min=True)


@st.composite
def cases(draw: st.DrawFn, max_nodes: int = 40) -> Case:
    n = draw(st.integers(0, max_nodes))
    if n == 0:
        edges: list[tuple[int, int]] = []
        personalization: dict[int, float] = {}
    else:
        node = st.integers(0, n - 1)
        # Unique (src, dst) pairs, self loops included, in random insertion order, so
        # successors are not sorted and nodes may be dangling or isolated.
        edges = draw(st.lists(st.tuples(node, node), unique=True, max_size=min(n * n, 6 * n)))
        # Mostly positive values on a random subset; zeros elsewhere and sometimes on seeds.
        seeds = draw(st.lists(node, unique=True, min_size=1, max_size=n))
        kinds = st.sampled_from(["unit", "unit", "large", "zero"])
        values = {"unit": unit_weights, "large": st.floats(1.0, 1e3), "zero": st.just(0.0)}
        personalization = {s: draw(values[draw(kinds)]) for s in seeds}
    weights = draw(st.lists(unit_weights, min_size=len(edges), max_size=len(edges)))
    alpha = draw(st.one_of(st.just(0.85), st.floats(0.05, 0.99)))
    # Mostly the spec's cap; sometimes a small one, so both outcomes are compared.
    max_iter = draw(st.sampled_from([200, 200, 200, 0])) or draw(st.integers(1, 60))
    tol = draw(st.sampled_from([1e-6, 1e-4, 1e-8, 1e-10, 1e-12]))
    return Case(n, edges, weights, personalization, alpha, max_iter, tol)


# Subnormal weights make 1 / out-weight infinite; both sides then meet inf and NaN alike.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_scores_match_networkx_bitwise(case: Case) -> None:
    event(assert_agrees_with_networkx(case))


def random_case(rng: np.random.Generator, n: int, m: int, n_seeds: int) -> Case:
    flat = rng.choice(n * n, size=m, replace=False)  # random order: unsorted successors
    edges = [(int(k // n), int(k % n)) for k in flat]
    weights = [float(w) for w in 1.0 - rng.random(m)]
    seeds = rng.choice(n, size=n_seeds, replace=False)
    personalization = {int(s): float(v) for s, v in zip(seeds, rng.random(n_seeds), strict=True)}
    return Case(n, edges, weights, personalization, 0.85, 200, 1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_scores_match_networkx_bitwise_on_larger_graphs(seed: int) -> None:
    # Hundreds of dangling nodes, so the dangling mass must be added left to right.
    rng = np.random.default_rng(seed)
    case = random_case(rng, n=3000, m=6000, n_seeds=10)
    assert assert_agrees_with_networkx(case) == "converged"


def test_edge_order_does_not_matter() -> None:
    rng = np.random.default_rng(7)
    case = random_case(rng, n=200, m=800, n_seeds=5)
    src, dst, weight = edge_arrays(build_graph(case))
    p = np.zeros(case.n)
    p[list(case.personalization)] = list(case.personalization.values())
    kwargs = {"alpha": 0.85, "max_iter": 200, "tol": 1e-6}
    expected = personalized_pagerank(case.n, src, dst, weight, p, **kwargs)
    perm = rng.permutation(src.size)
    shuffled = personalized_pagerank(case.n, src[perm], dst[perm], weight[perm], p, **kwargs)
    assert expected.scores is not None and shuffled.scores is not None
    assert_bitwise_equal(shuffled.scores, expected.scores)
    assert shuffled.iterations == expected.iterations


def test_non_convergence_gives_no_scores() -> None:
    case = Case(4, [(0, 1), (1, 2), (2, 0), (2, 3)], [1.0, 0.5, 0.25, 0.75], {0: 1.0},
                alpha=0.85, max_iter=3, tol=1e-12)
    with pytest.raises(nx.PowerIterationFailedConvergence):
        nx.pagerank(build_graph(case), alpha=0.85, personalization={0: 1.0}, max_iter=3,
                    tol=1e-12, weight="weight")
    result = run_ours(case, build_graph(case))
    assert result == PageRankResult(None, 3, "did not converge in 3 iterations")
    assert assert_agrees_with_networkx(case) == "not converged"


def test_all_zero_personalization_is_an_error() -> None:
    case = Case(3, [(0, 1), (1, 2)], [1.0, 1.0], {0: 0.0, 2: 0.0},
                alpha=0.85, max_iter=100, tol=1e-6)
    with pytest.raises(ZeroDivisionError):
        nx.pagerank(build_graph(case), personalization=case.personalization)
    result = run_ours(case, build_graph(case))
    assert result == PageRankResult(None, 0, "personalization sums to zero")


def test_empty_graph() -> None:
    assert nx.pagerank(nx.DiGraph(), personalization={}) == {}
    empty = np.zeros(0, dtype=np.int64)
    result = personalized_pagerank(0, empty, empty, np.zeros(0), np.zeros(0),
                                   alpha=0.85, max_iter=100, tol=1e-6)
    assert result.error is None
    assert result.scores is not None and result.scores.shape == (0,)


def test_isolated_nodes_only() -> None:
    case = Case(5, [], [], {1: 0.25, 3: 0.75}, alpha=0.85, max_iter=100, tol=1e-6)
    assert assert_agrees_with_networkx(case) == "converged"


def test_inputs_are_not_modified() -> None:
    src = np.array([0, 1, 1])
    dst = np.array([1, 0, 2])
    weight = np.array([0.5, 0.25, 1.0])
    p = np.array([2.0, 0.0, 2.0])
    copies = [a.copy() for a in (src, dst, weight, p)]
    personalized_pagerank(3, src, dst, weight, p, alpha=0.85, max_iter=100, tol=1e-6)
    for before, after in zip(copies, (src, dst, weight, p), strict=True):
        assert np.array_equal(before, after)


@pytest.mark.parametrize(
    ("n", "src", "dst", "weight", "p", "message"),
    [
        (2, [0, 0], [1, 1], [1.0, 2.0], [1.0, 0.0], r"edges must be unique, got 0 -> 1"),
        (2, [0], [2], [1.0], [1.0, 0.0], r"dst must lie in 0\.\.1, got values from 2 to 2"),
        (2, [-1], [0], [1.0], [1.0, 0.0], r"src must lie in 0\.\.1"),
        (2, [0], [1], [1.0, 2.0], [1.0, 0.0], r"1-D arrays of one length"),
        (2, [0], [1], [1.0], [1.0], r"personalization must have shape \(2,\), got \(1,\)"),
        (2, [0], [1], [np.inf], [1.0, 0.0], r"edge weights must be finite, got inf at edge 0"),
        (2, [0.0], [1.0], [1.0], [1.0, 0.0], r"src must hold integers"),
        (-1, [], [], [], [], r"n must be >= 0, got -1"),
    ],
)
def test_bad_inputs_are_rejected(n, src, dst, weight, p, message) -> None:
    with pytest.raises(ValueError, match=message):
        personalized_pagerank(n, np.array(src), np.array(dst), np.array(weight), np.array(p),
                              alpha=0.85, max_iter=100, tol=1e-6)
