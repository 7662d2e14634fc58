"""The position-based click model fitted to logged searches, by EM, with or without the
truncation a verdict log has.

A logged search shows memories at ranks 1..k; a click is a verdict (helpful or not). The
position-based model (PBM; Richardson et al. 2007, Craswell et al. 2008; Chuklin, Markov
and de Rijke, *Click Models for Web Search*, 2015, sections 3.2 and 4) says rank r is
examined with probability gamma_r, independently, and a memory m shown for question q is
clicked when examined and attractive:

    P(click at r) = gamma_r * alpha_qm

gamma is identified only up to scale (gamma * c, alpha / c give the same clicks), so
gamma_1 = 1: the curve is the examination relative to the top rank. It is identified at all
because the same memory is shown for the same question at different ranks over time (the
logging ranker moves as feedback accrues: Agarwal et al., WSDM 2019, harvest exactly that).

**Attractiveness by latent class.** The textbook PBM gives every (question, memory) pair
its own alpha. A verdict log has few impressions per pair (most questions are asked a few
times), and then that fit is inconsistent (Neyman and Scott's incidental parameters): a pair
clicked in its one impression at rank r gets alpha = 1 and pulls gamma_r towards 1. On
simulated logs with a known curve r^-0.7 (gamma_2 = 0.62), 40 questions asked 100 times
each give gamma_2 0.65, 500 questions asked 5 times each 1.00; on a generated world (every
search, the true lists), 0.87. So, as regression-EM shares attractiveness through features
(Wang et al., WSDM 2018), here it is shared through classes: each pair belongs to one of
`classes` latent classes (2: the memories users find relevant and those they do not),
class c with attractiveness alpha_c and rate eta_c of helpful verdicts among its clicks (so
a helpful verdict is evidence of the class). The logging ranker shows relevant memories
higher, so where a pair was shown says something of its class: the classes' shares pi are
per best rank the pair was shown at (with one share for all, the never-clicked pairs low
in the lists are taken for relevant too often and the curve's tail falls: 0.14 at rank 7
for 0.26). The parameters are a few dozen whatever the number of pairs; on the same logs
gamma_2 reads 0.64, 0.64 and 0.67, and the largest error over the ten ranks of the sparse
log is 0.07.

**Truncation.** A ContextKit deployment logs no impressions: a search is known only through
its verdicts, so a search nobody clicked is missing from the log. The observed searches are
those with at least one click, and a fit that reads them as if sampled blindly overstates
examination at low ranks (on a 5,000-search world: gamma_2 0.77 against 0.53 from every
search). `truncated=True` fits the searches given that each has a click, by EM with the
missing searches as missing data (Dempster, Laird and Rubin 1977, section 4.6, truncated
samples): each observed search stands for P0_s / (1 - P0_s) expected click-less copies of
its list, P0_s = prod_i (1 - gamma_r(i) alpha_i), which enter the E-step as impressions
without a click. With latent classes P0_s takes each pair's posterior mean attractiveness
(a mean-field step: the classes of one search's pairs are treated as independent).

The E-step: each pair's class posterior from its impressions (clicks, non-clicks and the
phantom non-clicks) and verdicts; within a class, a shown memory without a click has
P(E = 1 | C = 0) = gamma (1 - alpha) / (1 - gamma alpha) and P(A = 1 | C = 0) = alpha (1 -
gamma) / (1 - gamma alpha); a click has E = A = 1. The M-step averages them per rank and per
class. Impressions are aggregated into cells (pair, rank), and the truncation's P0 is
computed once per distinct shown list; every fit reports its iterations and whether it
converged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl
from scipy import sparse

__all__ = ["CLASSES", "IMPRESSIONS", "ClickLog", "PBMFit", "fit_pbm"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# One row per memory a logged search showed: the search, its question (the unit every
# estimate resamples), the memory, its rank (1 = top), whether it got a verdict (a click)
# and whether that verdict was helpful.
IMPRESSIONS = pl.Schema({"search": pl.Int64, "question": pl.String, "memory_id": pl.String,
                         "rank": pl.Int64, "clicked": pl.Boolean, "helpful": pl.Boolean})
_FLOOR = 1e-9          # parameters stay inside (0, 1): log(0) never happens
CLASSES = 2            # latent attractiveness classes (module docstring)
# Converged: in one EM step no examination, class attractiveness or share moves more than
# _TOLERANCE. The parameters are a few, so EM is quick: on a 3,064-search world about 400
# steps from the start and tens from a nearby fit (a bootstrap resample starts at the
# whole log's fit).
_TOLERANCE = 1e-7
_MAX_ITERATIONS = 20_000


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
        cell_pair and cell_rank, shape (n_cells,), its pair and rank; pair_question and
        pair_best, shape (n_pairs,), each pair's question and the best (0-based) rank it
        was shown at.
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
    pair_best: IntArray
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
        pairs = (frame.group_by("_pair").agg(
            pl.col("question").first(), pl.col("memory_id").first(),
            _pair_question=pl.col("_question").first(), _best=pl.col("rank").min() - 1)
            .sort("_pair"))
        questions = frame.select("_question", "question").unique().sort("_question")
        return ClickLog(
            session=frame["_session"].to_numpy(), rank=rank, pair=pair,
            clicked=frame["clicked"].to_numpy(), helpful=frame["helpful"].to_numpy(),
            question=sessions["_question"].to_numpy(), cell=cell.astype(np.int64),
            cell_pair=(cells // n_ranks).astype(np.int64),
            cell_rank=(cells % n_ranks).astype(np.int64),
            pair_question=pairs["_pair_question"].to_numpy(),
            pair_best=pairs["_best"].cast(pl.Int64).to_numpy(), session_list=session_list,
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
    attractiveness : shape (n_pairs,), each (question, memory)'s posterior mean alpha.
    selected : shape (n_sessions,), P(the search has a click) under the model: 1 - P0.
    classes : per class, shape (n_classes,): alpha (attractiveness) and helpful (eta, the
        helpful share of its clicks); share (pi), shape (n_ranks, n_classes), the classes'
        shares among the pairs whose best rank is r; posterior, (n_pairs, n_classes).
    truncated, iterations, converged, log_likelihood : how it was fitted (the likelihood
        of the observed clicks and verdicts, the truncation's term by the mean field).
    """

    examination: FloatArray
    attractiveness: FloatArray
    selected: FloatArray
    truncated: bool
    iterations: int
    converged: bool
    log_likelihood: float
    alpha: FloatArray
    share: FloatArray
    helpful: FloatArray
    posterior: FloatArray


