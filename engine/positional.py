"""BFS expansion and the rerank's features over integer node positions.

The object path (`bfs.expand_bfs`, then `rerank.featurize`) walks dicts and touches a node,
a stored payload, a token set and a new `Candidate` for every candidate in Python. Here the
walk and the features and final scores run in two compiled loops over arrays by node
position, giving exactly what the object path gives: the same candidates in the same
order, the same doubles (no fastmath, engine/jit.py; every operation the loop's own, in
its order). Candidates and their payloads are made only when read (`search` makes its
results; the others when `SearchOutcome.candidates` is read); readers of the values alone
(a replay's table) take them as columns (`SearchOutcome.columns`).

What the loops read, and how it stays current:

- Node columns (engine/records.py): relevance, archived flags, access counts, and the
  owner and tenant ids as integer codes, written by the nodes themselves as they change.
- Edge weights (`EdgeColumns`) and the integer adjacency (engine/adjacency.py), rebuilt
  for the nodes whose edges came or went.
- `CandidateCache`, per position, what a search reads of the stored payload (owner codes,
  token ids of the text) and the embedding. The state's payloads (a `PayloadStore`) and
  the graph's embeddings (a `ChangeLog`, engine/stores.py) log every memory whose payload
  or embedding is put, removed or edited in place; the first search after such writes
  reads those memories (and every position added since) and nothing else. So the cost of
  indexing a memory is paid once, by the next search after it is written, and a search
  that follows no writes reads no payload at all. Payloads or embeddings a caller put in a
  plain dict have no log: their searches take the object path.

Measured (`make bench`, 10k memories, all signals on): the object path's per-candidate
work, or checking each candidate's objects by identity at every search, costs about as
much as the candidates' memory touches; what gains is not touching them at all, hence the
logs.

The object path stays the reference and the fallback: `expand_and_score` returns None
wherever the arrays cannot stand in for the objects (a weight, relevance or flag the
columns call exotic, an owner, tenant or count that is not a str or an int, embeddings of
another shape, a seed outside the graph, a cosine that would raise, payloads or
embeddings without a change log), and the search runs
the object path instead. Edge-type priors, PPR and strict isolation always take it.
"""

from __future__ import annotations

import functools
import math
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from .config import RetrievalConfig
from .graph import ContextGraph, EdgeKey, Embedding
from .jit import exact_njit
from .records import CODE_FIELDS, NONE_CODE, MemoryEdge
from .rerank import Candidate, Provider, SubgraphEdge, _subgraph_edge
from .scope import UNVERIFIABLE, Scope
from .seeds import Payload
from .stores import ChangeLog, PayloadStore
from .text import split_tokens, tokens

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

OWNER_FIELDS = CODE_FIELDS[:3]  # the owner ids, in the order of their codes
UNKNOWN_CODE = -2       # a wanted id that no node or payload carries: matches nothing
UNVERIFIABLE_CODE = -3  # a wanted id that cannot be compared: matches nothing either
_NO_VECTOR = np.zeros(0)


