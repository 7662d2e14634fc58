"""The context graph: memory nodes, typed weighted edges and embeddings (MSPR.md section 2).

Adjacency mirrors a networkx MultiDiGraph with one edge per (src, dst, type): plain
insertion-ordered dicts, so neighbour order, storage order and the effect of removing and
re-adding an edge are the library's. Ties in BFS and PPR follow that order.

Beside the dicts the graph keeps every edge as a row with the positions of its ends
(`edge_rows`), and the decaying attributes of nodes and edges in columns
(engine/records.py), so a pass that does not depend on order, such as decay, reads and
writes arrays instead of walking the dicts. Rows are in the order the keys were added, not
storage order: a removed edge leaves a hole (its `alive` byte 0) until the holes outnumber
the edges and `_compact_rows` drops them, keeping the others in order; a key added again
takes a new row at the end.
"""

from __future__ import annotations

import functools
import itertools
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

import numpy as np
import numpy.typing as npt

# Nodes and edges are defined beside their columns; everything else imports them from here.
from .adjacency import AdjacencyIndex
from .jit import exact_njit
from .records import EdgeColumns, LooseEdges, NodeColumns, epoch_us
from .records import EdgeType as EdgeType
from .records import MemoryEdge as MemoryEdge
from .records import MemoryNode as MemoryNode
from .stores import ChangeLog

FloatArray = npt.NDArray[np.float64]
PositionArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]


# Decay never touches these (MSPR.md section 2.2).
STICKY_EDGE_TYPES = frozenset({EdgeType.CAUSAL, EdgeType.CONTRADICTS})


@dataclass(frozen=True, slots=True)
class Embedding:
    """A stored vector with its squared norm summed left to right, as the library's cosine does."""

    vector: FloatArray
    norm_sq: float

    @classmethod
    def of(cls, values: Sequence[float] | FloatArray) -> Embedding:
        vector = np.asarray(values, dtype=np.float64)
        return cls(vector, sequential_sum(vector * vector))


def sequential_sum(values: FloatArray) -> float:
    """Sum left to right (no pairwise summation), matching a Python `+=` loop."""
    if values.size == 0:
        return 0.0
    return float(np.add.accumulate(values)[-1])


def row_norms_sq(matrix: FloatArray) -> list[float]:
    """`Embedding.of(row).norm_sq` of every row of a 2-D float64 matrix, compiled: each
    row's squares summed left to right, as for the row alone."""
    out = np.zeros(matrix.shape[0])
    _row_norms()(np.ascontiguousarray(matrix, dtype=np.float64), out)
    found: list[float] = out.tolist()
    return found


def _row_norms_loop(matrix: FloatArray, out: FloatArray) -> None:
    for i in range(matrix.shape[0]):
        total = 0.0  # 0 + the first square is that square (squares are never -0)
        for j in range(matrix.shape[1]):
            square = matrix[i, j] * matrix[i, j]
            total += square
        out[i] = total


@functools.cache
def _row_norms() -> Callable[[FloatArray, FloatArray], None]:
    return exact_njit(_row_norms_loop)


@dataclass(frozen=True, slots=True)
class EdgeRows:
    """The graph's edge rows themselves (no copies), in the order the keys were added (not
    storage order), holes of removed edges included: valid until an edge comes or goes.

    edges : the edge stored at each row, None at a hole (the live objects).
    alive : 1 where a row holds an edge, 0 at a hole.
    src, dst : position of `edge.src` / `edge.dst` in `ContextGraph.nodes` (insertion
        order); a hole keeps its edge's.
    sticky : 1 where the edge's type is in `STICKY_EDGE_TYPES`.
    A row is also the edge's row in `ContextGraph.edge_columns`. Read only: the graph
    writes these as edges come and go.
    """

    edges: list[MemoryEdge | None]
    alive: bytearray
    src: array[int]
    dst: array[int]
    sticky: array[int]


# A (src, dst) pair's edges: the edge itself while the pair has had one type, a dict by
# type (insertion-ordered, as networkx's keys) from its second on. Most pairs have one edge,
# and a dict per pair in each direction was ~370 bytes an edge (0.6 GB at 1.6M edges).
_Pair = MemoryEdge | dict[EdgeType, MemoryEdge]
_Adjacency = dict[str, dict[str, _Pair]]


def _in_pair(pair: _Pair | None, kind: EdgeType) -> MemoryEdge | None:
    """The pair's edge of type `kind`, or None."""
    if pair is None:
        return None
    if isinstance(pair, dict):
        return pair.get(kind)
    return pair if pair.type == kind else None


