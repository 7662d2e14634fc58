"""The context graph: memory nodes, typed weighted edges and embeddings (MSPR.md section 2).

Adjacency mirrors a networkx MultiDiGraph with one edge per (src, dst, type): plain
insertion-ordered dicts, so neighbour order, storage order and the effect of removing and
re-adding an edge are the library's. Ties in BFS and PPR follow that order.

Beside the dicts the graph keeps every edge as a row with the positions of its ends
(`edge_table`), and the decaying attributes of nodes and edges in columns
(engine/records.py), so a pass that does not depend on order, such as decay, reads and
writes arrays instead of walking the dicts.
"""

from __future__ import annotations

import enum
import itertools
import operator
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

import numpy as np
import numpy.typing as npt

# Nodes and edges are defined beside their columns; everything else imports them from here.
from .records import EdgeColumns, NodeColumns
from .records import MemoryEdge as MemoryEdge
from .records import MemoryNode as MemoryNode

FloatArray = npt.NDArray[np.float64]
PositionArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]


class EdgeType(enum.StrEnum):
    REPLY_TO = "REPLY_TO"
    TOPIC_SIMILAR = "TOPIC_SIMILAR"
    DOCUMENT_LINK = "DOCUMENT_LINK"
    TEMPORAL_NEXT = "TEMPORAL_NEXT"
    UPDATED_FROM = "UPDATED_FROM"
    CAUSAL = "CAUSAL"
    SUPPORTS = "SUPPORTS"
    CONTRADICTS = "CONTRADICTS"
    REFINES = "REFINES"
    ELABORATES = "ELABORATES"


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


@dataclass(frozen=True, slots=True)
class EdgeTable:
    """Every edge once, in the order the keys were added (not storage order).

    edges : the stored edges (the live objects: weights are read from them).
    src, dst : ndarray, shape (n_edges,)
        Position of `edge.src` / `edge.dst` in `ContextGraph.nodes` (insertion order).
    sticky : ndarray, shape (n_edges,)
        Whether the edge's type is in `STICKY_EDGE_TYPES`.
    rows : ndarray, shape (n_edges,)
        The edge's row in `ContextGraph.edge_columns` (rows of removed edges are skipped
        until the graph compacts them).
    """

    edges: list[MemoryEdge]
    src: PositionArray
    dst: PositionArray
    sticky: BoolArray
    rows: PositionArray


