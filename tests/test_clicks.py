"""Click and verdict models: simulated rates against the published analytic forms, and the
parameter checks."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from msprlab.datasets.clicks import (
    CascadeModel,
    ClickModel,
    DependentClickModel,
    PositionBasedModel,
    VerdictModel,
    expected_click_rates,
)

N_SESSIONS = 200_000
GRADES = np.array([3, 0, 2, 1, 0, 3, 1, 0, 2, 0])
MODELS = [
    PositionBasedModel(eta=1.0, noise=0.1),
    PositionBasedModel(eta=0.5, noise=0.4, max_grade=4),
    CascadeModel(noise=0.1),
    CascadeModel(noise=0.5),
    DependentClickModel(),
    DependentClickModel(continuation=(0.9, 0.2), noise=0.2),
]


def _within(observed: np.ndarray, expected: np.ndarray, se: np.ndarray) -> np.ndarray:
    """Per-rank |observed - expected| in standard errors (0 where the expectation is exact)."""
    z = np.zeros_like(expected)
    np.divide(np.abs(observed - expected), se, out=z, where=se > 0)
    assert np.all(observed[se == 0] == expected[se == 0])
    return z


@pytest.mark.parametrize("model", MODELS, ids=repr)
def test_click_rates_match_the_analytic_expectation_on_one_ranking(model: ClickModel) -> None:
    clicks = model.simulate(np.tile(GRADES, (N_SESSIONS, 1)), np.random.default_rng(11))
    expected = expected_click_rates(model, GRADES)
    se = np.sqrt(expected * (1.0 - expected) / N_SESSIONS)
    z = _within(clicks.mean(axis=0), expected, se)
    assert z.max() <= 4.0, (z.round(2), expected)


@pytest.mark.parametrize("model", MODELS, ids=repr)
def test_click_rates_match_the_analytic_expectation_on_mixed_rankings(
        model: ClickModel) -> None:
    rng = np.random.default_rng(12)
    n = N_SESSIONS // 4
    grades = rng.integers(0, model.max_grade + 1, size=(n, 8))
    clicks = model.simulate(grades, rng)
    p = expected_click_rates(model, grades)
    # Sessions are independent Bernoulli draws per rank with their own p.
    se = np.sqrt((p * (1.0 - p)).sum(axis=0)) / n
    z = _within(clicks.mean(axis=0), p.mean(axis=0), se)
    assert z.max() <= 4.0, z.round(2)


def test_hand_computed_expectations() -> None:
    # noise 0.2, max_grade 1: alpha(0) = 0.1, alpha(1) = 0.9.
    pbm = PositionBasedModel(eta=1.0, noise=0.2, max_grade=1)
    np.testing.assert_allclose(expected_click_rates(pbm, [1, 0, 1, 1]),
                               [0.9, 0.05, 0.3, 0.225])
    cascade = CascadeModel(noise=0.2, max_grade=1)
    np.testing.assert_allclose(expected_click_rates(cascade, [1, 0, 1]),
                               [0.9, 0.1 * 0.1, 0.1 * 0.9 * 0.9])
    dcm = DependentClickModel(continuation=(0.5,), noise=0.2, max_grade=1)
    # P(E2) = 1 - 0.9 * (1 - 0.5) = 0.55; P(E3) = 0.55 * 0.55.
    np.testing.assert_allclose(expected_click_rates(dcm, [1, 1, 1]),
                               [0.9, 0.55 * 0.9, 0.55 * 0.55 * 0.9])


def test_attractiveness_mapping_is_the_documented_one() -> None:
    model = CascadeModel(noise=0.0, max_grade=3)
    np.testing.assert_allclose(model.attractiveness([0, 1, 2, 3]), [0, 1 / 7, 3 / 7, 1])
    np.testing.assert_allclose(CascadeModel(noise=1.0).attractiveness([0, 3]), [0.5, 0.5])
    np.testing.assert_allclose(CascadeModel(noise=0.1).attractiveness([0, 3]), [0.05, 0.95])


def test_the_models_reduce_to_each_other_at_their_limits() -> None:
    grades = np.random.default_rng(3).integers(0, 4, size=(50, 10))
    np.testing.assert_allclose(
        expected_click_rates(DependentClickModel(continuation=(0.0,)), grades),
        expected_click_rates(CascadeModel(), grades))
    np.testing.assert_allclose(
        expected_click_rates(DependentClickModel(continuation=(1.0,)), grades),
        expected_click_rates(PositionBasedModel(eta=0.0), grades))


def test_cascade_clicks_at_most_once_and_dcm_continuation_extends_per_rank() -> None:
    rng = np.random.default_rng(5)
    clicks = CascadeModel(noise=0.5).simulate(np.tile(GRADES, (10_000, 1)), rng)
    assert clicks.sum(axis=1).max() == 1
    assert DependentClickModel(continuation=(0.9, 0.2)).continuation_at(4).tolist() == [
        0.9, 0.2, 0.2, 0.2]


def test_same_generator_seed_gives_the_same_clicks() -> None:
    grades = np.tile(GRADES, (100, 1))
    for model in MODELS:
        a = model.simulate(grades, np.random.default_rng(1))
        b = model.simulate(grades, np.random.default_rng(1))
        assert np.array_equal(a, b)


def test_verdict_rates_match_p_helpful_per_grade() -> None:
    verdicts = VerdictModel(p_helpful=(0.1, 0.5, 0.8, 0.95), judge_rate=0.7)
    grades = np.repeat(np.arange(4), 50_000)
    judged, helpful = verdicts.sample(grades, np.random.default_rng(9))
    assert abs(judged.mean() - 0.7) <= 4 * np.sqrt(0.7 * 0.3 / grades.size)
    for grade, p in enumerate(verdicts.p_helpful):
        rate = helpful[grades == grade].mean()
        assert abs(rate - p) <= 4 * np.sqrt(p * (1 - p) / 50_000), (grade, rate)


def test_models_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        PositionBasedModel().noise = 0.5  # type: ignore[misc]


BAD_PARAMETERS = [
    (PositionBasedModel, {"noise": 1.5}, "PositionBasedModel: `0 <= noise <= 1` must hold, "
                                         "but got 1.5"),
    (PositionBasedModel, {"noise": -0.1}, "`0 <= noise <= 1` must hold, but got -0.1"),
    (PositionBasedModel, {"noise": float("nan")}, "`0 <= noise <= 1` must hold, but got nan"),
    (PositionBasedModel, {"noise": True}, "`0 <= noise <= 1` must hold, but got True"),
    (PositionBasedModel, {"eta": -1.0}, "`0 <= eta < inf` must hold, but got -1.0"),
    (PositionBasedModel, {"eta": float("inf")}, "`0 <= eta < inf` must hold, but got inf"),
    (CascadeModel, {"noise": "0.1"}, "`0 <= noise <= 1` must hold, but got '0.1'"),
    (CascadeModel, {"max_grade": 0}, "`max_grade >= 1` (an integer) must hold, but got 0"),
    (CascadeModel, {"max_grade": 2.0}, "`max_grade >= 1` (an integer) must hold, but got 2.0"),
    (DependentClickModel, {"continuation": ()}, "`len(continuation) >= 1` (a tuple) must "
                                                "hold, but got ()"),
    (DependentClickModel, {"continuation": [0.5]}, "(a tuple) must hold, but got [0.5]"),
    (DependentClickModel, {"continuation": (0.5, 1.2)},
     "`0 <= continuation[1] <= 1` must hold, but got 1.2"),
    (VerdictModel, {"p_helpful": (0.1, 2.0)}, "`0 <= p_helpful[1] <= 1` must hold, but got 2.0"),
    (VerdictModel, {"p_helpful": ()}, "`len(p_helpful) >= 1`"),
    (VerdictModel, {"judge_rate": -0.5}, "`0 <= judge_rate <= 1` must hold, but got -0.5"),
]


@pytest.mark.parametrize(("cls", "kwargs", "message"), BAD_PARAMETERS)
def test_bad_parameters_are_rejected_with_the_invariant(cls: type, kwargs: dict[str, object],
                                                        message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        cls(**kwargs)


BAD_GRADES = [
    (np.array([[0, 4]]), "`0 <= grade <= max_grade` must hold, but got grade 4 with "
                         "max_grade=3"),
    (np.array([[-1, 0]]), "but got grade -1 with max_grade=3"),
    (np.array([[0.5, 1.0]]), "grades must be integers, but got dtype float64"),
    (np.array([0, 1]), "grades must have 2 dimensions (sessions x ranks), but got shape (2,)"),
]


@pytest.mark.parametrize(("grades", "message"), BAD_GRADES)
def test_bad_grades_are_rejected(grades: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        CascadeModel().simulate(grades, np.random.default_rng(0))


def test_expected_rates_keep_the_input_shape() -> None:
    model = PositionBasedModel()
    assert expected_click_rates(model, GRADES).shape == (10,)
    assert expected_click_rates(model, np.tile(GRADES, (3, 1))).shape == (3, 10)
    with pytest.raises(ValueError, match=re.escape("but got grade 7 with max_grade=3")):
        expected_click_rates(model, [7])
