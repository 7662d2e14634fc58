"""Every node's edges as integers, for the positional search (engine/positional.py).

For the node at position p (`ContextGraph.nodes` order), entries `start[p]` to
`start[p] + count[p]` of `other` (position of the node at the other end) and `row` (the
edge's row, `ContextGraph.edge_rows`) list its edges in `ContextGraph.adjacent` order:
outgoing then incoming, each side in the adjacency dicts' order, self loops left out.

Each node's entries are also kept in arrays of its own, in that order, as edges come and
go (`link`, `unlink`): a new pair of ends goes last on its side, another type of an
existing pair right after that pair's entries, as the dicts place them; a removal takes
its entry out.

An edge coming or going makes its two ends stale, and the graph copies the stale nodes'
entries into the pool before a walk reads it (`ContextGraph.adjacency_index`); the entries
they replace become garbage, and the pool starts afresh once garbage outweighs what is
live. So a change costs a few array operations on the two ends, not a walk over their edge
objects in the graph's dicts (which, for a node with many edges, cost more each time it
gains one).
"""

from __future__ import annotations

from array import array

import numpy as np


class AdjacencyIndex:
    """Integer adjacency by node position (see the module docstring); `array('q')`
    buffers, which the compiled walk reads as they are."""

    __slots__ = ("count", "ends", "live", "other", "row", "stale", "start")

    def __init__(self) -> None:
        self.start = array("q")
        self.count = array("q")
        self.other = array("q")
        self.row = array("q")
        self.stale: set[int] = set()  # positions whose entries must be copied again
        self.live = 0                 # entries that some node's slice still covers
        # per position: its outgoing entries (others, rows), then its incoming ones
        self.ends: list[tuple[array[int], array[int], array[int], array[int]]] = []

    def add_position(self) -> None:
        self.start.append(0)
        self.count.append(0)
        self.ends.append((array("q"), array("q"), array("q"), array("q")))

    def link(self, src: int, dst: int, row: int, new_pair: bool) -> None:
        """A new edge key at `row`, from position src to dst; `new_pair`: no edge joined
        src to dst before (else it follows their other types). Self loops are not listed."""
        if src == dst:
            return
        out, into = self.ends[src], self.ends[dst]
        if new_pair:  # the common case, spelled out: two appends on each end
            out[0].append(dst)
            out[1].append(row)
            into[2].append(src)
            into[3].append(row)
            return
        for others, rows, other in ((out[0], out[1], dst), (into[2], into[3], src)):
            i = len(others) - others[::-1].index(other)
            others.insert(i, other)
            rows.insert(i, row)

    def unlink(self, src: int, dst: int, row: int) -> None:
        """The edge at `row`, from position src to dst, is gone."""
        if src == dst:
            return
        for at, side in ((src, 0), (dst, 2)):
            others, rows = self.ends[at][side], self.ends[at][side + 1]
            i = rows.index(row)
            del others[i]
            del rows[i]

    def refresh(self) -> None:
        """Copy the stale nodes' entries into the pool."""
        if self.needs_fresh_pool():
            self.fresh_pool()
        for at in self.stale:
            out_others, out_rows, in_others, in_rows = self.ends[at]
            self.put(at, out_others + in_others, out_rows + in_rows)
        self.stale.clear()

    def put(self, position: int, others: array[int], rows: array[int]) -> None:
        """The entries of the node at `position`, replacing any it had."""
        self.live += len(others) - self.count[position]
        self.start[position] = len(self.other)
        self.count[position] = len(others)
        self.other.extend(others)
        self.row.extend(rows)

    def needs_fresh_pool(self) -> bool:
        """Garbage outweighs live entries (and is worth a rebuild)."""
        return len(self.other) > 2 * self.live + 4096

    def fresh_pool(self) -> None:
        """Drop every entry; every node that had one is stale."""
        self.stale.update(p for p, n in enumerate(self.count) if n)
        self.other = array("q")
        self.row = array("q")
        self.count = array("q", bytes(8 * len(self.count)))
        self.live = 0

    def renumber_rows(self, alive: bytes | bytearray) -> None:
        """Edge rows were compacted (rows whose `alive` byte is 0 dropped): renumber.

        A node's own arrays hold live edges only. In the pool, entries of removed edges sit
        only in stale or garbage slices (a removal makes both ends stale), so whatever
        number they get is never read.
        """
        renumbered = np.cumsum(np.frombuffer(alive, dtype=np.uint8), dtype=np.int64) - 1
        if self.row:
            rows = renumbered[np.frombuffer(self.row, dtype=np.int64)]
            self.row = array("q", rows.tobytes())
        new_row = renumbered.tolist().__getitem__
        for ends in self.ends:
            for rows_of in (ends[1], ends[3]):
                if rows_of:
                    rows_of[:] = array("q", map(new_row, rows_of))