class CandidateCache:
    """Per node position: what a search reads of the stored payload and the embedding.

    payload_owner : codes of the payload's user, agent and run ids (NONE_CODE for None
        or no payload), in the graph's code book; one `array('q')` per field.
    token_start, token_count, pool : the token ids of the payload's text, in `pool`.
    vectors, norm_sq, has_vector : the embedding as a matrix row.
    odd_payload, odd_vector : 1 where the objects cannot be coded (an owner that is not
        a str; an embedding of another shape): a search meeting one falls back.
    Scalars sit in `array`s and `bytearray`s (cheap to write one at a time); the kernels
    read them through NumPy views made for the call.
    """

    def __init__(self, graph: ContextGraph) -> None:
        self.graph = graph
        self.capacity = 0
        self.payload_owner = [array("q") for _ in OWNER_FIELDS]
        self.token_start = array("q")
        self.token_count = array("q")
        self.pool = array("q")
        self.live_tokens = 0
        self.vocabulary: dict[str, int] = {}
        self.dim = -1
        self.vectors = np.zeros((0, 0))  # (capacity, dim), dim 0 until an embedding comes
        self.norm_sq = array("d")
        self.has_vector = bytearray()
        self.odd_payload = bytearray()
        self.odd_vector = bytearray()
        # Where the payloads and embeddings are `ChangeLog`s: how far each log has been
        # read (the log, its epoch, a count), and how many positions were indexed.
        self.read: dict[str, tuple[ChangeLog | None, int, int]] = {
            "payload": (None, 0, 0), "vector": (None, 0, 0)}
        self.indexed = 0
        # The walk's scratch (`_walk_rows`), which it leaves as it found it.
        self.slot = np.zeros(0, np.int64)
        self.verdict = np.zeros(0, np.uint8)
        self.is_seed = np.zeros(0, np.uint8)
        self.walked_seen = np.zeros(0, np.uint8)
        # The kernels' outputs (`outputs`), overwritten by each search.
        self.order = np.zeros(0, np.int64)
        self.reach = np.zeros(0, np.float64)
        self.kept = np.zeros(0, np.int64)
        self.walked = np.zeros(0, np.int64)
        self.between = np.zeros(0, np.int64)

    def scratch(self, positions: int, rows: int) -> tuple[Any, Any, Any, Any]:
        """The walk's scratch for this many positions and edge rows."""
        if len(self.slot) < positions:
            size = max(positions, 2 * len(self.slot))
            self.slot = np.full(size, -1, np.int64)
            self.verdict = np.zeros(size, np.uint8)
            self.is_seed = np.zeros(size, np.uint8)
        if len(self.walked_seen) < rows:
            self.walked_seen = np.zeros(max(rows, 2 * len(self.walked_seen)), np.uint8)
        return self.slot, self.verdict, self.is_seed, self.walked_seen

    def outputs(self, candidates: int, rows: int) -> tuple[Any, Any, Any, Any, Any]:
        """The walk's and the scoring's output arrays (`_walk_rows`, `_score_rows`), for up
        to this many candidates and edge rows: order, reach, walked, kept, between."""
        if len(self.order) < candidates:
            size = max(candidates, 2 * len(self.order))
            self.order = np.empty(size, np.int64)
            self.reach = np.empty(size, np.float64)
            self.kept = np.empty(size, np.int64)
        if len(self.walked) < rows:
            size = max(rows, 2 * len(self.walked))
            self.walked = np.empty(size, np.int64)
            self.between = np.empty(size, np.int64)
        return self.order, self.reach, self.walked, self.kept, self.between

    def grow(self, positions: int) -> None:
        """Room for `positions` positions, the new ones empty (`follow` reads them)."""
        if positions <= self.capacity:
            return
        size = max(positions, 2 * self.capacity, 64)
        extra = size - self.capacity
        for codes in self.payload_owner:
            codes.extend([NONE_CODE] * extra)
        self.token_start.extend([0] * extra)
        self.token_count.extend([0] * extra)
        self.norm_sq.extend([0.0] * extra)
        for flags in (self.has_vector, self.odd_payload, self.odd_vector):
            flags.extend(bytes(extra))
        vectors = np.zeros((size, self.vectors.shape[1]))
        vectors[:self.capacity] = self.vectors
        self.vectors = vectors
        self.capacity = size

    def follow(self, payloads: ChangeLog, embeddings: ChangeLog, ids: list[str],
               position: Mapping[str, int]) -> None:
        """Index what was written since the last search: the positions added since, and
        those whose payload or embedding the logs name (every position, for a log this
        cache has not read or that started afresh). So the first search after memories
        are written indexes them (tokens, codes, vector), and a search reads nothing else.
        """
        n = len(ids)
        todo: dict[str, set[int]] = {}
        for name, log in (("payload", payloads), ("vector", embeddings)):
            source, epoch, count = self.read[name]
            if source is not log or epoch != log.epoch:
                todo[name] = set(range(n))
            else:
                named = set(map(position.get, log.changes[count:]))
                named.discard(None)
                named.update(range(self.indexed, n))
                todo[name] = named  # type: ignore[assignment]
            self.read[name] = (log, log.epoch, len(log.changes))
        self.indexed = n
        for at in sorted(todo["payload"]):
            self._read_payload(at, payloads.get(ids[at]))
        for at in sorted(todo["vector"]):
            self._read_embedding(at, embeddings.get(ids[at]))

    def _read_payload(self, at: int, stored: Any) -> None:
        """Position `at`'s owner codes and token ids from its stored payload, if any (the
        resolver skips a payload that is empty; one that is not a mapping is odd)."""
        odd = 0
        found: list[int] = []
        if stored and not isinstance(stored, Mapping):
            odd, stored = 1, None
        code = self.graph.node_columns.code
        for field, name in enumerate(OWNER_FIELDS):
            value = stored.get(name) if stored else None
            if value is None:
                self.payload_owner[field][at] = NONE_CODE
            elif type(value) is str:
                self.payload_owner[field][at] = code(value)
            else:
                odd = 1
        text = stored.get("data") if stored else None
        if text and isinstance(text, str):
            found = self._token_ids(text)
        self.odd_payload[at] = odd
        self._put_tokens(at, found)

    def _put_tokens(self, at: int, found: list[int]) -> None:
        """The token ids of position `at`, into the pool."""
        self.live_tokens += len(found) - self.token_count[at]
        self.token_count[at] = len(found)
        pool = self.pool
        if len(pool) + len(found) > 2 * self.live_tokens + 4096:  # mostly garbage: compact
            fresh = array("q")
            starts, counts = self.token_start, self.token_count
            for p in range(self.capacity):
                if p == at:
                    starts[p] = len(fresh)
                    fresh.extend(found)
                elif counts[p]:
                    start = starts[p]
                    starts[p] = len(fresh)
                    fresh.extend(pool[start:start + counts[p]])
            self.pool = fresh
        else:
            self.token_start[at] = len(pool)
            pool.extend(found)

    def _token_ids(self, text: str) -> list[int]:
        """The ids of the text's distinct tokens (`text.tokens`, without filling its cache:
        the ids are all a search needs, and a cache of sets would only feed the collector)."""
        vocabulary = self.vocabulary
        words = set(split_tokens(text))
        found = list(map(vocabulary.get, words))
        if None not in found:
            return found  # type: ignore[return-value]
        for word in words:
            if word not in vocabulary:
                vocabulary[word] = len(vocabulary)
        return list(map(vocabulary.__getitem__, words))

    def _read_embedding(self, at: int, embedding: Any) -> None:
        """Position `at`'s matrix row from its embedding, if any (of another shape: odd)."""
        self.has_vector[at] = 0
        self.odd_vector[at] = 0
        if embedding is None:
            return
        vector = embedding.vector
        if vector.ndim != 1 or (self.dim >= 0 and vector.size != self.dim):
            self.odd_vector[at] = 1
            return
        if self.dim < 0:
            self.dim = vector.size
            self.vectors = np.zeros((self.capacity, self.dim))
        self.vectors[at] = vector
        self.norm_sq[at] = embedding.norm_sq
        self.has_vector[at] = 1


