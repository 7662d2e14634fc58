"""Feedback logs from judgments: a query stream replayed through a logging ranker.

`simulate_log` turns a judged corpus (memories, embeddings, edges, queries, qrels) into an
event log, in a closed loop through the engine:

1. **Timeline.** Every memory is added at its `created_at` (a `memory_added` event; a
   `memory_deleted` event at `deleted_at` archives it and removes it from the vector store).
   An edge becomes live once it and both of its endpoints exist.
2. **Query stream.** Each query is asked as a Poisson process from the moment it is
   answerable (every memory judged relevant to it, its evidence, exists; a query without
   evidence once its owner has a memory), at a rate proportional to its Zipf popularity
   `rank ** -zipf_s` (ranks a seeded permutation of the queries); once every query is
   answerable, searches come one per `mean_gap_seconds` on average. A search never starts
   before the previous session has ended. People ask again: popular queries repeat, with
   case and leading/trailing whitespace variants that `hash_query` folds together (inner
   whitespace is never changed: the library would see another query).
3. **Seeds.** `seeds_fn(query_id)` gives (memory id, score) pairs; ids not in the vector
   store at that time are dropped. The default is the cosine between the query vector and
   the embeddings of the memories in the query's owner scope (every non-null of user_id,
   agent_id and run_id equal) that exist at that time, top 10, ties in memory order.
4. **Search.** The engine's `search` runs on the state built so far; its results, cut to
   `limit`, are the shown ranking (a `search` event). The searcher's tenant_id and role
   (the most common among the owner's memories, where they carry one) go in its filters,
   as a multi-tenant deployment passes them: role policies judge results against them.
5. **Access.** When the logging ranker counts accesses (MSPR and `mspr.frequency` on, the
   graph path taken), the engine bumped the access count of every result it returned; each
   bump is an `access` event at the search's timestamp (after the search on the timeline),
   so a replay in `logged` frequency mode can apply exactly the counts the log produced.
6. **Reaction.** The click model reads the graded relevance of each shown memory (0 when
   unjudged) and draws clicks; the i-th click (top-down) is a `click` event 20 s x (i + 1)
   after the search. The verdict model judges clicked memories: a `feedback` event 5 s after
   its click, applied to the state with `record_feedback`, so later searches see it
   (personal boost, relevance bump, success history).

Access, click and feedback events carry the query_id of the search that showed the memory.
The query vectors are stored with the log (`query_embeddings`, float32 like the memory
embeddings) and the simulation uses them as stored, so a replay finds the same seeds.
Randomness comes from one `numpy.random.Generator` seeded by `seed`, so the same inputs
give identical frames. Events at the same timestamp are ordered as `schema.EVENT_KINDS`
(memory events, search, feedback, access, click); `seq` and `event_id` are both the
position on that timeline.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from msprlab.engine import (
    EngineConfig,
    SearchError,
    SearchRequest,
    Seed,
    new_state,
    record_feedback,
    search,
)
from msprlab.engine.config import as_dict
from msprlab.engine.search import vector_hits
from msprlab.engine.state import EngineState

from .clicks import ClickModel, VerdictModel
from .schema import EVENTS, QUERY_EMBEDDINGS, Dataset
from .timeline import (
    Corpus,
    Timeline,
    collector_paused,
    corpus_of,
    owner_cosine_seeds,
    project_queries,
    to_datetime,
    to_us,
    token_incidence,
    unit_rows,
)

__all__ = ["SeedsFn", "SimulatedUsers", "complete_events", "draw_stream", "memory_events",
           "order_events", "simulate_log", "token_incidence"]

SeedsFn = Callable[[str], Sequence[tuple[str, float]]]

CLICK_STEP_US = 20_000_000   # the i-th click of a session, 20 s x (i + 1) after the search
VERDICT_DELAY_US = 5_000_000  # a verdict, 5 s after its click
SESSION_GAP_US = 1_000_000    # the next search, at least 1 s after the previous session
# Query text as typed again: same hash_query (strip + lower), different strings.
_VARIANTS: tuple[Callable[[str], str], ...] = (
    lambda q: q, str.lower, str.upper, lambda q: " " + q, lambda q: q + "  ",
    lambda q: "\t" + q.lower() + " ")
_VARIANT_P = (0.5, 0.1, 0.1, 0.1, 0.1, 0.1)
_MEMORY_KINDS = ("memory_added", "memory_deleted")


def memory_events(memories: pl.DataFrame) -> pl.DataFrame:
    """One `memory_added` per memory at created_at, one `memory_deleted` per deleted_at.

    Columns of `schema.EVENTS`; `event_id` and `seq` are placeholders until `order_events`.
    """
    owners = ["memory_id", "user_id", "agent_id", "run_id"]
    added = memories.select(pl.col("created_at").alias("ts"), *owners,
                            kind=pl.lit("memory_added"))
    deleted = memories.filter(pl.col("deleted_at").is_not_null()).select(
        pl.col("deleted_at").alias("ts"), *owners, kind=pl.lit("memory_deleted"))
    frame = pl.concat([added, deleted])
    return complete_events(frame)


def complete_events(frame: pl.DataFrame) -> pl.DataFrame:
    """Cast to the events schema, adding the missing columns as nulls."""
    return frame.with_columns(
        [pl.lit(None).alias(c) for c in EVENTS if c not in frame.columns]).select(
        [pl.col(c).cast(t) for c, t in EVENTS.items()])


def order_events(events: pl.DataFrame) -> pl.DataFrame:
    """Sort by (ts, kind in EVENT_KINDS order, previous order) and renumber seq/event_id."""
    ordered = events.with_row_index("_order").sort(
        [pl.col("ts"), pl.col("kind").to_physical(), pl.col("_order")])
    n = ordered.height
    return ordered.drop("_order").with_columns(
        event_id=pl.int_range(n, dtype=pl.Int64), seq=pl.int_range(n, dtype=pl.Int64)
    ).select(list(EVENTS))


# ---- the query stream ---------------------------------------------------------------------
def draw_stream(rng: np.random.Generator, answerable_us: npt.NDArray[np.float64],
                 n_searches: int, zipf_s: float, start_us: int,
                 mean_gap_seconds: float) -> tuple[npt.NDArray[np.int64],
                                                   npt.NDArray[np.int64]]:
    """Query rows and earliest times of the searches (microseconds, naive UTC).

    Each query is asked as a Poisson process of rate proportional to its Zipf weight from
    the moment it is answerable; the total rate, once every query is, is one search per
    `mean_gap_seconds`. Drawn by thinning: a Poisson stream of that total rate whose k-th
    draw picks a query by weight and is kept when that query is answerable by then.
    """
    n_queries = answerable_us.size
    popularity = (rng.permutation(n_queries) + 1.0) ** -zipf_s
    share = popularity / popularity.sum()
    picks: list[npt.NDArray[np.int64]] = []
    times: list[npt.NDArray[np.float64]] = []
    clock, kept = float(start_us), 0
    while kept < n_searches:
        size = max(1024, 2 * (n_searches - kept))
        moments = clock + np.cumsum(rng.exponential(mean_gap_seconds * 1e6, size=size))
        drawn = rng.choice(n_queries, size=size, p=share)
        open_ = answerable_us[drawn] <= moments
        picks.append(drawn[open_])
        times.append(moments[open_])
        kept += int(open_.sum())
        clock = float(moments[-1])
    return (np.concatenate(picks)[:n_searches].astype(np.int64),
            np.floor(np.concatenate(times)[:n_searches]).astype(np.int64))


def _check(name: str, ok: bool, rule: str, value: object) -> None:
    if not ok:
        raise ValueError(f"simulate_log: `{rule}` must hold, but got {name}={value!r}")


def simulate_log(
    dataset: Dataset, *, logging_config: EngineConfig, click_model: ClickModel,
    n_searches: int, seed: int, verdict_model: VerdictModel | None = None,
    zipf_s: float = 1.1, start: datetime | None = None, mean_gap_seconds: float = 3600.0,
    limit: int = 10, seeds_fn: SeedsFn | None = None,
    query_vectors: npt.ArrayLike | None = None, query_vectors_id: str | None = None,
) -> Dataset:
    """Replay a Zipf query stream through the logging ranker; return the corpus plus the log.

    Parameters
    ----------
    dataset : Dataset
        memories, embeddings (one embedder), edges, queries and qrels. Its events may hold
        memory events only; they are kept as they are, while the engine state follows the
        memories' created_at and deleted_at (text updates are not replayed).
    logging_config : EngineConfig
        The ranker that produced the log (the "logging policy").
    click_model, verdict_model : how users react (`msprlab.datasets.clicks`); the verdict
        model defaults to `VerdictModel()`.
    n_searches, seed, zipf_s, start, mean_gap_seconds, limit : the stream (module docstring).
        `start` defaults to the first moment a query is answerable.
    seeds_fn : query_id -> [(memory_id, score)], optional; default owner-scoped cosine.
    query_vectors : array, shape (n_queries, dim), optional
        Query embeddings aligned with `dataset.queries` rows (e.g.
        `embedder.embed(ds.queries["text"].to_list())`); by default projected from the text
        (`project_queries`).
    query_vectors_id : str, optional
        What made `query_vectors` (an embedder's recipe), hashed into the digest instead of
        their bytes, which BLAS may round differently on another machine.

    Returns
    -------
    Dataset
        The input tables and an events table: memory events merged with the new search,
        access and feedback events, `event_id` dense in (ts, seq) order.
    """
    verdicts = VerdictModel() if verdict_model is None else verdict_model
    _check("n_searches", _is_int(n_searches) and n_searches >= 1, "n_searches >= 1",
           n_searches)
    _check("zipf_s", _is_number(zipf_s) and zipf_s >= 0, "zipf_s >= 0", zipf_s)
    _check("mean_gap_seconds", _is_number(mean_gap_seconds) and mean_gap_seconds > 0,
           "mean_gap_seconds > 0", mean_gap_seconds)
    _check("limit", _is_int(limit) and limit >= 1, "limit >= 1", limit)
    logged = dataset.events.filter(~pl.col("kind").cast(pl.String).str.starts_with("memory_"))
    if logged.height:
        raise ValueError(f"simulate_log: the dataset already holds {logged.height} search, "
                         "feedback or access events; pass a corpus without a log")
    top = int(dataset.qrels.select(pl.col("relevance").max()).item() or 0)
    if top > min(click_model.max_grade, verdicts.max_grade):
        raise ValueError(f"simulate_log: qrels hold grade {top}, but the click model reads "
                         f"grades up to {click_model.max_grade} and the verdict model up to "
                         f"{verdicts.max_grade}; set max_grade / p_helpful to cover it")
    corpus = corpus_of(dataset)
    if seeds_fn is None and corpus.vectors is None:
        raise ValueError("simulate_log: the dataset has no embeddings, so the default seeds "
                         "(owner-scoped cosine) cannot run; embed the memories or pass seeds_fn")
    stored = _query_vectors(dataset, corpus, query_vectors)
    vectors = None if stored is None else unit_rows(stored.astype(np.float64))
    first = float(corpus.answerable_us.min()) if corpus.answerable_us.size else np.inf
    if not np.isfinite(first):
        raise ValueError("simulate_log: no query is ever answerable (no query has an owner "
                         "with memories)")
    start_us = int(first) if start is None else to_us(start)
    if start_us < first:
        raise ValueError(f"simulate_log: start {start} is before the first answerable query "
                         f"({to_datetime(int(first))}); pass a later start or None")

    rng = np.random.default_rng(seed)
    picks, times = draw_stream(rng, corpus.answerable_us, n_searches, float(zipf_s),
                                start_us, float(mean_gap_seconds))
    variants = rng.choice(len(_VARIANTS), size=n_searches, p=_VARIANT_P)
    users = SimulatedUsers(click_model, verdicts, rng)
    with collector_paused():
        log = _replay(dataset, corpus, new_state(logging_config), vectors, seeds_fn, users,
                      [(int(q), int(t), int(v)) for q, t, v in zip(picks, times, variants,
                                                                    strict=True)], limit)
    kept = dataset.events.select(list(EVENTS))
    if kept.height == 0:
        kept = memory_events(dataset.memories)
    events = order_events(pl.concat([kept, log.frame()]))
    digest = _digest(dataset, logging_config, click_model, verdicts, seeds_fn,
                     query_vectors_id or query_vectors, n_searches=n_searches, seed=seed,
                     zipf_s=zipf_s, start_us=start_us,
                     mean_gap_seconds=mean_gap_seconds, limit=limit)
    return Dataset(source=f"{dataset.source}+clicks", version=f"{dataset.version}+clicks/1",
                   digest=digest, memories=dataset.memories, embeddings=dataset.embeddings,
                   edges=dataset.edges, events=events, queries=dataset.queries,
                   qrels=dataset.qrels,
                   query_embeddings=_query_embeddings(dataset, corpus, stored))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and np.isfinite(float(value)))


def _query_vectors(ds: Dataset, corpus: Corpus, given: npt.ArrayLike | None,
                   ) -> npt.NDArray[np.float32] | None:
    """Unit query vectors (n_queries, dim) as stored, in float32: the given ones, projected
    ones, or None. The search uses them as stored (scaled to unit length again), so a
    replay reading them back from the store computes exactly the same seeds."""
    if given is None:
        if corpus.vectors is None:
            return None
        return project_queries(ds, corpus).astype(np.float32)
    vectors = np.asarray(given, dtype=np.float64)
    dim = None if corpus.vectors is None else corpus.vectors.shape[1]
    if vectors.ndim != 2 or vectors.shape[0] != len(corpus.query_ids) or (
            dim is not None and vectors.shape[1] != dim):
        raise ValueError(f"simulate_log: query_vectors has shape {vectors.shape}, expected "
                         f"({len(corpus.query_ids)}, {dim or 'dim'}): one row per query")
    return unit_rows(vectors).astype(np.float32)


def _query_embeddings(ds: Dataset, corpus: Corpus,
                      stored: npt.NDArray[np.float32] | None) -> pl.DataFrame:
    """The query vectors in the memories' embedder's name, one row per query."""
    if stored is None:
        return pl.DataFrame(schema=QUERY_EMBEDDINGS)
    embedder = ds.embeddings["embedder"][0] if ds.embeddings.height else "query-vectors"
    return pl.DataFrame({"query_id": corpus.query_ids, "embedder": embedder,
                         "vector": pl.Series(stored).cast(pl.List(pl.Float32))},
                        schema=QUERY_EMBEDDINGS)


@dataclass(frozen=True)
class SimulatedUsers:
    """The simulated users: clicks, then verdicts, drawn from one generator (also what
    `experiments.parity.world` shows the library's rankings to)."""

    clicks: ClickModel
    verdicts: VerdictModel
    rng: np.random.Generator

    def react(self, grades: npt.NDArray[np.int64]) -> tuple[list[int], list[bool | None]]:
        """Clicked ranks (0-based, top-down) and each click's verdict (None: not judged)."""
        clicked = np.flatnonzero(self.clicks.simulate(grades[None, :], self.rng)[0])
        judged, helpful = self.verdicts.sample(grades[clicked], self.rng)
        return clicked.tolist(), [bool(h) if j else None
                                  for j, h in zip(judged, helpful, strict=True)]


def _replay(ds: Dataset, corpus: Corpus, state: EngineState,
            vectors: npt.NDArray[np.float64] | None, seeds_fn: SeedsFn | None,
            users: SimulatedUsers, stream: list[tuple[int, int, int]], limit: int) -> _Log:
    """The closed loop: (query row, earliest time, variant) per search, in order."""
    timeline = Timeline(ds, corpus, state)
    mspr = state.config.mspr
    counts_access = mspr.enabled and mspr.frequency.enabled
    embeddings = None if vectors is None else [tuple(v.tolist()) for v in vectors]
    log = _Log()
    hits = vector_hits(state, limit)  # the store is asked for `limit`; seed_top_k are kept
    previous_end = -(1 << 62)
    for k, (q, earliest, variant) in enumerate(stream):
        at = max(earliest, previous_end + SESSION_GAP_US)
        timeline.advance(at)
        qid = corpus.query_ids[q]
        text = _VARIANTS[variant](corpus.query_texts[q])
        user, agent, run = corpus.owners[q]
        if seeds_fn is None:
            assert vectors is not None
            seeds = owner_cosine_seeds(corpus, timeline, q, vectors[q], hits)
        else:
            seeds = [Seed(m, float(s)) for m, s in seeds_fn(qid) if m in state.payloads]
        caller = corpus.callers[q]
        request = SearchRequest(query=text, seeds=seeds, user_id=user, agent_id=agent,
                                run_id=run, limit=limit, filters=caller or None,
                                query_embedding=None if embeddings is None else embeddings[q])
        try:
            outcome = search(state, request, now=to_datetime(at))
        except SearchError as exc:
            raise ValueError(f"simulate_log: search {k} (query {qid!r}) failed: {exc}") from exc
        shown = [c.id for c in outcome.results[:limit]]
        log.search(at, qid, text, user, agent, run, limit, shown, caller)
        if counts_access and outcome.graph_path:  # the engine bumped each returned result
            for memory_id in shown:
                log.event("access", at, qid, memory_id, user, agent, run)
        previous_end = at
        if not shown:
            continue
        grades = np.array([corpus.grades[q].get(m, 0) for m in shown], dtype=np.int64)
        clicked, verdicts = users.react(grades)
        for i, (rank, helpful) in enumerate(zip(clicked, verdicts, strict=True)):
            memory_id = shown[rank]
            previous_end = click_at = at + CLICK_STEP_US * (i + 1)
            log.event("click", click_at, qid, memory_id, user, agent, run)
            if helpful is None:
                continue
            previous_end = verdict_at = click_at + VERDICT_DELAY_US
            log.feedback(verdict_at, qid, text, memory_id, user, agent, run, helpful)
            record_feedback(state, memory_id, helpful=helpful, now=to_datetime(verdict_at),
                            user_id=user, agent_id=agent, run_id=run, query=text)
    return log


class _Log:
    """The new events, column by column."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {c: [] for c in (
            "ts", "kind", "memory_id", "query_id", "user_id", "agent_id", "run_id", "query",
            "filters", "limit", "shown", "helpful")}

    def _row(self, **values: Any) -> None:
        for name, column in self.columns.items():
            column.append(values.get(name))

    def search(self, at: int, qid: str, text: str, user: str | None, agent: str | None,
               run: str | None, limit: int, shown: list[str],
               caller: dict[str, str]) -> None:
        self._row(ts=at, kind="search", query_id=qid, query=text, user_id=user,
                  agent_id=agent, run_id=run, filters=json.dumps(caller, sort_keys=True),
                  limit=limit, shown=shown)

    def event(self, kind: str, at: int, qid: str, memory_id: str, user: str | None,
              agent: str | None, run: str | None) -> None:
        """An `access` or `click` on a memory a search showed."""
        self._row(ts=at, kind=kind, query_id=qid, memory_id=memory_id, user_id=user,
                  agent_id=agent, run_id=run)

    def feedback(self, at: int, qid: str, text: str, memory_id: str, user: str | None,
                 agent: str | None, run: str | None, helpful: bool) -> None:
        self._row(ts=at, kind="feedback", query_id=qid, query=text, memory_id=memory_id,
                  user_id=user, agent_id=agent, run_id=run, helpful=helpful)

    def frame(self) -> pl.DataFrame:
        schema = {c: EVENTS[c] for c in self.columns if c != "ts"} | {"ts": pl.Int64}
        frame = pl.DataFrame(self.columns, schema=schema)
        return complete_events(frame.with_columns(pl.col("ts").cast(pl.Datetime("us"))))


def _digest(dataset: Dataset, config: EngineConfig, click_model: ClickModel,
            verdicts: VerdictModel, seeds_fn: SeedsFn | None,
            query_vectors: npt.ArrayLike | str | None, **stream: Any) -> str:
    """sha256 of the input digest and every generator parameter; query vectors by their
    recipe when the caller names one (a string), else by their bytes."""
    vectors = query_vectors if isinstance(query_vectors, str) else None  # a recipe
    if query_vectors is not None and vectors is None:
        raw = np.ascontiguousarray(np.asarray(query_vectors, dtype=np.float64))
        vectors = hashlib.sha256(raw.tobytes()).hexdigest()
    seeds = "owner-cosine" if seeds_fn is None else getattr(seeds_fn, "__qualname__", "custom")
    spec = {"input": dataset.digest, "config": as_dict(config), "click_model": repr(click_model),
            "verdict_model": repr(verdicts), "seeds_fn": seeds, "query_vectors": vectors,
            **stream}
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()
