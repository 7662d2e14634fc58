"""BFS expansion and candidate features over integer positions (work in progress).

Measured with prototypes (10k memories, all signals on, rankings identical): compiling the
BFS and the numeric features alone gains ~1.1x, because a search then still builds a
payload dict, a token set lookup and a `Candidate` for every one of its ~50 candidates in
Python; holding token ids, owners, tenants and embeddings by position as well, and
building payloads and Candidates only for what the caller reads, gains ~1.7-2.1x.

This module is that second path: `PositionalIndex` holds what a search reads, by node
position, and `expand_and_score` runs the walk and the rerank's features and final scores
in two compiled loops, giving exactly what `bfs.expand_bfs` and `rerank.featurize` give
(same candidates in the same order, same doubles). The object path stays the reference
and the fallback: `PositionalIndex.build` returns None where the arrays cannot stand in
for the objects (a weight, relevance or archived flag the columns call exotic, an owner or
tenant id that is not a str, embeddings of mixed sizes, ...), and `expand_and_score`
returns None where a search needs what the kernels do not do (edge-type priors, a seed
outside the graph, a query vector of another size, a cosine that would raise).

Phase 1 (this file): the index is a snapshot, built from a state in one go. Phase 2 keeps
it up to date as the state is written (the adjacency as in the compiled-BFS spike, owner
and tenant codes, access counts and the embedding matrix on write, payload token ids when
a payload is stored, checked by identity at search time).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .config import RetrievalConfig
from .graph import EdgeKey, Embedding
from .jit import exact_njit
from .rerank import Candidate, Provider
from .scope import UNVERIFIABLE, Scope
from .seeds import Payload
from .state import EngineState
from .text import tokens

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
ByteArray = npt.NDArray[np.uint8]

OWNER_FIELDS = ("user_id", "agent_id", "run_id")
NONE_CODE = -1      # an owner or tenant id that is None
UNKNOWN_CODE = -2   # a wanted id that no node or payload carries: matches nothing
UNVERIFIABLE_CODE = -3  # a wanted id that cannot be compared: matches nothing either


@dataclass(frozen=True, slots=True)
class PositionalIndex:
    """What a search reads, by node position (`ContextGraph.nodes` order).

    adjacency: for position p, entries `start[p]:start[p + 1]` of `other` (the node at
    the other end) and `row` (the edge) in `ContextGraph.adjacent` order.
    """

    ids: list[str]
    position: dict[str, int]
    real: ByteArray                 # 1: a node, 0: a bare endpoint (None in `nodes`)
    archived: ByteArray
    start: IntArray
    other: IntArray
    row: IntArray
    weight: FloatArray              # by edge row (this index's own numbering)
    row_keys: list[EdgeKey]
    node_owner: IntArray            # (3, n): codes of the node's user/agent/run id
    payload_owner: IntArray         # (3, n): codes of the stored payload's, NONE_CODE if none
    tenant: IntArray
    sub_tenant: IntArray
    relevance: FloatArray
    access: IntArray
    vectors: FloatArray             # (n, d); rows of nodes without an embedding are 0
    norm_sq: FloatArray
    has_vector: ByteArray
    token_start: IntArray           # token ids of the stored payload's text, by position
    token_ids: IntArray
    codes: dict[str, int]           # owner and tenant ids -> code
    vocabulary: dict[str, int]      # token -> id

    @staticmethod
    def build(state: EngineState) -> PositionalIndex | None:
        """A snapshot of `state` for `expand_and_score`; None when the arrays cannot hold
        what the object path reads exactly."""
        graph = state.graph
        if graph.node_columns.exotic or graph.edge_columns.exotic:
            return None
        ids = list(graph.nodes)
        position = {node_id: at for at, node_id in enumerate(ids)}
        n = len(ids)
        codes: dict[str, int] = {}

        def code(value: object) -> int:
            if value is None:
                return NONE_CODE
            if type(value) is not str:
                raise _NotApplicable
            return codes.setdefault(value, len(codes))

        real = np.zeros(n, np.uint8)
        archived = np.zeros(n, np.uint8)
        node_owner = np.full((3, n), NONE_CODE, np.int64)
        payload_owner = np.full((3, n), NONE_CODE, np.int64)
        tenant = np.full(n, NONE_CODE, np.int64)
        sub_tenant = np.full(n, NONE_CODE, np.int64)
        relevance = np.ones(n)
        access = np.zeros(n, np.int64)
        starts = [0]
        others: list[int] = []
        rows: list[int] = []
        row_of: dict[int, int] = {}
        row_keys: list[EdgeKey] = []
        weights: list[float] = []
        vocabulary: dict[str, int] = {}
        token_starts = [0]
        token_ids: list[int] = []
        dims = {e.vector.shape for e in graph.embeddings.values()}
        if len(dims) > 1 or any(len(shape) != 1 for shape in dims):
            return None
        d = next(iter(dims))[0] if dims else 0
        vectors = np.zeros((n, d))
        norm_sq = np.zeros(n)
        has_vector = np.zeros(n, np.uint8)
        payloads = state.payloads
        try:
            for at, node_id in enumerate(ids):
                node = graph.nodes[node_id]
                if node is not None:
                    real[at] = 1
                    archived[at] = node.archived is True
                    for field, name in enumerate(OWNER_FIELDS):
                        node_owner[field, at] = code(getattr(node, name))
                    tenant[at] = code(node.tenant_id)
                    sub_tenant[at] = code(node.sub_tenant_id)
                    relevance[at] = node.relevance
                    if type(node.access_count) is not int:
                        return None
                    access[at] = node.access_count
                stored = payloads.get(node_id)
                if stored:  # the resolver skips a stored payload that is empty
                    for field, name in enumerate(OWNER_FIELDS):
                        payload_owner[field, at] = code(stored.get(name))
                    text = stored.get("data", "")
                    if text and isinstance(text, str):
                        token_ids.extend(sorted(vocabulary.setdefault(t, len(vocabulary))
                                                for t in tokens(text)))
                token_starts.append(len(token_ids))
                embedding = graph.embeddings.get(node_id)
                if embedding is not None:
                    vectors[at] = embedding.vector
                    norm_sq[at] = embedding.norm_sq
                    has_vector[at] = 1
                for other, edge, key in zip(*graph.adjacent(node_id), strict=True):
                    row = row_of.get(id(edge))
                    if row is None:
                        row = row_of[id(edge)] = len(row_keys)
                        row_keys.append(key)
                        weights.append(edge.weight)
                    others.append(position[other])
                    rows.append(row)
                starts.append(len(others))
        except _NotApplicable:
            return None
        for node_id in payloads:
            if node_id not in position:
                return None  # a stored memory outside the graph: the object path handles it
        return PositionalIndex(
            ids=ids, position=position, real=real, archived=archived,
            start=np.array(starts, np.int64), other=np.array(others, np.int64),
            row=np.array(rows, np.int64), weight=np.array(weights, np.float64),
            row_keys=row_keys, node_owner=node_owner, payload_owner=payload_owner,
            tenant=tenant, sub_tenant=sub_tenant, relevance=relevance, access=access,
            vectors=vectors, norm_sq=norm_sq, has_vector=has_vector,
            token_start=np.array(token_starts, np.int64),
            token_ids=np.array(token_ids, np.int64), codes=codes, vocabulary=vocabulary)


def sync_access(index: PositionalIndex, node_id: str, count: int) -> None:
    """The access count of `node_id` is now `count` (the search counted an access)."""
    at = index.position.get(node_id)
    if at is not None:
        index.access[at] = count


class _NotApplicable(Exception):
    """A value the arrays cannot hold exactly (building the index stops)."""


@dataclass(frozen=True, slots=True)
class Scored:
    """`expand_and_score`'s result: candidates by position, in reach order."""

    ids: list[str]          # every candidate the rerank scored, in reach order
    positions: IntArray
    was_seed: list[bool]
    dense: list[float]
    lexical: list[float]
    graph: list[float]
    frequency: list[float]
    personal: list[float]
    success: list[float]
    relevance: list[float]
    score: list[float]
    edges_used: dict[EdgeKey, float]

    def candidate(self, i: int, payload: Payload) -> Candidate:
        """The `i`-th candidate, with the payload `featurize` gives it."""
        return Candidate(self.ids[i], payload, self.was_seed[i], self.dense[i],
                         self.lexical[i], self.graph[i], self.frequency[i], self.personal[i],
                         self.success[i], self.relevance[i], self.score[i])

    def candidates(self, seeds: Mapping[str, Payload],
                   payload_of: Callable[[str], Payload | None]) -> list[Candidate]:
        """Every Candidate `featurize` gives: seeds keep their payload, the others take the
        resolver's (`payload_of`), or the stand-in for a memory without one."""
        out = []
        for i, cid in enumerate(self.ids):
            payload = seeds.get(cid) if self.was_seed[i] else payload_of(cid)
            out.append(self.candidate(i, {"id": cid, "memory": "", "score": 0.0}
                                      if payload is None else payload))
        return out