def cache_for(holder: Any, graph: ContextGraph) -> CandidateCache:
    """The cache kept on `holder` (an EngineState) for its graph, new if the graph is."""
    cache: CandidateCache | None = holder.positional
    if cache is None or cache.graph is not graph:
        cache = holder.positional = CandidateCache(graph)
    return cache


def index_written(state: Any) -> None:
    """`expand_and_score`'s indexing of what was written since the last search (the
    graph's integer adjacency, `grow` and `follow` of the state's cache), ahead of it,
    where the payloads and embeddings keep change logs and the positional path is on:
    caches, so filling them early changes no search's result (`search.prepare_search`)."""
    graph = state.graph
    if not (state.positional_search and isinstance(state.payloads, PayloadStore)
            and isinstance(graph.embeddings, ChangeLog)):
        return
    graph.adjacency_index()  # the walk's integer adjacency, brought up to date
    cache = cache_for(state, graph)
    cache.grow(len(graph.node_ids))
    cache.follow(state.payloads, graph.embeddings, graph.node_ids, graph._position)


@dataclass(frozen=True, slots=True)
class Scored:
    """`expand_and_score`'s result: the candidates `featurize` keeps, in reach order."""

    ids: list[str]
    was_seed: list[bool]
    dense: list[float]
    lexical: list[float]
    graph: list[float]
    frequency: list[float]
    personal: list[float]
    success: list[float]
    relevance: list[float]
    score: list[float]
    subgraph: list[SubgraphEdge]        # `rerank.subgraph` of the walked edges (`want_subgraph`)
    edges_used: dict[EdgeKey, float]    # `expand_bfs`'s, when asked for (`want_edges`)

    def candidate(self, i: int, payload: Payload) -> Candidate:
        """The `i`-th candidate, with the payload `featurize` gives it."""
        return Candidate(self.ids[i], payload, self.was_seed[i], self.dense[i],
                         self.lexical[i], self.graph[i], self.frequency[i], self.personal[i],
                         self.success[i], self.relevance[i], self.score[i])