@dataclass(frozen=True, eq=False)
class _Stats:
    """The weighted sufficient statistics of one fit: per cell the impressions and
    clicks, per pair its clicks and helpful verdicts, per distinct list its weight."""

    shown: FloatArray
    clicks: FloatArray
    pair_clicks: FloatArray
    pair_helpful: FloatArray
    list_weight: FloatArray


def _stats(log: ClickLog, weights: FloatArray) -> _Stats:
    w = weights[log.session]
    n_cells = log.cell_pair.size
    return _Stats(np.bincount(log.cell, w, n_cells),
                  np.bincount(log.cell, w * log.clicked, n_cells),
                  np.bincount(log.pair, w * log.clicked, log.n_pairs),
                  np.bincount(log.pair, w * (log.clicked & log.helpful), log.n_pairs),
                  np.bincount(log.session_list, weights, log.lists.shape[0]))


@dataclass
class _Params:
    gamma: FloatArray
    alpha: FloatArray
    share: FloatArray
    helpful: FloatArray

    def vector(self) -> FloatArray:
        return np.concatenate([self.gamma, self.alpha, self.share.ravel()])


def _no_click(log: ClickLog, gamma: FloatArray, mean_alpha: FloatArray) -> FloatArray:
    """Per distinct list: P(no click) with each pair's mean attractiveness."""
    u = gamma[log.cell_rank] * mean_alpha[log.cell_pair]
    p0: FloatArray = np.exp(log.lists @ np.log1p(-np.minimum(u, 1.0 - _FLOOR)))
    return p0


def _posterior(log: ClickLog, s: _Stats, p: _Params, phantom: FloatArray
               ) -> tuple[FloatArray, float]:
    """Each pair's class posterior, shape (n_pairs, n_classes), and the log-likelihood of
    the clicks and verdicts (the phantoms included)."""
    g = p.gamma[log.cell_rank][:, None]
    u = np.clip(g * p.alpha[None, :], _FLOOR, 1.0 - _FLOOR)
    misses = (s.shown - s.clicks + phantom)[:, None]
    cell = s.clicks[:, None] * np.log(u) + misses * np.log1p(-u)
    verdicts = (s.pair_helpful[:, None] * np.log(p.helpful)[None, :]
                + (s.pair_clicks - s.pair_helpful)[:, None] * np.log1p(-p.helpful)[None, :])
    joint = np.stack([np.bincount(log.cell_pair, cell[:, c], log.n_pairs)
                      for c in range(p.alpha.size)], axis=1) + verdicts + np.log(
        p.share[log.pair_best])
    top = joint.max(axis=1, keepdims=True)
    total = top[:, 0] + np.log(np.exp(joint - top).sum(axis=1))
    return np.exp(joint - total[:, None]), float(total.sum())


