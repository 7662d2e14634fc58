"""Edge synthesis on insert, update and delete (MSPR.md section 4).

`EdgeBuilder` keeps the two in-process caches the library keeps (the last memory per
session key and the holders of each document ref), so REPLY_TO, TEMPORAL_NEXT and
DOCUMENT_LINK depend on the order of calls, and are lost with the builder as they are
across a library restart. Time is an argument: every node timestamp and edge timestamp a
call writes is its `now`.

TOPIC_SIMILAR compares a new memory with every stored embedding. The builder keeps those
vectors as the rows of one matrix (`_EmbeddingRows`), so each insert costs one matrix-vector
product that rules out the pairs provably below the threshold, and the few left get the
library's exact left-to-right cosine (bit for bit what `text.cosine` gives).

LLM-inferred edges (SUPPORTS, CONTRADICTS, REFINES, ELABORATES) are out of scope, so
the builder keeps no text cache for them. The UPDATED_FROM edge is not modelled either:
`Memory.update` passes the memory's own id as the previous version, and the library only
links a previous version that differs from it.
"""

from __future__ import annotations

import hashlib
import math
import operator
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from .config import EdgesConfig
from .graph import ContextGraph, EdgeType, Embedding, FloatArray, MemoryEdge, MemoryNode
from .text import cosine

__all__ = ["DOC_REF_KEYS", "EdgeBuilder", "archive", "extract_doc_refs", "same_owner", "text_hash"]

# `http://` or `https://` up to whitespace, `)` or `]`, so markdown links end at the URL.
_URL = re.compile(r"https?://[^\s)\]]+", re.IGNORECASE)
DOC_REF_KEYS = ("doc_id", "document_id", "source_id", "source_url", "url")

_REPLY_TO_WEIGHT = 1.0
_TEMPORAL_NEXT_WEIGHT = 0.6
_DOCUMENT_LINK_WEIGHT = 0.8

SessionKey = tuple[str, str]


def text_hash(text: str) -> str:
    """sha256 hex digest of the UTF-8 text, the node's `hash` (not the payload's md5)."""
    return hashlib.sha256((text or "").encode("utf-8")).hexdigest()


def extract_doc_refs(text: str, metadata: Mapping[str, Any] | None) -> list[str]:
    """Document refs of a memory, first occurrence kept.

    Non-empty string values of `DOC_REF_KEYS` in that key order, then every URL in the
    text in order of appearance. Other value types are ignored.

    >>> extract_doc_refs("see [a](https://ex.com/a) and https://ex.com/a", {"url": "x"})
    ['x', 'https://ex.com/a']
    """
    refs: list[str] = []
    for key in DOC_REF_KEYS:
        value = (metadata or {}).get(key)
        if isinstance(value, str) and value:
            refs.append(value)
    if text:
        refs.extend(_URL.findall(text))
    return list(dict.fromkeys(refs))


def same_owner(a: MemoryNode | None, b: MemoryNode | None) -> bool:
    """Whether DOCUMENT_LINK / TOPIC_SIMILAR may join two memories.

    user_id and agent_id must be equal (None only equals None); tenant_id and
    sub_tenant_id must be equal when both sides carry one; a memory without a node
    never matches.
    """
    if a is None or b is None:
        return False
    if a.user_id != b.user_id or a.agent_id != b.agent_id:
        return False
    for mine, theirs in ((a.tenant_id, b.tenant_id), (a.sub_tenant_id, b.sub_tenant_id)):
        if mine is not None and theirs is not None and mine != theirs:
            return False
    return True


def archive(graph: ContextGraph, memory_id: str) -> None:
    """Soft delete, as `Memory.delete` does: the node is archived and keeps its embedding.

    An unknown id, or a bare node created only as an edge endpoint, is left alone.
    """
    node = graph.get(memory_id)
    if node is None:
        return
    node.archived = True
    graph.changed()