_Adjacency = dict[str, dict[str, dict[EdgeType, MemoryEdge]]]
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
        self.embeddings: dict[str, Embedding] = {}
        self.last_decay_tick: datetime | None = None
        self.version = 0
        self._peak: int | None = None
        self._adjacent: dict[str, Adjacent] = {}
        self.node_columns = NodeColumns()     # by node position
        self.edge_columns = EdgeColumns()     # by edge row
        # `edge_table`'s rows, kept as edges come and go: a removed edge leaves None
        # until the holes outnumber the edges (`remove_edge` compacts them then).
        self._position: dict[str, int] = {}       # node id -> its index in `nodes`
        self._by_position: list[MemoryNode | None] = []  # and back
        self._rows: list[MemoryEdge | None] = []
        self._row_of: dict[tuple[str, str, EdgeType], int] = {}
        # Arrays, so that `edge_table` copies them into NumPy in one go.
        self._row_src = array("q")
        self._row_dst = array("q")
        self._row_sticky = array("b")
        self._removed_rows = 0
        self._table: EdgeTable | None = None

    # ---- nodes ---------------------------------------------------------------------
    def _ensure(self, node_id: str) -> None:
        if node_id not in self.nodes:
            self._new_position(node_id)
            self.node_columns.append_bare()

    def _new_position(self, node_id: str) -> None:
        self._position[node_id] = len(self.nodes)
        self._by_position.append(None)
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

    def peak_access_count(self) -> int:
        """Maximum access_count over non-archived nodes (MSPR.md section 10.3), cached."""
        if self._peak is None:
            self._peak = max(
                (n.access_count for n in self.nodes.values() if n is not None and not n.archived),
                default=0)
        return self._peak

    def record_access(self, node_id: str, now: datetime) -> None:
        """Access counting (MSPR.md section 15); unknown and bare nodes are skipped."""
        node = self.nodes.get(node_id)
        if node is None:
            return
        count = node.access_count + 1
        node.access_count = count = count if count > 0 else 0  # max(0, count)
        node.last_accessed_at = now
        if self._peak is not None and not node.archived and count > self._peak:
            self._peak = count  # max(peak, count)

    # ---- edges ---------------------------------------------------------------------
    def upsert_edge(self, edge: MemoryEdge) -> MemoryEdge:
        """Add an edge, or overwrite weight/updated_at/evidence/metadata of the existing key."""
        existing = self._succ.get(edge.src, {}).get(edge.dst, {}).get(edge.type)
        if existing is not None:
            existing.weight = edge.weight
            existing.updated_at = edge.updated_at
            if edge.evidence is not None:
                existing.evidence = edge.evidence
            if edge.metadata:
                existing.metadata.update(edge.metadata)
            self.version += 1         # edges: the access-count peak stands
            return existing
        self._ensure(edge.src)
        self._ensure(edge.dst)
        self._succ[edge.src].setdefault(edge.dst, {})[edge.type] = edge
        self._pred[edge.dst].setdefault(edge.src, {})[edge.type] = edge
        self._row_of[(edge.src, edge.dst, edge.type)] = len(self._rows)
        edge.bind(self.edge_columns)
        self._rows.append(edge)
        self._row_src.append(self._position[edge.src])
        self._row_dst.append(self._position[edge.dst])
        self._row_sticky.append(edge.type in STICKY_EDGE_TYPES)
        self._table = None
        self._forget_adjacent(edge)
        self.version += 1
        return edge

    def remove_edge(self, edge: MemoryEdge) -> None:
        """Remove one key; an emptied (src, dst) pair loses its adjacency position."""
        by_type = self._succ.get(edge.src, {}).get(edge.dst)
        if not by_type or edge.type not in by_type:
            return
        by_type.pop(edge.type).unbind()
        del self._pred[edge.dst][edge.src][edge.type]
        if not by_type:
            del self._succ[edge.src][edge.dst]
            del self._pred[edge.dst][edge.src]
        self._rows[self._row_of.pop((edge.src, edge.dst, edge.type))] = None
        self._removed_rows += 1
        self._table = None
        self._forget_adjacent(edge)
        if self._removed_rows > max(1024, len(self._row_of)):
            self._compact_rows()
        self.version += 1

    def _forget_adjacent(self, edge: MemoryEdge) -> None:
        """An edge came or went: only its two ends' `adjacent` entries change."""
        self._adjacent.pop(edge.src, None)
        self._adjacent.pop(edge.dst, None)

    def edges(self) -> Iterator[MemoryEdge]:
        """Every edge in storage order: by source in node order, then target, then type."""
        for targets in self._succ.values():
            for by_type in targets.values():
                yield from by_type.values()

    def edge_table(self) -> EdgeTable:
        """Every edge with the positions of its ends, cached until an edge is added or removed.

        The order is the order the keys were added, so use it only where order does not
        matter; `edges()` gives storage order.
        """
        if self._table is None:
            # Holes are skipped, not compacted: decay prunes a few edges a tick, and
            # compacting every row each time would cost more than the tick.
            alive = np.fromiter(map(operator.is_not, self._rows, itertools.repeat(None)),
                                dtype=bool, count=len(self._rows))   # C-level loops only
            rows = np.flatnonzero(alive)
            self._table = EdgeTable(
                edges=cast(list[MemoryEdge], list(itertools.compress(self._rows, alive.tolist()))),
                src=np.array(self._row_src, dtype=np.intp)[rows],
                dst=np.array(self._row_dst, dtype=np.intp)[rows],
                sticky=np.array(self._row_sticky, dtype=np.int8)[rows].astype(bool),
                rows=rows)
        return self._table

    def _compact_rows(self) -> None:
        """Drop the rows of removed edges, keeping the others in order."""
        if not self._removed_rows:
            return
        kept = [i for i, edge in enumerate(self._rows) if edge is not None]
        renumber = dict(zip(kept, range(len(kept)), strict=True))
        self._row_of = {key: renumber[row] for key, row in self._row_of.items()}
        self._rows = [self._rows[i] for i in kept]
        self.edge_columns.keep(kept)
        for row, edge in enumerate(self._rows):
            cast(MemoryEdge, edge).move_to(row)
        self._row_src = array("q", [self._row_src[i] for i in kept])
        self._row_dst = array("q", [self._row_dst[i] for i in kept])
        self._row_sticky = array("b", [self._row_sticky[i] for i in kept])
        self._removed_rows = 0

    def incident(self, node_id: str) -> Iterator[MemoryEdge]:
        """Outgoing then incoming edges of a node (a self loop appears in both)."""
        for by_type in self._succ.get(node_id, {}).values():
            yield from by_type.values()
        for by_type in self._pred.get(node_id, {}).values():
            yield from by_type.values()

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
            for adjacency in (self._succ, self._pred):
                for other, by_type in adjacency.get(node_id, {}).items():
                    if other == node_id:
                        continue
                    for edge in by_type.values():
                        others.append(other)
                        edges.append(edge)
                        # `_value_` is what `.value` returns, without the property call.
                        keys.append((edge.src, edge.dst, edge.type._value_))
            found = self._adjacent[node_id] = (tuple(others), tuple(edges), tuple(keys))
        return found

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
            for other, by_type in adjacency[node_id].items():
                for edge in by_type.values():
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
