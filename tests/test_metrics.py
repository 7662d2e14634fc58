"""Vectorised metrics: agreement with pytrec_eval (trec_eval) on random and generated
tie-free runs, bpref included, the condensed-list measures against trec_eval's -J too,
brute-force oracles for what trec_eval lacks (exponential gain, Judged@k, the condensed
lists by hand), parsing and bad inputs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st

from msprlab.experiments.measures.metrics import (
    KINDS,
    Judged,
    Metric,
    evaluate,
    judged_from_frames,
    parse_metric,
)

CUTOFFS = (1, 5, 10, 100)
# Our metric -> pytrec_eval's measure name for each cutoff (None: no cutoff).
TREC_NAMES = {"ndcg": "ndcg_cut_{k}", "recall": "recall_{k}", "precision": "P_{k}",
              "map": "map_cut_{k}", "hit": "success_{k}", "ndcg_condensed": "ndcg_cut_{k}",
              "precision_condensed": "P_{k}"}
TREC_MEASURES = {"ndcg_cut.1,5,10,100", "recall.1,5,10,100", "P.1,5,10,100",
                 "map_cut.1,5,10,100", "success.1,5,10,100", "recip_rank", "map", "ndcg",
                 "bpref"}
# The condensed-list measures are trec_eval's on the judged memories only (its -J flag).
CONDENSED = {"ndcg_condensed", "precision_condensed"}


@dataclass
class Case:
    """A random evaluation: TREC-style dicts for pytrec_eval and our arrays, same data."""

    qrels: dict[str, dict[str, int]]
    run: dict[str, dict[str, float]]
    query_ids: list[str]
    judged: Judged
    ranks: np.ndarray
    n_returned: np.ndarray
    # (query position, ranked list of every candidate) for the brute-force oracles
    candidates: list[list[str]]
    pair_ids: list[str]  # the memory of each judged pair (row of `judged`)


@dataclass(frozen=True)
class Query:
    """One query of a case: its qrels, every candidate best first, the returned prefix's
    length, and the judged candidates past it whose rank is -1 (the others keep their
    position >= n_returned: both mean "not returned")."""

    qrels: dict[str, int]
    order: list[str]
    n_returned: int
    hidden: frozenset[str] = frozenset()


def build_case(queries: list[Query]) -> Case:
    """The Case of these queries: a tie-free run (strictly decreasing scores) of each
    returned prefix, the judged candidates as pairs in candidate order."""
    query_ids = [f"q{q:04d}" for q in range(len(queries))]
    rows: list[tuple[int, str, int]] = []
    ranks: list[int] = []
    for q, query in enumerate(queries):
        for position, doc in enumerate(query.order):
            if doc in query.qrels:
                rows.append((q, doc, query.qrels[doc]))
                ranks.append(-1 if doc in query.hidden else position)
    qrels = {qid: query.qrels for qid, query in zip(query_ids, queries, strict=True)}
    run = {qid: {doc: float(query.n_returned - i)
                 for i, doc in enumerate(query.order[:query.n_returned])}
           for qid, query in zip(query_ids, queries, strict=True)}
    searches = pl.DataFrame({"search": range(len(queries)), "query_id": query_ids})
    pairs = pl.DataFrame(rows, schema=["search", "memory_id", "grade"], orient="row")
    qrels_frame = pl.DataFrame(
        [(q, d, r) for q, docs in qrels.items() for d, r in docs.items()],
        schema=["query_id", "memory_id", "relevance"], orient="row")
    return Case(qrels, run, query_ids, judged_from_frames(searches, pairs, qrels_frame),
                np.array(ranks, dtype=np.int64),
                np.array([query.n_returned for query in queries]),
                [query.order for query in queries], [doc for _, doc, _ in rows])


def random_case(seed: int, n_queries: int = 250) -> Case:
    """Queries with graded qrels 0..3 (some with nothing relevant, some with relevant
    memories outside the candidates), 1..120 candidates mixing judged and unjudged memories,
    a returned prefix of random length; ranks of judged candidates past that prefix are
    either -1 or their position (>= n_returned), both meaning "not returned"."""
    rng = np.random.default_rng(seed)
    queries = []
    for q in range(n_queries):
        judged_docs = [f"d{q}_{i}" for i in range(int(rng.integers(1, 25)))]
        grades = rng.integers(0, 4, len(judged_docs))
        if rng.random() < 0.1:
            grades[:] = 0  # a query with no relevant memory
        qrels = dict(zip(judged_docs, map(int, grades), strict=True))
        in_pool = [d for d in judged_docs if rng.random() < 0.7]  # the rest: never candidates
        unjudged = [f"u{q}_{i}" for i in range(int(rng.integers(0, 60)))]
        pool = [*in_pool, *unjudged] or [f"u{q}_x"]
        order = [pool[i] for i in rng.permutation(len(pool))]
        n = int(rng.integers(1, len(order) + 1))
        hidden = frozenset(doc for doc in order[n:] if doc in qrels and rng.random() >= 0.5)
        queries.append(Query(qrels, order, n, hidden))
    return build_case(queries)


def all_metrics() -> list[Metric]:
    cut = [Metric(kind, k) for kind in TREC_NAMES for k in CUTOFFS]
    return [*cut, Metric("mrr"), Metric("map"), Metric("ndcg"), Metric("bpref"),
            Metric("ndcg_condensed")]


def trec_name(metric: Metric) -> str:
    if metric.k is None:
        return {"mrr": "recip_rank", "map": "map", "ndcg": "ndcg", "bpref": "bpref",
                "ndcg_condensed": "ndcg"}[metric.kind]
    return TREC_NAMES[metric.kind].format(k=metric.k)


def disagreements(case: Case, ranks: np.ndarray) -> list[str]:
    """Every (metric, query) where we and pytrec_eval differ by more than 1e-9."""
    reference = {judged_only: pytrec_eval.RelevanceEvaluator(
        case.qrels, TREC_MEASURES, judged_docs_only_flag=judged_only).evaluate(case.run)
        for judged_only in (False, True)}
    ours = evaluate(case.judged, ranks, all_metrics(), n_returned=case.n_returned)
    has_relevant = case.judged.n_relevant > 0
    bad = []
    for metric in all_metrics():
        measured = reference[metric.kind in CONDENSED]
        theirs = np.array([measured[q][trec_name(metric)] for q in case.query_ids])
        mine = ours[metric.name]
        # trec_eval scores a query without relevant memories 0; we exclude it (NaN).
        if not (np.isnan(mine[~has_relevant]).all() and (theirs[~has_relevant] == 0).all()):
            bad.append(f"{metric.name}: queries without relevant memory")
        gap = np.abs(mine[has_relevant] - theirs[has_relevant])
        bad += [f"{metric.name} {case.query_ids[i]}: ours {mine[i]!r}, trec_eval {theirs[i]!r}"
                for i in np.flatnonzero(has_relevant)[gap > 1e-9]]
    return bad


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agrees_with_pytrec_eval_on_random_tie_free_runs(seed: int) -> None:
    case = random_case(seed)
    assert (case.judged.n_relevant == 0).sum() > 5  # the no-relevant path is exercised
    assert (case.ranks == -1).any() and (case.ranks >= case.n_returned[case.judged.search]).any()
    assert disagreements(case, case.ranks) == []


def test_a_wrong_rank_breaks_agreement() -> None:
    case = random_case(0, n_queries=60)
    ranks = case.ranks.copy()
    returned = (ranks >= 0) & (ranks < case.n_returned[case.judged.search])
    i = int(np.flatnonzero(returned & (case.judged.grade > 0) & (ranks > 0))[0])
    ranks[i] -= 1  # one relevant memory moved up by one place (an off-by-one in a scorer)
    found = disagreements(case, ranks)
    assert any(line.startswith("ndcg@") for line in found), found
    assert any(line.startswith("map ") for line in found), found


def test_many_trials_at_once_equal_one_at_a_time() -> None:
    case = random_case(3, n_queries=80)
    rng = np.random.default_rng(3)
    t = 11  # more than one block of trials
    trials = np.stack([case.ranks, *(rng.permutation(case.ranks) for _ in range(t - 1))])
    n_returned = np.maximum(0, case.n_returned + rng.integers(-1, 2, (t, case.n_returned.size)))
    for shared in (False, True):  # one n_returned per trial, or one for all
        lengths = np.broadcast_to(case.n_returned, n_returned.shape) if shared else n_returned
        together = evaluate(case.judged, trials, all_metrics(),
                            n_returned=case.n_returned if shared else n_returned)
        for i in range(t):
            alone = evaluate(case.judged, trials[i], all_metrics(), n_returned=lengths[i])
            for name, values in alone.items():
                assert together[name].shape == (t, case.judged.n_searches)
                np.testing.assert_array_equal(together[name][i], values, err_msg=name)


def brute_force(qrels: dict[str, int], returned: list[str], metric: Metric) -> float:
    """Exponential-gain NDCG, Judged@k and the condensed-list measures straight from their
    definitions, on one query's returned list."""
    if metric.kind == "judged":
        top = returned[: metric.k]
        return sum(doc in qrels for doc in top) / min(metric.k, len(returned))  # ir_measures
    if metric.kind in CONDENSED:
        returned = [doc for doc in returned if doc in qrels]  # Sakai's condensed list
    grades = sorted((g for g in qrels.values() if g > 0), reverse=True)
    if not grades:
        return math.nan
    cut = metric.k  # None: the whole returned list, and every relevant memory in the ideal
    if metric.kind == "precision_condensed":
        return sum(qrels[doc] > 0 for doc in returned[:cut]) / metric.k
    gain = (lambda g: 2 ** g - 1) if metric.kind == "ndcg_exp" else (lambda g: g)
    dcg = sum(gain(qrels.get(doc, 0)) / math.log2(i + 2) for i, doc in enumerate(returned[:cut]))
    ideal = sum(gain(g) / math.log2(i + 2) for i, g in enumerate(grades[:cut]))
    return dcg / ideal