def _session_key(user_id: str | None, agent_id: str | None, run_id: str | None) -> SessionKey:
    # The run wins over the agent, and the tenant plays no part (MSPR.md section 18, item 37).
    return (run_id or agent_id or "", user_id or "")


class EdgeBuilder:
    """The library's incremental builder with its process-local caches.

    Attributes
    ----------
    sessions : dict
        Session key `(run_id or agent_id or "", user_id or "")` -> (last memory id, its time).
    holders : dict
        Document ref -> ids of the memories that carried it, in first-seen order.

    It also keeps the stored embeddings as matrix rows for TOPIC_SIMILAR, a cache only:
    it is checked against `graph.embeddings` on every call and rebuilt when they differ.
    """

    def __init__(self) -> None:
        self.sessions: dict[SessionKey, tuple[str, datetime]] = {}
        self.holders: dict[str, list[str]] = {}
        self._rows = _EmbeddingRows()

    # ---- hooks ---------------------------------------------------------------------
    def on_memory_created(
        self,
        graph: ContextGraph,
        cfg: EdgesConfig,
        *,
        memory_id: str,
        text: str,
        user_id: str | None,
        agent_id: str | None,
        run_id: str | None,
        metadata: Mapping[str, Any] | None,
        embedding: Sequence[float] | None,
        now: datetime,
        tenant_id: str | None = None,
        sub_tenant_id: str | None = None,
    ) -> list[MemoryEdge]:
        """Upsert the node, then add REPLY_TO, TEMPORAL_NEXT, DOCUMENT_LINK, TOPIC_SIMILAR.

        `now` is naive UTC; it stamps the node and the edges and is the session time the
        REPLY_TO window is measured from. Returns a record of each edge write, in order
        (not the stored edges): a write to an existing (src, dst, type) key overwrites
        its weight and evidence, so the same key may appear more than once.
        """
        _upsert_node(graph, memory_id, text, user_id=user_id, agent_id=agent_id,
                     run_id=run_id, metadata=metadata, embedding=embedding, now=now,
                     tenant_id=tenant_id, sub_tenant_id=sub_tenant_id)
        written: list[MemoryEdge] = []
        key = _session_key(user_id, agent_id, run_id)
        previous = self.sessions.get(key)
        if previous is not None and previous[0] != memory_id:
            prev_id, prev_time = previous
            window = cfg.reply_to_window_seconds
            # No lower bound: a memory stamped before its predecessor still replies to it.
            if cfg.enable_reply_to and now - prev_time <= timedelta(seconds=window):
                written.append(_write(graph, prev_id, memory_id, EdgeType.REPLY_TO,
                                      _REPLY_TO_WEIGHT, now, metadata={"window_s": window}))
            if cfg.enable_temporal_next:
                written.append(_write(graph, prev_id, memory_id, EdgeType.TEMPORAL_NEXT,
                                      _TEMPORAL_NEXT_WEIGHT, now,
                                      metadata={"session_key": f"{key[0]}::{key[1]}"}))
        written += self._document_links(graph, cfg, memory_id, text, metadata, now)
        written += _topic_links(graph, cfg, memory_id, embedding, now, self._rows)
        if run_id or agent_id or user_id:
            self.sessions[key] = (memory_id, now)
        return written

    def on_memory_updated(
        self,
        graph: ContextGraph,
        cfg: EdgesConfig,
        *,
        memory_id: str,
        text: str,
        user_id: str | None,
        agent_id: str | None,
        run_id: str | None,
        metadata: Mapping[str, Any] | None,
        embedding: Sequence[float] | None,
        now: datetime,
        tenant_id: str | None = None,
        sub_tenant_id: str | None = None,
    ) -> list[MemoryEdge]:
        """The `Memory.update` hook: upsert the node, then TOPIC_SIMILAR, then DOCUMENT_LINK.

        A changed text gives a new version. The session cache is neither read nor
        written, and the node keeps the owner ids it was created with (only the tenant
        fields can change). Returns the edges in the order they were written.
        """
        _upsert_node(graph, memory_id, text, user_id=user_id, agent_id=agent_id,
                     run_id=run_id, metadata=metadata, embedding=embedding, now=now,
                     tenant_id=tenant_id, sub_tenant_id=sub_tenant_id)
        written = _topic_links(graph, cfg, memory_id, embedding, now, self._rows)
        written += self._document_links(graph, cfg, memory_id, text, metadata, now)
        return written

    # ---- DOCUMENT_LINK ---------------------------------------------------------------
    def _document_links(self, graph: ContextGraph, cfg: EdgesConfig, memory_id: str,
                        text: str, metadata: Mapping[str, Any] | None,
                        now: datetime) -> list[MemoryEdge]:
        # With the switch off the refs are not even registered, so memories added while
        # it was off are never linked later.
        if not cfg.enable_document_link:
            return []
        written: list[MemoryEdge] = []
        node = graph.get(memory_id)
        for ref in extract_doc_refs(text, metadata):
            holders = self.holders.setdefault(ref, [])
            # Every other holder, later ones included when an update re-runs this.
            for other_id in holders:
                if other_id != memory_id and same_owner(node, graph.get(other_id)):
                    written.append(_write(graph, memory_id, other_id, EdgeType.DOCUMENT_LINK,
                                          _DOCUMENT_LINK_WEIGHT, now, evidence=ref,
                                          metadata={"ref": ref}))
            if memory_id not in holders:
                holders.append(memory_id)
        return written