def expand_and_score(graph: ContextGraph, cache: CandidateCache,
                     payloads: Mapping[str, Payload], cfg: RetrievalConfig, *, query: str,
                     seeds: Mapping[str, Payload], scope: Scope,
                     query_embedding: Embedding | None, personal: Provider | None,
                     success: Provider | None, tenant_id: str | None,
                     sub_tenant_id: str | None, include_archived: bool,
                     peak: int, want_subgraph: bool = True,
                     want_edges: bool = False) -> Scored | None:
    """`expand_bfs` then `featurize` (without priors) over positions; None where the
    object path must run instead (see the module docstring). The subgraph is made only
    when wanted (a search that ranks; featurizing has no use for it)."""
    nodes, edge_cols = graph.node_columns, graph.edge_columns
    if nodes.exotic or nodes.codes_exotic or edge_cols.exotic or not (
            isinstance(payloads, PayloadStore) and isinstance(graph.embeddings, ChangeLog)):
        return None
    position = graph._position
    seed_at = []
    for sid in seeds:
        at = position.get(sid)
        if at is None:
            return None
        seed_at.append(at)
    seed_positions = np.array(seed_at, np.int64)
    adjacency = graph.adjacency_index()
    # The columns go to the kernels as they are (`array`s and `bytearray`s, buffers numba
    # indexes directly): no NumPy view each, which costs more than the call takes them.
    codes = nodes.codes
    fields, wants = _scope_codes(nodes.code_of, scope)
    cache.grow(len(graph.node_ids))
    max_candidates = max(1, cfg.max_candidates)
    slot, verdict, is_seed, walked_seen = cache.scratch(len(graph.node_ids),
                                                        len(edge_cols.weight))
    order_out, value_out, walked_out, kept_out, between_out = cache.outputs(
        max(max_candidates, len(seed_at)) + 1, len(edge_cols.weight))
    size, walked_count = _walk()(
        seed_positions, adjacency.start, adjacency.count, adjacency.other, adjacency.row,
        edge_cols.weight, nodes.real, nodes.archived_flags, codes[0], codes[1], codes[2],
        fields, wants, not include_archived, max(0, cfg.expansion_depth), max_candidates,
        float(cfg.edge_weight_floor), slot, verdict, is_seed, walked_seen, order_out,
        value_out, walked_out)
    # Views of the cache's arrays, read before the next search writes them again.
    order, reach, walked = order_out[:size], value_out[:size], walked_out[:walked_count]
    order_list = order.tolist()
    ids = graph.node_ids
    cids = list(map(ids.__getitem__, order_list))
    cache.follow(payloads, graph.embeddings, ids, position)  # what was written since
    k = len(cids)
    seed_count = len(seed_at)
    seed_dense = np.zeros(k)
    for i, payload in enumerate(seeds.values()):
        dense = payload.get("score") or 0.0
        seed_dense[i] = dense if type(dense) is float else float(dense)
    epsilon, delta, zeta = cfg.epsilon_frequency, cfg.delta_personal, cfg.zeta_success
    personal_values = _provided(personal, delta, cids)
    success_values = _provided(success, zeta, cids)
    query_tokens = tokens(query)
    vocabulary = cache.vocabulary
    query_ids = np.array([vocabulary.get(t, -1) for t in query_tokens], np.int64)
    if query_embedding is None:
        q, q_norm, similarity = _NO_VECTOR, 0.0, 0
    elif query_embedding.vector.ndim != 1:
        return None
    else:
        q, q_norm, similarity = query_embedding.vector, query_embedding.norm_sq, 1
    weights = np.array([cfg.alpha_dense, cfg.beta_bm25, cfg.gamma_graph, epsilon, delta, zeta])
    values = np.empty((8, k))
    m, b, status = _score()(
        order, seed_count, reach, seed_dense, nodes.real, codes[0], codes[1], codes[2],
        *cache.payload_owner, fields, wants, codes[3], codes[4],
        _code(nodes.code_of, tenant_id), _code(nodes.code_of, sub_tenant_id),
        cache.vectors, cache.norm_sq, cache.has_vector, q, q_norm, similarity,
        nodes.relevance, nodes.access, peak, cache.token_start, cache.token_count,
        cache.pool, query_ids, len(query_tokens), personal_values, success_values, weights,
        cache.odd_payload, cache.odd_vector, walked, graph._row_src, graph._row_dst,
        bool(scope), verdict, values, kept_out, between_out)
    if status:
        return None
    keep = kept_out[:m].tolist()
    sub_rows = between_out[:b] if scope else walked
    columns = values[:, :m].tolist()
    rows = graph._rows
    weight, src, dst = edge_cols.weight, graph._row_src, graph._row_dst
    make = _subgraph_edge
    sub = [make(ids[src[r]], ids[dst[r]], cast(MemoryEdge, rows[r]).type._value_, weight[r])
           for r in sub_rows.tolist()] if want_subgraph else []
    edges_used: dict[EdgeKey, float] = {}
    if want_edges:
        for row in walked.tolist():
            edge = cast(MemoryEdge, rows[row])
            edges_used[(edge.src, edge.dst, edge.type._value_)] = weight[row]
    return Scored(ids=list(map(cids.__getitem__, keep)),
                  was_seed=[i < seed_count for i in keep], dense=columns[0],
                  lexical=columns[1], graph=columns[2], frequency=columns[3],
                  personal=columns[4], success=columns[5], relevance=columns[6],
                  score=columns[7], subgraph=sub, edges_used=edges_used)


