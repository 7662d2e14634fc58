"""Per-query inference: collapsing searches, query-level tests against SciPy, the
permutation count and the multiple-testing family, and the per-search cluster bootstrap."""

from __future__ import annotations

import itertools
import math

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from scipy import stats as scipy_stats

from msprlab.experiments.measures.stats import (
    _exact_sign_flip_pvalue,
    _random_sign_flip_pvalues,
    _rng,
    aggregate,
    compare,
    holm,
    per_query,
    permutation_count,
)

pytestmark = pytest.mark.filterwarnings("error")  # degenerate cells must not warn


def log(seed: int, n_queries: int, searches: np.ndarray | int, *, effect: float = 0.0,
        noise: float = 0.05, spread: float = 0.0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(base, arm): per-search frames of n_queries questions, query q asked searches[q]
    times; values are a per-query quality (in the arm plus effect and a per-query shift of
    sd `spread`) plus per-search noise."""
    rng = np.random.default_rng(seed)
    counts = np.broadcast_to(searches, (n_queries,))
    q = np.repeat(np.arange(n_queries), counts)
    quality = rng.beta(2, 5, n_queries)
    intent = rng.choice(["FACTUAL", "TEMPORAL", "UNKNOWN"], n_queries, p=[0.3, 0.1, 0.6])
    frame = pl.DataFrame({"search": np.arange(q.size), "query_id": [f"q{i:04d}" for i in q],
                          "intent": intent[q]})
    shifts = (np.zeros(n_queries), effect + rng.normal(0, spread, n_queries))
    values = [np.clip(quality[q] + shift[q] + rng.normal(0, noise, q.size), 0, 1)
              for shift in shifts]
    return tuple(frame.with_columns(ndcg=pl.Series(v)) for v in values)  # type: ignore[return-value]


# -- per_query -------------------------------------------------------------------------

def test_per_query_means_each_querys_searches() -> None:
    frame = pl.DataFrame({
        "search": [0, 1, 2, 3, 4, 5], "query_id": ["b", "a", "b", "c", "c", "b"],
        "intent": ["X", "Y", "X", "Z", "Z", "X"],
        "ndcg": [0.5, 1.0, 0.0, math.nan, math.nan, 1.0],
        "mrr": [1.0, 0.25, math.nan, 0.5, math.nan, 0.5]})  # mixed NaN in b and c
    out = per_query(frame, metric_cols=["ndcg", "mrr"], group_cols=["intent"])
    assert out.columns == ["query_id", "intent", "ndcg", "mrr", "n_searches"]
    assert out["query_id"].to_list() == ["a", "b", "c"]  # sorted by key
    assert out["n_searches"].to_list() == [1, 3, 2]
    assert out["ndcg"].to_list()[:2] == [1.0, 0.5] and math.isnan(out["ndcg"][2])
    assert out["mrr"].to_list() == [0.25, 0.75, 0.5]  # the mean over searches with a value


def test_per_query_rejects_a_group_that_changes_within_a_query() -> None:
    frame = pl.DataFrame({"query_id": ["a", "b", "b"], "intent": ["X", "X", "Y"],
                          "ndcg": [0.1, 0.2, 0.3]})
    with pytest.raises(ValueError, match=r"group column 'intent' must be constant within a "
                                         r"query, but query_id 'b' has values \['X', 'Y'\]"):
        per_query(frame, metric_cols=["ndcg"], group_cols=["intent"])
    with pytest.raises(ValueError, match=r"base: group column 'intent'"):
        compare(frame.with_row_index("search"), {"x": frame.with_row_index("search")},
                metric_cols=["ndcg"], group_cols=["intent"])


# -- query level equals SciPy on the same query-level values --------------------------

@st.composite
def search_logs(draw: st.DrawFn) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per-search (base, arm) with repeated queries; values on a 1/16 grid so that every
    sum is exact and both implementations see the same ties. A query has no relevant
    memory on all its searches or none (qrels are per query)."""
    n_queries = draw(st.integers(2, 12))
    counts = draw(st.lists(st.integers(1, 4), min_size=n_queries, max_size=n_queries))
    no_relevant = draw(st.lists(st.booleans(), min_size=n_queries, max_size=n_queries))
    q = np.repeat(np.arange(n_queries), counts)
    grid = st.integers(0, 16).map(lambda k: k / 16)
    sides = [np.array(draw(st.lists(grid, min_size=q.size, max_size=q.size)))
             for _ in range(2)]
    for values in sides:
        values[np.asarray(no_relevant)[q]] = math.nan
    order = draw(st.permutations(range(q.size)))  # the searches in any row order
    frame = pl.DataFrame({"search": np.arange(q.size), "query_id": [f"q{i:02d}" for i in q]})
    return tuple(frame.with_columns(m=pl.Series(v))[list(order)] for v in sides)  # type: ignore[return-value]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(search_logs(), st.integers(0, 2**16))
def test_query_level_bootstrap_and_tests_equal_scipys(logs: tuple[pl.DataFrame, pl.DataFrame],
                                                      seed: int) -> None:
    base, arm = logs
    row = compare(base, {"arm": arm}, metric_cols=["m"], group_cols=(), n_resamples=300,
                  seed=seed, min_support=0).row(0, named=True)
    b, a = (per_query(f, metric_cols=["m"], group_cols=())["m"].to_numpy() for f in logs)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    d = a - b
    assert (row["unit"], row["n"], row["n_queries"]) == ("query", d.size, d.size)
    assert row["n_no_relevant"] == base["query_id"].n_unique() - d.size
    event(f"{d.size} queries" if d.size < 2 else "2+ queries")
    if d.size == 0:
        assert math.isnan(row["delta"]) and math.isnan(row["p_perm"])
        return
    assert row["delta"] == d.mean()
    assert (row["mean_base"], row["mean_arm"]) == (b.mean(), a.mean())
    if d.size < 2:
        assert math.isnan(row["ci_low"]) and math.isnan(row["p_t"]) and math.isnan(row["p_perm"])
        return
    if np.all(d == 0):
        assert (row["ci_low"], row["ci_high"], row["p_t"], row["p_perm"]) == (0, 0, 1, 1)
        assert not row["tested"]
        return
    assert row["tested"]
    # Exact sign flips: 2^n <= the permutation count, here for every n <= 12.
    assert row["n_permutations"] == 2**d.size
    assert f"exact, all 2^n sign flips (n = {d.size})" in row["permutation_test"]
    perm = scipy_stats.permutation_test((d,), np.mean, permutation_type="samples",
                                        vectorized=True, n_resamples=2**d.size)
    assert row["p_perm"] == perm.pvalue
    # constant non-zero differences, up to rounding as SciPy's cancellation check sees it
    # (0.8125/3 - 0.4375/3 against 0.125): t undefined, a zero-width CI
    if np.ptp(d) <= 10 * np.finfo(np.float64).eps * abs(d.mean()):
        assert math.isnan(row["p_t"]) and row["ci_low"] == row["ci_high"] == d.mean()
        return
    event("bootstrap and t-test compared")
    assert row["p_t"] == scipy_stats.ttest_rel(a, b).pvalue
    ci = scipy_stats.bootstrap((d,), np.mean, n_resamples=300, method="percentile",
                               vectorized=True, rng=_rng(seed, "arm", "overall", "overall", "m"))
    assert (row["ci_low"], row["ci_high"]) == (ci.confidence_interval.low,
                                               ci.confidence_interval.high)


def test_exact_sign_flips_equal_a_brute_force_enumeration() -> None:
    rng = np.random.default_rng(3)
    for n in (2, 3, 5, 8, 11):
        x = rng.integers(-8, 9, n) / 8  # exact sums; includes zeros and ties
        if np.all(x == 0):
            continue
        observed = x.sum()
        null = [sum(s * v for s, v in zip(signs, x, strict=True))
                for signs in itertools.product((1, -1), repeat=n)]
        less = sum(v <= observed for v in null) / 2**n
        greater = sum(v >= observed for v in null) / 2**n
        assert _exact_sign_flip_pvalue(x) == min(1.0, 2 * min(less, greater))


def test_random_sign_flips_agree_with_scipys_exact_p() -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(0.1, 0.3, 14)
    exact = scipy_stats.permutation_test((x,), np.mean, permutation_type="samples",
                                         vectorized=True, n_resamples=2**14).pvalue
    assert 0.05 < exact < 0.5  # a p where the Monte Carlo error is visible
    n = 20_000
    p = _random_sign_flip_pvalues(x[:, None], n, np.random.default_rng(5))[0]
    assert p != exact  # it is the random path
    assert abs(p - exact) < 5 * 2 * math.sqrt(exact / 2 * (1 - exact / 2) / n)
    # Columns share the signs: a second column, a multiple of the first, gets the same p;
    # a column of zeros elsewhere does not change it.
    both = _random_sign_flip_pvalues(np.column_stack([x, 2 * x]), n, np.random.default_rng(5))
    assert both[0] == p == both[1]


# -- the permutation count and the family ----------------------------------------------

@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.1])
@pytest.mark.parametrize("family", [0, 1, 12, 42, 240, 270, 1000, 5000])
def test_permutation_count_puts_the_smallest_adjusted_p_below_alpha(family: int,
                                                                    alpha: float) -> None:
    count = permutation_count(family, alpha)
    assert count >= 9999
    assert 2 / (count + 1) * max(family, 1) < alpha / 10
    if count > 9999:  # and no smaller count would do
        assert 2 / count * family >= alpha / 10