def _topic_links(graph: ContextGraph, cfg: EdgesConfig, memory_id: str,
                 embedding: Sequence[float] | None, now: datetime,
                 rows: _EmbeddingRows) -> list[MemoryEdge]:
    """TOPIC_SIMILAR to the most similar same-owner memories, archived ones included."""
    if not cfg.enable_topic_similar or embedding is None or len(embedding) == 0:
        return []
    scored = rows.similar(graph.embeddings, memory_id, cfg.topic_min_similarity)
    if scored is None:  # a query of another length than the rows: one pair at a time
        scored = _similar_one_by_one(graph.embeddings, memory_id, cfg.topic_min_similarity)
    # Stable: equal similarities keep embedding insertion order.
    scored.sort(key=lambda pair: pair[1], reverse=True)
    node = graph.get(memory_id)
    accepted: list[tuple[str, float]] = []
    for other_id, similarity in scored:
        if len(accepted) >= cfg.topic_top_k:
            break
        if same_owner(node, graph.get(other_id)):
            accepted.append((other_id, similarity))
    return [_write(graph, memory_id, other_id, EdgeType.TOPIC_SIMILAR, similarity, now,
                   metadata={"similarity": similarity})
            for other_id, similarity in accepted]


def _similar_one_by_one(stored: Mapping[str, Embedding], memory_id: str,
                        threshold: float) -> list[tuple[str, float]]:
    """(id, cosine) of every other stored embedding with cosine >= threshold, in store order."""
    mine = stored[memory_id]
    scored: list[tuple[str, float]] = []
    for other_id, other in stored.items():
        if other_id == memory_id:
            continue
        similarity = cosine(mine, other)
        if similarity >= threshold:
            scored.append((other_id, similarity))
    return scored


# Norms (squared) inside this range keep every product and partial sum of a dot product
# far from overflow and make underflow negligible, so the rounding bound below holds.
_SAFE_NORM_SQ = (1e-100, 1e100)


def _sequential_dots(rows: FloatArray, query: FloatArray) -> FloatArray:
    """Each row's dot product with `query`, summed left to right as `text.cosine` does.

    `np.add.accumulate` along a row adds its products one after another (a running sum
    admits no other order); a BLAS product or `np.dot` may group them differently.
    """
    return np.add.accumulate(rows * query, axis=1)[:, -1]


