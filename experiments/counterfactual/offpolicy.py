"""Inverse-propensity estimators on logged rewards: the primitives every counterfactual
estimate here is built from, with obp's definitions (Saito et al., Open Bandit Pipeline;
Swaminathan and Joachims 2015), checked on the Open Bandit Dataset's real logs
(tests/test_counterfactual_obd.py).

A logged round t has a reward r_t, the logging policy's propensity of what it did,
p_t = pi_b(a_t | x_t), and the target's, pi_e(a_t | x_t). The importance weight is
w_t = pi_e / max(p_t, clip): a propensity below `clip` is raised to it (Joachims et al.
2017 clip propensities; obp clips the weight at lambda, the same as clip = pi_e / lambda),
which bounds the weight and biases the estimate towards 0 where it acts.

- IPS: mean_t r_t w_t, unbiased for the target's mean reward when clip acts nowhere.
- SNIPS: sum_t r_t w_t / sum_t w_t, self-normalised: consistent, not unbiased, and free of
  the propensities' scale (E[w] = 1 under the logging policy, so the mean weight is a
  check of the propensities themselves).

>>> w = importance_weights(np.full(4, 0.5), np.array([0.5, 0.25, 1.0, 0.5]), clip=0.0)
>>> float(ips(np.array([1.0, 0.0, 1.0, 1.0]), w)), float(snips(np.array([1.0, 0.0, 1.0, 1.0]), w))
(0.625, 0.5555555555555556)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["importance_weights", "ips", "snips"]

FloatArray = npt.NDArray[np.float64]


def importance_weights(target: npt.ArrayLike, logging: npt.ArrayLike, *,
                       clip: float) -> FloatArray:
    """pi_e / max(pi_b, clip), elementwise; shapes broadcast."""
    if not (np.isfinite(clip) and 0.0 <= clip <= 1.0):
        raise ValueError(f"importance weights: `0 <= clip <= 1` must hold, but got {clip}")
    p = np.asarray(logging, dtype=np.float64)
    if p.size and (np.isnan(p).any() or p.min() < 0.0):
        raise ValueError("importance weights: propensities must be >= 0 and not NaN")
    floor = np.maximum(p, clip)
    with np.errstate(divide="ignore"):
        weights: FloatArray = np.where(floor > 0, np.asarray(target, dtype=np.float64) / floor,
                                       np.inf)
    if np.isinf(weights).any():
        raise ValueError("importance weights: a propensity of 0 with clip 0 has no weight; "
                         "set clip > 0")
    return weights


def ips(rewards: npt.ArrayLike, weights: npt.ArrayLike) -> float:
    """mean_t r_t w_t (NaN for no rounds)."""
    r, w = np.asarray(rewards, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    return float(np.mean(r * w)) if r.size else float("nan")


def snips(rewards: npt.ArrayLike, weights: npt.ArrayLike) -> float:
    """sum_t r_t w_t / sum_t w_t (NaN when the weights sum to 0)."""
    r, w = np.asarray(rewards, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    total = float(w.sum())
    return float(np.dot(r, w) / total) if total > 0 else float("nan")