def test_a_clear_effect_reaches_the_smallest_p_and_survives_holm() -> None:
    base, arm = log(0, 300, 3, effect=0.1)
    arms = {f"arm{i}": arm for i in range(6)}
    table = compare(base, arms, metric_cols=["ndcg"], group_cols=["intent"], n_resamples=200,
                    min_support=20)
    m = int(table["tested"].sum())
    assert m == 6 * 4  # every arm: overall and three intents
    count = permutation_count(m)
    assert (table["n_permutations"] == count).all()
    assert f"{count} random sign flips" in table["permutation_test"][0]
    assert (table["p_perm"] == 2 / (count + 1)).all()  # no sign vector beats the observed
    np.testing.assert_allclose(table["p_perm_adj"].to_numpy(), m * 2 / (count + 1), rtol=1e-15)
    assert (table["p_perm_adj"] < 0.05 / 10).all()
    assert table["correction"][0].startswith(f"Holm over {m} tested rows")
    assert table["p_perm_bound"].all()  # at the floor: printed as an upper bound


def test_only_a_p_at_the_random_flips_floor_is_a_bound() -> None:
    base, arm = log(0, 300, 3, effect=0.0)
    table = compare(base, {"a": arm}, metric_cols=["ndcg"], group_cols=[], n_resamples=50)
    assert not table["p_perm_bound"].any()  # no effect: the p is not at the floor
    small = compare(base.head(6), {"a": arm.head(6)}, metric_cols=["ndcg"], group_cols=[],
                    n_resamples=50, min_support=1)
    assert "exact" in small["permutation_test"][0]
    assert not small["p_perm_bound"].any()  # an exact p is the p itself