class _EmbeddingRows:
    """The stored embeddings as rows of one matrix, in `graph.embeddings` order.

    A cache: `sync` compares it with the graph's dict (keys, and Embedding objects by
    identity) and appends the new entries, or starts over when an entry was replaced or
    removed. The row length is that of the first non-empty vector; a vector of another
    length is kept as a row of zeros marked `zero`, since its cosine is exactly 0, as with
    a zero norm.

    `similar` finds the rows whose cosine with one of them reaches a threshold. The cosines
    compared with the threshold and written as weights must be the library's, summed left
    to right. A matrix-vector product sums in another order (and may fuse multiply-adds),
    but any two such sums of the same products differ by at most 2·γ_d·Σ|q_i·v_i|
    ≤ 2·γ_d·‖q‖·‖v‖, with γ_d = d·u / (1 - d·u) and u = 2^-53. So a row whose fast cosine
    is below `threshold - margin`, for a margin far above that bound, has an exact cosine
    below the threshold too and is dropped; every other row gets the exact cosine, which
    alone decides. The bound needs norms well away from overflow and underflow: rows (or a
    query) with a squared norm outside `_SAFE_NORM_SQ`, non-finite values included, always
    get the exact cosine.
    """

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self.ids: list[str] = []
        self.embeddings: list[Embedding] = []
        self.position: dict[str, int] = {}
        self.dim = 0                                      # 0: no non-empty vector yet
        self.matrix: FloatArray = np.zeros((0, 0))
        self.root: FloatArray = np.zeros(0)               # sqrt(norm_sq), as cosine takes it
        self.zero = np.zeros(0, dtype=bool)               # cosine exactly 0.0 (length, norm)
        self.safe = np.zeros(0, dtype=bool)               # the fast cosine may rule it out

    def sync(self, stored: Mapping[str, Embedding]) -> None:
        """Match the rows to `stored`: append what is new, start over on any other change."""
        keys, values = list(stored), list(stored.values())
        k = len(self.ids)
        if len(keys) < k or keys[:k] != self.ids or not all(
                map(operator.is_, self.embeddings, values)):
            self._clear()
            k = 0
        if len(keys) == k:
            return
        if not self.dim:
            self.dim = next((v.vector.size for v in values[k:] if v.vector.size), 0)
        self._reserve(len(keys))
        low, high = _SAFE_NORM_SQ
        for i in range(k, len(keys)):
            key, embedding = keys[i], values[i]
            self.ids.append(key)
            self.embeddings.append(embedding)
            self.position[key] = i
            norm_sq = embedding.norm_sq
            fits = embedding.vector.size == self.dim
            self.matrix[i] = embedding.vector if fits else 0.0
            self.root[i] = math.sqrt(norm_sq)
            self.zero[i] = not fits or norm_sq == 0.0
            self.safe[i] = fits and low <= norm_sq <= high

    def _reserve(self, rows: int) -> None:
        """Room for `rows` rows of `dim` values; the capacity at least doubles."""
        capacity, width = self.matrix.shape
        if rows <= capacity and width == self.dim:
            return
        capacity = max(rows, 2 * capacity, 64)
        k = len(self.ids)
        matrix = np.zeros((capacity, self.dim))
        if width == self.dim:   # else every row so far is empty, so zeros already
            matrix[:k] = self.matrix[:k]
        self.matrix = matrix
        columns = []
        for column in (self.root, self.zero, self.safe):
            grown = np.zeros(capacity, dtype=column.dtype)
            grown[:k] = column[:k]
            columns.append(grown)
        self.root, self.zero, self.safe = columns

    def similar(self, stored: Mapping[str, Embedding], memory_id: str,
                threshold: float) -> list[tuple[str, float]] | None:
        """`_similar_one_by_one(stored, memory_id, threshold)`, bit for bit, or None.

        None when the query's length is not the rows' length: the caller then takes one
        pair at a time. (A denominator never underflows to 0, where the library's cosine
        would raise: a positive squared norm is at least 2^-1074, whose root is 2^-537.)
        """
        self.sync(stored)
        n = len(self.ids)
        me = self.position[memory_id]
        query = self.embeddings[me]
        if query.vector.size != self.dim:
            return None
        zero_passes = threshold <= 0.0
        if query.norm_sq == 0.0:    # every cosine is 0.0
            return [(other, 0.0) for other in self.ids if other != memory_id] if zero_passes \
                else []
        root = math.sqrt(query.norm_sq)
        low, high = _SAFE_NORM_SQ
        with np.errstate(all="ignore"):
            if low <= query.norm_sq <= high:
                # The two cosines differ by at most 2·γ_d plus two roundings of the
                # division (same denominator), under 8·d·u for any d < 2^50: 6e-14 at
                # d = 256. The 1e-9 covers rounding `threshold - margin` and underflow.
                margin = 1e-9 + 8.0 * self.dim * 2.0**-53
                fast = (self.matrix[:n] @ query.vector) / (root * self.root[:n])
                maybe = ~(self.zero[:n] | (self.safe[:n] & (fast < threshold - margin)))
            else:
                maybe = ~self.zero[:n]
            maybe[me] = False
            rows = np.flatnonzero(maybe)
            cosines = _sequential_dots(self.matrix[rows], query.vector) / (root * self.root[rows])
        passing = cosines >= threshold
        if not zero_passes:
            return list(zip([self.ids[i] for i in rows[passing]], cosines[passing].tolist(),
                            strict=True))
        # The zero rows pass too (a 0 threshold): merge them in, in row order.
        values = np.zeros(n)
        values[rows] = cosines
        keep = self.zero[:n].copy()
        keep[rows[passing]] = True
        keep[me] = False
        found = np.flatnonzero(keep)
        return list(zip([self.ids[i] for i in found], values[found].tolist(), strict=True))


