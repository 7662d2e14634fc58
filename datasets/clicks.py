"""Seeded click models and a verdict model: how simulated users react to a shown ranking.

No public memory benchmark has real user feedback, so msprlab simulates it from graded
judgments (EVALUATION.md). Each model is a small frozen dataclass whose parameters are
checked on construction; `simulate` draws clicks for many sessions at once from a
`numpy.random.Generator` the caller passes in (no global random state), and
`expected_click_rates` gives the analytic per-rank click probability the draws must match.

Attractiveness, shared by every model. A memory of grade g (0 = not relevant or unjudged,
`max_grade` = perfect) attracts a click with probability

    alpha(g) = (1 - noise) * (2**g - 1) / (2**max_grade - 1) + noise / 2

that is, with probability `1 - noise` the user judges by the grade (the ERR gain of
Chapelle et al. 2009, scaled to [0, 1]), and with probability `noise` by a fair coin.
`noise = 0` gives deterministic attraction (0 for grade 0, 1 for the top grade);
`noise = 1` gives uninformative clicks.

The models, with r = 1, 2, ... the rank and alpha_r the attractiveness of the memory there:

- `PositionBasedModel` (PBM; Richardson et al. 2007, Craswell et al. 2008's examination
  hypothesis, as in Chuklin, Markov and de Rijke, *Click Models for Web Search*, 2015,
  section 3.2): rank r is examined with probability gamma_r = r**-eta, independently of
  the rest; a click happens when the memory is examined and attractive.
  P(C_r) = gamma_r * alpha_r.
- `CascadeModel` (Craswell, Zoeter, Taylor and Ramsey 2008): the user scans top-down, clicks
  an examined memory with probability alpha_r and stops at the first click.
  P(C_r) = alpha_r * prod_{i<r} (1 - alpha_i).
- `DependentClickModel` (DCM; Guo, Liu and Wang 2009): a cascade that may go on after a
  click, with probability lambda_r at rank r (`continuation`), and always goes on after a
  skip. P(E_1) = 1, P(E_{r+1}) = P(E_r) * (1 - alpha_r * (1 - lambda_r)),
  P(C_r) = P(E_r) * alpha_r. With every lambda = 0 it is the cascade model.

`VerdictModel`: a clicked memory is judged (a feedback verdict) with probability
`judge_rate`; a judged memory of grade g is helpful with probability `p_helpful[g]` and
unhelpful otherwise.

>>> import numpy as np
>>> model = CascadeModel(noise=0.0, max_grade=1)
>>> expected_click_rates(model, np.array([0, 1, 1])).tolist()
[0.0, 1.0, 0.0]
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "CascadeModel",
    "ClickModel",
    "DependentClickModel",
    "PositionBasedModel",
    "VerdictModel",
    "expected_click_rates",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def _check_unit(owner: str, name: str, value: object) -> None:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not 0.0 <= float(value) <= 1.0):
        raise ValueError(f"{owner}: `0 <= {name} <= 1` must hold, but got {value!r}")


def _check_max_grade(owner: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: `max_grade >= 1` (an integer) must hold, but got {value!r}")


def _as_grades(grades: npt.ArrayLike, max_grade: int, *, ndim: tuple[int, ...]) -> IntArray:
    array = np.asarray(grades)
    if array.ndim not in ndim:
        raise ValueError(f"grades must have {' or '.join(map(str, ndim))} dimensions "
                         f"(sessions x ranks), but got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"grades must be integers, but got dtype {array.dtype}")
    out = array.astype(np.int64, copy=False)
    if out.size and (out.min() < 0 or out.max() > max_grade):
        bad = int(out.min()) if out.min() < 0 else int(out.max())
        raise ValueError(f"`0 <= grade <= max_grade` must hold, but got grade {bad} with "
                         f"max_grade={max_grade}; raise the model's max_grade to the "
                         "largest relevance in the qrels")
    return out


class ClickModel(ABC):
    """One user-browsing model: attractiveness from grades, clicks from attractiveness."""

    noise: float
    max_grade: int

    def _validate_common(self) -> None:
        owner = type(self).__name__
        _check_unit(owner, "noise", self.noise)
        _check_max_grade(owner, self.max_grade)

    def attractiveness(self, grades: npt.ArrayLike) -> FloatArray:
        """alpha(g) for every grade, same shape as `grades` (see the module docstring)."""
        g = _as_grades(grades, self.max_grade, ndim=(1, 2))
        levels = np.arange(self.max_grade + 1, dtype=np.float64)
        gain = (np.exp2(levels) - 1.0) / (2.0 ** self.max_grade - 1.0)
        return ((1.0 - self.noise) * gain + self.noise / 2.0)[g]

    @abstractmethod
    def click_probabilities(self, grades: npt.ArrayLike) -> FloatArray:
        """P(click at rank r) per session; grades (n_sessions, n_ranks) -> same shape."""

    @abstractmethod
    def simulate(self, grades: npt.ArrayLike, rng: np.random.Generator) -> BoolArray:
        """Clicks for each session; grades (n_sessions, n_ranks) -> bool (n_sessions, n_ranks)."""


@dataclass(frozen=True, kw_only=True)
class PositionBasedModel(ClickModel):
    """PBM: examination gamma_r = r**-eta independent of clicks elsewhere (Richardson et al.
    2007; Chuklin et al. 2015, section 3.2).

    eta : float >= 0
        Position-bias strength; 0 examines every rank, 1 halves it by rank 2.
    """

    eta: float = 1.0
    noise: float = 0.1
    max_grade: int = 3

    def __post_init__(self) -> None:
        if (isinstance(self.eta, bool) or not isinstance(self.eta, int | float)
                or not (math.isfinite(self.eta) and self.eta >= 0)):
            raise ValueError(f"PositionBasedModel: `0 <= eta < inf` must hold, but got "
                             f"{self.eta!r}")
        self._validate_common()

    def examination(self, n_ranks: int) -> FloatArray:
        """gamma_r for r = 1..n_ranks, shape (n_ranks,)."""
        return np.arange(1, n_ranks + 1, dtype=np.float64) ** -float(self.eta)

    def click_probabilities(self, grades: npt.ArrayLike) -> FloatArray:
        alpha = self.attractiveness(_as_grades(grades, self.max_grade, ndim=(2,)))
        return alpha * self.examination(alpha.shape[1])

    def simulate(self, grades: npt.ArrayLike, rng: np.random.Generator) -> BoolArray:
        alpha = self.attractiveness(_as_grades(grades, self.max_grade, ndim=(2,)))
        draws = rng.random((2, *alpha.shape))
        clicks: BoolArray = (draws[0] < self.examination(alpha.shape[1])) & (draws[1] < alpha)
        return clicks


@dataclass(frozen=True, kw_only=True)
class CascadeModel(ClickModel):
    """Cascade: scan top-down, stop at the first click (Craswell et al. 2008)."""

    noise: float = 0.1
    max_grade: int = 3

    def __post_init__(self) -> None:
        self._validate_common()

    def click_probabilities(self, grades: npt.ArrayLike) -> FloatArray:
        alpha = self.attractiveness(_as_grades(grades, self.max_grade, ndim=(2,)))
        return alpha * _examined_before(1.0 - alpha)

    def simulate(self, grades: npt.ArrayLike, rng: np.random.Generator) -> BoolArray:
        alpha = self.attractiveness(_as_grades(grades, self.max_grade, ndim=(2,)))
        attractive = rng.random(alpha.shape) < alpha
        # The first attractive rank is the only click: nothing after it is examined.
        clicks: BoolArray = attractive & (np.cumsum(attractive, axis=1) == 1)
        return clicks


@dataclass(frozen=True, kw_only=True)
class DependentClickModel(ClickModel):
    """DCM: a cascade that goes on after a click with probability lambda_r (Guo et al. 2009).

    continuation : tuple of float in [0, 1]
        lambda_r for ranks 1, 2, ...; ranks past the end reuse the last value.
    """

    continuation: tuple[float, ...] = (0.7, 0.6, 0.5, 0.45, 0.4)
    noise: float = 0.1
    max_grade: int = 3

    def __post_init__(self) -> None:
        if not isinstance(self.continuation, tuple) or not self.continuation:
            raise ValueError("DependentClickModel: `len(continuation) >= 1` (a tuple) must "
                             f"hold, but got {self.continuation!r}")
        for i, value in enumerate(self.continuation):
            _check_unit("DependentClickModel", f"continuation[{i}]", value)
        self._validate_common()

    def continuation_at(self, n_ranks: int) -> FloatArray:
        """lambda_r for r = 1..n_ranks, shape (n_ranks,)."""
        lam = np.asarray(self.continuation, dtype=np.float64)
        return lam[np.minimum(np.arange(n_ranks), lam.size - 1)]

    def click_probabilities(self, grades: npt.ArrayLike) -> FloatArray:
        alpha = self.attractiveness(_as_grades(grades, self.max_grade, ndim=(2,)))
        stop = alpha * (1.0 - self.continuation_at(alpha.shape[1]))
        return alpha * _examined_before(1.0 - stop)

    def simulate(self, grades: npt.ArrayLike, rng: np.random.Generator) -> BoolArray:
        alpha = self.attractiveness(_as_grades(grades, self.max_grade, ndim=(2,)))
        draws = rng.random((2, *alpha.shape))
        attractive = draws[0] < alpha
        stops = attractive & ~(draws[1] < self.continuation_at(alpha.shape[1]))
        # Rank r is examined when no earlier rank ended the session.
        examined = (np.cumsum(stops, axis=1) - stops) == 0
        clicks: BoolArray = examined & attractive
        return clicks


def _examined_before(go_on: FloatArray) -> FloatArray:
    """P(E_r) = prod_{i<r} go_on_i per row: an exclusive cumulative product."""
    out = np.ones_like(go_on)
    if go_on.shape[1] > 1:
        out[:, 1:] = np.cumprod(go_on[:, :-1], axis=1)
    return out


def expected_click_rates(model: ClickModel, relevances_by_rank: npt.ArrayLike) -> FloatArray:
    """Analytic P(click) per rank for `model`.

    relevances_by_rank : int array, shape (n_ranks,) or (n_sessions, n_ranks)
        Graded relevance of the memory shown at each rank (0 when unjudged).

    Returns an array of the same shape.

    >>> expected_click_rates(PositionBasedModel(eta=1.0, noise=0.0, max_grade=1),
    ...                      [1, 1, 0, 1]).tolist()
    [1.0, 0.5, 0.0, 0.25]
    """
    grades = _as_grades(relevances_by_rank, model.max_grade, ndim=(1, 2))
    if grades.ndim == 1:
        one: FloatArray = model.click_probabilities(grades[None, :])[0]
        return one
    return model.click_probabilities(grades)


@dataclass(frozen=True, kw_only=True)
class VerdictModel:
    """Feedback after a click: judged with probability `judge_rate`; a judged memory of grade
    g is helpful with probability `p_helpful[g]`, unhelpful otherwise.

    p_helpful : tuple of float in [0, 1], one per grade 0..max_grade
    judge_rate : float in [0, 1]
    """

    p_helpful: tuple[float, ...] = (0.1, 0.6, 0.85, 0.95)
    judge_rate: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.p_helpful, tuple) or not self.p_helpful:
            raise ValueError("VerdictModel: `len(p_helpful) >= 1` (a tuple, one entry per "
                             f"grade) must hold, but got {self.p_helpful!r}")
        for i, value in enumerate(self.p_helpful):
            _check_unit("VerdictModel", f"p_helpful[{i}]", value)
        _check_unit("VerdictModel", "judge_rate", self.judge_rate)

    @property
    def max_grade(self) -> int:
        return len(self.p_helpful) - 1

    def sample(self, grades: npt.ArrayLike,
               rng: np.random.Generator) -> tuple[BoolArray, BoolArray]:
        """For clicked memories of these grades, shape (n,): (judged, helpful), both (n,).

        `helpful` is meaningful only where `judged` is True.
        """
        g = _as_grades(grades, self.max_grade, ndim=(1,))
        draws = rng.random((2, g.size))
        judged = draws[0] < self.judge_rate
        helpful = draws[1] < np.asarray(self.p_helpful, dtype=np.float64)[g]
        return judged, helpful
