"""The position-based click model fitted by EM (experiments/counterfactual/click_model.py)
and its bootstrap curve (position_bias.py), on simulated logs whose curve is known."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from msprlab.experiments.counterfactual.click_model import IMPRESSIONS, ClickLog, fit_pbm
from msprlab.experiments.counterfactual.position_bias import (
    examination_curve,
    resample_questions,
)

from click_logs import simulate


def _oracle_em(frame: pl.DataFrame, iterations: int) -> np.ndarray:
    """Plain PBM EM over every impression (Chuklin et al. 2015, section 4.2), no
    truncation, no acceleration: the textbook loop the kernel must agree with."""
    rank = frame["rank"].to_numpy() - 1
    pair = frame.select(pl.struct("question", "memory_id").rank("dense"))["question"
                                                                         ].to_numpy() - 1
    click = frame["clicked"].to_numpy()
    k, n = rank.max() + 1, pair.max() + 1
    gamma, alpha = np.full(k, 0.5), np.full(n, 0.5)
    for _ in range(iterations):
        g, a = gamma[rank], alpha[pair]
        examined = np.where(click, 1.0, g * (1 - a) / (1 - g * a))
        attracted = np.where(click, 1.0, a * (1 - g) / (1 - g * a))
        gamma = np.clip(np.bincount(rank, examined, k) / np.bincount(rank, minlength=k),
                        1e-9, 1 - 1e-9)
        alpha = np.clip(np.bincount(pair, attracted, n) / np.bincount(pair, minlength=n),
                        1e-9, 1 - 1e-9)
    return gamma / gamma[0]


def test_per_pair_attractiveness_fails_on_a_sparse_log_and_classes_do_not() -> None:
    """500 questions asked about 5 times each: the textbook fit, one alpha per (question,
    memory), drives gamma_2 towards 1 (incidental parameters); latent classes recover it."""
    log = simulate(seed=3, questions=500, memories=30, searches=2500, eta=0.7,
                   truncated=False)
    truth = log.model.examination(10)
    textbook = _oracle_em(log.impressions, 3000)
    assert textbook[1] - truth[1] > 0.2
    fit = fit_pbm(ClickLog.of(log.impressions), truncated=False)
    assert fit.converged
    assert abs(fit.examination[1] - truth[1]) < 0.05
    assert np.max(np.abs(fit.examination - truth)) < 0.1
    # the two classes are the simulation's: attractiveness 0.05 and 0.95
    np.testing.assert_allclose(np.sort(fit.alpha), [0.05, 0.95], atol=0.03)


def test_the_textbook_em_agrees_with_classes_where_every_pair_is_well_observed() -> None:
    log = simulate(seed=1, questions=10, searches=3000, truncated=False)
    fit = fit_pbm(ClickLog.of(log.impressions), truncated=False)
    np.testing.assert_allclose(fit.examination, _oracle_em(log.impressions, 3000), atol=0.03)


def test_em_recovers_a_known_curve_from_every_search() -> None:
    log = simulate(seed=2, searches=6000, eta=0.7, truncated=False)
    fit = fit_pbm(ClickLog.of(log.impressions), truncated=False)
    truth = log.model.examination(10)
    assert fit.examination[0] == 1.0
    np.testing.assert_allclose(fit.examination, truth, atol=0.05)


def test_the_truncated_fit_undoes_what_the_naive_fit_overstates() -> None:
    """A verdict log holds only searches with a click: fitted as if it held every search,
    the curve is far too flat; with the truncation in the likelihood it is recovered."""
    log = simulate(seed=3, searches=8000, eta=1.0, truncated=True)
    assert log.impressions["search"].n_unique() < log.every["search"].n_unique()
    clicked = ClickLog.of(log.impressions)
    truth = log.model.examination(10)
    truncated = fit_pbm(clicked, truncated=True)
    naive = fit_pbm(clicked, truncated=False)
    assert np.max(np.abs(truncated.examination - truth)) < 0.05
    assert np.max(naive.examination - truth) > 0.1
    # P(the search drew a click) under the model matches the share that did
    share = clicked.n_sessions / log.every["search"].n_unique()
    assert 1.0 / np.mean(1.0 / truncated.selected) == pytest.approx(share, abs=0.05)


def test_the_bootstrap_interval_covers_the_known_curve() -> None:
    log = simulate(seed=4, searches=3000, eta=0.7, truncated=True)
    curve = examination_curve(ClickLog.of(log.impressions), truncated=True, n_resamples=60,
                              seed=0)
    frame = curve.frame
    truth = log.model.examination(10)
    inside = (frame["ci_low"].to_numpy() - 1e-9 <= truth) & (
        truth <= frame["ci_high"].to_numpy() + 1e-9)
    assert inside.sum() >= 9  # 95% intervals: at most one of ten ranks may miss
    assert (frame["ci_high"] - frame["ci_low"]).to_numpy()[1:].min() > 0
    assert frame["shown"].to_list() == [curve.n_searches] * 10
    assert "60 resamples" in curve.caption()


def test_resamples_are_multinomial_counts_over_questions() -> None:
    weights = resample_questions(7, 5, seed=3)
    assert weights.shape == (5, 7)
    assert (weights.sum(axis=1) == 7).all()
    assert np.array_equal(weights, resample_questions(7, 5, seed=3))


def test_a_held_curve_fits_only_the_attractiveness() -> None:
    log = simulate(seed=5, searches=1500, truncated=True)
    clicked = ClickLog.of(log.impressions)
    held = log.model.examination(10)
    fit = fit_pbm(clicked, truncated=True, examination=held)
    np.testing.assert_allclose(fit.examination, held)
    free = fit_pbm(clicked, truncated=True)
    assert fit.log_likelihood <= free.log_likelihood + 1e-6


@pytest.mark.parametrize(("frame", "message"), [
    (pl.DataFrame(schema=IMPRESSIONS), "no logged search"),
    (pl.DataFrame({"search": [1], "question": ["q"], "memory_id": ["m"], "rank": [0],
                   "clicked": [True], "helpful": [True]}, schema=IMPRESSIONS), "rank >= 1"),
    (pl.DataFrame({"search": [1, 1], "question": ["q", "q"], "memory_id": ["m", "m"],
                   "rank": [1, 2], "clicked": [True, False], "helpful": [True, False]},
                  schema=IMPRESSIONS), "shows memory 'm' twice"),
    (pl.DataFrame({"search": [1]}), "missing column 'question'"),
])
def test_bad_impressions_are_refused(frame: pl.DataFrame, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClickLog.of(frame)