def _write(graph: ContextGraph, src: str, dst: str, edge_type: EdgeType, weight: float,
           now: datetime, *, evidence: str | None = None,
           metadata: dict[str, Any]) -> MemoryEdge:
    """One facade edge write: weight clamped to [0, 1], both timestamps `now`.

    Returns a record of the write, never the stored edge, which later writes to the same
    key (in this call or a later one) and decay change in place.
    """
    edge = MemoryEdge(src=src, dst=dst, type=edge_type,
                      weight=max(0.0, min(1.0, float(weight))),
                      created_at=now, updated_at=now, evidence=evidence, metadata=metadata)
    graph.upsert_edge(edge.replaced(metadata=dict(metadata)))
    return edge


def _upsert_node(graph: ContextGraph, memory_id: str, text: str, *, user_id: str | None,
                 agent_id: str | None, run_id: str | None,
                 metadata: Mapping[str, Any] | None, embedding: Sequence[float] | None,
                 now: datetime, tenant_id: str | None, sub_tenant_id: str | None) -> None:
    """Create the node, or refresh an existing one (MSPR.md section 2.1), and store the vector."""
    payload = dict(metadata or {})
    if tenant_id is None:
        tenant_id = payload.get("tenant_id")
    if sub_tenant_id is None:
        sub_tenant_id = payload.get("sub_tenant_id")
    digest = text_hash(text)
    node = graph.get(memory_id)
    if node is None:
        node = MemoryNode(id=memory_id, hash=digest, created_at=now, updated_at=now,
                          user_id=user_id, agent_id=agent_id, run_id=run_id,
                          tenant_id=tenant_id, sub_tenant_id=sub_tenant_id, metadata=payload)
    else:
        node.updated_at = now
        if digest != node.hash:
            node.prev_version_id = node.id
            node.version += 1
            node.hash = digest
        if metadata:
            node.metadata.update(metadata)
        # A tenant is stamped when one is known, never cleared.
        if tenant_id is not None:
            node.tenant_id = tenant_id
        if sub_tenant_id is not None:
            node.sub_tenant_id = sub_tenant_id
    graph.add_node(node)
    if embedding is not None:
        graph.set_embedding(memory_id, embedding)