def _provided(provider: Provider | None, weight: float, ids: list[str]) -> FloatArray:
    """The provider's value of each id (zeros without one, or at weight 0): through its
    `many` where it has one (`feedback.Boosts`, `success.Rates`), else one call each."""
    if provider is None or not weight > 0:
        return np.zeros(len(ids))
    many = getattr(provider, "many", None)
    return np.array(many(ids) if many is not None else list(map(provider, ids)), np.float64)


def _code(code_of: Mapping[str, int], value: str | None) -> int:
    if value is None:
        return NONE_CODE
    return code_of.get(value, UNKNOWN_CODE)


def _scope_codes(code_of: Mapping[str, int], scope: Scope) -> tuple[IntArray, IntArray]:
    """The scope's fields (0 user, 1 agent, 2 run) and wanted codes, in scope order. A
    wanted code below -1 equals no owner's code: a tagged owner conflicts with it (the
    walk) and no owner confirms it (the rerank), as for an unverifiable value."""
    fields = [OWNER_FIELDS.index(name) for name in scope]
    wants = [UNVERIFIABLE_CODE if want is UNVERIFIABLE
             else code_of.get(str(want), UNKNOWN_CODE) for want in scope.values()]
    return np.array(fields, np.int64), np.array(wants, np.int64)


