"""IPS and SNIPS (experiments/counterfactual/offpolicy.py) on real logged clicks with known
propensities: the Open Bandit Dataset's small sample (tests/fixtures/obd_small/). Each
policy's clicks were logged on-policy in the same week, so one policy's click-through rate
estimated from the other's log can be checked against the rate it really had."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from msprlab.experiments.counterfactual.offpolicy import importance_weights, ips, snips

OBD = Path(__file__).parent / "fixtures" / "obd_small"
UNIFORM = 1 / 80  # the random policy's propensity of any item at any position


def _interval(rewards: np.ndarray, weights: np.ndarray, estimator: Callable[..., float],
              ) -> tuple[float, float]:
    """95% percentile bootstrap over rounds (obp's estimate_interval resamples rounds)."""
    rng = np.random.default_rng(0)
    draws = [estimator(rewards[i], weights[i])
             for i in rng.integers(0, rewards.size, size=(2000, rewards.size))]
    return float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))


@pytest.fixture(scope="module")
def logs() -> tuple[pl.DataFrame, pl.DataFrame]:
    return pl.read_parquet(OBD / "random.parquet"), pl.read_parquet(OBD / "bts.parquet")


def test_the_random_policys_rate_from_the_thompson_log(logs) -> None:
    """Exact propensities both ways: pi_e = 1/80, pi_b = the logged Thompson propensity.
    The mean weight is 1 under the logging policy (the propensities' own check), and IPS and
    SNIPS cover the random policy's on-policy rate, 38 / 10,000."""
    random, bts = logs
    clicks = bts["click"].to_numpy().astype(np.float64)
    weights = importance_weights(UNIFORM, bts["propensity_score"].to_numpy(), clip=0.0)
    low, high = _interval(np.ones_like(clicks), weights, ips)
    assert low < 1.0 < high
    truth = random["click"].mean()
    assert truth == pytest.approx(0.0038)
    for estimator in (ips, snips):
        low, high = _interval(clicks, weights, estimator)
        assert low < truth < high, estimator.__name__
    assert ips(clicks, weights) == pytest.approx(float(np.mean(clicks * weights)))
    # inverted weights (a plausible bug) put the estimate far outside
    assert ips(clicks, 1 / weights) > 5 * truth


def test_the_thompson_policys_rate_from_the_random_log(logs) -> None:
    """The README's classic check. Thompson sampling's propensity of the random log's item
    at that moment is not logged; the nearest-in-time Thompson impression of the same item
    and position stands in (an approximation: those propensities do not sum to 1 over the
    items, their mean weight is far above 1), so the self-normalised estimate is the one
    that covers Thompson's on-policy rate, 42 / 10,000."""
    random, bts = logs
    nearest = (random.sort("timestamp").join_asof(
        bts.sort("timestamp").select("timestamp", "item_id", "position",
                                     pi_bts="propensity_score"),
        on="timestamp", by=["item_id", "position"], strategy="nearest", check_sortedness=False)
        .with_columns(pl.col("pi_bts").fill_null(0.0)))
    clicks = nearest["click"].to_numpy().astype(np.float64)
    weights = importance_weights(nearest["pi_bts"].to_numpy(), UNIFORM, clip=0.0)
    truth = bts["click"].mean()
    low, high = _interval(clicks, weights, snips)
    assert low < truth < high
    assert weights.mean() > 1.2


@pytest.mark.parametrize(("target", "logging", "clip", "message"), [
    (1.0, [0.5, -0.1], 0.0, ">= 0"),
    (1.0, [0.0], 0.0, "clip > 0"),
    (1.0, [0.5], 1.5, "0 <= clip <= 1"),
])
def test_bad_propensities_are_refused(target, logging, clip, message) -> None:
    with pytest.raises(ValueError, match=message):
        importance_weights(target, logging, clip=clip)


def test_the_clip_raises_small_propensities() -> None:
    weights = importance_weights(1.0, np.array([0.01, 0.5]), clip=0.1)
    assert weights.tolist() == [10.0, 2.0]
    assert snips(np.array([1.0, 0.0]), np.array([0.0, 0.0])) != snips(  # NaN: no weight
        np.array([1.0, 0.0]), np.array([0.0, 0.0]))
