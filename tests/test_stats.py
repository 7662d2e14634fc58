"""Aggregation with bootstrap CIs, multiple-testing corrections (paired comparisons:
test_compare.py)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from scipy import stats as scipy_stats

from msprlab.experiments.measures.stats import (
    adjust_pvalues,
    aggregate,
    holm,
    mc_error,
    noninferior,
)

pytestmark = pytest.mark.filterwarnings("error")  # degenerate cells must not warn

METRICS = ["ndcg@10", "mrr"]


def one_search_per_query(seed: int, n: int = 300) -> pl.DataFrame:
    """n searches of n distinct queries (so per query and per search agree)."""
    rng = np.random.default_rng(seed)
    ndcg = rng.beta(2, 3, n)
    ndcg[rng.random(n) < 0.1] = math.nan  # queries without a relevant memory
    return pl.DataFrame({
        "search": np.arange(n),
        "query_id": [f"q{i:04d}" for i in range(n)],
        "intent": rng.choice(["FACTUAL", "TEMPORAL", "UNKNOWN"], n, p=[0.25, 0.03, 0.72]),
        "question_type": rng.integers(1, 4, n),
        "ndcg@10": ndcg,
        "mrr": rng.choice([0.0, 0.5, 1.0], n),
    })


def test_aggregate_counts_means_and_cis() -> None:
    values = one_search_per_query(0)
    table = aggregate(values, metric_cols=METRICS, n_resamples=500, min_support=20)
    assert table.columns == ["group_by", "group", "metric", "unit", "n", "n_queries",
                             "n_no_relevant", "mean", "ci_low", "ci_high", "confidence",
                             "low_support", "ci_method", "ci_mc_error"]
    overall = table.filter(group_by="overall", metric="ndcg@10").row(0, named=True)
    ndcg = values["ndcg@10"].to_numpy()
    assert overall["n"] == np.count_nonzero(~np.isnan(ndcg))
    assert overall["n_no_relevant"] == np.count_nonzero(np.isnan(ndcg)) > 0
    assert overall["mean"] == pytest.approx(np.nanmean(ndcg), abs=1e-15)
    assert (table["ci_low"] < table["mean"]).all() and (table["mean"] < table["ci_high"]).all()
    # Groups: overall, then intent values, then question types (cast to strings), sorted.
    groups = table.filter(metric="mrr").select("group_by", "group").rows()
    assert groups == [("overall", "overall"), ("intent", "FACTUAL"), ("intent", "TEMPORAL"),
                      ("intent", "UNKNOWN"), ("question_type", "1"), ("question_type", "2"),
                      ("question_type", "3")]
    small = table.filter(group="TEMPORAL", metric="mrr").row(0, named=True)
    assert small["n"] < 20 and small["low_support"]
    assert table.filter(group_by="overall")["low_support"].not_().all()
    for row in table.filter(group_by="intent").iter_rows(named=True):
        part = values.filter(intent=row["group"])[row["metric"]].to_numpy()
        assert row["n"] + row["n_no_relevant"] == part.size


def test_aggregate_ci_is_close_to_the_normal_interval() -> None:
    values = one_search_per_query(1, n=2000)
    row = aggregate(values, metric_cols=["mrr"], group_cols=(), n_resamples=2000).row(
        0, named=True)
    x = values["mrr"].to_numpy()
    half = 1.96 * x.std(ddof=1) / math.sqrt(x.size)
    assert row["ci_low"] == pytest.approx(x.mean() - half, abs=0.15 * half)
    assert row["ci_high"] == pytest.approx(x.mean() + half, abs=0.15 * half)


@pytest.mark.parametrize("unit", ["query", "search"])
def test_the_monte_carlo_error_is_the_spread_of_the_bounds_over_streams(unit: str) -> None:
    # The bounds of one data set's CI, bootstrapped again and again with other seeds, spread
    # by about the error each run estimates from its own draws.
    values = one_search_per_query(3, n=150)
    values = pl.concat([values, values.head(60)])  # 60 queries asked twice (per search)
    runs = [aggregate(values, metric_cols=["ndcg@10"], group_cols=(), unit=unit,
                      n_resamples=1000, seed=seed).row(0, named=True) for seed in range(60)]
    spread = max(np.std([r["ci_low"] for r in runs]), np.std([r["ci_high"] for r in runs]))
    estimate = np.mean([r["ci_mc_error"] for r in runs])
    assert 0.75 * spread < estimate < 1.5 * spread
    # Ten times the draws: about a third of the error.
    many = aggregate(values, metric_cols=["ndcg@10"], group_cols=(), unit=unit,
                     n_resamples=10_000, seed=0).row(0, named=True)
    assert 0.2 * estimate < many["ci_mc_error"] < 0.5 * estimate
    assert "10,000 resamples" in many["ci_method"]


def test_mc_error_of_a_known_distribution() -> None:
    # Normal draws: the q-quantile's standard error is sqrt(q (1 - q) / B) / phi(z_q).
    draws = np.random.default_rng(0).standard_normal(200_000)
    q = 0.025
    expected = math.sqrt(q * (1 - q) / draws.size) / scipy_stats.norm.pdf(scipy_stats.norm.ppf(q))
    assert mc_error(draws, 0.95) == pytest.approx(expected, rel=0.1)
    assert math.isnan(mc_error(np.array([1.0]), 0.95))


def test_aggregate_is_deterministic_per_seed_and_per_cell() -> None:
    values = one_search_per_query(2)
    first = aggregate(values, metric_cols=METRICS, n_resamples=300, seed=7)
    assert_frame_equal(first, aggregate(values, metric_cols=METRICS, n_resamples=300, seed=7))
    other = aggregate(values, metric_cols=METRICS, n_resamples=300, seed=8)
    assert not first["ci_low"].equals(other["ci_low"])
    # A cell's stream depends on its labels only: dropping a metric changes nothing else.
    alone = aggregate(values, metric_cols=["mrr"], n_resamples=300, seed=7)
    assert_frame_equal(alone, first.filter(metric="mrr"))


def test_aggregate_degenerate_groups() -> None:
    values = pl.DataFrame({"intent": ["a", "b", "b", "c", "c", None],
                           "ndcg@10": [0.4, 0.7, 0.7, math.nan, math.nan, 1.0]})
    # cluster=None: every row is a query of its own (a frame that is already per query).
    table = aggregate(values, metric_cols=["ndcg@10"], group_cols=["intent"], cluster=None,
                      min_support=2)
    rows = {row["group"]: row for row in table.filter(group_by="intent").iter_rows(named=True)}
    assert (rows["a"]["n"], rows["a"]["mean"]) == (1, 0.4) and math.isnan(rows["a"]["ci_low"])
    assert (rows["b"]["ci_low"], rows["b"]["ci_high"]) == (0.7, 0.7)  # no variance
    assert (rows["c"]["n"], rows["c"]["n_no_relevant"]) == (0, 2)
    assert math.isnan(rows["c"]["mean"]) and rows["c"]["low_support"]
    assert rows[None]["n"] == 1  # a null label is a group of its own


def test_aggregate_bad_input() -> None:
    values = pl.DataFrame({"ndcg@10": [0.5]})
    with pytest.raises(ValueError, match=r"missing column\(s\) \['intent', 'question_type'\].*"
                                         r"pass group_cols=\(\)"):
        aggregate(values, metric_cols=["ndcg@10"])
    with pytest.raises(ValueError, match=r"confidence must be in \(0, 1\), got 95"):
        aggregate(values, metric_cols=["ndcg@10"], group_cols=(), confidence=95)


def test_holm_on_textbook_examples() -> None:
    # Wikipedia, "Holm–Bonferroni method", worked example: p = 0.01, 0.03, 0.04, 0.005 for
    # H1..H4 at alpha = 0.05; H1 and H4 are rejected, H2 and H3 are not. The adjusted
    # values follow Holm (1979) as in R's p.adjust(method = "holm"):
    # sorted 0.005 x 4, 0.01 x 3, 0.03 x 2, max(0.04 x 1, 0.06).
    adjusted = holm([0.01, 0.03, 0.04, 0.005])
    np.testing.assert_allclose(adjusted, [0.03, 0.06, 0.06, 0.02], rtol=1e-12)
    assert (adjusted <= 0.05).tolist() == [True, False, False, True]
    # R package HDLSSkST, documentation of Holm(pvalues, alpha) (Holm's step-down
    # procedure, 1979): Holm(c(0.50, 0.01, 0.001, 0.69, 0.02, 0.05, 0.0025), 0.05) outputs
    # 0 0 1 0 0 0 1 (that example rejects when p_(i) < alpha / (m - i + 1), strictly).
    adjusted = holm([0.50, 0.01, 0.001, 0.69, 0.02, 0.05, 0.0025])
    assert (adjusted < 0.05).astype(int).tolist() == [0, 0, 1, 0, 0, 0, 1]
    np.testing.assert_allclose(adjusted, [1.0, 0.05, 0.007, 1.0, 0.08, 0.15, 0.015],
                               rtol=1e-12)


def test_adjust_pvalues_bh_is_scipys_and_skips_nan() -> None:
    p = np.random.default_rng(0).random(40) ** 3
    np.testing.assert_array_equal(adjust_pvalues(p, "bh"),
                                  scipy_stats.false_discovery_control(p, method="bh"))
    with_nan = np.concatenate([[math.nan], p, [math.nan]])
    for method in ("holm", "bh"):
        out = adjust_pvalues(with_nan, method)  # type: ignore[arg-type]
        assert np.isnan(out[[0, -1]]).all()
        np.testing.assert_array_equal(out[1:-1], adjust_pvalues(p, method))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="correction must be 'holm' or 'bh', got 'bonf'"):
        adjust_pvalues(p, "bonf")  # type: ignore[arg-type]


def test_noninferior_gate() -> None:
    lows = np.array([-0.005, -0.02, 0.01, math.nan])
    assert noninferior(lows, 0.01).tolist() == [True, False, True, False]
    assert bool(noninferior(-0.001, 0.0)) is False and bool(noninferior(0.0, 0.0)) is False
    assert bool(noninferior(0.001, 0.0))
    with pytest.raises(ValueError, match=r"margin must be a finite number >= 0, got -0\.1"):
        noninferior(lows, -0.1)
