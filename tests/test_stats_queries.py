"""Per-query aggregation: collapsing searches, what n counts in each unit, the per-search
cluster bootstrap, and one resample stream per arm."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from test_compare import log

from msprlab.experiments.measures.compare import compare
from msprlab.experiments.measures.stats import aggregate, per_query

pytestmark = pytest.mark.filterwarnings("error")  # degenerate cells must not warn


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


# -- units: what n counts, and the cluster bootstrap ------------------------------------

def test_n_counts_queries_per_query_and_searches_per_search() -> None:
    counts = np.array([1, 2, 5, 1, 3] * 10)
    base, arm = log(3, counts.size, counts, effect=0.01)
    nan_query = base["query_id"] == "q0002"  # 5 searches without a relevant memory
    base, arm = (f.with_columns(ndcg=pl.when(nan_query).then(math.nan).otherwise("ndcg"))
                 for f in (base, arm))
    for unit, n, missing in (("query", 49, 1), ("search", 120 - 5, 5)):
        row = compare(base, {"a": arm}, metric_cols=["ndcg"], group_cols=(),
                      unit=unit).row(0, named=True)
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
    base, _ = log(4, 80, 1, effect=0.02, noise=0.1)
    kwargs = {"metric_cols": ["ndcg"], "group_cols": ["intent"], "n_resamples": 300,
              "min_support": 5, "seed": 3}
    agg = [aggregate(base, unit=unit, **kwargs) for unit in ("query", "search")]
    for column in ("n", "mean", "ci_low", "ci_high"):
        np.testing.assert_allclose(agg[0][column].to_numpy(), agg[1][column].to_numpy(),
                                   rtol=1e-13, err_msg=column)


def test_duplicated_searches_widen_the_cluster_ci_over_a_naive_one() -> None:
    base, _ = log(5, 40, 20, effect=0.02, noise=0.005, spread=0.05)
    kwargs = {"metric_cols": ["ndcg"], "group_cols": (), "n_resamples": 1000, "seed": 1}
    spread = [aggregate(base, unit="search", cluster=c, **kwargs).row(0, named=True)
              for c in ("query_id", None)]
    assert (spread[0]["ci_high"] - spread[0]["ci_low"]
            > 3 * (spread[1]["ci_high"] - spread[1]["ci_low"]))


def test_each_arm_draws_its_own_resample_stream() -> None:
    base, _ = log(6, 100, 2, noise=0.1)
    kwargs = {"metric_cols": ["ndcg"], "group_cols": (), "n_resamples": 500, "seed": 1}
    one, same, other = (aggregate(base, stream=s, **kwargs) for s in ("off", "off", "tuned"))
    assert_frame_equal(one, same)  # deterministic for a seed and a stream
    assert one["ci_low"][0] != other["ci_low"][0]  # two arms never share resamples


def test_cluster_bootstrap_matches_resampling_queries_by_hand() -> None:
    # Unequal traffic (1 to 30 searches per question): the CI of the per-search mean from
    # 4,000 hand-drawn resamples of whole questions.
    counts = np.random.default_rng(9).zipf(1.6, 120).clip(1, 30)
    _, arm = log(9, counts.size, counts, effect=0.03, noise=0.02, spread=0.08)
    draws = np.random.default_rng(10).integers(0, counts.size, (4000, counts.size))
    summary = aggregate(arm, metric_cols=["ndcg"], group_cols=(), unit="search",
                        n_resamples=4000).row(0, named=True)
    value = arm.group_by("query_id").agg(total=pl.col("ndcg").sum(), searches=pl.len())
    ratios = (value["total"].to_numpy()[draws].sum(axis=1)
              / value["searches"].to_numpy()[draws].sum(axis=1))
    low, high = np.quantile(ratios, [0.025, 0.975])
    assert summary["ci_low"] == pytest.approx(low, abs=0.1 * (high - low))
    assert summary["ci_high"] == pytest.approx(high, abs=0.1 * (high - low))