def expand_and_score(index: PositionalIndex, cfg: RetrievalConfig, *, query: str,
                     seeds: Mapping[str, Payload], scope: Scope,
                     query_embedding: Embedding | None, personal: Provider | None,
                     success: Provider | None, tenant_id: str | None,
                     sub_tenant_id: str | None, include_archived: bool,
                     peak: int) -> Scored | None:
    """`expand_bfs` then `featurize` (without priors), over positions; None where the
    object path must run instead (see the module docstring)."""
    position = index.position
    seed_at = []
    for sid in seeds:
        at = position.get(sid)
        if at is None:
            return None
        seed_at.append(at)
    seed_positions = np.array(seed_at, np.int64)
    fields, wants = _scope_codes(index, scope)
    found, reach, walked = _walk()(
        seed_positions, index.start, index.other, index.row, index.weight, index.real,
        index.archived, index.node_owner, fields, wants, not include_archived,
        max(0, cfg.expansion_depth), max(1, cfg.max_candidates),
        float(cfg.edge_weight_floor))
    ids = index.ids
    order = np.concatenate([seed_positions, found])
    cids = list(map(ids.__getitem__, order.tolist()))
    k = len(cids)
    seed_count = len(seed_at)
    seed_dense = np.zeros(k)
    for i, payload in enumerate(seeds.values()):
        dense = payload.get("score") or 0.0
        seed_dense[i] = dense if type(dense) is float else float(dense)
    epsilon, delta, zeta = cfg.epsilon_frequency, cfg.delta_personal, cfg.zeta_success
    personal_values = np.array(list(map(personal, cids)) if personal is not None and delta > 0
                               else np.zeros(k), np.float64)
    success_values = np.array(list(map(success, cids)) if success is not None and zeta > 0
                              else np.zeros(k), np.float64)
    query_tokens = tokens(query)
    vocabulary = index.vocabulary
    query_ids = np.array([vocabulary.get(t, -1) for t in query_tokens], np.int64)
    if query_embedding is None:
        q, q_norm, similarity = np.zeros(0), 0.0, 0
    elif query_embedding.vector.ndim != 1:
        return None
    elif query_embedding.vector.size != index.vectors.shape[1] and index.has_vector.any():
        return None  # `cosine` gives 0.0 for unequal sizes; left to the object path
    else:
        q, q_norm = query_embedding.vector, query_embedding.norm_sq
        similarity = 1
    tenant_code = _code(index, tenant_id)
    sub_tenant_code = _code(index, sub_tenant_id)
    weights = np.array([cfg.alpha_dense, cfg.beta_bm25, cfg.gamma_graph, epsilon, delta, zeta])
    values = np.empty((8, k))
    kept, raised = _score()(
        order, seed_count, reach, seed_dense, index.real, index.node_owner,
        index.payload_owner, fields, wants, index.tenant, index.sub_tenant,
        tenant_code, sub_tenant_code, index.vectors, index.norm_sq, index.has_vector, q,
        q_norm, similarity, index.relevance, index.access, peak, index.token_start,
        index.token_ids, query_ids, len(query_tokens), personal_values, success_values,
        weights, values)
    if raised:
        return None  # a cosine whose denominator underflows: `cosine` raises there
    keep = np.flatnonzero(kept).tolist()
    columns = [values[j][kept].tolist() for j in range(8)]
    keys = index.row_keys
    edges_used = dict(zip(map(keys.__getitem__, walked.tolist()),
                          index.weight[walked].tolist(), strict=True))
    return Scored(ids=list(map(cids.__getitem__, keep)), positions=order[kept],
                  was_seed=[i < seed_count for i in keep], dense=columns[0],
                  lexical=columns[1], graph=columns[2], frequency=columns[3],
                  personal=columns[4], success=columns[5], relevance=columns[6],
                  score=columns[7], edges_used=edges_used)