def test_family_counts_only_tested_rows() -> None:
    base, arm = log(1, 120, 2, effect=0.02)
    table = compare(base, {"a": arm, "b": arm.with_columns(pl.col("ndcg") - 0.01)},
                    metric_cols=["ndcg"], group_cols=["intent"], n_resamples=200,
                    min_support=30)
    low = table.filter(pl.col("n_queries") < 30)
    assert low.height == 2 and (low["group"] == "TEMPORAL").all()  # both arms' small group
    assert (table["tested"] == ~table["low_support"]).all()
    assert low["p_perm"].is_finite().all() and low["p_t"].is_finite().all()  # raw p shown
    assert low["p_perm_adj"].is_nan().all() and low["p_t_adj"].is_nan().all()
    tested = table.filter("tested")
    m = tested.height
    assert m == table.height - 2
    assert table["correction"][0].startswith(f"Holm over {m} tested rows (n_queries >= 30")
    np.testing.assert_array_equal(tested["p_t_adj"].to_numpy(), holm(tested["p_t"].to_numpy()))
    np.testing.assert_array_equal(tested["p_perm_adj"].to_numpy(),
                                  holm(tested["p_perm"].to_numpy()))


def test_test_metrics_keeps_the_family_to_the_primary_metric() -> None:
    base, arm = log(2, 100, 2, effect=0.03)
    base, arm = (f.with_columns(mrr=pl.col("ndcg") ** 2) for f in (base, arm))
    table = compare(base, {"a": arm}, metric_cols=["ndcg", "mrr"], group_cols=(),
                    n_resamples=200, test_metrics=["ndcg"])
    assert table.select("metric", "tested").rows() == [("ndcg", True), ("mrr", False)]
    mrr = table.row(1, named=True)
    assert math.isfinite(mrr["p_perm"]) and math.isnan(mrr["p_perm_adj"])
    assert table["correction"][0] == ("Holm over 1 tested rows (n_queries >= 30, differences "
                                      "not all zero, metrics ndcg)")
    with pytest.raises(ValueError, match=r"test_metrics \['recall'\] are not in metric_cols"):
        compare(base, {"a": arm}, metric_cols=["ndcg"], group_cols=(), test_metrics=["recall"])