def brute_force_all(case: Case, metric: Metric) -> np.ndarray:
    return np.array([brute_force(case.qrels[qid], case.candidates[q][:case.n_returned[q]],
                                 metric) for q, qid in enumerate(case.query_ids)])


@pytest.mark.parametrize("metric", ["ndcg_exp@1", "ndcg_exp@5", "ndcg_exp@10", "ndcg_exp",
                                    "judged@1", "judged@10", "judged@100", "ndcg'@5", "ndcg'",
                                    "P'@1", "P'@10"])
def test_matches_the_direct_formula(metric: str) -> None:
    case = random_case(4, n_queries=120)
    m = parse_metric(metric)
    ours = evaluate(case.judged, case.ranks, [m], n_returned=case.n_returned)[m.name]
    np.testing.assert_allclose(ours, brute_force_all(case, m), rtol=0, atol=1e-12)
    if m.kind == "ndcg_exp":  # grades up to 3, so the gain differs from the linear one
        linear = evaluate(case.judged, case.ranks, [Metric("ndcg", m.k)],
                          n_returned=case.n_returned)
        assert not np.allclose(np.nan_to_num(linear[Metric("ndcg", m.k).name]),
                               np.nan_to_num(ours))


@st.composite
def query_lists(draw: st.DrawFn, unjudged: bool = True) -> list[Query]:
    """A few queries as random_case makes them, small enough to shrink: grades 0..3, judged
    memories that are never candidates, unjudged candidates (unless `unjudged` is False),
    a returned prefix, and -1 or a position for judged candidates past it."""
    out = []
    for q in range(draw(st.integers(1, 6))):
        grades = draw(st.lists(st.integers(0, 3), min_size=1, max_size=8))
        qrels = {f"d{q}_{i}": g for i, g in enumerate(grades)}
        in_pool = [doc for doc in qrels if draw(st.booleans())]
        extra = [f"u{q}_{i}" for i in range(draw(st.integers(0, 8)) if unjudged else 0)]
        order = draw(st.permutations([*in_pool, *extra] or [next(iter(qrels))]))
        n = draw(st.integers(1, len(order)))
        hidden = frozenset(doc for doc in order[n:] if doc in qrels and draw(st.booleans()))
        out.append(Query(qrels, order, n, hidden))
    return out


