"""Simulated verdict logs with a known position bias, for the counterfactual estimators'
tests: the seeded click models of `msprlab.datasets.clicks` read the grades of what a
noisy logging ranker showed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from msprlab.datasets.clicks import PositionBasedModel, VerdictModel

P_HELPFUL = (0.1, 0.95)


@dataclass(frozen=True)
class SimulatedLog:
    impressions: pl.DataFrame   # click_model.IMPRESSIONS; only searches with a click if truncated
    every: pl.DataFrame         # every search, clicked or not
    grades: dict[tuple[str, str], int]
    model: PositionBasedModel
    verdicts: VerdictModel

    def beta(self, grade: int) -> float:
        """P(helpful verdict | examined) of a memory of this grade."""
        alpha = float(self.model.attractiveness(np.array([grade]))[0])
        return alpha * self.verdicts.p_helpful[grade]


def simulate(*, seed: int, questions: int = 40, memories: int = 15, relevant: int = 2,
             searches: int = 4000, eta: float = 0.7, noise: float = 0.1, spread: float = 1.0,
             k: int = 10, truncated: bool = True) -> SimulatedLog:
    """`searches` searches of `questions` questions (uniformly), each showing the top k of
    `memories` memories by a logging score: a relevant memory's base score is higher, and
    each search adds normal noise of sd `spread`, so a memory moves between ranks."""
    rng = np.random.default_rng(seed)
    model = PositionBasedModel(eta=eta, noise=noise, max_grade=1)
    verdicts = VerdictModel(p_helpful=P_HELPFUL, judge_rate=1.0)
    grades = np.zeros((questions, memories), dtype=np.int64)
    for q in range(questions):
        grades[q, rng.choice(memories, size=relevant, replace=False)] = 1
    base = grades * 1.0 + rng.normal(0.0, 0.5, size=grades.shape)
    asked = rng.integers(0, questions, size=searches)
    scores = base[asked] + rng.normal(0.0, spread, size=(searches, memories))
    shown = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    shown_grades = np.take_along_axis(grades[asked], shown, axis=1)
    clicks = model.simulate(shown_grades, rng)
    judged, helpful = verdicts.sample(shown_grades[clicks], rng)
    helpful_matrix = np.zeros_like(clicks)
    helpful_matrix[clicks] = helpful & judged
    frame = pl.DataFrame({
        "search": np.repeat(np.arange(searches, dtype=np.int64), k),
        "question": np.repeat([f"q{q}" for q in asked], k),
        "memory_id": [f"m{m}" for m in shown.ravel()],
        "rank": np.tile(np.arange(1, k + 1, dtype=np.int64), searches),
        "clicked": clicks.ravel(), "helpful": helpful_matrix.ravel()})
    kept = frame.filter(pl.col("clicked").any().over("search")) if truncated else frame
    truth = {(f"q{q}", f"m{m}"): int(grades[q, m])
             for q in range(questions) for m in range(memories)}
    return SimulatedLog(kept, frame, truth, model, verdicts)
