"""Every node's edges as integers, for the positional search (engine/positional.py).

For the node at position p (`ContextGraph.nodes` order), entries `start[p]` to
`start[p] + count[p]` of `other` (position of the node at the other end) and `row` (the
edge's row, `ContextGraph.edge_rows`) list its edges in `ContextGraph.adjacent` order:
outgoing then incoming, each side in the adjacency dicts' order, self loops left out.

An edge coming or going makes its two ends stale. The graph rebuilds the stale nodes'
entries before a walk reads them (`ContextGraph.adjacency_index`), appending them to the
pool; the entries they replace become garbage, and the pool starts afresh once garbage
outweighs what is live. So a graph that changes between searches pays for the nodes that
changed, and a graph built in one go pays for all its nodes once, at its first search.
"""

from __future__ import annotations

from array import array

import numpy as np


class AdjacencyIndex:
    """Integer adjacency by node position (see the module docstring); `array('q')`
    buffers, which the compiled walk reads as they are."""

    __slots__ = ("count", "live", "other", "row", "stale", "start")

    def __init__(self) -> None:
        self.start = array("q")
        self.count = array("q")
        self.other = array("q")
        self.row = array("q")
        self.stale: set[int] = set()  # positions whose entries must be rebuilt
        self.live = 0                 # entries that some node's slice still covers

    def add_position(self) -> None:
        self.start.append(0)
        self.count.append(0)

    def put(self, position: int, others: list[int], rows: list[int]) -> None:
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

        Entries of removed edges sit only in stale or garbage slices (a removal makes both
        ends stale), so whatever number they get is never read.
        """
        if not self.row:
            return
        renumbered = np.cumsum(np.frombuffer(alive, dtype=np.uint8), dtype=np.int64) - 1
        rows = renumbered[np.frombuffer(self.row, dtype=np.int64)]
        self.row = array("q", rows.tobytes())