def _with(pair: _Pair | None, edge: MemoryEdge) -> _Pair:
    """The pair with `edge` added after its edges (its type is not in it)."""
    if pair is None:
        return edge
    if isinstance(pair, dict):
        pair[edge.type] = edge
        return pair
    return {pair.type: pair, edge.type: edge}


def _pair_edges(pair: _Pair) -> Iterable[MemoryEdge]:
    return pair.values() if isinstance(pair, dict) else (pair,)


EdgeKey = tuple[str, str, str]
# `ContextGraph.adjacent`: the nodes at the other ends, the edges, their keys (parallel).
Adjacent = tuple[tuple[str, ...], tuple[MemoryEdge, ...], tuple[EdgeKey, ...]]


class ContextGraph:
    """Nodes (None marks a bare node created by an edge endpoint), edges and embeddings.

    `version` changes on every structural or weight change, so derived views (the PPR
    matrix, the access-count peak) can be cached and rebuilt only when needed; an entry of
    the adjacency cache is dropped only when an edge of its node comes or goes.
    The decaying attributes of nodes and edges live in `node_columns` and `edge_columns`
    (engine/records.py).
    """

    def __init__(self) -> None:
        self.nodes: dict[str, MemoryNode | None] = {}
        self._succ: _Adjacency = {}
        self._pred: _Adjacency = {}
        self.embeddings: dict[str, Embedding] = ChangeLog()  # logs what changed
        self.last_decay_tick: datetime | None = None
        self.decay_memo: object | None = None  # what a decay tick keeps for the next one
        self.version = 0
        self._peak: int | None = None
        self._adjacent: dict[str, Adjacent] = {}
        self.node_columns = NodeColumns()     # by node position
        self.edge_columns = EdgeColumns()     # by edge row
        self._position: dict[str, int] = {}       # node id -> its index in `nodes`
        self._by_position: list[MemoryNode | None] = []  # and back
        self.node_ids: list[str] = []                   # position -> node id
        self._index = AdjacencyIndex()                  # `adjacent` as integers
        # `edge_rows`, kept as edges come and go: a removed edge leaves None (alive 0)
        # until the holes outnumber the edges (`remove_edges` compacts them then). A
        # stored edge's row is its `_row` (engine/records.py), so no key -> row dict.
        # Buffers (arrays, a bytearray) that the compiled decay tick reads as they are.
        self._rows: list[MemoryEdge | None] = []
        self._alive = bytearray()
        self._row_src = array("q")
        self._row_dst = array("q")
        self._row_sticky = array("b")
        self._removed_rows = 0

    # ---- nodes ---------------------------------------------------------------------
    def _ensure(self, node_id: str) -> None:
        if node_id not in self.nodes:
            self._new_position(node_id)
            self.node_columns.append_bare()

    def _new_position(self, node_id: str) -> None:
        self._position[node_id] = len(self.nodes)
        self._by_position.append(None)
        self.node_ids.append(node_id)
        self._index.add_position()
        self.nodes[node_id] = None
        self._succ[node_id] = {}
        self._pred[node_id] = {}

    def add_node(self, node: MemoryNode) -> None:
        """Insert or replace a node; a node keeps the position it first had.

        The node's decaying attributes move into the graph's columns; a node it replaces
        takes its own back. (A node object belongs to one graph at a time.)
        """
        node_id = node.id
        old = self.nodes.get(node_id)
        if node_id not in self.nodes:
            self._new_position(node_id)
            node.attach(self.node_columns)          # its row is its new position
        else:
            if old is not None and old is not node:
                old.unbind()
            position = self._position[node_id]
            if not node.bound_to(self.node_columns, position):
                node.bind(self.node_columns, position)
        self.nodes[node_id] = node
        self._by_position[self._position[node_id]] = node
        self.version += 1
        # A replaced node may have held the peak; a new one can only raise it.
        self._peak = None if old is not None else self._peak_with(node)

    def get(self, node_id: str) -> MemoryNode | None:
        return self.nodes.get(node_id)

    def changed(self) -> None:
        """Call after mutating nodes or edges in place: drops cached derived views."""
        self.version += 1
        self._peak = None

    def _peak_with(self, node: MemoryNode) -> int | None:
        """The cached peak once `node`, new, is in (None: to recompute; a negative count
        may undercut the default 0 of a graph with no eligible node)."""
        peak = self._peak
        if peak is None or node.archived:
            return peak
        return max(peak, node.access_count) if node.access_count >= 0 else None

    def decayed(self, archived: Sequence[int] | None) -> None:
        """`changed` after a decay tick, which touches no access count: the access-count
        peak survives unless a node archived (by position; None: unknown) held it."""
        self.version += 1
        peak = self._peak
        if peak is not None and (archived is None or any(
                node is not None and node.access_count >= peak
                for node in map(self._by_position.__getitem__, archived))):
            self._peak = None

    def set_embedding(self, node_id: str, values: Sequence[float]) -> None:
        self.embeddings[node_id] = Embedding.of(values)

    def put_embedding(self, node_id: str, embedding: Embedding) -> None:
        """`set_embedding` with the norm already summed (`row_norms_sq`)."""
        self.embeddings[node_id] = embedding

    def peak_access_count(self) -> int:
        """Maximum access_count over non-archived nodes (MSPR.md section 10.3), cached."""
        if self._peak is None:
            self._peak = max(
                (n.access_count for n in self.nodes.values() if n is not None and not n.archived),
                default=0)
        return self._peak

    def record_access(self, node_id: str, now: datetime) -> None:
        """Access counting (MSPR.md section 15); unknown and bare nodes are skipped."""
        self.record_accesses((node_id,), now)

    def record_accesses(self, node_ids: Iterable[str], now: datetime) -> None:
        """`record_access` of each id in turn, all at `now`, converted to µs once (a replay
        applies each run of accesses at one time in one call)."""
        us = epoch_us(now)
        nodes = self.nodes
        for node_id in node_ids:
            node = nodes.get(node_id)
            if node is None:
                continue
            count = node.count_access(now, us)
            if self._peak is not None and count > self._peak and not node.archived:
                self._peak = count  # max(peak, count)

    # ---- edges ---------------------------------------------------------------------
    def upsert_edge(self, edge: MemoryEdge) -> MemoryEdge:
        """Add an edge, or overwrite weight/updated_at/evidence/metadata of the existing key."""
        targets = self._succ.get(edge.src)
        existing = None if targets is None else _in_pair(targets.get(edge.dst), edge.type)
        if existing is not None:
            existing.weight = edge.weight
            existing.updated_at = edge.updated_at
            if edge.evidence is not None:
                existing.evidence = edge.evidence
            if edge.has_metadata:
                existing.metadata.update(edge.metadata)
            self.version += 1         # edges: the access-count peak stands
            return existing
        self._ensure(edge.src)
        self._ensure(edge.dst)
        targets = self._succ[edge.src]
        pair = targets.get(edge.dst)
        new_pair = pair is None
        targets[edge.dst] = _with(pair, edge)
        sources = self._pred[edge.dst]
        sources[edge.src] = _with(sources.get(edge.src), edge)
        edge.bind(self.edge_columns)        # its row: the next one, len(self._rows)
        src, dst = self._position[edge.src], self._position[edge.dst]
        self._index.link(src, dst, len(self._rows), new_pair)
        self._rows.append(edge)
        self._alive.append(1)
        self._row_src.append(src)
        self._row_dst.append(dst)
        self._row_sticky.append(edge.type in STICKY_EDGE_TYPES)
        self._forget_adjacent(edge)
        self.version += 1
        return edge

    def upsert_edges(self, src: Sequence[str], dst: Sequence[str], types: Sequence[EdgeType],
                     weights: Sequence[float], created_at: Sequence[datetime],
                     updated_at: Sequence[datetime],
                     evidence: Sequence[str | None] | None = None) -> None:
        """`upsert_edge(MemoryEdge(src[i], dst[i], types[i], weights[i], created_at[i],
        updated_at[i], evidence[i]))` for each i in turn, for a bulk load (a replay adds
        ~10^6 edges before its first search; one call each, with the loose one-row columns
        every new edge starts with, was 20 µs an edge).

        The graph ends exactly as after those calls: each edge takes the same steps in the
        same order, inlined, and a new one is made already bound to its row
        (`MemoryEdge.in_columns`). An edge whose key is stored already, or that the columns
        cannot take as it is (a weight that is not a float, a time that is not naive,
        columns already exotic), goes through `upsert_edge` itself.
        """
        n = len(src)
        cols, succ, pred, nodes = self.edge_columns, self._succ, self._pred, self.nodes
        position, index, adjacent = self._position, self._index, self._adjacent
        stale, ends = index.stale, index.ends
        rows, alive, row_src, row_dst = self._rows, self._alive, self._row_src, self._row_dst
        row_sticky = self._row_sticky
        col_weight, col_updated, col_us = cols.weight, cols.updated_at, cols.updated_us
        touch = cols.touch
        make = MemoryEdge.in_columns
        # A batch's edges mostly share one time object (a memory's edges enter at its time)
        last_stamped: object = None
        last_us: int | None = None
        added = 0
        try:
            for s, d, kind, w, made, stamped, e in zip(
                    src, dst, types, weights, created_at, updated_at,
                    [None] * n if evidence is None else evidence, strict=True):
                if stamped is not last_stamped:
                    last_stamped, last_us = stamped, epoch_us(stamped)
                    if last_us is not None:
                        cols.bound(last_us)
                us = last_us
                targets = succ.get(s)
                pair = None if targets is None else targets.get(d)
                if (cols.exotic or type(w) is not float or us is None
                        or (pair is not None and _in_pair(pair, kind) is not None)):
                    self.upsert_edge(MemoryEdge(s, d, kind, w, made, stamped, e))  # rare
                    continue
                if s not in nodes:
                    self._ensure(s)
                if d not in nodes:
                    self._ensure(d)
                if targets is None:
                    targets = succ[s]
                row = len(rows)
                edge = make(cols, row, s, d, kind, made, e)
                col_weight.append(w)
                col_updated.append(stamped)
                col_us.append(us)
                touch(row)
                p, q = position[s], position[d]
                if pair is None:  # a new pair (`_with`; the pred side has none either)
                    targets[d] = edge
                    pred[d][s] = edge
                    if p != q:    # `AdjacencyIndex.link`'s common case, inlined
                        out, into = ends[p], ends[q]
                        out[0].append(q)
                        out[1].append(row)
                        into[2].append(p)
                        into[3].append(row)
                else:
                    targets[d] = _with(pair, edge)
                    sources = pred[d]
                    sources[s] = _with(sources.get(s), edge)
                    index.link(p, q, row, False)
                rows.append(edge)
                alive.append(1)
                row_src.append(p)
                row_dst.append(q)
                row_sticky.append(kind in STICKY_EDGE_TYPES)
                adjacent.pop(s, None)
                adjacent.pop(d, None)
                stale.add(p)
                stale.add(q)
                added += 1
        finally:
            self.version += added   # one bump per new edge, as `upsert_edge` did

    def remove_edge(self, edge: MemoryEdge) -> None:
        """Remove one key; an emptied (src, dst) pair loses its adjacency position."""
        self.remove_edges((edge,))

    def remove_edges(self, edges: Iterable[MemoryEdge]) -> int:
        """`remove_edge` for each edge in turn (keys not stored are skipped); returns how
        many were removed.

        The graph ends exactly as after those calls (dicts, rows, compaction points,
        `version`): each removal is the same steps in the same order; the lookups are
        hoisted, `version` is bumped once by the count, and the edges let go share one
        `LooseEdges` (each still reads and writes its own values only). What is left per
        edge is a few dict operations on a graph too large for the CPU caches.
        """
        succ, pred = self._succ, self._pred
        rows, alive = self._rows, self._alive
        index, position = self._index, self._position
        loose = LooseEdges()
        touch = self.edge_columns.touch
        removed = 0
        try:
            for edge in edges:
                src, dst, kind = edge.src, edge.dst, edge.type
                targets = succ.get(src)
                pair = None if targets is None else targets.get(dst)
                stored = _in_pair(pair, kind)
                if stored is None:
                    continue
                assert targets is not None
                row = stored._row       # before it is let go: the row it holds here
                loose.take(stored)      # it keeps its values, out of the graph
                sources = pred[dst]
                if isinstance(pair, dict):  # then so is the pred side's
                    del pair[kind]
                    del cast(dict[EdgeType, MemoryEdge], sources[src])[kind]
                if not isinstance(pair, dict) or not pair:
                    del targets[dst]
                    del sources[src]
                index.unlink(position[src], position[dst], row)
                touch(row)
                rows[row] = None
                alive[row] = 0
                removed += 1
                self._removed_rows += 1
                self._forget_adjacent(stored)
                if self._removed_rows > max(1024, len(rows) - self._removed_rows):
                    self._compact_rows()
                    rows, alive = self._rows, self._alive
        finally:
            self.version += removed   # one bump per removal, as `remove_edge` did
        return removed

    def _forget_adjacent(self, edge: MemoryEdge) -> None:
        """An edge came or went: only its two ends' `adjacent` entries change."""
        self._adjacent.pop(edge.src, None)
        self._adjacent.pop(edge.dst, None)
        stale, position = self._index.stale, self._position
        stale.add(position[edge.src])
        stale.add(position[edge.dst])

    def edges(self) -> Iterator[MemoryEdge]:
        """Every edge in storage order: by source in node order, then target, then type."""
        for targets in self._succ.values():
            for pair in targets.values():
                yield from _pair_edges(pair)

    def edge_rows(self) -> EdgeRows:
        """Every edge row with the positions of its ends: the graph's own buffers, no copies
        (`EdgeRows`). The order is the order the keys were added, so use it only where
        order does not matter; `edges()` gives storage order."""
        return EdgeRows(self._rows, self._alive, self._row_src, self._row_dst,
                        self._row_sticky)

    def _compact_rows(self) -> None:
        """Drop the rows of removed edges, keeping the others in order."""
        if not self._removed_rows:
            return
        alive = self._alive
        self._rows = list(itertools.compress(self._rows, alive))
        self.edge_columns.keep(alive)
        self._index.renumber_rows(alive)
        for row, edge in enumerate(self._rows):
            cast(MemoryEdge, edge).move_to(row)
        self._row_src = array("q", itertools.compress(self._row_src, alive))
        self._row_dst = array("q", itertools.compress(self._row_dst, alive))
        self._row_sticky = array("b", itertools.compress(self._row_sticky, alive))
        self._alive = bytearray(b"\x01") * len(self._rows)
        self._removed_rows = 0

    def adjacency_index(self) -> AdjacencyIndex:
        """`adjacent` of every node as integers (engine/adjacency.py), brought up to date:
        valid until an edge comes or goes."""
        index = self._index
        if index.stale:
            index.refresh()
        return index

    def incident(self, node_id: str) -> Iterator[MemoryEdge]:
        """Outgoing then incoming edges of a node (a self loop appears in both)."""
        for pair in self._succ.get(node_id, {}).values():
            yield from _pair_edges(pair)
        for pair in self._pred.get(node_id, {}).values():
            yield from _pair_edges(pair)

    def adjacent(self, node_id: str) -> Adjacent:
        """Every edge of a node except self loops, in `neighbours` order, unfiltered.

        Three parallel tuples: the node at the other end, the edge, and its key (src, dst,
        type value). The structure is cached per node until an edge of it comes or goes;
        weights and archived flags are not part of it, so callers filter on the live `edge.weight`
        and nodes. (Parallel tuples keep the cache nearly invisible to the garbage collector.)
        """
        found = self._adjacent.get(node_id)
        if found is None:
            others: list[str] = []
            edges: list[MemoryEdge] = []
            keys: list[EdgeKey] = []
            for other, edge in self._adjacent_edges(node_id):
                others.append(other)
                edges.append(edge)
                # `_value_` is what `.value` returns, without the property call.
                keys.append((edge.src, edge.dst, edge.type._value_))
            found = self._adjacent[node_id] = (tuple(others), tuple(edges), tuple(keys))
        return found

    def _adjacent_edges(self, node_id: str) -> Iterator[tuple[str, MemoryEdge]]:
        """(the node at the other end, the edge) for each edge of a node but self loops:
        outgoing then incoming, each in the adjacency dicts' order: the order `adjacent`
        lists, and `AdjacencyIndex.link` keeps for `adjacency_index`."""
        for adjacency in (self._succ, self._pred):
            for other, pair in adjacency.get(node_id, {}).items():
                if other == node_id:
                    continue
                for edge in _pair_edges(pair):
                    yield other, edge

    def is_archived(self, node_id: str) -> bool:
        node = self.nodes.get(node_id)
        return node is not None and node.archived

    def neighbours(self, node_id: str, *, min_weight: float,
                   include_archived: bool) -> list[MemoryEdge]:
        """Depth-1 neighbourhood in the library's order (MSPR.md section 8).

        Outgoing edges first, then incoming; edges below `min_weight` or touching an
        archived node (unless `include_archived`) are left out; a self loop is listed once.
        """
        if node_id not in self.nodes:
            return []
        found: list[MemoryEdge] = []
        self_loops: set[EdgeType] = set()
        for incoming, adjacency in ((False, self._succ), (True, self._pred)):
            for other, pair in adjacency[node_id].items():
                for edge in _pair_edges(pair):
                    if edge.weight < min_weight:
                        continue
                    if not include_archived and (
                            self.is_archived(edge.src) or self.is_archived(edge.dst)):
                        continue
                    if other == node_id:
                        if incoming and edge.type in self_loops:
                            continue
                        self_loops.add(edge.type)
                    found.append(edge)
        return found
