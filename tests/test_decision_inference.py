"""The decision's tests against their references: statsmodels' `ttost_paired` (equivalence)
and `TTestPower` (minimum detectable effect), SciPy's paired t-test, statsmodels'
cluster-robust OLS; and the pairing of every confirmatory interval with its adjusted p."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats

from msprlab.experiments.decision import (
    Candidate,
    DecisionSettings,
    Estimate,
    decide,
    inference,
    interval,
    mde,
    noninferiority_p,
    paired_estimate,
    queries_needed,
    tost_p,
    two_sided_p,
)

sm_weightstats = pytest.importorskip("statsmodels.stats.weightstats")
sm_power = pytest.importorskip("statsmodels.stats.power")
sm_api = pytest.importorskip("statsmodels.api")


def pairs(draw: st.DrawFn, low: int = 3, high: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Per-query values of two arms: noisy, correlated, on the metric's [0, 1] scale."""
    n = draw(st.integers(low, high))
    seed = draw(st.integers(0, 2**32 - 1))
    shift = draw(st.floats(-0.2, 0.2))
    spread = draw(st.floats(0.001, 0.3))
    rng = np.random.default_rng(seed)
    reference = rng.uniform(0, 1, n)
    candidate = reference + shift + rng.normal(0, spread, n)
    return candidate, reference


paired_values = st.composite(pairs)


@settings(max_examples=200, deadline=None)
@given(paired_values(), st.floats(0.001, 0.3))
def test_tost_equals_statsmodels_ttost_paired(values: tuple[np.ndarray, np.ndarray],
                                              margin: float) -> None:
    candidate, reference = values
    expected = sm_weightstats.ttost_paired(candidate, reference, -margin, margin)[0]
    got = tost_p(paired_estimate(candidate, reference), margin)
    assert got == pytest.approx(float(expected), rel=1e-9, abs=1e-300)


# From 20 queries, alpha from 0.002 (0.05 over 25 rows), power up to 0.95: further out
# SciPy's noncentral t loses its far tail at the effects solved for (statsmodels' own
# power is NaN there, and its solver is off by 0.002 at n = 3); the decision tests groups
# of at least min_support (30) queries.
@settings(max_examples=200, deadline=None)
@given(paired_values(low=20), st.floats(0.002, 0.2), st.floats(0.5, 0.95))
def test_mde_equals_statsmodels_ttestpower(values: tuple[np.ndarray, np.ndarray],
                                           alpha: float, power: float) -> None:
    candidate, reference = values
    n = candidate.size
    d = candidate - reference
    effect = sm_power.TTestPower().solve_power(nobs=n, alpha=alpha, power=power,
                                               alternative="two-sided")
    got = mde(paired_estimate(candidate, reference), alpha, power)
    # Ours solves TTestPower's own power equation to rounding, always:
    assert sm_power.TTestPower().power(got / d.std(ddof=1), n, alpha) == pytest.approx(
        power, abs=1e-9)
    # and equals solve_power wherever its root finder converged (at alpha 0.001 and power
    # 0.94 over 10 queries it can stop 0.017 short of the power it was asked for).
    # An array when its fallback solver ran; two-sided, it may give the negative root.
    effect = abs(float(np.ravel(effect)[0]))
    if abs(sm_power.TTestPower().power(effect, n, alpha) - power) < 1e-6:
        assert got == pytest.approx(effect * d.std(ddof=1), rel=1e-4)


@settings(max_examples=40, deadline=None)
@given(paired_values(low=20), st.floats(0.002, 0.2), st.floats(0.5, 0.95))
def test_queries_needed_equals_statsmodels_ttestpower(values: tuple[np.ndarray, np.ndarray],
                                                      alpha: float, power: float) -> None:
    candidate, reference = values
    d = candidate - reference
    estimate = paired_estimate(candidate, reference)
    assume(estimate.testable and abs(estimate.delta) > 1e-3 * d.std(ddof=1))
    got = queries_needed(estimate, estimate.delta, alpha, power)
    effect = abs(estimate.delta) / d.std(ddof=1)  # Cohen's d of the observed delta
    reached = sm_power.TTestPower().power(effect, got, alpha)
    assume(math.isfinite(reached))  # statsmodels' power is NaN where SciPy's tail underflows
    if got == 2:  # two queries already detect it (fewer cannot be tested)
        assert reached >= power - 1e-9
        return
    # Ours solves TTestPower's power equation in n to rounding:
    assert reached == pytest.approx(power, abs=1e-7)
    expected = sm_power.TTestPower().solve_power(effect_size=effect, alpha=alpha,
                                                 power=power)
    expected = float(np.ravel(expected)[0])
    if abs(sm_power.TTestPower().power(effect, expected, alpha) - power) < 1e-6:
        assert got == pytest.approx(expected, rel=1e-4)
    # The row's own n detects its own MDE: at that effect, n queries are needed.
    at_mde = queries_needed(estimate, mde(estimate, alpha, power), alpha, power)
    assert at_mde == pytest.approx(estimate.n_queries, rel=1e-6)


def test_queries_needed_is_nan_without_a_test_or_an_effect() -> None:
    e = paired_estimate(np.array([0.1, 0.2, 0.4]), np.array([0.0, 0.1, 0.1]))
    assert math.isnan(queries_needed(e, 0.0, 0.05, 0.8))
    assert math.isnan(queries_needed(paired_estimate(np.ones(3), np.zeros(3)), 0.1, 0.05, 0.8))


