"""Counterfactual estimates of an arm's ranking quality from verdicts: IPS and SNIPS nDCG@k.

**The estimand.** For question q, asked in the logged searches S_q, and an arm A that
returns list A_s at search s: the mean over S_q of DCG@k of A_s with the relevance users
reveal, beta_qm = P(helpful verdict on m | m examined), over the memories the logging
ranker showed for q (its *logged support*),

    DCG_A(q) = (1 / |S_q|) sum_s sum_{m in A_s, rank r <= k} beta_qm / log2(r + 1),

and its normalised form nDCG_A(q) = DCG_A(q) / IDCG(q), IDCG the DCG@k of q's memories
in the order of beta. Arms are compared by the mean over questions of nDCG_A(q) - nDCG_off(q)
(paired per question, as every msprlab comparison). Where beta is 0 or 1 by relevance (a
user finds a memory helpful exactly when it is relevant) this is trec_eval's nDCG@k with
binary gains on the logged support.

**The labels** (Joachims, Swaminathan and Schnabel, WSDM 2017: a click weighted by the
inverse of its examination propensity is an unbiased relevance signal). Each search s of q
showed m at logged rank r_sm (or not at all); the click model (`click_model`) gives the
examination gamma_r and, for a log of searches kept only when they drew a verdict, the
chance P(sel_s) that s drew one. Under the model, E[helpful_sm | s logged] = gamma_r beta_qm
/ P(sel_s), so with the propensity p_sm = gamma_r / P(sel_s) (gamma_r alone when every
search is logged) and q's marginal propensity pi_qm = (1/|S_q|) sum_s p_sm (obp's
IIPS: the logging policy's marginal exposure of the memory, here over q's searches),

    beta^_qm = (1/|S_q|) sum_s helpful_sm / max(pi_qm, clip)

is unbiased for beta_qm once pi_qm >= clip (Swaminathan and Joachims's clipping: a
smaller propensity is raised to `clip`, trading bias for variance; the clip is printed).

**The two estimators** of nDCG_A(q), both with DCG_A(q) under the labels beta^:

- `ips`: DCG_A(q) / IDCG_k(n_q), n_q the memories with a helpful verdict on q's support:
  the ideal fixed as raw verdict nDCG fixes it. Unbiased for DCG_A(q) / IDCG_k(n_q), which
  reads in units of beta: where users find a relevant memory helpful 9 times in 10, 0.9 x
  the binary nDCG (a change too).
- `snips`: DCG_A(q) / IDCG^(q), the ideal under the same labels: the ratio of two IPS
  estimates with the same weights, self-normalised as SNIPS is (Swaminathan and Joachims,
  NeurIPS 2015; obp's SelfNormalized estimators): the unknown scale of beta cancels and
  large weights partly cancel. Consistent, not unbiased.

**Off the support.** A memory the logging ranker never showed for q has no propensity and
no label: an arm that puts it in its top k is not scored there (its gain counts 0). Each
arm's share of such memories in its top k is reported, with the bound its estimate could
move by (those memories scored at q's largest label, the ideal held): an arm whose share
exceeds `max_unshown` is *bounded*, not scored (BM25 and dense-only surface memories
MSPR's pool never had).

Questions with no helpful verdict on their support have no estimate (as a query without a
relevant memory has no nDCG) and are counted. CIs resample questions with the click model
refitted in each resample (`position_bias.Bootstrap`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from .click_model import ClickLog, PBMFit, fit_pbm
from .offpolicy import importance_weights
from .position_bias import RESAMPLE_ITERATIONS, ExaminationCurve

__all__ = ["ESTIMATORS", "RANKINGS", "ArmRankings", "Counterfactual", "counterfactual",
           "labels", "per_question"]

ESTIMATORS = ("ips", "snips")
# One row per memory an arm returns at an evaluated search, best first (rank 1 = top).
RANKINGS = pl.Schema({"search": pl.Int64, "memory_id": pl.String, "rank": pl.Int64})
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class ArmRankings:
    """The evaluated searches of every arm: `searches` (search, question) and, per arm, a
    `RANKINGS` frame over those searches."""

    searches: pl.DataFrame
    arms: dict[str, pl.DataFrame]

    def __post_init__(self) -> None:
        for name, frame in self.arms.items():
            missing = [c for c in RANKINGS if c not in frame.columns]
            if missing:
                raise ValueError(f"arm {name!r} rankings: missing columns {missing} "
                                 f"(found {frame.columns})")


def labels(log: ClickLog, fit: PBMFit, *, clip: float,
           question_weights: FloatArray | None = None) -> pl.DataFrame:
    """beta^ per (question, memory) of the log's support (module docstring): question,
    memory_id, label, exposure (pi, before the clip), helpful (verdicts), searches (|S_q|);
    label NaN for a question of weight 0."""
    label, exposure, helpful, asked = _labels(log, fit, clip, question_weights)
    return log.pairs.with_columns(label=pl.Series(label), exposure=pl.Series(exposure),
                                  helpful=pl.Series(helpful), searches=pl.Series(asked))


def _labels(log: ClickLog, fit: PBMFit, clip: float, question_weights: FloatArray | None,
            ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    if not 0.0 < clip <= 1.0:
        raise ValueError(f"labels: `0 < clip <= 1` must hold, but got {clip}")
    weights = log.session_weights(question_weights)
    w = weights[log.session]
    selected = fit.selected if fit.truncated else np.ones(log.n_sessions)
    gamma = np.nan_to_num(fit.examination, nan=0.0)[log.rank]
    propensity = gamma / np.maximum(selected[log.session], 1e-12)
    n = log.n_pairs
    exposure = np.bincount(log.pair, w * propensity, n)
    helpful = np.bincount(log.pair, w * log.helpful, n)
    asked = np.bincount(log.question, weights, log.n_questions)[log.pair_question]
    kept = asked > 0   # a question left out of a resample has no label
    pi = np.full(n, np.nan)
    pi[kept] = exposure[kept] / asked[kept]
    label = np.full(n, np.nan)
    # IPS over q's searches of the helpful verdicts on m, weighted by 1 / max(pi_qm, clip)
    label[kept] = helpful[kept] / asked[kept] * importance_weights(1.0, pi[kept], clip=clip)
    return label, pi, helpful, asked


@dataclass(frozen=True, eq=False)
class _Layout:
    """Every arm's top-k rows as arrays against the window's click log, made once: per
    row its arm, evaluated search, the log's (question, memory) pair (-1: the logging
    ranker never showed it for that question) and rank discount; per evaluated search its
    question in the log (-1: a question the log does not hold)."""

    arms: list[str]
    row_arm: npt.NDArray[np.int64]
    row_search: npt.NDArray[np.int64]
    row_pair: npt.NDArray[np.int64]
    row_discount: FloatArray
    search_question: npt.NDArray[np.int64]
    n_questions: int
    pair_question: npt.NDArray[np.int64]
    k: int


def _layout(log: ClickLog, rankings: ArmRankings, k: int) -> _Layout:
    searches = rankings.searches.select("search", "question").with_row_index("_s")
    order = pl.DataFrame({"question": log.questions,
                          "_q": np.arange(log.n_questions, dtype=np.int64)})
    searches = searches.join(order, on="question", how="left", maintain_order="left")
    pairs = log.pairs.with_row_index("_p").with_columns(pl.col("_p").cast(pl.Int64))
    arms = list(rankings.arms)
    frames = []
    for a, arm in enumerate(arms):
        rows = (rankings.arms[arm].filter(pl.col("rank") <= k)
                .join(searches, on="search", how="inner")
                .join(pairs, on=["question", "memory_id"], how="left")
                .select(pl.lit(a, dtype=pl.Int64).alias("_a"), pl.col("_s").cast(pl.Int64),
                        pl.col("_p").fill_null(-1),
                        (1.0 / (pl.col("rank") + 1).cast(pl.Float64).log(2)).alias("_d")))
        frames.append(rows)
    every = pl.concat(frames)
    return _Layout(arms, every["_a"].to_numpy(), every["_s"].to_numpy(),
                   every["_p"].to_numpy(), every["_d"].to_numpy(),
                   searches["_q"].fill_null(-1).to_numpy(), log.n_questions,
                   log.pair_question, k)


def _ideal(gains: FloatArray, question: npt.NDArray[np.int64], n_questions: int,
           k: int) -> FloatArray:
    """Per question: DCG@k of its gains sorted best first."""
    order = np.lexsort((-gains, question))
    q, g = question[order], gains[order]
    first = np.searchsorted(q, q)  # the first row of each row's question
    position = np.arange(q.size) - first
    keep = position < k
    return np.bincount(q[keep], g[keep] / np.log2(position[keep] + 2.0), n_questions)


def _values(layout: _Layout, label: FloatArray, helpful: FloatArray
            ) -> dict[str, FloatArray]:
    """Per (arm, question) of the log: ips, snips, unshown and bound (module docstring);
    NaN where a question has no positive label or no evaluated search."""
    known = ~np.isnan(label)
    gains = np.where(known, label, 0.0)
    n_arms, n_q = len(layout.arms), layout.n_questions
    pair = layout.row_pair
    on = pair >= 0
    scored = np.zeros(pair.size, dtype=bool)
    scored[on] = known[pair[on]]
    gain = np.zeros(pair.size)
    gain[scored] = gains[pair[scored]]
    n_searches = layout.search_question.size
    cell = layout.row_arm * n_searches + layout.row_search
    dcg = np.bincount(cell, gain * layout.row_discount, n_arms * n_searches)
    lift = np.bincount(cell, ~scored * layout.row_discount, n_arms * n_searches)
    shown = np.bincount(cell, minlength=n_arms * n_searches)
    missing = np.bincount(cell, ~scored, n_arms * n_searches)
    with np.errstate(invalid="ignore", divide="ignore"):
        unshown_search = np.where(shown > 0, missing / shown, 0.0)
    in_log = layout.search_question >= 0
    sq = layout.search_question[in_log]
    per_question = np.bincount(sq, minlength=n_q).astype(np.float64)

    def question_mean(values: FloatArray) -> FloatArray:
        table = values.reshape(n_arms, n_searches)[:, in_log]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.stack([np.bincount(sq, row, n_q) for row in table]) / per_question

    ideal = _ideal(gains, layout.pair_question, n_q, layout.k)
    ideal_binary = _ideal((helpful > 0).astype(np.float64), layout.pair_question, n_q,
                          layout.k)
    top = np.full(n_q, -np.inf)
    np.maximum.at(top, layout.pair_question, gains)
    positive = (ideal > 0) & (per_question > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_dcg = question_mean(dcg)
        return {"ips": np.where(positive, mean_dcg / ideal_binary, np.nan),
                "snips": np.where(positive, mean_dcg / ideal, np.nan),
                "unshown": np.where(per_question > 0, question_mean(unshown_search), np.nan),
                "bound": np.where(positive, question_mean(lift) * top / ideal, np.nan)}


def per_question(log: ClickLog, fit: PBMFit, rankings: ArmRankings, *, k: int = 10,
                 clip: float = 0.05) -> pl.DataFrame:
    """Each arm's per-query contributions: arm, question, searches (evaluated), ips, snips
    (NaN: no helpful verdict on the question's support), unshown (the share of the arm's
    top k the logging ranker never showed for the question), bound (what those memories
    could add to snips, scored at the question's largest label with the ideal held)."""
    layout = _layout(log, rankings, k)
    label, _, helpful, _ = _labels(log, fit, clip, None)
    return _frame(layout, _values(layout, label, helpful), log.questions)


def _frame(layout: _Layout, values: dict[str, FloatArray], questions: list[str]
           ) -> pl.DataFrame:
    searches = np.bincount(layout.search_question[layout.search_question >= 0],
                           minlength=layout.n_questions)
    return pl.DataFrame({
        "arm": np.repeat(layout.arms, layout.n_questions),
        "question": np.tile(questions, len(layout.arms)),
        "searches": np.tile(searches, len(layout.arms)),
        **{name: values[name].ravel() for name in ("ips", "snips", "unshown", "bound")}})


@dataclass(frozen=True, eq=False)
class Counterfactual:
    """Every arm's counterfactual estimates on a window.

    questions : the per-query contributions (`per_question`).
    estimates : arm, estimator, n_questions, mean, ci_low, ci_high, unshown, bound,
        scored (False: bounded, its share of never-shown memories exceeds max_unshown).
    changes : arm, reference, estimator, n_questions, delta, ci_low, ci_high (paired
        per question; the percentile interval of the resamples), se (the resamples'
        standard deviation), identical (every per-question difference is 0).
    """

    questions: pl.DataFrame
    estimates: pl.DataFrame
    changes: pl.DataFrame
    clip: float
    k: int
    confidence: float
    n_resamples: int
    max_unshown: float


def counterfactual(window: ClickLog, curve: ExaminationCurve, rankings: ArmRankings, *,
                   k: int = 10, clip: float = 0.05, references: tuple[str, ...] = ("off",),
                   max_unshown: float = 0.1) -> Counterfactual:
    """IPS and SNIPS nDCG@k of each arm on the `window` searches, with percentile CIs over
    the curve's question resamples, and each arm's paired change against each reference
    present. The examination is the curve's (fitted on the whole log); the window's
    attractiveness, which the truncation's P(sel) needs, is fitted on the window with the
    curve held, in every resample with that resample's curve and question counts."""
    truncated = curve.truncated
    fit = fit_pbm(window, truncated=truncated, examination=curve.fit.examination)
    layout = _layout(window, rankings, k)
    label, _, helpful, _ = _labels(window, fit, clip, None)
    point = _values(layout, label, helpful)
    position = {q: i for i, q in enumerate(curve.questions)}
    missing = [q for q in window.questions if q not in position]
    if missing:
        raise ValueError(f"counterfactual: the window's question {missing[0]!r} is not in "
                         "the log the curve was fitted on")
    weights = curve.bootstrap.weights[:, [position[q] for q in window.questions]]
    replicates = {e: np.empty((weights.shape[0], len(layout.arms), window.n_questions))
                  for e in ESTIMATORS}
    for b, (row, refit) in enumerate(zip(weights, curve.bootstrap.fits, strict=True)):
        window_fit = fit_pbm(window, truncated=truncated, question_weights=row, start=fit,
                             examination=refit.examination,
                             max_iterations=RESAMPLE_ITERATIONS)
        values = _values(layout, *_labels(window, window_fit, clip, row)[::2])
        for e in ESTIMATORS:
            replicates[e][b] = values[e]
    tail = (1.0 - curve.confidence) / 2.0

    def interval(draws: FloatArray) -> tuple[float, float, float]:
        """Percentile interval of the resamples' weighted means over their questions, and
        their standard deviation (the bootstrap standard error)."""
        finite = ~np.isnan(draws)
        total = np.where(finite, weights, 0.0).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(finite, weights * np.nan_to_num(draws), 0.0).sum(axis=1) / total
        means = means[np.isfinite(means)]
        if means.size < 2:
            return math.nan, math.nan, math.nan
        return (float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail)),
                float(means.std(ddof=1)))

    def mean(values: FloatArray) -> float:
        finite = ~np.isnan(values)
        return float(values[finite].mean()) if finite.any() else math.nan

    estimates, changes = [], []
    arms = layout.arms
    for e in ESTIMATORS:
        for a, arm in enumerate(arms):
            low, high, _ = interval(replicates[e][:, a])
            scored = ~np.isnan(point[e][a])
            share = mean(point["unshown"][a])
            estimates.append({
                "arm": arm, "estimator": e, "n_questions": int(scored.sum()),
                "mean": mean(point[e][a]), "ci_low": low, "ci_high": high,
                "unshown": share, "bound": mean(np.where(scored, point["bound"][a], np.nan)),
                "scored": bool(share <= max_unshown)})
        for reference in (r for r in references if r in arms):
            r = arms.index(reference)
            for a, arm in enumerate(arms):
                if a == r:
                    continue
                delta = point[e][a] - point[e][r]
                low, high, se = interval(replicates[e][:, a] - replicates[e][:, r])
                finite = delta[~np.isnan(delta)]
                changes.append({
                    "arm": arm, "reference": reference, "estimator": e,
                    "n_questions": int(finite.size), "delta": mean(delta),
                    "ci_low": low, "ci_high": high, "se": se,
                    "identical": bool(finite.size > 0 and np.all(finite == 0.0))})
    return Counterfactual(_frame(layout, point, window.questions), pl.DataFrame(estimates),
                          pl.DataFrame(changes), clip, k, curve.confidence,
                          weights.shape[0], max_unshown)
