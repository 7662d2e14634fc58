"""The position-based click model fitted to logged searches, by EM, with or without the
truncation a verdict log has.

A logged search shows memories at ranks 1..k; a click is a verdict (helpful or not). The
position-based model (PBM; Richardson et al. 2007, Craswell et al. 2008; Chuklin, Markov
and de Rijke, *Click Models for Web Search*, 2015, sections 3.2 and 4) says rank r is
examined with probability gamma_r, independently, and a memory m shown for question q is
clicked when examined and attractive, with probability alpha_qm:

    P(click at r) = gamma_r * alpha_qm

gamma is identified only up to scale (gamma * c, alpha / c give the same clicks), so
gamma_1 = 1: the curve is the examination relative to the top rank. It is identified at all
because the same memory is shown for the same question at different ranks over time (the
logging ranker moves as feedback accrues: Agarwal et al., WSDM 2019, harvest exactly that).

**Truncation.** A ContextKit deployment logs no impressions: a search is known only through
its verdicts, so a search nobody clicked is missing from the log. The observed searches are
those with at least one click, and the naive fit over them reads every click as if the
search had been sampled blindly, overstating examination at low ranks (on a 5,000-search
world: gamma_2 0.77 against 0.53 from every search). `truncated=True` maximises the
likelihood of the observed searches given that each has a click,

    sum_s [ sum_i log P(c_si) - log(1 - P0_s) ],  P0_s = prod_i (1 - gamma_r(i) alpha_qm(i)),

by EM with the missing searches as missing data (Dempster, Laird and Rubin 1977, section
4.6, truncated samples): each observed search stands for P0_s / (1 - P0_s) expected
click-less searches with the same list, which enter the E-step as searches without clicks.

The E-step for a shown memory without a click: P(E = 1 | C = 0) = gamma (1 - alpha) / (1 -
gamma alpha), P(A = 1 | C = 0) = alpha (1 - gamma) / (1 - gamma alpha); a click has E = A = 1.
The M-step averages them per rank and per (question, memory). Impressions are aggregated
into cells (pair, rank) so an iteration costs the number of cells, plus one pass over the
impressions for the truncation's per-search P0. EM's steps are accelerated with SQUAREM
(Varadhan and Roland 2008, scheme S3), keeping a step only when the likelihood does not
fall; every fit reports its iterations and whether it converged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
from scipy import sparse

from msprlab.engine.jit import exact_njit

__all__ = ["IMPRESSIONS", "ClickLog", "PBMFit", "fit_pbm"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# One row per memory a logged search showed: the search, its question (the unit every
# estimate resamples), the memory, its rank (1 = top), whether it got a verdict (a click)
# and whether that verdict was helpful.
IMPRESSIONS = pl.Schema({"search": pl.Int64, "question": pl.String, "memory_id": pl.String,
                         "rank": pl.Int64, "clicked": pl.Boolean, "helpful": pl.Boolean})
_FLOOR = 1e-9          # parameters stay inside (0, 1): log(0) never happens
# Converged: in one accelerated step no examination value moves more than _TOLERANCE and
# the log-likelihood rises by less than _RISE of itself. Attractiveness is left out: a
# memory clicked in every search it was shown in drifts towards 1 for thousands of steps
# while the likelihood no longer moves. On a 3,064-search world the fit stops after 792
# steps with the curve equal to 4 decimals to one run 30x longer; a bootstrap resample
# (starting from that fit) needs 100-400. Tighter, some resamples crawl along a ridge
# where the likelihood is flat for 30,000 steps (the curve then moves by 0.01).
_TOLERANCE = 1e-5
_RISE = 1e-7
_MAX_ITERATIONS = 100_000


def _require(frame: pl.DataFrame) -> None:
    problems = [f"missing column {c!r}" for c in IMPRESSIONS if c not in frame.columns]
    problems += [f"column {c!r} is {frame.schema[c]}, expected {t}"
                 for c, t in IMPRESSIONS.items()
                 if c in frame.columns and frame.schema[c] != t]
    if problems:
        raise ValueError("impressions: " + "; ".join(problems)
                         + f" (found columns {frame.columns})")


@dataclass(frozen=True, eq=False)
class ClickLog:
    """Impressions as arrays for the fit (`of` builds it from an `IMPRESSIONS` frame).

    session, rank, pair, clicked, helpful : shape (n_impressions,); rank is 0-based, pair
        indexes `pairs`' rows (question, memory_id).
    question : shape (n_sessions,), each session's question (indexes `questions`).
    cell : shape (n_impressions,), the (pair, rank) cell of each impression;
        cell_pair and cell_rank, shape (n_cells,), its pair and rank; pair_question, shape
        (n_pairs,), each pair's question.
    session_list : shape (n_sessions,), the distinct shown list each session is (the same
        question and the same memories at the same ranks); lists, (n_lists, n_cells), which
        cells each list holds: the truncation's P0 is a list's, computed once per list.
    searches : the `search` id of each session.
    """

    session: IntArray
    rank: IntArray
    pair: IntArray
    clicked: npt.NDArray[np.bool_]
    helpful: npt.NDArray[np.bool_]
    question: IntArray
    cell: IntArray
    cell_pair: IntArray
    cell_rank: IntArray
    pair_question: IntArray
    session_list: IntArray
    lists: sparse.csr_array
    pairs: pl.DataFrame      # pair index -> question, memory_id
    questions: list[str]
    searches: IntArray
    n_ranks: int

    @staticmethod
    def of(impressions: pl.DataFrame) -> ClickLog:
        _require(impressions)
        if impressions.height == 0:
            raise ValueError("impressions: no logged search to fit (the frame is empty)")
        bad = impressions.filter(pl.col("rank") < 1)
        if bad.height:
            raise ValueError(f"impressions: `rank >= 1` must hold, but got rank "
                             f"{bad['rank'][0]} (search {bad['search'][0]})")
        frame = impressions.with_columns(
            _session=pl.col("search").rank("dense").cast(pl.Int64) - 1,
            _question=pl.col("question").rank("dense").cast(pl.Int64) - 1,
            _pair=pl.struct("question", "memory_id").rank("dense").cast(pl.Int64) - 1)
        duplicated = frame.select("_session", "_pair").is_duplicated()
        if duplicated.any():
            row = frame.filter(duplicated).row(0, named=True)
            raise ValueError(f"impressions: search {row['search']} shows memory "
                             f"{row['memory_id']!r} twice")
        n_ranks = int(frame["rank"].max())  # type: ignore[arg-type]
        rank = frame["rank"].to_numpy().astype(np.int64) - 1
        pair = frame["_pair"].to_numpy()
        cell_key = pair * n_ranks + rank
        cells, cell = np.unique(cell_key, return_inverse=True)
        sessions = frame.select("_session", "_question", "search").unique().sort("_session")
        members = (frame.with_columns(_cell=pl.Series(cell.astype(np.int64)))
                   .group_by("_session").agg(pl.col("_cell").sort()).sort("_session"))
        session_list = (members["_cell"].rank("dense").cast(pl.Int64) - 1).to_numpy()
        first = np.unique(session_list, return_index=True)[1]
        cells_of = members["_cell"].to_list()
        rows = np.repeat(np.arange(first.size), [len(cells_of[i]) for i in first])
        columns = np.concatenate([cells_of[i] for i in first])
        lists = sparse.csr_array((np.ones(rows.size), (rows, columns)),
                                 shape=(first.size, cells.size))
        pairs = (frame.select("_pair", "question", "memory_id",
                              _pair_question=pl.col("_question")).unique().sort("_pair"))
        questions = frame.select("_question", "question").unique().sort("_question")
        return ClickLog(
            session=frame["_session"].to_numpy(), rank=rank, pair=pair,
            clicked=frame["clicked"].to_numpy(), helpful=frame["helpful"].to_numpy(),
            question=sessions["_question"].to_numpy(), cell=cell.astype(np.int64),
            cell_pair=(cells // n_ranks).astype(np.int64),
            cell_rank=(cells % n_ranks).astype(np.int64),
            pair_question=pairs["_pair_question"].to_numpy(), session_list=session_list,
            lists=lists, pairs=pairs.drop("_pair"), questions=questions["question"].to_list(),
            searches=sessions["search"].to_numpy(), n_ranks=n_ranks)

    @property
    def n_sessions(self) -> int:
        return int(self.question.size)

    @property
    def n_pairs(self) -> int:
        return self.pairs.height

    @property
    def n_questions(self) -> int:
        return len(self.questions)

    def session_weights(self, question_weights: FloatArray | None) -> FloatArray:
        """Each session's weight: its question's (a bootstrap count), 1 without."""
        if question_weights is None:
            return np.ones(self.n_sessions)
        return np.asarray(question_weights, dtype=np.float64)[self.question]


@dataclass(frozen=True, eq=False)
class PBMFit:
    """A fitted position-based model.

    examination : shape (n_ranks,), gamma_r with gamma_1 = 1; NaN at a rank nothing was
        shown at.
    attractiveness : shape (n_pairs,), alpha per (question, memory) of the click log.
    selected : shape (n_sessions,), P(the search has a click) under the model: 1 - P0.
    truncated, iterations, converged, log_likelihood : how it was fitted.
    """

    examination: FloatArray
    attractiveness: FloatArray
    selected: FloatArray
    truncated: bool
    iterations: int
    converged: bool
    log_likelihood: float


def _squarem_em(cell_rank: IntArray, cell_pair: IntArray, shown: FloatArray,
                clicks: FloatArray, indptr: IntArray, indices: IntArray,
                list_weight: FloatArray, truncated: bool, fit_examination: bool,
                x: FloatArray, n_ranks: int,
                max_iterations: int, tolerance: float, rise: float,
                floor: float) -> tuple[FloatArray, int, bool, float]:
    """The EM loop with SQUAREM steps, compiled by numba (`_kernel`): x = (gamma, alpha)."""
    n_cells, n_lists = cell_rank.size, indptr.size - 1
    n_pairs = x.size - n_ranks
    u = np.empty(n_cells)
    miss_log = np.empty(n_cells)  # log(1 - u), once per cell: the lists sum them
    phantom = np.zeros(n_cells)

    def clip(v: float) -> float:
        return min(max(v, floor), 1.0 - floor)

    def fill_u(x: FloatArray) -> None:
        for c in range(n_cells):
            u[c] = x[cell_rank[c]] * x[n_ranks + cell_pair[c]]
            miss_log[c] = np.log1p(-u[c])

    def no_click(list_index: int) -> float:
        total = 0.0
        for j in range(indptr[list_index], indptr[list_index + 1]):
            total += miss_log[indices[j]]
        return np.exp(total)

    def value(x: FloatArray) -> float:
        fill_u(x)
        out = 0.0
        for c in range(n_cells):
            out += clicks[c] * np.log(u[c]) + (shown[c] - clicks[c]) * miss_log[c]
        if truncated:
            for list_index in range(n_lists):
                out -= list_weight[list_index] * np.log1p(-no_click(list_index))
        return out

    def step(x: FloatArray) -> FloatArray:
        fill_u(x)
        phantom[:] = 0.0
        if truncated:  # each session stands for P0 / (1 - P0) click-less copies of itself
            for list_index in range(n_lists):
                p0 = no_click(list_index)
                copies = list_weight[list_index] * p0 / max(1.0 - p0, floor)
                for j in range(indptr[list_index], indptr[list_index + 1]):
                    phantom[indices[j]] += copies
        acc = np.zeros(x.size)
        tot = np.zeros(x.size)
        for c in range(n_cells):
            r, p = cell_rank[c], n_ranks + cell_pair[c]
            g, a = x[r], x[p]
            miss = shown[c] - clicks[c] + phantom[c]
            total = shown[c] + phantom[c]
            acc[r] += clicks[c] + miss * g * (1.0 - a) / (1.0 - u[c])
            acc[p] += clicks[c] + miss * a * (1.0 - g) / (1.0 - u[c])
            tot[r] += total
            tot[p] += total
        new = x.copy()  # a rank or pair with no weight (left out of a resample) keeps its value
        for i in range(0 if fit_examination else n_ranks, x.size):
            if tot[i] > 0.0:
                new[i] = acc[i] / tot[i]
        # gamma_1 = 1: move along the ridge gamma * c, alpha / c, which leaves every click
        # probability as it is.
        scale = max(new[0], floor) if fit_examination else 1.0
        for i in range(n_ranks):
            new[i] = clip(min(new[i] / scale, 1.0))
        for i in range(n_ranks, n_ranks + n_pairs):
            new[i] = clip(new[i] * scale)
        return new

    iterations, converged, current = 0, False, value(x)
    while iterations < max_iterations:
        x1 = step(x)
        x2 = step(x1)
        iterations += 2
        r = x1 - x
        v = x2 - 2.0 * x1 + x
        nv = np.sqrt(np.dot(v, v))
        moved_to = x2
        accepted = False
        if nv > 0.0:
            steplength = -np.sqrt(np.dot(r, r)) / nv
            if steplength < -1.0:
                # SQUAREM S3: extrapolate, then one EM step; kept when the likelihood has
                # not fallen (Varadhan and Roland's monotone variant), else EM's two steps
                trial = x - 2.0 * steplength * r + steplength * steplength * v
                for i in range(trial.size):
                    trial[i] = clip(trial[i])
                top = trial[0] if fit_examination else 1.0
                for i in range(n_ranks):
                    trial[i] = min(trial[i] / top, 1.0) if fit_examination else x[i]
                trial = step(trial)
                iterations += 1
                trial_value = value(trial)
                if trial_value >= current:
                    moved_to, moved_value, accepted = trial, trial_value, True
        if not accepted:
            moved_value = value(x2)
        moved = 0.0
        for i in range(n_ranks):
            moved = max(moved, abs(moved_to[i] - x[i]))
        gain = moved_value - current
        x, current = moved_to, moved_value
        if moved < tolerance and gain < rise * abs(current):
            converged = True
            break
    return x, iterations, converged, current


@functools.cache
def _kernel() -> Callable[..., Any]:
    return exact_njit(_squarem_em)


def fit_pbm(log: ClickLog, *, truncated: bool, question_weights: FloatArray | None = None,
            start: PBMFit | None = None, examination: FloatArray | None = None,
            max_iterations: int = _MAX_ITERATIONS) -> PBMFit:
    """The maximum-likelihood PBM of `log` (module docstring), by accelerated EM.

    examination : shape (n_ranks,) at least, optional; hold the curve at these values
        (gamma_1 = 1) and fit the attractiveness alone: the curve of a larger log applied
        to a window of it.

    question_weights : shape (n_questions,), optional; each question's searches count
        that many times (a bootstrap resample). A question of weight 0 drops out: its
        pairs keep their starting attractiveness.
    start : a fit of the same log to start from (a bootstrap replicate starts from the
        fit on the whole log).
    """
    weights = log.session_weights(question_weights)
    w = weights[log.session]
    n_cells, k = log.cell_pair.size, log.n_ranks
    shown = np.bincount(log.cell, w, n_cells)
    clicks = np.bincount(log.cell, w * log.clicked, n_cells)
    list_weight = np.bincount(log.session_list, weights, log.lists.shape[0])
    if start is None:
        gamma = np.clip(1.0 / np.arange(1, k + 1), _FLOOR, 1.0 - _FLOOR)
        by_pair = np.bincount(log.cell_pair, clicks, log.n_pairs)
        seen = np.bincount(log.cell_pair, shown, log.n_pairs)
        alpha = np.clip((by_pair + 0.5) / (seen + 1.0), _FLOOR, 1.0 - _FLOOR)
    else:
        gamma = np.clip(np.nan_to_num(start.examination, nan=0.5), _FLOOR, 1.0 - _FLOOR)
        alpha = start.attractiveness.copy()
    if examination is not None:
        held = np.asarray(examination, dtype=np.float64)
        if held.size < k or held[0] != 1.0:
            raise ValueError(f"fit_pbm: the held examination needs {k} values with rank 1 "
                             f"= 1, but got {held.tolist()}")
        gamma = np.clip(np.nan_to_num(held[:k], nan=_FLOOR), _FLOOR, 1.0)
    x, iterations, converged, value = _kernel()(
        log.cell_rank, log.cell_pair, shown, clicks, log.lists.indptr.astype(np.int64),
        log.lists.indices.astype(np.int64), list_weight, truncated, examination is None,
        np.concatenate([gamma, alpha]), k, max_iterations, _TOLERANCE, _RISE, _FLOOR)
    gamma, alpha = x[:k].copy(), x[k:].copy()
    gamma[0] = 1.0
    if examination is None:
        gamma[np.bincount(log.rank, minlength=k) == 0] = np.nan  # nothing shown there
    u = np.nan_to_num(gamma, nan=0.0)[log.cell_rank] * alpha[log.cell_pair]
    selected = 1.0 - np.exp(log.lists @ np.log1p(-u))[log.session_list]
    return PBMFit(gamma, alpha, selected, truncated, int(iterations), bool(converged),
                  float(value))
