"""The corpus and its memories on a timeline: what the simulator and the replay share.

`simulate_log` (the logging run) and `experiments.replay` (the evaluation run) must build
exactly the same engine state and the same dense seeds at every moment, or a replay of
the logging configuration would not reproduce the logged rankings. Both use this module:

- `corpus_of`: memories, unit embeddings, owner scopes and graded qrels as arrays;
- `Timeline`: memory additions, edges and deletions applied to an engine state in time
  order (additions, then edges, then deletions at equal times);
- `owner_cosine_seeds`: the default dense seeds, the cosine between a query vector and
  the unit embeddings of the query owner's memories that exist at that time, the top
  `count` (the hits that can reach the candidates: `engine.search.vector_hits`, from the
  search's limit and the configured `seed_top_k`), ties in memory order; `SeedPlan`: the
  same seeds for a stream of searches known in advance, computed up front;
- `project_queries`: query vectors from the query text alone, when none were stored.
"""

from __future__ import annotations

import bisect
import functools
import gc
import hashlib
import json
import operator
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
from scipy import sparse

from msprlab.engine import RetrievalConfig, Seed, archive
from msprlab.engine.graph import EdgeType, Embedding, MemoryNode, row_norms_sq
from msprlab.engine.jit import exact_njit
from msprlab.engine.ppr import stable_top_prefix
from msprlab.engine.state import EngineState

from .schema import PAYLOAD_COLUMNS, PAYLOAD_FIELDS, Dataset

__all__ = ["DEFAULT_SEEDS", "Corpus", "SeedPlan", "Timeline", "collector_paused", "corpus_of",
           "owner_cosine_seeds",
           "project_queries", "row_tops", "shared_by_replays", "single_embedder", "to_datetime",
           "to_us", "token_incidence", "unit_rows", "vector_matrix"]

# The library's default seed_top_k (and the simulated logs' search limit): the seed count
# of a default configuration.
DEFAULT_SEEDS = RetrievalConfig().seed_top_k
_EPOCH = datetime(1970, 1, 1)


def to_datetime(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=int(us))