@settings(max_examples=100, deadline=None)
@given(paired_values())
def test_query_unit_is_scipys_paired_t_test(values: tuple[np.ndarray, np.ndarray]) -> None:
    candidate, reference = values
    estimate = paired_estimate(candidate, reference)
    assert two_sided_p(estimate) == pytest.approx(
        stats.ttest_rel(candidate, reference).pvalue, rel=1e-9, abs=1e-300)
    low, high = interval(estimate, 0.95)
    ci = stats.ttest_rel(candidate, reference).confidence_interval(0.95)
    assert (low, high) == pytest.approx((ci.low, ci.high), rel=1e-9, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.integers(3, 60), st.integers(0, 2**32 - 1))
def test_search_unit_is_cluster_robust_ols(queries: int, seed: int) -> None:
    """The traffic-weighted delta is OLS's intercept on per-search differences; its se is
    statsmodels' cluster-robust (CR1) se with queries as clusters."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 8, queries)
    cluster = np.repeat(np.arange(queries), counts)
    d = rng.normal(rng.normal(0.05, 0.1, queries)[cluster], 0.05)
    totals = np.bincount(cluster, weights=d)
    estimate = paired_estimate(totals, np.zeros(queries), counts, unit="search")
    fit = sm_api.OLS(d, np.ones(d.size)).fit(cov_type="cluster",
                                             cov_kwds={"groups": cluster})
    assert estimate.delta == pytest.approx(float(fit.params[0]), rel=1e-9)
    assert estimate.se == pytest.approx(float(fit.bse[0]), rel=1e-9)
    assert estimate.df == queries - 1 and estimate.n == d.size


def test_search_unit_with_one_search_per_query_is_the_paired_t_test() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.uniform(size=40), rng.uniform(size=40)
    by_search = paired_estimate(a, b, np.ones(40), unit="search")
    by_query = paired_estimate(a, b)
    assert by_search.delta == pytest.approx(by_query.delta)
    assert by_search.se == pytest.approx(by_query.se)
    assert two_sided_p(by_search) == pytest.approx(two_sided_p(by_query))


@settings(max_examples=300, deadline=None)
@given(st.lists(paired_values(low=5, high=80), min_size=1, max_size=12),
       st.sampled_from([0.01, 0.05, 0.1]))
def test_confirmatory_interval_excludes_zero_exactly_when_adjusted_p_below_alpha(
        family: list[tuple[np.ndarray, np.ndarray]], alpha: float) -> None:
    candidates = [Candidate(f"c{i}", "ref", paired_estimate(c, r))
                  for i, (c, r) in enumerate(family)]
    table = decide(candidates, DecisionSettings(alpha=alpha), metric="m")
    for row in table.iter_rows(named=True):
        if not row["tested"]:
            continue
        assert row["family_size"] == sum(c.estimate.testable for c in candidates)
        assume(abs(row["p_adj"] - alpha) > 1e-9 and row["p"] * row["family_size"] < 1)
        excludes = row["ci_low"] > 0 or row["ci_high"] < 0
        assert excludes == (row["p_adj"] < alpha)
        assert row["ci_level"] == pytest.approx(1 - alpha / row["family_size"])


def test_noninferiority_is_the_one_sided_lower_bound() -> None:
    rng = np.random.default_rng(5)
    d = rng.normal(-0.004, 0.02, 120)
    estimate = Estimate.of_contributions(d)
    low = inference.lower_bound(estimate, 0.05)
    for margin in (0.001, 0.005, 0.01, 0.02):
        assert (noninferiority_p(estimate, margin) < 0.05) == (low > -margin)


def test_degenerate_estimates() -> None:
    zero = paired_estimate(np.ones(10), np.ones(10))
    assert zero.identical and not zero.testable and zero.delta == 0
    assert math.isnan(two_sided_p(zero)) and interval(zero, 0.95) == (0.0, 0.0)
    assert math.isnan(mde(zero, 0.05, 0.8))
    shift = paired_estimate(np.full(10, 0.3), np.full(10, 0.2))
    assert not shift.testable and not shift.identical
    assert "the same" in shift.why_untestable
    one = paired_estimate(np.array([0.5]), np.array([0.1]))
    assert not one.testable and math.isnan(interval(one, 0.95)[0])
    assert math.isnan(mde(one, 0.05, 0.8))
    nan = paired_estimate(np.array([0.5, math.nan, 0.2]), np.array([0.1, 0.3, math.nan]))
    assert nan.n_queries == 1


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"alpha": 0.0}, r"decision.alpha: `0 < alpha < 0.5`"),
    ({"alpha": 0.7}, r"decision.alpha"),
    ({"power": 0.01}, r"decision.power: `alpha < power < 1`"),
    ({"power": 1.0}, r"decision.power"),
    ({"unit": "session"}, r"decision.unit: 'session' is not one of query, search"),
    ({"reference": "bm25"}, r"decision.reference"),
    ({"noninferiority_margin": 0.0}, r"decision.noninferiority_margin"),
    ({"equivalence_margin": -0.01}, r"decision.equivalence_margin"),
    ({"equivalence_margin": math.inf}, r"decision.equivalence_margin"),
    ({"guardrails": ("seen",)}, r"decision.guardrails: 'seen'"),
])
def test_settings_refuse_out_of_range(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DecisionSettings(**kwargs)


def test_doctests() -> None:
    from msprlab.experiments.decision import pairs, rule
    for module in (inference, rule, pairs):
        result = doctest.testmod(module)
        assert result.failed == 0
    assert doctest.testmod(inference).attempted > 0