# -- units: what n counts, and the cluster bootstrap ------------------------------------

def test_n_counts_queries_per_query_and_searches_per_search() -> None:
    counts = np.array([1, 2, 5, 1, 3] * 10)
    base, arm = log(3, counts.size, counts, effect=0.01)
    nan_query = base["query_id"] == "q0002"  # 5 searches without a relevant memory
    base, arm = (f.with_columns(ndcg=pl.when(nan_query).then(math.nan).otherwise("ndcg"))
                 for f in (base, arm))
    for unit, n, missing in (("query", 49, 1), ("search", 120 - 5, 5)):
        row = compare(base, {"a": arm}, metric_cols=["ndcg"], group_cols=(), unit=unit,
                      n_resamples=100).row(0, named=True)
        assert (row["unit"], row["n"], row["n_queries"], row["n_no_relevant"]) == (
            unit, n, 49, missing)
        summary = aggregate(base, metric_cols=["ndcg"], group_cols=(), unit=unit,
                            n_resamples=100).row(0, named=True)
        assert (summary["unit"], summary["n"], summary["n_queries"],
                summary["n_no_relevant"]) == (unit, n, 49, missing)
    values = base.filter(~nan_query)
    by_search = aggregate(base, metric_cols=["ndcg"], group_cols=(), unit="search")["mean"][0]
    assert by_search == pytest.approx(values["ndcg"].mean(), abs=1e-15)
    by_query = aggregate(base, metric_cols=["ndcg"], group_cols=())["mean"][0]
    assert by_query == pytest.approx(
        values.group_by("query_id").agg(pl.col("ndcg").mean())["ndcg"].mean(), abs=1e-15)
    assert by_query != pytest.approx(by_search, abs=1e-6)


def test_one_search_per_query_makes_the_units_agree() -> None:
    base, arm = log(4, 80, 1, effect=0.02, noise=0.1)
    kwargs = {"metric_cols": ["ndcg"], "group_cols": ["intent"], "n_resamples": 300,
              "min_support": 5, "seed": 3}
    per_q = compare(base, {"a": arm}, **kwargs)
    per_s = compare(base, {"a": arm}, unit="search", **kwargs)
    same = ["n", "n_queries", "delta", "ci_low", "ci_high", "p_perm", "n_permutations",
            "tested"]
    for column in same:
        np.testing.assert_allclose(per_q[column].to_numpy(), per_s[column].to_numpy(),
                                   rtol=1e-13, err_msg=column)
    # The CR1 cluster-robust t-test is the paired t-test when every cluster is one pair.
    np.testing.assert_allclose(per_s["p_t"].to_numpy(), per_q["p_t"].to_numpy(), rtol=1e-9)
    agg = [aggregate(base, unit=unit, **kwargs) for unit in ("query", "search")]
    for column in ("n", "mean", "ci_low", "ci_high"):
        np.testing.assert_allclose(agg[0][column].to_numpy(), agg[1][column].to_numpy(),
                                   rtol=1e-13, err_msg=column)


