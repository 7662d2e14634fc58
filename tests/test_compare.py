"""Exploratory paired comparisons (`measures.compare`): one t-test per row against SciPy
and the cluster-robust sandwich, each breakdown its own family, intervals that pair with
the Bonferroni-adjusted p."""

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

from msprlab.experiments.measures.compare import compare
from msprlab.experiments.measures.stats import adjust_pvalues, per_query

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


@st.composite
def search_logs(draw: st.DrawFn) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per-search (base, arm) with repeated queries, on a 1/16 grid (exact sums); a query
    has no relevant memory on all its searches or none."""
    n_queries = draw(st.integers(2, 12))
    counts = draw(st.lists(st.integers(1, 4), min_size=n_queries, max_size=n_queries))
    no_relevant = draw(st.lists(st.booleans(), min_size=n_queries, max_size=n_queries))
    q = np.repeat(np.arange(n_queries), counts)
    grid = st.integers(0, 16).map(lambda k: k / 16)
    sides = [np.array(draw(st.lists(grid, min_size=q.size, max_size=q.size)))
             for _ in range(2)]
    for values in sides:
        values[np.asarray(no_relevant)[q]] = math.nan
    order = draw(st.permutations(range(q.size)))
    frame = pl.DataFrame({"search": np.arange(q.size), "query_id": [f"q{i:02d}" for i in q]})
    return tuple(frame.with_columns(m=pl.Series(v))[list(order)] for v in sides)  # type: ignore[return-value]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(search_logs())
def test_query_level_test_and_interval_equal_scipys(logs: tuple[pl.DataFrame, pl.DataFrame]
                                                     ) -> None:
    base, arm = logs
    row = compare(base, {"arm": arm}, metric_cols=["m"], group_cols=(),
                  min_support=0).row(0, named=True)
    b, a = (per_query(f, metric_cols=["m"], group_cols=())["m"].to_numpy() for f in logs)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    d = a - b
    assert (row["unit"], row["n"], row["n_queries"]) == ("query", d.size, d.size)
    event(f"{d.size} queries" if d.size < 2 else "2+ queries")
    if d.size == 0:
        assert math.isnan(row["delta"]) and math.isnan(row["p_t"])
        return
    assert row["delta"] == pytest.approx(d.mean(), abs=1e-15)
    if d.size < 2:
        assert math.isnan(row["ci_low"]) and math.isnan(row["p_t"]) and not row["tested"]
        return
    if np.ptp(d) <= 10 * np.finfo(np.float64).eps * max(abs(d.mean()), 1e-300):
        assert not row["tested"] and row["ci_low"] == row["ci_high"]  # nothing to test
        return
    assert row["tested"] and row["family_size"] == 1 and row["ci_level"] == 0.95
    t = scipy_stats.ttest_rel(a, b)
    assert row["p_t"] == pytest.approx(t.pvalue, rel=1e-9)
    ci = t.confidence_interval(0.95)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-9,
                                                            abs=1e-12)


def test_each_breakdown_is_its_own_bonferroni_family() -> None:
    base, arm = log(0, 300, 3, effect=0.05)
    table = compare(base, {"a": arm, "b": arm.with_columns(pl.col("ndcg") - 0.05)},
                    metric_cols=["ndcg"], group_cols=["intent"], min_support=20)
    overall = table.filter(pl.col("group_by") == "overall")
    by_intent = table.filter(pl.col("group_by") == "intent")
    assert (overall["family_size"] == 2).all() and (by_intent["family_size"] == 6).all()
    assert overall["ci_level"][0] == pytest.approx(1 - 0.05 / 2)
    assert by_intent["ci_level"][0] == pytest.approx(1 - 0.05 / 6)
    for part, m in ((overall, 2), (by_intent, 6)):
        np.testing.assert_allclose(part["p_t_adj"].to_numpy(),
                                   np.minimum(1, m * part["p_t"].to_numpy()))
        assert part["correction"][0].startswith(f"exploratory: Bonferroni over the {m} tested")
        for r in part.iter_rows(named=True):  # the interval pairs with the adjusted p
            if abs(r["p_t_adj"] - 0.05) > 1e-9 and r["p_t"] * m < 1:
                assert (r["ci_low"] > 0 or r["ci_high"] < 0) == (r["p_t_adj"] < 0.05)


def test_holm_and_bh_adjust_p_only_and_say_so() -> None:
    base, arm = log(1, 200, 2, effect=0.02)
    arms = {"a": arm, "b": arm.with_columns(pl.col("ndcg") + 0.01)}
    for correction in ("holm", "bh"):
        table = compare(base, arms, metric_cols=["ndcg"], group_cols=["intent"],
                        correction=correction, min_support=20)  # type: ignore[arg-type]
        for _, part in table.group_by("group_by", maintain_order=True):
            tested = part.filter("tested")
            np.testing.assert_array_equal(tested["p_t_adj"].to_numpy(), adjust_pvalues(
                tested["p_t"].to_numpy(), correction))  # type: ignore[arg-type]
        assert (table["ci_level"] == 0.95).all()
        assert "does not pair" in table["correction"][0]


def test_family_counts_only_tested_rows() -> None:
    base, arm = log(1, 120, 2, effect=0.02)
    table = compare(base, {"a": arm, "b": arm.with_columns(pl.col("ndcg") - 0.01)},
                    metric_cols=["ndcg"], group_cols=["intent"], min_support=30)
    low = table.filter(pl.col("n_queries") < 30)
    assert low.height == 2 and (low["group"] == "TEMPORAL").all()
    assert (table["tested"] == ~table["low_support"]).all()
    assert low["p_t"].is_finite().all() and low["p_t_adj"].is_nan().all()  # raw p shown
    assert table.filter(pl.col("group_by") == "intent", "tested")["family_size"][0] == 4


def test_unchanged_values_are_not_tested() -> None:
    base, arm = log(2, 100, 2, effect=0.03)
    base, arm = (f.with_columns(mrr=pl.lit(0.5)) for f in (base, arm))
    table = compare(base, {"a": arm}, metric_cols=["ndcg", "mrr"], group_cols=(),
                    test_metrics=["ndcg"])
    assert table.select("metric", "tested").rows() == [("ndcg", True), ("mrr", False)]
    mrr = table.row(1, named=True)
    assert mrr["delta"] == 0 and mrr["ci_low"] == mrr["ci_high"] == 0
    assert math.isnan(mrr["p_t"]) and math.isnan(mrr["p_t_adj"])
    with pytest.raises(ValueError, match=r"test_metrics \['recall'\] are not in metric_cols"):
        compare(base, {"a": arm}, metric_cols=["ndcg"], group_cols=(), test_metrics=["recall"])


def test_one_search_per_query_makes_the_units_agree() -> None:
    base, arm = log(4, 80, 1, effect=0.02, noise=0.1)
    kwargs = {"metric_cols": ["ndcg"], "group_cols": ["intent"], "min_support": 5}
    per_q = compare(base, {"a": arm}, **kwargs)
    per_s = compare(base, {"a": arm}, unit="search", **kwargs)
    for column in ("n", "n_queries", "delta", "ci_low", "ci_high", "p_t", "p_t_adj"):
        np.testing.assert_allclose(per_q[column].to_numpy(), per_s[column].to_numpy(),
                                   rtol=1e-9, err_msg=column)


def test_duplicated_searches_widen_the_cluster_interval_over_a_naive_one() -> None:
    base, arm = log(5, 40, 20, effect=0.02, noise=0.005, spread=0.05)
    kwargs = {"metric_cols": ["ndcg"], "group_cols": ()}
    cluster = compare(base, {"a": arm}, unit="search", **kwargs).row(0, named=True)
    naive = compare(base, {"a": arm}, unit="search", cluster=None, **kwargs).row(0, named=True)
    assert (cluster["n"], cluster["n_queries"], naive["n_queries"]) == (800, 40, 800)
    assert cluster["delta"] == pytest.approx(naive["delta"], abs=1e-15)
    width = {k: r["ci_high"] - r["ci_low"] for k, r in (("cluster", cluster), ("naive", naive))}
    assert width["cluster"] > 3 * width["naive"]
    assert cluster["p_t"] > 100 * naive["p_t"]


def test_cluster_t_test_is_the_cr1_sandwich() -> None:
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
    half = scipy_stats.t.ppf(0.975, g - 1) * se
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((beta[0] - half, beta[0] + half))
    assert row["n"] == y.size and row["n_queries"] == g and "CR1" in row["t_test"]


def test_compare_ignores_row_order() -> None:
    base, arm = log(6, 150, np.arange(150) % 4 + 1, effect=0.01)
    for unit in ("query", "search"):
        first = compare(base, {"a": arm}, metric_cols=["ndcg"], unit=unit,
                        group_cols=["intent"], min_support=10)
        shuffled = compare(base.sample(fraction=1.0, shuffle=True, seed=1),
                           {"a": arm.sample(fraction=1.0, shuffle=True, seed=2)},
                           metric_cols=["ndcg"], group_cols=["intent"], unit=unit,
                           min_support=10)
        assert_frame_equal(first, shuffled, check_exact=False, rel_tol=1e-12)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"unit": "searches"}, r"unit must be 'query' or 'search', got 'searches'"),
    ({"alpha": 0.0}, r"alpha must be in \(0, 1\), got 0.0"),
    ({"correction": "fdr"}, r"correction must be one of bonferroni, holm, bh, got 'fdr'"),
    ({"cluster": "question"}, r"base: missing column\(s\) \['question'\].*pass cluster=None"),
])
def test_compare_bad_settings(kwargs: dict[str, object], message: str) -> None:
    base, arm = log(7, 10, 2)
    with pytest.raises(ValueError, match=message):
        compare(base, {"a": arm}, metric_cols=["ndcg"], group_cols=(), **kwargs)


def test_compare_rejects_unpaired_or_moved_searches() -> None:
    base, arm = log(8, 10, 2)
    moved = arm.with_columns(query_id=pl.col("query_id").reverse())
    with pytest.raises(ValueError, match=r"arm 'a': 20 search\(es\) belong to another "
                                         r"query_id than in base"):
        compare(base, {"a": moved}, metric_cols=["ndcg"], group_cols=())
    with pytest.raises(ValueError, match=r"base: 1 search value\(s\) missing on the other"):
        compare(base, {"a": arm.filter(pl.col("search") > 0)}, metric_cols=["ndcg"],
                group_cols=())
    with pytest.raises(ValueError, match=r"base: group column 'intent'"):
        bad = base.with_columns(intent=pl.Series(["X", "Y"] * 10))
        compare(bad, {"a": arm}, metric_cols=["ndcg"], group_cols=["intent"])