def ranks_in(case: Case, orders: list[list[str]]) -> np.ndarray:
    """Each judged pair's position in its query's list of `orders` (past the returned
    prefix: not returned)."""
    where = [{doc: i for i, doc in enumerate(order)} for order in orders]
    return np.array([where[q][doc] for q, doc in zip(case.judged.search.tolist(),
                                                     case.pair_ids, strict=True)],
                    dtype=np.int64)


@given(query_lists())
@settings(max_examples=300, deadline=None)
def test_agrees_with_pytrec_eval_on_generated_queries(queries: list[Query]) -> None:
    """Every metric pytrec_eval has, bpref among them, and the condensed-list measures
    against trec_eval's -J (judged memories only)."""
    case = build_case(queries)
    assert disagreements(case, case.ranks) == []


BPREF_CASES = {  # qrels, candidates best first, returned prefix, bpref by hand
    # N = 0: trec_eval's special case, each relevant memory returned counts 1.
    "no judged non-relevant": ({"a": 1, "b": 2, "c": 1}, ["x", "a", "y", "b", "z"], 5, 2 / 3),
    # R = 3 > N = 2: the divisor is min(R, N) = 2.
    "R > N": ({"a": 1, "b": 1, "c": 1, "n": 0, "m": 0}, ["a", "n", "b", "m", "c"], 5,
              (1 + (1 - 1 / 2) + 0) / 3),
    # R = 2 < N = 3: the count above b (3) is capped at R.
    "R < N": ({"a": 1, "b": 1, "n": 0, "m": 0, "o": 0}, ["n", "a", "m", "o", "b"], 5,
              ((1 - 1 / 2) + (1 - 2 / 2)) / 2),
    # b is not returned (past the prefix); m, never returned, still counts in N = 2.
    "unretrieved": ({"a": 1, "b": 1, "n": 0, "m": 0}, ["n", "a", "u", "b", "m"], 3,
                    (1 - 1 / 2) / 2),
    # Unjudged memories above and between count for nothing.
    "unjudged": ({"a": 1, "n": 0}, ["u1", "u2", "a", "u3", "n"], 5, 1.0),
    "all after a non-relevant": ({"a": 2, "n1": 0, "n2": 0, "n3": 0}, ["n1", "n2", "a"], 3, 0.0),
    "no relevant memory": ({"n": 0}, ["n", "u"], 2, math.nan),  # trec_eval: 0
}