def test_duplicated_searches_widen_the_cluster_ci_over_a_naive_one() -> None:
    # 40 questions, each asked 20 times, the arm's change differing by question far more
    # than between repeats: 800 searches that carry the evidence of 40.
    base, arm = log(5, 40, 20, effect=0.02, noise=0.005, spread=0.05)
    kwargs = {"metric_cols": ["ndcg"], "group_cols": (), "n_resamples": 1000, "seed": 1}
    cluster = compare(base, {"a": arm}, unit="search", **kwargs).row(0, named=True)
    naive = compare(base, {"a": arm}, unit="search", cluster=None, **kwargs).row(
        0, named=True)
    assert (cluster["n"], cluster["n_queries"], naive["n_queries"]) == (800, 40, 800)
    assert cluster["delta"] == pytest.approx(naive["delta"], abs=1e-15)
    width = {k: r["ci_high"] - r["ci_low"] for k, r in (("cluster", cluster), ("naive", naive))}
    assert width["cluster"] > 3 * width["naive"]  # ~sqrt(20) with near-identical repeats
    assert cluster["p_t"] > 100 * naive["p_t"]
    spread = [aggregate(base, unit="search", cluster=c, **kwargs).row(0, named=True)
              for c in ("query_id", None)]
    assert (spread[0]["ci_high"] - spread[0]["ci_low"]
            > 3 * (spread[1]["ci_high"] - spread[1]["ci_low"]))


def test_cluster_t_test_is_the_cr1_sandwich() -> None:
    # Per-search differences in 6 queries of unequal size, checked against the textbook
    # sandwich: an intercept-only least squares fit, V = G/(G-1) (X'X)^-1 (sum_g X_g' e_g
    # e_g' X_g) (X'X)^-1, t with G - 1 df.
    d = [np.array(v) for v in ([0.1, 0.2], [0.0], [-0.05, 0.1, 0.3], [0.2], [0.05, 0.0],
                               [0.15, 0.1, 0.1, 0.2])]
    queries = np.repeat(np.arange(len(d)), [v.size for v in d])
    base = pl.DataFrame({"search": np.arange(queries.size),
                         "query_id": [f"q{g}" for g in queries], "m": 0.5})
    arm = base.with_columns(m=pl.Series(0.5 + np.concatenate(d)))
    row = compare(base, {"a": arm}, metric_cols=["m"], group_cols=(), unit="search",
                  min_support=0).row(0, named=True)
    y = np.concatenate(d)
    x = np.ones((y.size, 1))
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    e = y - x @ beta
    bread = np.linalg.inv(x.T @ x)
    starts = np.cumsum([0] + [v.size for v in d])
    meat = sum(np.outer(x[s:t].T @ e[s:t], x[s:t].T @ e[s:t])
               for s, t in itertools.pairwise(starts))
    g = len(d)
    se = math.sqrt((g / (g - 1) * bread @ meat @ bread)[0, 0])
    assert row["delta"] == pytest.approx(beta[0], rel=1e-12)
    assert row["p_t"] == pytest.approx(2 * scipy_stats.t.sf(abs(beta[0] / se), g - 1),
                                       rel=1e-10)
    assert row["n"] == y.size and row["n_queries"] == g
    assert "CR1" in row["t_test"]