def to_us(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


# ---- the corpus as arrays -----------------------------------------------------------------
Owner = tuple[str | None, str | None, str | None]  # a query's (user_id, agent_id, run_id)


@dataclass(frozen=True)
class Corpus:
    """Memories, owner scopes and query facts, as arrays indexed by row."""

    memory_ids: list[str]
    vectors: npt.NDArray[np.float64] | None      # (n_memories, dim), unit rows or zero
    has_vector: npt.NDArray[np.bool_]
    query_ids: list[str]
    query_texts: list[str]
    owners: list[Owner]
    scope_rows: list[npt.NDArray[np.int64]]     # per query: memory rows in its owner scope
    answerable_us: npt.NDArray[np.float64]      # per query; inf when never answerable
    grades: list[dict[str, int]]                # per query: memory id -> relevance
    callers: list[dict[str, str]]               # per query: the searcher's tenant_id / role


def single_embedder(embeddings: pl.DataFrame) -> pl.DataFrame:
    names = embeddings["embedder"].unique().sort().to_list()
    if len(names) > 1:
        raise ValueError(f"embeddings hold vectors of {len(names)} embedders {names}; keep "
                         "one: dataset.embeddings.filter(pl.col('embedder') == name)")
    return embeddings


# `shared_by_replays`: per dataset open in it (by id, with the dataset itself, so a new
# object at a reused id is not taken for it), what has been made of it, by name.
_SHARED: dict[int, tuple[Dataset, dict[Any, Any]]] = {}


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside, as it was after: for a replay of a
    log through the engine (`experiments/replay.py`, `simulate_log`'s logging ranker).

    A replay makes no reference cycles: its objects are freed by reference counting. But
    the collector's passes, set off by the engine state it grows, walk that state and
    everything else the process holds: in a LoCoMo replay of 2,000 searches they freed
    nothing and took 3-10% of the time (a full pass ~0.25 s); generating a 50k-memory
    world, whose logging replay ran with them, 9.0 s became 6.9 s without.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def shared_by_replays(ds: Dataset) -> Iterator[None]:
    """Replays of `ds` made inside share what they only read of it, made once: its
    `Corpus` and a Timeline's operations, memory columns, edge lists and each memory's
    payload and hash (at 250k memories and 1.6M edges, 4.4 s a replay, and 1.8 s more for
    the payloads)."""
    key = id(ds)
    if key in _SHARED:
        yield
        return
    _SHARED[key] = (ds, {})
    try:
        yield
    finally:
        del _SHARED[key]


def _shared(ds: Dataset, name: Any, make: Callable[[], Any]) -> Any:
    """`make()`, or inside `shared_by_replays(ds)` what it gave the first time."""
    entry = _SHARED.get(id(ds))
    if entry is None or entry[0] is not ds:
        return make()
    made = entry[1]
    if name not in made:
        made[name] = make()
    return made[name]


def corpus_of(ds: Dataset) -> Corpus:
    """The memories, owner scopes and query facts of `ds` as arrays (`Corpus`)."""
    return _shared(ds, "corpus", lambda: _corpus_of(ds))  # type: ignore[no-any-return]


def _corpus_of(ds: Dataset) -> Corpus:
    memories = ds.memories
    ids = memories["memory_id"].to_list()
    row_of = {m: i for i, m in enumerate(ids)}
    if len(row_of) != len(ids):
        raise ValueError("memories: memory_id must be unique")
    vectors = None
    has_vector = np.zeros(len(ids), dtype=bool)
    embeddings = single_embedder(ds.embeddings)
    if embeddings.height:
        rows = np.array([row_of.get(m, -1) for m in embeddings["memory_id"].to_list()])
        if (rows < 0).any():
            bad = embeddings["memory_id"][int(np.argmax(rows < 0))]
            raise ValueError(f"embeddings: memory_id {bad!r} is not in memories")
        matrix = unit_rows(vector_matrix(embeddings["vector"]))
        vectors = np.zeros((len(ids), matrix.shape[1]))
        vectors[rows] = matrix
        has_vector[rows] = True
    if memories["created_at"].null_count():
        raise ValueError("memories: created_at must be set on every memory (the timeline "
                         "adds a memory at its created_at)")
    created = memories["created_at"].cast(pl.Int64).to_numpy()
    owner_cols = [memories[c].to_numpy() for c in ("user_id", "agent_id", "run_id")]
    queries = ds.queries
    owners = list(zip(queries["user_id"].to_list(), queries["agent_id"].to_list(),
                      queries["run_id"].to_list(), strict=True))
    scopes: dict[Owner, npt.NDArray[np.int64]] = {}
    for owner in dict.fromkeys(owners):
        if owner == (None, None, None):
            raise ValueError("queries: every query needs a user_id, agent_id or run_id "
                             "(the library refuses a search without one)")
        mask = np.ones(len(ids), dtype=bool)
        for column, value in zip(owner_cols, owner, strict=True):
            if value is not None:
                mask &= column == value
        scopes[owner] = np.flatnonzero(mask)
    grades: dict[str, dict[str, int]] = {q: {} for q in queries["query_id"].to_list()}
    evidence: dict[str, int] = {}
    for qid, mid, rel in ds.qrels.select("query_id", "memory_id", "relevance").iter_rows():
        if qid not in grades or mid not in row_of:
            missing = f"query_id {qid!r}" if qid not in grades else f"memory_id {mid!r}"
            raise ValueError(f"qrels: {missing} is not in the dataset (query {qid!r}, "
                             f"memory {mid!r})")
        grades[qid][mid] = int(rel)
        if rel > 0:
            evidence[qid] = max(evidence.get(qid, -(1 << 62)), int(created[row_of[mid]]))
    answerable = np.full(queries.height, np.inf)
    for i, (qid, owner) in enumerate(zip(queries["query_id"].to_list(), owners, strict=True)):
        if qid in evidence:
            answerable[i] = evidence[qid]
        elif scopes[owner].size:
            answerable[i] = created[scopes[owner]].min()
    callers = {owner: _caller(memories, scopes[owner]) for owner in scopes}
    return Corpus(ids, vectors, has_vector, queries["query_id"].to_list(),
                  queries["text"].to_list(), owners, [scopes[o] for o in owners],
                  answerable, [grades[q] for q in queries["query_id"].to_list()],
                  [callers[o] for o in owners])


def vector_matrix(vectors: pl.Series) -> npt.NDArray[np.float64]:
    """A column of float lists as a float64 matrix, one row per list (exact: float32 and
    float64 values convert to float64 exactly)."""
    lengths = vectors.list.len()
    if vectors.null_count() or lengths.n_unique() != 1 or not lengths[0]:
        return np.asarray(vectors.to_list(), dtype=np.float64)  # ragged: numpy says how
    flat = vectors.explode()
    if flat.null_count():
        return np.asarray(vectors.to_list(), dtype=np.float64)  # None becomes NaN
    return flat.to_numpy().astype(np.float64).reshape(vectors.len(), lengths[0])


def _caller(memories: pl.DataFrame, rows: npt.NDArray[np.int64]) -> dict[str, str]:
    """Who searches a scope, as a multi-tenant deployment passes it in the filters: the
    tenant_id and role most common among the scope's memories (ties: the smallest), each
    only when some memory of the scope carries one."""
    caller: dict[str, str] = {}
    if rows.size == 0:
        return caller
    part = memories[rows.tolist()]
    for column in ("tenant_id", "role"):
        values = part[column].drop_nulls()
        if values.len():
            counts = values.value_counts().sort(["count", column], descending=[True, False])
            caller[column] = counts[column][0]
    return caller


def token_incidence(texts: pl.Series) -> sparse.csr_matrix:
    """(n_texts, n_tokens) 0/1 incidence of the lower-cased `\\w+` tokens of each text (the
    engine's lexical tokens); columns are the distinct tokens in sorted order."""
    found = (pl.DataFrame({"row": np.arange(texts.len()),
                           "token": texts.fill_null("").str.extract_all(r"\w+")})
             .explode("token").drop_nulls()
             .with_columns(pl.col("token").str.to_lowercase()).unique()
             .with_columns(column=pl.col("token").rank("dense") - 1))
    return sparse.csr_matrix(
        (np.ones(found.height), (found["row"].to_numpy(), found["column"].to_numpy())),
        shape=(texts.len(), int(found.select(pl.col("column").max()).item() or 0) + 1))


def unit_rows(rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Rows scaled to unit L2 norm; zero rows stay zero."""
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    out: npt.NDArray[np.float64] = np.divide(rows, norms, out=np.zeros_like(rows),
                                             where=norms > 0)
    return out


def project_queries(ds: Dataset, corpus: Corpus) -> npt.NDArray[np.float64]:
    """Query vectors in the memories' embedding space, from the query text alone (no qrels).

    Each token gets the mean embedding of the memories whose text holds it; a query is the
    idf-weighted sum of its tokens' vectors, normalised (zero when it shares no token with
    any memory). A stand-in that needs neither the embedder nor a model: pass
    `query_vectors` to embed queries as the corpus was embedded.
    """
    assert corpus.vectors is not None
    n_memories = ds.memories.height
    tokens = token_incidence(pl.concat([ds.memories["text"], ds.queries["text"]]))
    in_memories = tokens[:n_memories][corpus.has_vector]
    frequency = np.asarray(in_memories.sum(axis=0)).ravel()
    idf = np.log((1.0 + in_memories.shape[0]) / (1.0 + frequency)) + 1.0
    weight = np.divide(idf, frequency, out=np.zeros_like(idf), where=frequency > 0)
    token_vectors = sparse.diags(weight) @ (in_memories.T @ corpus.vectors[corpus.has_vector])
    return unit_rows(np.asarray(tokens[n_memories:] @ token_vectors, dtype=np.float64))


# ---- the engine state on the timeline -----------------------------------------------------
# What `Timeline` reads of a memory to add it.
_PAYLOAD_COLUMNS = ("memory_id", "text", "user_id", "agent_id", "run_id", "tenant_id",
                    "sub_tenant_id", "role", "allowed_roles", "metadata", "created_at",
                    "updated_at")


def _payload(row: dict[str, Any]) -> dict[str, Any]:
    """The vector-store row `Memory.add` stores: core fields, owner ids, metadata flat."""
    text = row["text"] or ""
    created: datetime = row["created_at"]
    updated: datetime = row["updated_at"] or created
    payload: dict[str, Any] = {
        "data": text, "hash": hashlib.md5(text.encode("utf-8")).hexdigest(),
        "created_at": created.isoformat(), "updated_at": updated.isoformat()}
    for key in PAYLOAD_COLUMNS:
        value = row[key]
        if value is not None:
            payload[key] = list(value) if key == "allowed_roles" else value
    if row["metadata"]:
        extra = json.loads(row["metadata"])
        if not isinstance(extra, dict):
            raise ValueError(f"memories: metadata of {row['memory_id']!r} is not a JSON object")
        clash = [key for key in PAYLOAD_FIELDS if key in extra]
        if clash:  # ingest refuses these; a store written before it did is refused here
            raise ValueError(f"memories: metadata of {row['memory_id']!r} has the key "
                             f"{clash[0]!r}, a payload field the memory's own columns set "
                             f"(reserved: {', '.join(PAYLOAD_FIELDS)}); re-ingest the store")
        payload.update(extra)
    return payload


# An operation's phase: at equal times additions come first, then edges, then deletions.
_ADD, _LINK, _DELETE = 0, 1, 2


def _read_only_parts(ds: Dataset, corpus: Corpus) -> dict[str, Any]:
    """A Timeline's attributes that no replay changes: the memory columns `_add` reads, the
    edges as the graph takes them, the operations in order, every memory's norm, and each
    memory's payload and hash once made (`_made`)."""
    parts = SimpleNamespace()
    memories, edges = ds.memories, ds.edges
    parts.memories = {name: memories[name].to_list() for name in _PAYLOAD_COLUMNS}
    created = memories["created_at"].cast(pl.Int64).to_numpy()
    row_of = {m: i for i, m in enumerate(corpus.memory_ids)}
    kinds = edges["type"].to_list()
    src = list(map(row_of.get, edges["src"].to_list()))
    dst = list(map(row_of.get, edges["dst"].to_list()))
    _check_edges(edges, kinds, src, dst)
    # The edges as the graph takes them: ends as the corpus's own id strings (one
    # object per memory, not one per edge end), each type's member made once, weights
    # clamped as `max(0.0, min(1.0, float(w)))` (NaN -> 1.0).
    ids = corpus.memory_ids
    members = {kind: EdgeType(kind) for kind in set(kinds)}
    parts._edge_src = list(map(ids.__getitem__, src))
    parts._edge_dst = list(map(ids.__getitem__, dst))
    parts._edge_type = list(map(members.__getitem__, kinds))
    parts._edge_weight = _clamped_weights(edges["weight"])
    parts._edge_evidence = edges["evidence"].to_list()
    # An edge enters at its own time, or when its later end is added if that is later.
    ends = np.maximum(created[np.array(src, dtype=np.int64)],
                      created[np.array(dst, dtype=np.int64)])
    edge_at = np.maximum(edges["created_at"].cast(pl.Int64).fill_null(0).to_numpy(), ends)
    deleted = memories["deleted_at"].cast(pl.Int64).fill_null(0).to_numpy()
    gone = np.flatnonzero(memories["deleted_at"].is_not_null().to_numpy())
    # (time, phase, index) in order: additions, then edges, then deletions at equal times.
    at = np.concatenate([created, edge_at, deleted[gone]])
    phase = np.repeat([_ADD, _LINK, _DELETE], [created.size, edge_at.size, gone.size])
    index = np.concatenate([np.arange(created.size), np.arange(edge_at.size), gone])
    order = np.lexsort((index, phase, at))
    # The operations as arrays (for `pending_changes`), which `advance` reads one at a
    # time through memoryviews: they hand out Python ints as lists do, where a list of
    # 10^6 ints held ~40 bytes an element (a replay keeps four).
    parts._op_arrays = (at[order].astype(np.int64), phase[order].astype(np.int64),
                        index[order].astype(np.int64))
    parts._times = memoryview(parts._op_arrays[0])
    parts._phases = memoryview(parts._op_arrays[1])
    parts._indexes = memoryview(parts._op_arrays[2])
    # per operation: where its run of consecutive edges ends (read at edges only), so
    # `advance` hands a run to the graph in one call
    starts = np.flatnonzero(np.diff(parts._op_arrays[1], prepend=-1, append=-1) != 0)
    parts._run_end = memoryview(np.repeat(starts[1:], np.diff(starts)).astype(np.int64))
    # every memory's squared norm, summed as `set_embedding` sums it, all at once
    parts._norms_sq = [] if corpus.vectors is None else row_norms_sq(corpus.vectors)
    # per memory: its payload and node hash, made at its first addition. Every replay
    # makes the same ones, and a state's store keeps its own copy of a payload put in it
    # (engine/stores.py), so the replays inside `shared_by_replays` share them.
    parts._made = [None] * memories.height
    return vars(parts)


class Timeline:
    """Memory additions, edges and deletions, applied to the state in time order."""

    def __init__(self, ds: Dataset, corpus: Corpus, state: EngineState) -> None:
        self.state = state
        self.corpus = corpus
        self.seedable = np.zeros(len(corpus.memory_ids), dtype=bool)
        # What the timeline only reads of the dataset, made once per replay or, inside
        # `shared_by_replays`, once for all of them.
        vars(self).update(_shared(ds, ("timeline", id(corpus)),
                                  lambda: _read_only_parts(ds, corpus)))
        self.next = 0  # the first operation not applied yet
        self._moment_us: int | None = None  # the last time `_datetime` made, and its datetime
        self._moment = _EPOCH
        # per owner scope: its seedable rows (in row order) and their vectors, as of the
        # last search in that scope
        self._live: dict[Owner, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = {}

    @property
    def ops(self) -> list[tuple[int, int, int]]:
        """Every operation in order: (time in µs, phase: 0 add, 1 edge, 2 delete, row of the
        memory or edge)."""
        return list(zip(self._times, self._phases, self._indexes, strict=True))

    def advance(self, until_us: int) -> None:
        """Apply every pending operation at or before `until_us`."""
        end = bisect.bisect_right(self._times, until_us, self.next)
        while self.next < end:
            position = self.next
            phase = self._phases[position]
            if phase == _LINK:
                self.next = min(self._run_end[position], end)
                self._link(position, self.next)
                continue
            self.next += 1  # counted first: an operation that raises is not applied again
            index = self._indexes[position]
            if phase == _ADD:
                self._add(index)
            else:
                self._delete(index)

    def pending_changes(self) -> tuple[list[int], list[int], list[int]]:
        """The additions and deletions not applied yet, in order: their times, phases and
        memory rows (edges change no memory's seedability, so they are left out)."""
        at, phase, index = self._op_arrays
        keep = self.next + np.flatnonzero(phase[self.next:] != _LINK)
        return at[keep].tolist(), phase[keep].tolist(), index[keep].tolist()

    def live_scope(self, query: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The rows of the query owner's memories that are seedable now, in row order, and
        their vectors (`corpus.vectors[rows]`, copied only when the rows change)."""
        assert self.corpus.vectors is not None
        rows = self.corpus.scope_rows[query]
        rows = rows[self.seedable[rows]]
        owner = self.corpus.owners[query]
        known = self._live.get(owner)
        if known is None or not np.array_equal(known[0], rows):
            known = self._live[owner] = (rows, self.corpus.vectors[rows])
        return known

    def _add(self, index: int) -> None:
        memories = self.memories
        made = self._made[index]
        if made is None:
            payload = _payload({name: column[index] for name, column in memories.items()})
            made = self._made[index] = (
                payload, hashlib.sha256(payload["data"].encode("utf-8")).hexdigest())
        payload, digest = made
        memory_id = memories["memory_id"][index]
        created = memories["created_at"][index]
        self.state.payloads[memory_id] = payload
        self.state.graph.add_node(MemoryNode(
            id=memory_id, hash=digest, created_at=created,
            updated_at=memories["updated_at"][index] or created,
            user_id=memories["user_id"][index], agent_id=memories["agent_id"][index],
            run_id=memories["run_id"][index], tenant_id=memories["tenant_id"][index],
            sub_tenant_id=memories["sub_tenant_id"][index], metadata=dict(payload)))
        if self.corpus.vectors is not None and self.corpus.has_vector[index]:
            self.state.graph.put_embedding(memory_id, Embedding(
                self.corpus.vectors[index].copy(), self._norms_sq[index]))
            self.seedable[index] = True

    def _link(self, first: int, end: int) -> None:
        """The edges of operations first..end-1 (a run of edges), each stamped with its
        time, in one `upsert_edges` call (the same as an `upsert_edge` each)."""
        edges = self._indexes[first:end]
        moments = list(map(self._datetime, self._times[first:end]))
        pick = operator.itemgetter(*edges) if len(edges) > 1 else (
            lambda column: (column[edges[0]],))
        self.state.graph.upsert_edges(
            pick(self._edge_src), pick(self._edge_dst), pick(self._edge_type),
            pick(self._edge_weight), moments, moments, pick(self._edge_evidence))

    def _delete(self, index: int) -> None:
        memory_id = self.corpus.memory_ids[index]
        archive(self.state.graph, memory_id)
        self.state.payloads.pop(memory_id, None)
        self.seedable[index] = False

    def _datetime(self, at: int) -> datetime:
        """`to_datetime(at)`, made once per time: edges enter in bursts at one time."""
        if at != self._moment_us:
            self._moment_us, self._moment = at, to_datetime(at)
        return self._moment


def _check_edges(edges: pl.DataFrame, kinds: list[Any], src: list[int | None],
                 dst: list[int | None]) -> None:
    """Every edge joins two memories and has a known type; else the first bad row's error."""
    known = EdgeType.__members__
    for j, (a, b, kind) in enumerate(zip(src, dst, kinds, strict=True)):
        if a is None or b is None:
            raise ValueError(f"edges: row {j} joins {edges['src'][j]!r} -> {edges['dst'][j]!r}, "
                             "which is not a memory")
        if kind not in known:
            raise ValueError(f"edges: row {j} has type {kind!r}; known: {', '.join(known)}")


def _clamped_weights(weights: pl.Series) -> list[float]:
    """`max(0.0, min(1.0, float(w)))` of each weight, as Python floats: min gives 1.0
    unless w < 1.0 (NaN included), max gives 0.0 unless the value is > 0.0 (-0.0 too)."""
    if weights.null_count():  # float(None) raises, as the edge by edge load did
        return [max(0.0, min(1.0, float(w))) for w in weights.to_list()]
    w = weights.cast(pl.Float64).to_numpy()
    capped = np.where(w < 1.0, w, 1.0)
    found: list[float] = np.where(capped > 0.0, capped, 0.0).tolist()
    return found


def owner_cosine_seeds(corpus: Corpus, timeline: Timeline, query: int,
                       vector: npt.NDArray[np.float64], count: int) -> list[Seed]:
    """The top `count` of the query owner's live memories by cosine with `vector`."""
    rows, vectors = timeline.live_scope(query)
    if rows.size == 0:
        return []
    scores = vectors @ vector
    top = row_tops(scores[np.newaxis], count)[0]
    ids = corpus.memory_ids
    return [Seed(ids[row], score)
            for row, score in zip(rows[top].tolist(), scores[top].tolist(), strict=True)]


class SeedPlan:
    """`owner_cosine_seeds` for a stream of searches known in advance (query rows at
    non-decreasing times, from the timeline's current state, and each one's seed count):
    `seeds(k)` are the seeds of the k-th search, as the timeline would give them at its
    time.

    They are computed up front, owner by owner: an owner's live vectors are gathered once
    per change of its live memories, and the searches in between are scored against them
    back to back, while the matrix is still in the CPU's caches (one search at a time, the
    matrix is read from memory each time). The products are the same, on the same
    matrices, as one `owner_cosine_seeds` per search: only their order differs, and a
    query searched again before its owner's memories change is scored once.
    """

    def __init__(self, corpus: Corpus, timeline: Timeline, searches: list[tuple[int, int]],
                 vectors: npt.NDArray[np.float64], counts: list[int]) -> None:
        assert corpus.vectors is not None
        if len(counts) != len(searches):
            raise ValueError(f"SeedPlan: {len(searches)} searches but {len(counts)} counts")
        ids = np.array(corpus.memory_ids, dtype=object)
        # per search: the seeds' memory ids and scores
        self.top: list[tuple[list[str], list[float]]] = [([], [])] * len(searches)
        for live, members in _search_groups(corpus, timeline, searches).values():
            if live.size == 0:
                continue
            matrix = corpus.vectors[live]
            # The group's searches of one query share its seeds (the same product of the
            # same matrix and vector; logs repeat their queries). Each query's product
            # alone (one matrix-vector product: a batched product may sum in another
            # order), into a row of the group's scores; then every row's top at once.
            queries, query_of = np.unique([searches[k][1] for k in members],
                                          return_inverse=True)
            scores = np.empty((queries.size, live.size))
            for i, query in enumerate(queries.tolist()):
                np.matmul(matrix, vectors[query], out=scores[i])
            # The largest count of the group; a search asking fewer takes the head (the
            # top k of a row are the head of its top k' for k < k', ties alike).
            tops = row_tops(scores, max(counts[k] for k in members))
            top_scores = np.take_along_axis(scores, tops, axis=1)
            found = list(zip(ids[live[tops]].tolist(), top_scores.tolist(), strict=True))
            for k, i in zip(members, query_of.tolist(), strict=True):
                found_ids, found_scores = found[i]
                n = counts[k]
                self.top[k] = ((found_ids, found_scores) if n >= len(found_ids)
                               else (found_ids[:n], found_scores[:n]))

    def seeds(self, k: int) -> list[Seed]:
        ids, scores = self.top[k]
        return list(map(Seed, ids, scores))


def _search_groups(corpus: Corpus, timeline: Timeline, searches: list[tuple[int, int]],
                   ) -> dict[tuple[Owner, int], tuple[npt.NDArray[np.int64], list[int]]]:
    """The searches by owner and by the state of that owner's live memories: for each, the
    live rows (as `Timeline.live_scope` gives them then) and the searches, in order.

    The timeline's additions and deletions are followed on a copy of `seedable`, as
    `Timeline.advance` applies them: an addition makes a memory with a vector seedable, a
    deletion makes it unseedable; each change starts a new group for the owners whose
    scope holds the memory.
    """
    owners_of: dict[int, list[Owner]] = {}
    for owner, rows in dict(zip(corpus.owners, corpus.scope_rows, strict=True)).items():
        for row in rows.tolist():
            owners_of.setdefault(row, []).append(owner)
    seedable = timeline.seedable.copy()
    has_vector = corpus.has_vector.tolist()
    epoch: dict[Owner, int] = {}
    groups: dict[tuple[Owner, int], tuple[npt.NDArray[np.int64], list[int]]] = {}
    times, phases, changed = timeline.pending_changes()
    done = 0
    for k, (at, query) in enumerate(searches):
        end = bisect.bisect_right(times, at, done)
        for phase, row in zip(phases[done:end], changed[done:end], strict=True):
            now = phase == _ADD and (has_vector[row] or bool(seedable[row]))
            if now != seedable[row]:
                seedable[row] = now
                for owner in owners_of.get(row, ()):
                    epoch[owner] = epoch.get(owner, 0) + 1
        done = end
        owner = corpus.owners[query]
        key = (owner, epoch.get(owner, 0))
        group = groups.get(key)
        if group is None:
            rows = corpus.scope_rows[query]
            group = groups[key] = (rows[seedable[rows]], [])
        group[1].append(k)
    return groups


def row_tops(scores: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.intp]:
    """`np.argsort(-row, kind="stable")[:k]` of each row of a 2-D `scores`: the positions
    of its k largest, ties in position order. One compiled pass keeps them (a search's
    seeds are few, and NumPy's partial sort costs several calls each time); a row holding
    a NaN goes to the engine's partial stable sort."""
    tops = np.empty((scores.shape[0], max(0, min(k, scores.shape[1]))), dtype=np.intp)
    if tops.size == 0:
        return tops
    for i in np.flatnonzero(~_largest()(scores, tops)).tolist():
        tops[i] = stable_top_prefix(-scores[i], k)[:k]
    return tops


def _largest_rows(scores: Any, tops: Any) -> Any:
    """Per row of `scores`, the positions of its `tops.shape[1]` (at least 1) largest
    scores into that row of `tops`, descending, ties in position order (the head of the
    stable argsort of -row: for scores that are not NaN, -a < -b exactly when a > b).
    A row holding a NaN gets False (its `tops` row is then not valid), the others True."""
    capacity = tops.shape[1]
    ok = np.ones(scores.shape[0], np.bool_)
    for r in range(scores.shape[0]):
        row = scores[r]
        top = tops[r]
        filled = 0
        for i in range(row.shape[0]):
            value = row[i]
            if value != value:
                ok[r] = False
                break
            if filled == capacity and not value > row[top[capacity - 1]]:
                continue
            j = filled if filled < capacity else capacity - 1
            while j > 0 and value > row[top[j - 1]]:  # strictly: an equal score stays behind
                top[j] = top[j - 1]
                j -= 1
            top[j] = i
            if filled < capacity:
                filled += 1
    return ok


@functools.cache
def _largest() -> Callable[..., Any]:
    return exact_njit(_largest_rows)