def _step(log: ClickLog, s: _Stats, p: _Params, previous: FloatArray, truncated: bool,
          fit_examination: bool) -> tuple[_Params, FloatArray, float]:
    """One EM step from the parameters `p` and the previous step's class posterior;
    returns the new parameters, the posterior and the log-likelihood at `p`."""
    phantom = np.zeros(s.shown.size)
    penalty = 0.0
    if truncated:  # each search stands for P0 / (1 - P0) click-less copies of its list
        p0 = _no_click(log, p.gamma, previous @ p.alpha)
        copies = s.list_weight * p0 / np.maximum(1.0 - p0, _FLOOR)
        phantom = log.lists.T @ copies
        penalty = float(np.sum(s.list_weight * np.log1p(-np.minimum(p0, 1.0 - _FLOOR))))
    post, value = _posterior(log, s, p, phantom)
    g = p.gamma[log.cell_rank][:, None]
    a = p.alpha[None, :]
    u = np.clip(g * a, _FLOOR, 1.0 - _FLOOR)
    weight = post[log.cell_pair]                               # (n_cells, n_classes)
    clicks, misses = s.clicks[:, None], (s.shown - s.clicks + phantom)[:, None]
    total = (s.shown + phantom)[:, None] * weight
    examined = (weight * (clicks + misses * g * (1.0 - a) / (1.0 - u))).sum(axis=1)
    attracted = (weight * (clicks + misses * a * (1.0 - g) / (1.0 - u))).sum(axis=0)
    k = p.gamma.size
    rank_total = np.bincount(log.cell_rank, total.sum(axis=1), k)
    gamma = p.gamma.copy()
    if fit_examination:
        seen = rank_total > 0  # a rank with no weight (left out of a resample) keeps its value
        gamma[seen] = np.bincount(log.cell_rank, examined, k)[seen] / rank_total[seen]
    alpha = attracted / np.maximum(total.sum(axis=0), _FLOOR)
    present = (np.bincount(log.cell_pair, s.shown, log.n_pairs) > 0).astype(np.float64)
    per_best = np.stack([np.bincount(log.pair_best, post[:, c] * present, k)
                         for c in range(p.alpha.size)], axis=1)
    counted = np.bincount(log.pair_best, present, k)
    share = p.share.copy()  # a best rank no pair has (in this resample) keeps its value
    share[counted > 0] = per_best[counted > 0] / counted[counted > 0, None]
    helpful = ((post * s.pair_helpful[:, None]).sum(axis=0)
               / np.maximum((post * s.pair_clicks[:, None]).sum(axis=0), _FLOOR))
    # gamma_1 = 1: move along the ridge gamma * c, alpha / c, which leaves every click
    # probability as it is.
    scale = max(gamma[0], _FLOOR) if fit_examination else 1.0
    new = _Params(np.clip(np.minimum(gamma / scale, 1.0), _FLOOR, 1.0),
                  np.clip(alpha * scale, _FLOOR, 1.0 - _FLOOR),
                  np.clip(share, _FLOOR, 1.0), np.clip(helpful, _FLOOR, 1.0 - _FLOOR))
    return new, post, value - penalty


def _extrapolate(p0: _Params, p1: _Params, p2: _Params, a: float) -> _Params:
    """p0 - 2 a (p1 - p0) + a^2 (p2 - 2 p1 + p0), field by field, kept in range."""
    def ex(x0: FloatArray, x1: FloatArray, x2: FloatArray, high: float) -> FloatArray:
        out: FloatArray = np.clip(x0 - 2 * a * (x1 - x0) + a * a * (x2 - 2 * x1 + x0),
                                  _FLOOR, high)
        return out
    gamma = ex(p0.gamma, p1.gamma, p2.gamma, 1.0)
    share = ex(p0.share, p1.share, p2.share, 1.0)
    return _Params(gamma / gamma[0] if p2.gamma[0] == 1.0 else gamma,
                   ex(p0.alpha, p1.alpha, p2.alpha, 1.0 - _FLOOR),
                   share / share.sum(axis=1, keepdims=True),
                   ex(p0.helpful, p1.helpful, p2.helpful, 1.0 - _FLOOR))