def _code(index: PositionalIndex, value: str | None) -> int:
    if value is None:
        return NONE_CODE
    return index.codes.get(value, UNKNOWN_CODE)


def _scope_codes(index: PositionalIndex, scope: Scope) -> tuple[IntArray, IntArray]:
    """The scope's fields (0 user, 1 agent, 2 run) and wanted codes, in scope order. A
    wanted code below -1 equals no owner's code: a tagged owner conflicts with it (the
    walk) and no owner confirms it (the rerank), as for an unverifiable value."""
    fields = [OWNER_FIELDS.index(name) for name in scope]
    wants = [UNVERIFIABLE_CODE if want is UNVERIFIABLE
             else index.codes.get(str(want), UNKNOWN_CODE) for want in scope.values()]
    return np.array(fields, np.int64), np.array(wants, np.int64)


def _walk_rows(seed_at: Any, start: Any, other: Any, row: Any, weight: Any, real: Any,
               archived: Any, owner: Any, fields: Any, wants: Any, check_archived: bool,
               depth: int, max_candidates: int, edge_floor: float) -> tuple[Any, Any, Any]:
    """`expand_bfs` over positions (compiled by `_walk`): the positions found after the
    seeds in discovery order, the reach of seeds and found (in that order), and the rows
    of the edges walked, in first-traversal order."""
    n = real.shape[0]
    slot = np.full(n, -1, np.int64)          # position -> index in `order`, -1: not reached
    verdict = np.zeros(n, np.uint8)          # 0 not judged, 1 open, 2 blocked
    is_seed = np.zeros(n, np.uint8)
    order = np.empty(max(max_candidates, seed_at.shape[0]) + 1, np.int64)
    value = np.empty(order.shape[0], np.float64)
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
    walked_seen = np.zeros(weight.shape[0], np.uint8)
    walked = np.empty(weight.shape[0], np.int64)
    walked_count = 0
    blocking = check_archived or fields.shape[0] > 0
    for _ in range(depth):
        if frontier.shape[0] == 0 or size >= max_candidates:
            break
        room = 0
        for i in range(frontier.shape[0]):
            room += start[frontier[i] + 1] - start[frontier[i]]
        next_frontier = np.empty(room, np.int64)
        next_value = np.empty(room, np.float64)
        width = 0
        full = False
        for i in range(frontier.shape[0]):
            at = frontier[i]
            accum = frontier_value[i]
            if check_archived and real[at] == 1 and archived[at] == 1:
                continue
            for j in range(start[at], start[at + 1]):
                to = other[j]
                edge_row = row[j]
                w = weight[edge_row]
                if w < edge_floor:
                    continue
                if blocking:
                    judged = verdict[to]
                    if judged == 0:
                        blocked = check_archived and real[to] == 1 and archived[to] == 1
                        if not blocked and fields.shape[0] > 0 and real[to] == 1 and (
                                is_seed[to] == 0):
                            for f in range(fields.shape[0]):
                                tag = owner[fields[f], to]
                                if tag != -1 and tag != wants[f]:
                                    blocked = True
                                    break
                        judged = 2 if blocked else 1
                        verdict[to] = judged
                    if judged == 2:
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
    seeds = seed_at.shape[0]
    return order[seeds:size].copy(), value[:size].copy(), walked[:walked_count].copy()