def test_compare_is_deterministic_and_ignores_row_order() -> None:
    base, arm = log(6, 150, np.arange(150) % 4 + 1, effect=0.01)
    for unit in ("query", "search"):
        first = compare(base, {"a": arm}, metric_cols=["ndcg"], unit=unit,
                        group_cols=["intent"], n_resamples=200, seed=2, min_support=10)
        shuffled = compare(base.sample(fraction=1.0, shuffle=True, seed=1),
                           {"a": arm.sample(fraction=1.0, shuffle=True, seed=2)},
                           metric_cols=["ndcg"], group_cols=["intent"], unit=unit,
                           n_resamples=200, seed=2, min_support=10)
        assert_frame_equal(first, shuffled, check_exact=False, rel_tol=1e-12)
        other = compare(base, {"a": arm}, metric_cols=["ndcg"], group_cols=["intent"],
                        unit=unit, n_resamples=200, seed=3, min_support=10)
        assert not first["p_perm"].equals(other["p_perm"])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"unit": "searches"}, r"unit must be 'query' or 'search', got 'searches'"),
    ({"alpha": 0.0}, r"alpha must be in \(0, 1\), got 0.0"),
    ({"cluster": "question"}, r"base: missing column\(s\) \['question'\].*pass cluster=None"),
])
def test_compare_bad_settings(kwargs: dict[str, object], message: str) -> None:
    base, arm = log(7, 10, 2)
    with pytest.raises(ValueError, match=message):
        compare(base, {"a": arm}, metric_cols=["ndcg"], group_cols=(), **kwargs)


def test_compare_rejects_an_arm_whose_searches_belong_to_other_queries() -> None:
    base, arm = log(8, 10, 2)
    arm = arm.with_columns(query_id=pl.col("query_id").reverse())
    with pytest.raises(ValueError, match=r"arm 'a': 20 search\(es\) belong to another "
                                         r"query_id than in base"):
        compare(base, {"a": arm}, metric_cols=["ndcg"], group_cols=())


def test_cluster_bootstrap_matches_resampling_queries_by_hand() -> None:
    # Unequal traffic (1 to 30 searches per question) and a per-question effect: the CI
    # of the per-search mean from 4,000 hand-drawn resamples of whole questions.
    counts = np.random.default_rng(9).zipf(1.6, 120).clip(1, 30)
    base, arm = log(9, counts.size, counts, effect=0.03, noise=0.02, spread=0.08)
    row = compare(base, {"a": arm}, metric_cols=["ndcg"], group_cols=(), unit="search",
                  n_resamples=4000).row(0, named=True)
    paired = base.join(arm, on="search", suffix="_arm").with_columns(
        d=pl.col("ndcg_arm") - pl.col("ndcg"))
    per = paired.group_by("query_id").agg(total=pl.col("d").sum(), searches=pl.len())
    total, searches = per["total"].to_numpy(), per["searches"].to_numpy()
    assert row["delta"] == pytest.approx(total.sum() / searches.sum(), rel=1e-12)
    draws = np.random.default_rng(10).integers(0, total.size, (4000, total.size))
    ratios = total[draws].sum(axis=1) / searches[draws].sum(axis=1)
    low, high = np.quantile(ratios, [0.025, 0.975])
    assert row["ci_low"] == pytest.approx(low, abs=0.1 * (high - low))
    assert row["ci_high"] == pytest.approx(high, abs=0.1 * (high - low))
    summary = aggregate(arm, metric_cols=["ndcg"], group_cols=(), unit="search",
                        n_resamples=4000).row(0, named=True)
    value = arm.group_by("query_id").agg(total=pl.col("ndcg").sum(), searches=pl.len())
    ratios = (value["total"].to_numpy()[draws].sum(axis=1)
              / value["searches"].to_numpy()[draws].sum(axis=1))
    low, high = np.quantile(ratios, [0.025, 0.975])
    assert summary["ci_low"] == pytest.approx(low, abs=0.1 * (high - low))
    assert summary["ci_high"] == pytest.approx(high, abs=0.1 * (high - low))