def test_bpref_by_hand_and_as_trec_eval() -> None:
    case = build_case([Query(qrels, order, n, frozenset({"b"}) & set(order[n:]))
                       for qrels, order, n, _ in BPREF_CASES.values()])
    ours = evaluate(case.judged, case.ranks, [Metric("bpref")], n_returned=case.n_returned)
    reference = pytrec_eval.RelevanceEvaluator(case.qrels, {"bpref"}).evaluate(case.run)
    for (name, (*_, expected)), qid, value in zip(BPREF_CASES.items(), case.query_ids,
                                                  ours["bpref"], strict=True):
        trec = reference[qid]["bpref"]
        assert value == pytest.approx(expected, abs=1e-12, nan_ok=True), name
        assert abs(np.nan_to_num(value) - trec) < 1e-9, (name, value, trec)
    assert case.judged.n_nonrelevant is not None
    assert case.judged.n_nonrelevant[3] == 2 and (case.ranks == -1).sum() == 1  # m; b is -1


@given(query_lists(), st.data())
@settings(max_examples=200, deadline=None)
def test_condensed_measures_match_the_direct_formula_on_many_trials(
        queries: list[Query], data: st.DataObject) -> None:
    """T trials at once ((T, N) ranks, one list length per trial and search; the case's
    own ranking first) against the condensed lists built by hand, trial by trial."""
    case = build_case(queries)
    orders = [case.candidates, *([data.draw(st.permutations(order)) for order in case.candidates]
                                 for _ in range(data.draw(st.integers(0, 9))))]
    lengths = np.array([case.n_returned, *([data.draw(st.integers(1, len(order)))
                                            for order in trial] for trial in orders[1:])])
    ranks = np.array([case.ranks, *(ranks_in(case, trial) for trial in orders[1:])])
    metrics = [parse_metric(name) for name in ("ndcg'@1", "ndcg'@3", "ndcg'", "P'@1", "P'@3",
                                               "P'@10")]
    ours = evaluate(case.judged, ranks, metrics, n_returned=lengths)
    for t, trial in enumerate(orders):
        for metric in metrics:
            expected = [brute_force(case.qrels[qid], trial[q][:lengths[t, q]], metric)
                        for q, qid in enumerate(case.query_ids)]
            np.testing.assert_allclose(ours[metric.name][t], expected, rtol=0, atol=1e-12,
                                       err_msg=f"{metric.name} trial {t}")