def _walk_rows(seed_at: Any, start: Any, count: Any, other: Any, row: Any, weight: Any,
               real: Any, archived: Any, user: Any, agent: Any, run: Any, fields: Any,
               wants: Any, check_archived: bool, depth: int, max_candidates: int,
               edge_floor: float, slot: Any, verdict: Any, is_seed: Any,
               walked_seen: Any, order: Any, value: Any, walked: Any) -> tuple[int, int]:
    """`expand_bfs` over positions (compiled by `_walk`), into the caller's arrays: `order`
    the seeds then the positions found after them, in discovery order, `value` the reach
    of each (both of at least max(max_candidates, seeds) + 1 entries), `walked` the rows of
    the edges walked, in first-traversal order (as many entries as edge rows). Returns how
    many positions and how many rows. (Arrays made here would each cost more to hand back
    to Python than the walk takes.)"""
    # Scratch, left as found (all -1 / 0): slot (position -> index in `order`, -1: not
    # reached), verdict (0 not judged, 1 open, 2 blocked), is_seed, walked_seen (by row).
    judged = np.empty(16, np.int64)
    judged_count = 0
    size = 0
    for s in seed_at:
        is_seed[s] = 1
    for s in seed_at:
        if slot[s] < 0:
            slot[s] = size
            order[size] = s
            value[size] = 1.0
            size += 1
    frontier = seed_at.copy()
    frontier_value = np.ones(seed_at.shape[0])
    walked_count = 0
    blocking = check_archived or fields.shape[0] > 0
    for _ in range(depth):
        if frontier.shape[0] == 0 or size >= max_candidates:
            break
        room = 0
        for i in range(frontier.shape[0]):
            room += count[frontier[i]]
        next_frontier = np.empty(room, np.int64)
        next_value = np.empty(room, np.float64)
        width = 0
        full = False
        for i in range(frontier.shape[0]):
            at = frontier[i]
            accum = frontier_value[i]
            if check_archived and real[at] == 1 and archived[at] == 1:
                continue
            for j in range(start[at], start[at] + count[at]):
                to = other[j]
                edge_row = row[j]
                w = weight[edge_row]
                if w < edge_floor:
                    continue
                if blocking:
                    if verdict[to] == 0:
                        blocked = check_archived and real[to] == 1 and archived[to] == 1
                        if not blocked and fields.shape[0] > 0 and real[to] == 1 and (
                                is_seed[to] == 0):
                            for f in range(fields.shape[0]):
                                field = fields[f]
                                tag = user[to] if field == 0 else (
                                    agent[to] if field == 1 else run[to])
                                if tag != -1 and tag != wants[f]:
                                    blocked = True
                                    break
                        if judged_count == judged.shape[0]:
                            grown = np.empty(2 * judged_count, np.int64)
                            grown[:judged_count] = judged
                            judged = grown
                        judged[judged_count] = to
                        judged_count += 1
                        verdict[to] = 2 if blocked else 1
                    if verdict[to] == 2:
                        continue
                w = w if w < 1.0 else 1.0
                propagated = accum * (w if w > 0.0 else 0.0)
                if propagated <= 0.0:
                    continue
                at_slot = slot[to]
                if at_slot < 0 or value[at_slot] < propagated:
                    if at_slot < 0:
                        at_slot = size
                        slot[to] = size
                        order[size] = to
                        size += 1
                    value[at_slot] = propagated
                    next_frontier[width] = to
                    next_value[width] = propagated
                    width += 1
                if walked_seen[edge_row] == 0:
                    walked_seen[edge_row] = 1
                    walked[walked_count] = edge_row
                    walked_count += 1
                if size >= max_candidates:
                    full = True
                    break
            if full:
                break
        frontier = next_frontier[:width]
        frontier_value = next_value[:width]
    for i in range(size):
        slot[order[i]] = -1
    for s in seed_at:
        is_seed[s] = 0
    for i in range(judged_count):
        verdict[judged[i]] = 0
    for i in range(walked_count):
        walked_seen[walked[i]] = 0
    return size, walked_count


