"""The corpus and its memories on a timeline: what the simulator and the replay share.

`simulate_log` (the logging run) and `experiments.replay` (the evaluation run) must build
exactly the same engine state and the same dense seeds at every moment, or a replay of
the logging configuration would not reproduce the logged rankings. Both use this module:

- `corpus_of`: memories, unit embeddings, owner scopes and graded qrels as arrays;
- `Timeline`: memory additions, edges and deletions applied to an engine state in time
  order (additions, then edges, then deletions at equal times);
- `owner_cosine_seeds`: the default dense seeds, the cosine between a query vector and
  the unit embeddings of the query owner's memories that exist at that time, top
  `DEFAULT_SEEDS`, ties in memory order;
- `project_queries`: query vectors from the query text alone, when none were stored.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
from scipy import sparse

from msprlab.engine import Seed, archive
from msprlab.engine.graph import EdgeType, MemoryEdge, MemoryNode
from msprlab.engine.state import EngineState

from .schema import Dataset

__all__ = ["DEFAULT_SEEDS", "Corpus", "Timeline", "corpus_of", "owner_cosine_seeds",
           "project_queries", "single_embedder", "to_datetime", "to_us", "token_incidence",
           "unit_rows"]

DEFAULT_SEEDS = 10
_EPOCH = datetime(1970, 1, 1)


def to_datetime(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=int(us))


def to_us(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


# ---- the corpus as arrays -----------------------------------------------------------------
@dataclass(frozen=True)
class Corpus:
    """Memories, owner scopes and query facts, as arrays indexed by row."""

    memory_ids: list[str]
    vectors: npt.NDArray[np.float64] | None      # (n_memories, dim), unit rows or zero
    has_vector: npt.NDArray[np.bool_]
    query_ids: list[str]
    query_texts: list[str]
    owners: list[tuple[str | None, str | None, str | None]]
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


def corpus_of(ds: Dataset) -> Corpus:
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
        matrix = unit_rows(np.asarray(embeddings["vector"].to_list(), dtype=np.float64))
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
    scopes: dict[tuple[str | None, str | None, str | None], npt.NDArray[np.int64]] = {}
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
def _payload(row: dict[str, Any]) -> dict[str, Any]:
    """The vector-store row `Memory.add` stores: core fields, owner ids, metadata flat."""
    text = row["text"] or ""
    created: datetime = row["created_at"]
    updated: datetime = row["updated_at"] or created
    payload: dict[str, Any] = {
        "data": text, "hash": hashlib.md5(text.encode("utf-8")).hexdigest(),
        "created_at": created.isoformat(), "updated_at": updated.isoformat()}
    for key in ("user_id", "agent_id", "run_id", "tenant_id", "sub_tenant_id", "role"):
        if row[key] is not None:
            payload[key] = row[key]
    if row["allowed_roles"] is not None:
        payload["allowed_roles"] = list(row["allowed_roles"])
    if row["metadata"]:
        extra = json.loads(row["metadata"])
        if not isinstance(extra, dict):
            raise ValueError(f"memories: metadata of {row['memory_id']!r} is not a JSON object")
        payload.update(extra)
    return payload


class Timeline:
    """Memory additions, edges and deletions, applied to the state in time order."""

    def __init__(self, ds: Dataset, corpus: Corpus, state: EngineState) -> None:
        self.state = state
        self.corpus = corpus
        self.seedable = np.zeros(len(corpus.memory_ids), dtype=bool)
        self.rows = ds.memories.to_dicts()
        created = ds.memories["created_at"].cast(pl.Int64).to_numpy()
        row_of = {m: i for i, m in enumerate(corpus.memory_ids)}
        self.edges = ds.edges.to_dicts()
        # (time, phase, index): additions, then edges, then deletions at equal times.
        ops: list[tuple[int, int, int]] = [(int(t), 0, i) for i, t in enumerate(created)]
        for j, edge in enumerate(self.edges):
            ends = [row_of.get(edge["src"]), row_of.get(edge["dst"])]
            if None in ends:
                raise ValueError(f"edges: row {j} joins {edge['src']!r} -> {edge['dst']!r}, "
                                 "which is not a memory")
            if edge["type"] not in EdgeType.__members__:
                raise ValueError(f"edges: row {j} has type {edge['type']!r}; known: "
                                 f"{', '.join(EdgeType.__members__)}")
            own = to_us(edge["created_at"]) if edge["created_at"] is not None else 0
            ops.append((max(own, *(int(created[e]) for e in ends if e is not None)), 1, j))
        deleted = ds.memories["deleted_at"].cast(pl.Int64).to_list()
        ops += [(t, 2, i) for i, t in enumerate(deleted) if t is not None]
        ops.sort()
        self.ops = ops
        self.next = 0

    def advance(self, until_us: int) -> None:
        """Apply every pending operation at or before `until_us`."""
        graph = self.state.graph
        while self.next < len(self.ops) and self.ops[self.next][0] <= until_us:
            at, phase, index = self.ops[self.next]
            self.next += 1
            if phase == 0:
                self._add(index)
            elif phase == 1:
                edge = self.edges[index]
                moment = to_datetime(at)
                graph.upsert_edge(MemoryEdge(
                    src=edge["src"], dst=edge["dst"], type=EdgeType(edge["type"]),
                    weight=max(0.0, min(1.0, float(edge["weight"]))), created_at=moment,
                    updated_at=moment, evidence=edge["evidence"]))
            else:
                memory_id = self.corpus.memory_ids[index]
                archive(graph, memory_id)
                self.state.payloads.pop(memory_id, None)
                self.seedable[index] = False

    def _add(self, index: int) -> None:
        row = self.rows[index]
        payload = _payload(row)
        memory_id = row["memory_id"]
        self.state.payloads[memory_id] = payload
        self.state.graph.add_node(MemoryNode(
            id=memory_id, hash=hashlib.sha256(payload["data"].encode("utf-8")).hexdigest(),
            created_at=row["created_at"], updated_at=row["updated_at"] or row["created_at"],
            user_id=row["user_id"], agent_id=row["agent_id"], run_id=row["run_id"],
            tenant_id=row["tenant_id"], sub_tenant_id=row["sub_tenant_id"],
            metadata=dict(payload)))
        if self.corpus.vectors is not None and self.corpus.has_vector[index]:
            self.state.graph.set_embedding(memory_id, self.corpus.vectors[index].tolist())
            self.seedable[index] = True


def owner_cosine_seeds(corpus: Corpus, timeline: Timeline, query: int,
                        vector: npt.NDArray[np.float64]) -> list[Seed]:
    assert corpus.vectors is not None
    rows = corpus.scope_rows[query]
    rows = rows[timeline.seedable[rows]]
    if rows.size == 0:
        return []
    scores = corpus.vectors[rows] @ vector
    top = np.argsort(-scores, kind="stable")[:DEFAULT_SEEDS]
    return [Seed(corpus.memory_ids[rows[i]], float(scores[i])) for i in top]