@given(query_lists(unjudged=False))
@settings(max_examples=100, deadline=None)
def test_condensed_equal_the_plain_measures_when_every_candidate_is_judged(
        queries: list[Query]) -> None:
    case = build_case(queries)
    pairs = [(Metric("ndcg", k), Metric("ndcg_condensed", k)) for k in (*CUTOFFS, None)]
    pairs += [(Metric("precision", k), Metric("precision_condensed", k)) for k in CUTOFFS]
    out = evaluate(case.judged, case.ranks, [m for pair in pairs for m in pair],
                   n_returned=case.n_returned)
    for plain, condensed in pairs:
        np.testing.assert_allclose(out[condensed.name], out[plain.name], rtol=0, atol=1e-12,
                                   err_msg=condensed.name)


def test_worked_example() -> None:
    # Search 0: relevant a (grade 2) at rank 2, b (1) not returned, c (0) at rank 0;
    # another relevant memory (grade 3) of the query is not a candidate.
    # Search 1: nothing relevant. Search 2: relevant at rank 0, only 1 returned.
    judged = Judged(search=np.array([0, 0, 0, 1, 2]), grade=np.array([2, 1, 0, 0, 1]),
                    ideal=np.array([[3, 2, 1], [0, 0, 0], [1, 0, 0]]))
    ranks = np.array([2, -1, 0, 0, 0])
    names = ["ndcg@3", "recall@3", "precision@3", "mrr", "map", "hit@1", "judged@3"]
    out = evaluate(judged, ranks, [parse_metric(n) for n in names],
                   n_returned=np.array([10, 4, 1]))
    ideal = 3 + 2 / math.log2(3) + 1 / 2
    expected = {"ndcg@3": [(2 / 2) / ideal, math.nan, 1.0], "recall@3": [1 / 3, math.nan, 1.0],
                "precision@3": [1 / 3, math.nan, 1 / 3], "mrr": [1 / 3, math.nan, 1.0],
                "map": [(1 / 3) / 3, math.nan, 1.0], "hit@1": [0.0, math.nan, 1.0],
                "judged@3": [2 / 3, 1 / 3, 1.0]}
    for name in names:
        np.testing.assert_allclose(out[name], expected[name], rtol=1e-15, err_msg=name)


def test_rank_at_or_beyond_n_returned_is_not_returned() -> None:
    judged = Judged(search=np.array([0]), grade=np.array([1]), ideal=np.array([[1]]))
    for n, expected in ((3, 1 / 3), (2, 0.0), (0, 0.0)):
        out = evaluate(judged, np.array([2]), [Metric("mrr")], n_returned=np.array([n]))
        assert out["mrr"].tolist() == [expected]
    out = evaluate(judged, np.array([0]), [Metric("judged", 5)], n_returned=np.array([0]))
    assert np.isnan(out["judged@5"]).all()  # nothing returned: no share to take


def test_searches_without_pairs_and_empty_judged() -> None:
    judged = Judged(search=np.array([1, 1]), grade=np.array([1, 0]),
                    ideal=np.array([[2], [1], [0]]))
    out = evaluate(judged, np.array([0, 1]), [Metric("ndcg", 10), Metric("mrr")],
                   n_returned=np.array([5, 5, 5]))
    assert out["ndcg@10"][:2].tolist() == [0.0, 1.0] and np.isnan(out["ndcg@10"][2])
    empty = Judged(search=np.zeros(0, np.int64), grade=np.zeros(0, np.int64),
                   ideal=np.array([[1], [0]]))
    out = evaluate(empty, np.zeros(0, np.int64), [Metric("map"), Metric("recall", 5)],
                   n_returned=np.array([3, 3]))
    assert out["map"][0] == 0.0 and np.isnan(out["recall@5"][1])