def _start(log: ClickLog, s: _Stats, classes: int) -> _Params:
    k = log.n_ranks
    gamma = np.clip(1.0 / np.arange(1, k + 1), _FLOOR, 1.0)
    rate = float(s.clicks.sum() / max(s.shown.sum(), _FLOOR))
    alpha = np.clip(np.geomspace(max(rate / 2, 0.01), 0.9, classes), _FLOOR, 1 - _FLOOR)
    return _Params(gamma, alpha, np.full((k, classes), 1.0 / classes),
                   np.linspace(0.2, 0.9, classes))


def fit_pbm(log: ClickLog, *, truncated: bool, question_weights: FloatArray | None = None,
            start: PBMFit | None = None, examination: FloatArray | None = None,
            classes: int = CLASSES, max_iterations: int = _MAX_ITERATIONS) -> PBMFit:
    """The PBM of `log` with latent attractiveness classes (module docstring), by EM.

    question_weights : shape (n_questions,), optional; each question's searches count
        that many times (a bootstrap resample); a question of weight 0 drops out.
    start : a fit of the same log to start from (a bootstrap replicate starts from the
        fit on the whole log).
    examination : shape (n_ranks,) at least, optional; hold the curve at these values
        (gamma_1 = 1) and fit the rest: the curve of a larger log applied to a window of it.
    """
    if classes < 1:
        raise ValueError(f"fit_pbm: `classes >= 1` must hold, but got {classes}")
    weights = log.session_weights(question_weights)
    stats = _stats(log, weights)
    k = log.n_ranks
    if start is not None and start.alpha.size == classes:
        params = _Params(np.clip(np.nan_to_num(start.examination, nan=0.5)[:k], _FLOOR, 1.0),
                         start.alpha.copy(), start.share.copy(), start.helpful.copy())
    else:
        params = _start(log, stats, classes)
    if examination is not None:
        held = np.asarray(examination, dtype=np.float64)
        if held.size < k or held[0] != 1.0:
            raise ValueError(f"fit_pbm: the held examination needs {k} values with rank 1 "
                             f"= 1, but got {held.tolist()}")
        params.gamma = np.clip(np.nan_to_num(held[:k], nan=_FLOOR), _FLOOR, 1.0)
    posterior = (start.posterior if start is not None and start.alpha.size == classes
                 else params.share[log.pair_best])
    fit_gamma = examination is None

    def step(p: _Params, post: FloatArray) -> tuple[_Params, FloatArray, float]:
        return _step(log, stats, p, post, truncated, fit_gamma)

    converged, iterations, value = False, 0, float("nan")
    while iterations < max_iterations:
        # SQUAREM (Varadhan and Roland 2008, S3) on the parameters: two EM steps, an
        # extrapolation along them and one more EM step from there, kept when the
        # likelihood there is no lower than after the first EM step (else the two steps)
        p1, post1, value = step(params, posterior)
        p2, post2, value1 = step(p1, post1)
        iterations += 2
        moved_to, moved_post = p2, post2
        r = p1.vector() - params.vector()
        v = p2.vector() - 2 * p1.vector() + params.vector()
        if (nv := float(np.sqrt(v @ v))) > 0 and (a := -float(np.sqrt(r @ r)) / nv) < -1.0:
            trial = _extrapolate(params, p1, p2, a)
            p3, post3, value2 = step(trial, post2)
            iterations += 1
            if value2 >= value1:
                moved_to, moved_post = p3, post3
        moved = float(np.max(np.abs(moved_to.vector() - params.vector())))
        params, posterior = moved_to, moved_post
        if moved < _TOLERANCE:
            converged = True
            break
    gamma = params.gamma.copy()
    if examination is None:
        gamma[0] = 1.0
        gamma[np.bincount(log.rank, minlength=k) == 0] = np.nan  # nothing shown there
    mean_alpha = posterior @ params.alpha
    selected = 1.0 - _no_click(log, np.nan_to_num(gamma, nan=0.0), mean_alpha)[log.session_list]
    return PBMFit(gamma, mean_alpha, selected, truncated, iterations, converged, value,
                  params.alpha, params.share, params.helpful, posterior)