def _score_rows(order: Any, seed_count: int, reach: Any, seed_dense: Any, real: Any,
                node_owner: Any, payload_owner: Any, fields: Any, wants: Any, tenant: Any,
                sub_tenant: Any, tenant_code: int, sub_tenant_code: int, vectors: Any,
                norm_sq: Any, has_vector: Any, q: Any,
                q_norm: float, similarity: int, relevance: Any, access: Any, peak: int,
                token_start: Any, token_ids: Any, query_ids: Any, query_size: int,
                personal: Any, success: Any, weights: Any, out: Any) -> tuple[Any, bool]:
    """`featurize`'s loop over positions (compiled by `_score`): which candidates are
    kept, and for each the dense, lexical, graph, frequency, personal, success and
    relevance terms and the final score, in `out`'s rows 0-7 (by reach index)."""
    k = order.shape[0]
    kept = np.zeros(k, np.bool_)
    alpha, beta, gamma = weights[0], weights[1], weights[2]
    epsilon, delta, zeta = weights[3], weights[4], weights[5]
    q_root = math.sqrt(q_norm)
    for i in range(k):
        p = order[i]
        is_real = real[p] == 1
        if i >= seed_count:
            confirmed = True
            for f in range(fields.shape[0]):
                tag = payload_owner[fields[f], p]
                if tag == -1 and is_real:
                    tag = node_owner[fields[f], p]
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
        kept[i] = True
        dense = seed_dense[i]
        if i >= seed_count and similarity == 1 and has_vector[p] == 1:
            if q.shape[0] == 0 or q_norm == 0.0 or norm_sq[p] == 0.0:
                value = 0.0
            else:
                dot = q[0] * vectors[p, 0]  # summed left to right from the first product
                for j in range(1, q.shape[0]):
                    dot += q[j] * vectors[p, j]
                denominator = q_root * math.sqrt(norm_sq[p])
                if denominator == 0.0:
                    return kept, True
                value = dot / denominator
            if value > dense:
                dense = value
        lexical = 0.0
        if query_size > 0:
            common = 0
            for a in range(query_ids.shape[0]):
                t = query_ids[a]
                if t < 0:
                    continue
                for j in range(token_start[p], token_start[p + 1]):
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
        out[0, i] = dense
        out[1, i] = lexical
        out[2, i] = graph_term
        out[3, i] = frequency
        out[4, i] = personal_term
        out[5, i] = success_term
        out[6, i] = r
        out[7, i] = (alpha * dense + beta * lexical + gamma * graph_term + epsilon * frequency
                     + delta * personal_term + zeta * success_term) * r
    return kept, False


@functools.cache
def _walk() -> Callable[..., tuple[Any, Any, Any]]:
    return exact_njit(_walk_rows)


@functools.cache
def _score() -> Callable[..., tuple[Any, bool]]:
    return exact_njit(_score_rows)