def test_judged_from_frames_builds_ideal_from_all_qrels() -> None:
    searches = pl.DataFrame({"search": [1, 0, 2], "query_id": ["qa", "qb", "qa"]})
    pairs = pl.DataFrame({"search": [0, 1, 1], "memory_id": ["m1", "m1", "m2"],
                          "grade": [0, 2, 0]})
    qrels = pl.DataFrame({"query_id": ["qa", "qa", "qa", "qb", "qc"],
                          "memory_id": ["m1", "m2", "m3", "m1", "m9"],
                          "relevance": [2, 0, 3, 0, 1]})
    judged = judged_from_frames(searches, pairs, qrels)
    assert judged.ideal.tolist() == [[0, 0], [3, 2], [3, 2]]
    assert judged.search.tolist() == [0, 1, 1] and judged.grade.tolist() == [0, 2, 0]
    assert judged.n_relevant.tolist() == [0, 2, 2]
    # bpref's N: qb's m1 for search 0; qa's m2 for searches 1 and 2 (a pair of 1 only).
    assert judged.n_nonrelevant is not None and judged.n_nonrelevant.tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="read-only"):
        judged.grade[0] = 1


def test_n_nonrelevant_defaults_to_the_grade_0_pairs_and_is_checked() -> None:
    search, grade, ideal = np.array([0, 0, 1]), np.array([0, 1, 0]), np.array([[1], [0]])
    default = Judged(search=search, grade=grade, ideal=ideal)
    assert default.n_nonrelevant is not None and default.n_nonrelevant.tolist() == [1, 1]
    with pytest.raises(ValueError, match="at least each search's grade-0 pairs"):
        Judged(search=search, grade=grade, ideal=ideal, n_nonrelevant=np.array([0, 1]))
    with pytest.raises(ValueError, match=r"shape \(2,\), got shape \(3,\)"):
        Judged(search=search, grade=grade, ideal=ideal, n_nonrelevant=np.array([1, 1, 1]))


@pytest.mark.parametrize(("change", "message"), [
    (lambda s, p, q: (s, p.reverse(), q), r"pairs: `search` must be sorted"),
    (lambda s, p, q: (s, pl.concat([p, p.tail(1)]), q),
     r"pairs: duplicate search=1, memory_id='m2'"),
    (lambda s, p, q: (s, p, pl.concat([q, q.head(1)])), r"qrels: duplicate query_id='qa'"),
    (lambda s, p, q: (s.with_columns(search=pl.Series([0, 0])), p, q), r"exactly once"),
    (lambda s, p, q: (s, p.drop("grade"), q), r"pairs: missing column\(s\) \['grade'\]"),
    (lambda s, p, q: (s, p.with_columns(grade=-1), q), r"grades must be >= 0"),
])
def test_judged_from_frames_rejects_bad_frames(change, message) -> None:  # type: ignore[no-untyped-def]
    searches = pl.DataFrame({"search": [0, 1], "query_id": ["qa", "qb"]})
    pairs = pl.DataFrame({"search": [0, 1], "memory_id": ["m1", "m2"], "grade": [1, 0]})
    qrels = pl.DataFrame({"query_id": ["qa"], "memory_id": ["m1"], "relevance": [1]})
    with pytest.raises(ValueError, match=message):
        judged_from_frames(*change(searches, pairs, qrels))