def _score_rows(order: Any, seed_count: int, reach: Any, seed_dense: Any, real: Any,
                user: Any, agent: Any, run: Any, payload_user: Any, payload_agent: Any,
                payload_run: Any, fields: Any, wants: Any,
                tenant: Any, sub_tenant: Any, tenant_code: int, sub_tenant_code: int,
                vectors: Any, norm_sq: Any, has_vector: Any, q: Any,
                q_norm: float, similarity: int, relevance: Any, access: Any, peak: int,
                token_start: Any, token_count: Any, token_ids: Any, query_ids: Any,
                query_size: int, personal: Any, success: Any, weights: Any,
                odd_payload: Any, odd_vector: Any, walked: Any, row_src: Any, row_dst: Any,
                scoped: bool, mark: Any, out: Any, kept: Any,
                between: Any) -> tuple[int, int, int]:
    """`featurize`'s loop over positions (compiled by `_score`), then `subgraph`'s pick.

    Writes into the caller's arrays: `kept`, the reach indices of the candidates kept;
    `out`'s rows 0-7, for the j-th kept, its dense, lexical, graph, frequency, personal,
    success and relevance terms and its final score; and with a scope, `between`, the
    walked rows the subgraph keeps (those between two kept candidates; `mark`, all zeros,
    is borrowed for that; without a scope it keeps every walked row). Returns how many
    kept, how many rows in `between`, and a status: 0, or 1 where `cosine` would raise, 2
    where a candidate's payload or embedding cannot be coded (`odd_*`) or its vector is not
    the query's size: the object path runs instead.
    """
    k = order.shape[0]
    m = 0
    pending = np.empty(k, np.int64)  # the kept (by index in `out`) whose cosine is owed
    n_pending = 0
    alpha, beta, gamma = weights[0], weights[1], weights[2]
    epsilon, delta, zeta = weights[3], weights[4], weights[5]
    q_root = math.sqrt(q_norm)
    for i in range(k):
        p = order[i]
        if odd_payload[p] == 1 or (similarity == 1 and (odd_vector[p] == 1 or (
                has_vector[p] == 1 and q.shape[0] != vectors.shape[1]))):
            return 0, 0, 2
        is_real = real[p] == 1
        if i >= seed_count:
            confirmed = True
            for f in range(fields.shape[0]):
                field = fields[f]
                tag = payload_user[p] if field == 0 else (
                    payload_agent[p] if field == 1 else payload_run[p])
                if tag == -1 and is_real:
                    tag = user[p] if field == 0 else (agent[p] if field == 1 else run[p])
                if tag == -1 or tag != wants[f]:
                    confirmed = False
                    break
            if not confirmed:
                continue
        if is_real:
            tag = tenant[p]
            if tenant_code != -1 and tag != -1 and tag != tenant_code:
                continue
            tag = sub_tenant[p]
            if sub_tenant_code != -1 and tag != -1 and tag != sub_tenant_code:
                continue
        kept[m] = i
        dense = seed_dense[i]
        if i >= seed_count and similarity == 1 and has_vector[p] == 1:
            if q.shape[0] == 0 or q_norm == 0.0 or norm_sq[p] == 0.0:
                if dense < 0.0:
                    dense = 0.0
            else:  # the cosine, after the loop
                pending[n_pending] = m
                n_pending += 1
        lexical = 0.0
        if query_size > 0:
            common = 0
            for a in range(query_ids.shape[0]):
                t = query_ids[a]
                if t < 0:
                    continue
                for j in range(token_start[p], token_start[p] + token_count[p]):
                    if token_ids[j] == t:
                        common += 1
                        break
            lexical = common / query_size
        frequency = 0.0
        if not is_real:
            r = 1.0
        else:
            r = relevance[p]
            r = r if r < 1.0 else 1.0
            r = r if r > 0.0 else 0.0
            if epsilon > 0:
                count = access[p]
                if count > 0:
                    top = peak if peak > 0 else count
                    top = top if top > count else count
                    denominator = math.log1p(top)
                    if denominator > 0.0:
                        frequency = max(0.0, min(1.0, math.log1p(count) / denominator))
        personal_term = 0.0
        if delta > 0:
            v = personal[i]
            v = v if v < 1.0 else 1.0
            personal_term = v if v > -1.0 else -1.0
        success_term = 0.0
        if zeta > 0:
            v = success[i]
            v = v if v < 1.0 else 1.0
            success_term = v if v > 0.0 else 0.0
        graph_term = reach[i]
        out[0, m] = dense
        out[1, m] = lexical
        out[2, m] = graph_term
        out[3, m] = frequency
        out[4, m] = personal_term
        out[5, m] = success_term
        out[6, m] = r
        m += 1
    # The cosines, four candidates at a time: each dot product is summed left to right from
    # its first product, as one at a time would sum it, but four independent sums keep the
    # CPU busy where one waits on each addition.
    d = q.shape[0]
    for start in range(0, n_pending, 4):
        n = min(4, n_pending - start)
        at0 = pending[start]
        at1 = pending[start + 1] if n > 1 else at0
        at2 = pending[start + 2] if n > 2 else at0
        at3 = pending[start + 3] if n > 3 else at0
        p0, p1, p2, p3 = (order[kept[at0]], order[kept[at1]], order[kept[at2]],
                          order[kept[at3]])
        dot0, dot1 = q[0] * vectors[p0, 0], q[0] * vectors[p1, 0]
        dot2, dot3 = q[0] * vectors[p2, 0], q[0] * vectors[p3, 0]
        for j in range(1, d):
            qj = q[j]
            dot0 += qj * vectors[p0, j]
            dot1 += qj * vectors[p1, j]
            dot2 += qj * vectors[p2, j]
            dot3 += qj * vectors[p3, j]
        for lane in range(n):
            at = pending[start + lane]
            p = order[kept[at]]
            dot = dot0 if lane == 0 else (dot1 if lane == 1 else (dot2 if lane == 2 else dot3))
            denominator = q_root * math.sqrt(norm_sq[p])
            if denominator == 0.0:
                return 0, 0, 1
            value = dot / denominator
            if value > out[0, at]:
                out[0, at] = value
    for j in range(m):
        out[7, j] = (alpha * out[0, j] + beta * out[1, j] + gamma * out[2, j]
                     + epsilon * out[3, j] + delta * out[4, j] + zeta * out[5, j]) * out[6, j]
    if not scoped:
        return m, 0, 0
    for j in range(m):
        mark[order[kept[j]]] = 1
    b = 0
    for j in range(walked.shape[0]):
        row = walked[j]
        if mark[row_src[row]] == 1 and mark[row_dst[row]] == 1:
            between[b] = row
            b += 1
    for j in range(m):
        mark[order[kept[j]]] = 0
    return m, b, 0


@functools.cache
def _walk() -> Callable[..., tuple[int, int]]:
    return exact_njit(_walk_rows)


@functools.cache
def _score() -> Callable[..., tuple[int, int, int]]:
    return exact_njit(_score_rows)