def test_evaluate_rejects_mismatched_shapes() -> None:
    judged = Judged(search=np.array([0]), grade=np.array([1]), ideal=np.array([[1]]))
    with pytest.raises(ValueError, match=r"ranks must have shape \(1,\) or \(T, 1\)"):
        evaluate(judged, np.array([0, 1]), [Metric("mrr")], n_returned=np.array([1]))
    with pytest.raises(ValueError, match=r"n_returned must have shape"):
        evaluate(judged, np.array([[0], [0]]), [Metric("mrr")], n_returned=np.ones((3, 1)))
    with pytest.raises(ValueError, match=r"ranks must hold integers, got dtype float64"):
        evaluate(judged, np.array([0.0]), [Metric("mrr")], n_returned=np.array([1]))
    with pytest.raises(ValueError, match=r"n_returned must be >= 0, got -1"):
        evaluate(judged, np.array([0]), [Metric("mrr")], n_returned=np.array([-1]))
    with pytest.raises(ValueError, match="non-decreasing"):
        Judged(search=np.array([1, 0]), grade=np.array([1, 1]), ideal=np.array([[1], [1]]))


@pytest.mark.parametrize(("text", "name", "key"), [
    ("ndcg@10", "ndcg@10", "ndcg_at_10"), ("NDCG@10", "ndcg@10", "ndcg_at_10"),
    ("ndcg_cut_10", "ndcg@10", "ndcg_at_10"), ("ndcg_cut.10", "ndcg@10", "ndcg_at_10"),
    ("ndcg_exp@10", "ndcg_exp@10", "ndcg_exp_at_10"), ("ndcg", "ndcg", "ndcg"),
    ("P@5", "precision@5", "precision_at_5"), ("P_5", "precision@5", "precision_at_5"),
    ("precision@5", "precision@5", "precision_at_5"), ("recall@100", "recall@100", "recall_at_100"),
    ("recall_100", "recall@100", "recall_at_100"), ("mrr", "mrr", "mrr"),
    ("recip_rank", "mrr", "mrr"), ("mrr@10", "mrr@10", "mrr_at_10"), ("map", "map", "map"),
    ("map_cut_10", "map@10", "map_at_10"), ("hit@10", "hit@10", "hit_at_10"),
    ("success@10", "hit@10", "hit_at_10"), ("success_1", "hit@1", "hit_at_1"),
    ("judged@10", "judged@10", "judged_at_10"), (" MAP ", "map", "map"), ("AP", "map", "map"),
    ("bpref", "bpref", "bpref"), ("BPREF", "bpref", "bpref"),
    ("ndcg_condensed@10", "ndcg_condensed@10", "ndcg_condensed_at_10"),
    ("ndcg'@10", "ndcg_condensed@10", "ndcg_condensed_at_10"),
    ("nDCG'_cut_10", "ndcg_condensed@10", "ndcg_condensed_at_10"),
    ("ndcg'", "ndcg_condensed", "ndcg_condensed"),
    ("precision_condensed@5", "precision_condensed@5", "precision_condensed_at_5"),
    ("P'@5", "precision_condensed@5", "precision_condensed_at_5"),
    ("P'_5", "precision_condensed@5", "precision_condensed_at_5"),
])
def test_parse_metric(text: str, name: str, key: str) -> None:
    metric = parse_metric(text)
    assert (metric.name, metric.key) == (name, key)
    assert parse_metric(metric.name) == metric


@pytest.mark.parametrize(("text", "message"), [
    ("ndcg@0", r"metric 'ndcg@0': Metric.k must be an integer >= 1"),
    ("precision", r"metric 'precision': precision needs a cutoff k, e.g. precision@10"),
    ("infAP", r"unknown metric 'infAP'; accepted: ndcg\[@K\]; ndcg_exp\[@K\]; recall"),
    ("bpref@10", r"metric 'bpref@10': bpref takes no cutoff"),
    ("P'", r"metric \"P'\": precision_condensed needs a cutoff k"),
    ("ndcg''@10", r"unknown metric"),
    ("ndcg@ten", r"unknown metric 'ndcg@ten'"),
    ("", r"unknown metric ''"),
])
def test_parse_metric_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        parse_metric(text)
    assert all(kind in str(info.value) for kind in KINDS)  # the accepted list comes along


def test_metric_validates_on_construction() -> None:
    with pytest.raises(ValueError, match=r"Metric.kind must be one of"):
        Metric("ndgc", 10)
    with pytest.raises(ValueError, match=r"Metric.k must be an integer >= 1 or None, got 2.5"):
        Metric("ndcg", 2.5)  # type: ignore[arg-type]
