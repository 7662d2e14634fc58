"""Memory nodes and edges whose decaying attributes live in columns (MSPR.md section 2).

The decay tick (MSPR.md 5.1) reads and writes a few attributes of every node and edge:
edge weight and `updated_at`; node relevance, floor, archived flag, `updated_at` and
`last_accessed_at`. Held as attributes of ~10^4 Python objects, reading them into arrays
and writing them back cost milliseconds per tick. So a graph keeps them in columns (one
per attribute, indexed by node position or edge row) and a node or edge object
reads and writes its own row through properties. A node or edge outside a graph owns
one-row columns of its own; `ContextGraph` binds it to the graph's columns when it is
added and gives it its own again when it is replaced or removed.

Floats sit in `array('d')` columns and times beside their µs since 1970 in `array('q')`
ones, and archived flags beside their bools in a `bytearray`, so the tick's compiled loop
reads them as they are (buffers) and writes copies it puts in place whole. A flag,
`exotic`, is set for good the first time something arrives that the arrays cannot hold as
it is (a weight, relevance or floor that is not a float, which turns those columns into
lists of the very objects assigned; a time that is not a naive `datetime`; an archived
flag that is not a bool; a node id changed after the node was added): the tick then reads
the objects one by one, as the library does (engine/decay.py), and every read returns
exactly what was written.
"""

from __future__ import annotations

import enum
from array import array
from collections.abc import MutableSequence
from datetime import datetime
from itertools import compress
from typing import Any, Self


class EdgeType(enum.StrEnum):
    """The library's edge types (MSPR.md section 2.2); here, beside the edge record, so the
    graph and the records need not import each other."""

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


# The node fields coded in `NodeColumns.codes`, in that order.
CODE_FIELDS = ("user_id", "agent_id", "run_id", "tenant_id", "sub_tenant_id")
NONE_CODE = -1      # the id is None
EXOTIC_CODE = -4    # the id is not a str (then `codes_exotic` is set)

_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = _EPOCH.resolution
# Naive datetime -> µs since 1970. Times repeat a lot (a tick stamps every edge with the
# same `now`); the memo is emptied when it grows past this many entries.
_EPOCH_US: dict[datetime, int] = {}
_EPOCH_US_SIZE = 1 << 18
_NO_US = 1 << 62   # beyond any datetime's µs (year 9999 is below 2^58)


def epoch_us(when: object) -> int | None:
    """µs since 1970 of a naive `datetime` (exact: integer arithmetic); None otherwise."""
    if type(when) is not datetime or when.tzinfo is not None or when.fold:
        return None
    found = _EPOCH_US.get(when)
    if found is None:
        if len(_EPOCH_US) > _EPOCH_US_SIZE:
            _EPOCH_US.clear()
        found = _EPOCH_US[when] = (when - _EPOCH) // _MICROSECOND
    return found


class NodeColumns:
    """The decaying attributes of nodes, by node position (`ContextGraph.nodes` order).

    relevance and floor are `array('d')` (numbers the tick copies in one go) until a value
    that is not a float arrives: then they turn into lists and `exotic` is set. A bare
    position (an edge endpoint without a node) holds placeholders, archived True, so that
    the tick, which skips archived nodes, skips it.

    `archived` holds the objects as assigned (what `MemoryNode.archived` returns) and
    `archived_flags` the same as bytes (1: `is True`) for the tick, which takes the
    `bytearray` as it is; one is never written without the other. (A flag that is not a
    bool sets `exotic`, and then the tick reads the objects, never the bytes.)
    """

    __slots__ = ("access", "accessed", "anchor_us", "archived", "archived_flags", "code_of",
                 "codes", "codes_exotic", "exotic", "floor", "real", "relevance", "updated_at")

    def __init__(self) -> None:
        self.relevance: MutableSequence[Any] = array("d")
        self.floor: MutableSequence[Any] = array("d")
        self.archived: list[Any] = []
        self.archived_flags = bytearray()
        self.updated_at: list[Any] = []
        self.accessed: list[Any] = []
        self.anchor_us = array("q")   # of `last_accessed_at or updated_at`; 0 if exotic
        self.exotic = False
        # For the positional search (engine/positional.py): the owner ids (user, agent,
        # run) and tenant ids (tenant, sub-tenant) of each node as integer codes
        # (`CODE_FIELDS`; NONE_CODE for None, else the id's number in `code_of`), its
        # access count, and 1 for a node, 0 for a bare position. A value the codes cannot
        # stand for exactly (an id that is not a str, a count that is not an int) sets
        # `codes_exotic`, and searches then read the objects.
        self.codes = tuple(array("q") for _ in CODE_FIELDS)
        self.access = array("q")
        self.real = bytearray()
        self.code_of: dict[str, int] = {}
        self.codes_exotic = False

    def append(self, relevance: Any, floor: Any, archived: Any, updated_at: Any,
               accessed: Any) -> int:
        if not self.exotic and (type(relevance) is not float or type(floor) is not float):
            self.go_exotic()        # before an array('d') turns an int into a float
        if type(archived) is not bool:
            self.exotic = True
        self.relevance.append(relevance)
        self.floor.append(floor)
        self.archived.append(archived)
        self.archived_flags.append(archived is True)
        self.updated_at.append(updated_at)
        self.accessed.append(accessed)
        us = epoch_us(accessed or updated_at)
        if us is None:
            self.exotic = True
            us = 0
        self.anchor_us.append(us)
        for codes in self.codes:
            codes.append(NONE_CODE)
        self.access.append(0)
        self.real.append(1)
        return len(self.archived) - 1

    def append_bare(self) -> None:
        """Placeholders for a bare position: archived, so the tick skips it."""
        self.relevance.append(0.0)
        self.floor.append(0.0)
        self.archived.append(True)
        self.archived_flags.append(1)
        self.updated_at.append(_EPOCH)
        self.accessed.append(None)
        self.anchor_us.append(0)
        for codes in self.codes:
            codes.append(NONE_CODE)
        self.access.append(0)
        self.real.append(0)

    def code(self, value: Any) -> int:
        """The code of an owner or tenant id (None: NONE_CODE)."""
        if value is None:
            return NONE_CODE
        if type(value) is not str:
            self.codes_exotic = True
            return EXOTIC_CODE
        found = self.code_of.get(value)
        if found is None:
            found = self.code_of[value] = len(self.code_of)
        return found

    def put_code(self, row: int, field: int, value: Any) -> None:
        self.codes[field][row] = self.code(value)

    def put_access(self, row: int, value: Any) -> None:
        if type(value) is int and -(1 << 63) <= value < (1 << 63):
            self.access[row] = value
        else:
            self.codes_exotic = True
            self.access[row] = 0

    def put_node(self, row: int, node: MemoryNode) -> None:
        """The codes and access count of `node`, now at `row`."""
        for field, name in enumerate(CODE_FIELDS):
            self.put_code(row, field, getattr(node, name))
        self.put_access(row, node.access_count)
        self.real[row] = 1

    def go_exotic(self) -> None:
        self.exotic = True
        self.relevance = list(self.relevance)
        self.floor = list(self.floor)

    def put_relevance(self, row: int, value: Any) -> None:
        if type(value) is not float and not self.exotic:
            self.go_exotic()
        self.relevance[row] = value

    def put_floor(self, row: int, value: Any) -> None:
        if type(value) is not float and not self.exotic:
            self.go_exotic()
        self.floor[row] = value

    def put_archived(self, row: int, value: Any) -> None:
        if type(value) is not bool:
            self.exotic = True
        self.archived[row] = value
        self.archived_flags[row] = value is True   # never bool(value): it could raise

    def refresh_anchor(self, row: int) -> None:
        us = epoch_us(self.accessed[row] or self.updated_at[row])
        if us is None:
            self.exotic = True
            us = 0
        self.anchor_us[row] = us


class _LooseNode(NodeColumns):
    """One row of a node that is in no graph: lists, and no checks until it is bound."""

    def __init__(self, relevance: Any, floor: Any, archived: Any, updated_at: Any,
                 accessed: Any) -> None:
        self.relevance = [relevance]
        self.floor = [floor]
        self.archived = [archived]
        self.archived_flags = bytearray([archived is True])
        self.updated_at = [updated_at]
        self.accessed = [accessed]
        self.anchor_us = array("q", [0])
        self.exotic = False

    def put_code(self, row: int, field: int, value: Any) -> None:
        """Nothing to code: a node is coded when it is bound to a graph."""

    def put_access(self, row: int, value: Any) -> None:
        """As `put_code`."""


class EdgeColumns:
    """The decaying attributes of edges, by row (`ContextGraph`'s edge rows); weight is an
    `array('d')` until a value that is not a float arrives (then a list, and `exotic`).

    A decay tick stamps most rows with its `now`, and writes only their µs: a row whose µs
    is the last tick's (`stamp_us`) has that tick's `now` (`stamp_at`) as its updated_at,
    whatever its `updated_at` entry holds (`updated_at_of`, which every reader goes
    through). The next tick first writes `stamp_at` into the rows it leaves at that µs
    (`stamp`). A fold=1 time is exotic (`epoch_us`), so equal µs are equal times."""

    __slots__ = ("exotic", "stamp_at", "stamp_us", "touched", "touched_lost", "updated_at",
                 "updated_us", "us_hi", "us_lo", "weight")

    def __init__(self) -> None:
        self.weight: MutableSequence[Any] = array("d")
        self.updated_at: list[Any] = []
        self.updated_us = array("q")   # 0 if exotic
        # Bounds on every µs written (`spans_within`): removals and compaction leave them
        # as they are, so they may be wider than what the rows hold, never narrower.
        self.us_lo = _NO_US
        self.us_hi = -_NO_US
        self.exotic = False
        self.stamp_us: int | None = None
        self.stamp_at: datetime | None = None
        # The rows written since the last decay tick (an edge added, overwritten, removed, a
        # weight or time set), which the tick's memo of each node's largest weight cannot
        # vouch for (engine/decay.py); `touched_lost`: they are not all known.
        self.touched: array[int] | None = array("q")
        self.touched_lost = False

    def touch(self, row: int) -> None:
        """Note that row `row` changed outside a decay tick."""
        touched = self.touched
        if touched is None:
            return
        if len(touched) <= 2 * len(self.updated_us):  # a new row is noted twice
            touched.append(row)
        else:                       # more notes than rows: as good as all of them
            self.touched_lost = True

    def untouch(self) -> None:
        """A decay tick has accounted for every change so far."""
        if self.touched is not None:
            del self.touched[:]
        self.touched_lost = False

    def updated_at_of(self, row: int) -> Any:
        """Row `row`'s updated_at (the last tick's `now` if the tick stamped it)."""
        if self.stamp_us is not None and self.updated_us[row] == self.stamp_us:
            return self.stamp_at
        return self.updated_at[row]

    def bound(self, us: int) -> None:
        """Note that some row's µs is `us` (`us_lo`, `us_hi`)."""
        if us < self.us_lo:
            self.us_lo = us
        if us > self.us_hi:
            self.us_hi = us

    def spans_within(self, now_us: int, limit: int) -> bool:
        """Whether every row's µs is less than `limit` µs from `now_us`, by the bounds
        (False may be wrong, True never is): the farthest of them is one of the two."""
        return abs(now_us - self.us_lo) < limit and abs(now_us - self.us_hi) < limit

    def stamp(self, now_us: int, now: datetime, left: list[int]) -> None:
        """A tick at `now` has stamped rows (their µs); `left`: the rows still at the last
        tick's µs, whose entries take that tick's `now` before `now` replaces it."""
        for row in left:
            self.updated_at[row] = self.stamp_at
        self.stamp_us, self.stamp_at = now_us, now

    def append(self, weight: Any, updated_at: Any) -> int:
        row = len(self.updated_at)
        self.weight.append(0.0)
        self.updated_at.append(None)
        self.updated_us.append(0)
        self.put_weight(row, weight)
        self.put_updated_at(row, updated_at)
        return row

    def put_weight(self, row: int, value: Any) -> None:
        if type(value) is not float and not self.exotic:
            self.exotic = True
            self.weight = list(self.weight)
        self.weight[row] = value
        self.touch(row)

    def put_updated_at(self, row: int, value: Any) -> None:
        us = epoch_us(value)
        if us is None:
            self.exotic = True
            us = 0
        self.updated_at[row] = value
        self.updated_us[row] = us
        self.bound(us)
        self.touch(row)

    def keep(self, alive: bytes | bytearray) -> None:
        """Keep the rows whose byte in `alive` is not 0, in order (compaction after
        removals); `itertools.compress` walks the columns in C."""
        weight = list(compress(self.weight, alive))
        self.weight = weight if self.exotic else array("d", weight)
        self.updated_at = list(compress(self.updated_at, alive))
        self.updated_us = array("q", compress(self.updated_us, alive))
        self.touched_lost = True    # the noted rows are renumbered


class _LooseEdge(EdgeColumns):
    """One row of an edge that is in no graph: lists, and no checks until it is bound."""

    touched: array[int] | None = None   # no decay tick reads these rows
    stamp_us: int | None = None
    us_lo, us_hi = -_NO_US, _NO_US      # as wide as they go: never narrowed, never read

    def __init__(self, weight: Any, updated_at: Any) -> None:
        self.weight = [weight]
        self.updated_at = [updated_at]
        self.updated_us = array("q", [0])
        self.exotic = False


class LooseEdges(_LooseEdge):
    """The rows of edges a graph lets go (`ContextGraph.remove_edges`): one set of lists
    with a row each, where each edge reads and writes only its own row, as in the one-row
    columns a new edge starts with (`_LooseEdge`), but one object for all the edges
    removed together (one object per edge was half of what a removal cost)."""

    def __init__(self) -> None:
        self.weight = []
        self.updated_at = []
        self.updated_us = array("q")
        self.exotic = False

    def take(self, edge: MemoryEdge) -> None:
        """Move the edge's values out of its graph's columns into a new row of these."""
        cols, row = edge._cols, edge._row
        self.weight.append(cols.weight[row])
        self.updated_at.append(cols.updated_at_of(row))
        self.updated_us.append(0)
        edge._cols = self
        edge._row = len(self.updated_at) - 1


class _Record:
    """What the dataclasses gave nodes and edges: equality by value over `FIELDS` (in the
    constructor's order), a repr, and `copy.copy` as a new record outside any graph."""

    __slots__ = ()
    FIELDS: tuple[str, ...] = ()

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Record)
        return self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = (f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"{type(self).__name__}({', '.join(fields)})"

    def __copy__(self) -> Self:
        return type(self)(*self._values())


class MemoryNode(_Record):
    """A memory (MSPR.md 2.1). Fields and defaults as the library's; compared by value."""

    __slots__ = ("_access_count", "_agent_id", "_cols", "_id", "_row", "_run_id",
                 "_sub_tenant_id", "_tenant_id", "_user_id", "created_at", "hash",
                 "helpful_count", "last_feedback_at", "metadata", "prev_version_id",
                 "unhelpful_count", "version")
    FIELDS = ("id", "hash", "created_at", "updated_at", "version", "prev_version_id",
              "relevance", "relevance_floor", "archived", "user_id", "agent_id", "run_id",
              "last_accessed_at", "access_count", "helpful_count", "unhelpful_count",
              "last_feedback_at", "tenant_id", "sub_tenant_id", "metadata")
    _cols: NodeColumns
    _row: int

    def __init__(self, id: str, hash: str, created_at: datetime, updated_at: datetime,
                 version: int = 1, prev_version_id: str | None = None,
                 relevance: float = 1.0, relevance_floor: float = 0.0,
                 archived: bool = False, user_id: str | None = None,
                 agent_id: str | None = None, run_id: str | None = None,
                 last_accessed_at: datetime | None = None, access_count: int = 0,
                 helpful_count: int = 0, unhelpful_count: int = 0,
                 last_feedback_at: datetime | None = None, tenant_id: str | None = None,
                 sub_tenant_id: str | None = None,
                 metadata: dict[str, Any] | None = None) -> None:
        self._id = id
        self.hash = hash
        self.created_at = created_at
        self.version = version
        self.prev_version_id = prev_version_id
        self._user_id = user_id
        self._agent_id = agent_id
        self._run_id = run_id
        self._access_count = access_count
        self.helpful_count = helpful_count
        self.unhelpful_count = unhelpful_count
        self.last_feedback_at = last_feedback_at
        self._tenant_id = tenant_id
        self._sub_tenant_id = sub_tenant_id
        self.metadata = {} if metadata is None else metadata
        self._cols = _LooseNode(relevance, relevance_floor, archived, updated_at,
                                last_accessed_at)
        self._row = 0

    @property
    def id(self) -> str:
        return self._id

    @id.setter
    def id(self, value: str) -> None:
        # The array tick finds a node's edges by its position; a renamed node sends the
        # graph's ticks to the loop, which reads the edges of the new id as the library does.
        self._cols.exotic = True
        self._id = value

    # ---- the column-backed attributes ----------------------------------------------
    @property
    def relevance(self) -> float:
        return self._cols.relevance[self._row]  # type: ignore[no-any-return]

    @relevance.setter
    def relevance(self, value: float) -> None:
        self._cols.put_relevance(self._row, value)

    @property
    def relevance_floor(self) -> float:
        return self._cols.floor[self._row]  # type: ignore[no-any-return]

    @relevance_floor.setter
    def relevance_floor(self, value: float) -> None:
        self._cols.put_floor(self._row, value)

    @property
    def archived(self) -> bool:
        return self._cols.archived[self._row]  # type: ignore[no-any-return]

    @archived.setter
    def archived(self, value: bool) -> None:
        self._cols.put_archived(self._row, value)

    @property
    def updated_at(self) -> datetime:
        return self._cols.updated_at[self._row]  # type: ignore[no-any-return]

    @updated_at.setter
    def updated_at(self, value: datetime) -> None:
        self._cols.updated_at[self._row] = value
        self._cols.refresh_anchor(self._row)

    @property
    def last_accessed_at(self) -> datetime | None:
        return self._cols.accessed[self._row]  # type: ignore[no-any-return]

    @last_accessed_at.setter
    def last_accessed_at(self, value: datetime | None) -> None:
        self._cols.accessed[self._row] = value
        self._cols.refresh_anchor(self._row)

    def count_access(self, now: datetime, now_us: int | None) -> int:
        """One access at `now`: `access_count` one more (at least 0) and `last_accessed_at =
        now`; returns the new count. `now_us` is `epoch_us(now)`: None (a time that is not
        naive) stamps through the setter, which marks the columns exotic."""
        count = self._access_count + 1
        count = count if count > 0 else 0  # max(0, count)
        self._access_count = count
        cols, row = self._cols, self._row
        cols.put_access(row, count)
        if now_us is None:
            self.last_accessed_at = now
        else:
            cols.accessed[row] = now
            cols.anchor_us[row] = now_us
        return count

    # ---- values kept also as codes in a graph's columns -------------------------------
    @property
    def user_id(self) -> str | None:
        return self._user_id

    @user_id.setter
    def user_id(self, value: str | None) -> None:
        self._user_id = value
        self._cols.put_code(self._row, 0, value)

    @property
    def agent_id(self) -> str | None:
        return self._agent_id

    @agent_id.setter
    def agent_id(self, value: str | None) -> None:
        self._agent_id = value
        self._cols.put_code(self._row, 1, value)

    @property
    def run_id(self) -> str | None:
        return self._run_id

    @run_id.setter
    def run_id(self, value: str | None) -> None:
        self._run_id = value
        self._cols.put_code(self._row, 2, value)

    @property
    def tenant_id(self) -> str | None:
        return self._tenant_id

    @tenant_id.setter
    def tenant_id(self, value: str | None) -> None:
        self._tenant_id = value
        self._cols.put_code(self._row, 3, value)

    @property
    def sub_tenant_id(self) -> str | None:
        return self._sub_tenant_id

    @sub_tenant_id.setter
    def sub_tenant_id(self, value: str | None) -> None:
        self._sub_tenant_id = value
        self._cols.put_code(self._row, 4, value)

    @property
    def access_count(self) -> int:
        return self._access_count

    @access_count.setter
    def access_count(self, value: int) -> None:
        self._access_count = value
        self._cols.put_access(self._row, value)

    # ---- binding -------------------------------------------------------------------
    def _column_values(self) -> tuple[Any, Any, Any, Any, Any]:
        cols, row = self._cols, self._row
        return (cols.relevance[row], cols.floor[row], cols.archived[row],
                cols.updated_at[row], cols.accessed[row])

    def attach(self, cols: NodeColumns) -> int:
        """Append its values to `cols` (a graph's, at a new position); returns the row."""
        row = cols.append(*self._column_values())
        self._cols = cols
        self._row = row
        cols.put_node(row, self)
        return row

    def bound_to(self, cols: NodeColumns, row: int) -> bool:
        return self._cols is cols and self._row == row

    def bind(self, cols: NodeColumns, row: int) -> None:
        """Move the column-backed values into `cols` at `row` (the graph's)."""
        relevance, floor, archived, updated_at, accessed = self._column_values()
        cols.put_relevance(row, relevance)
        cols.put_floor(row, floor)
        cols.put_archived(row, archived)
        cols.updated_at[row] = updated_at
        cols.accessed[row] = accessed
        cols.refresh_anchor(row)
        cols.put_node(row, self)
        self._cols = cols
        self._row = row

    def unbind(self) -> None:
        """Take the values into one-row columns of its own (the graph let it go)."""
        self._cols = _LooseNode(*self._column_values())
        self._row = 0


class MemoryEdge(_Record):
    """A typed weighted edge (MSPR.md 2.2). Fields and defaults as the library's."""

    __slots__ = ("_cols", "_metadata", "_row", "created_at", "dst", "evidence", "src", "type")
    FIELDS = ("src", "dst", "type", "weight", "created_at", "updated_at", "evidence",
              "metadata")

    def __init__(self, src: str, dst: str, type: EdgeType, weight: float,
                 created_at: datetime, updated_at: datetime, evidence: str | None = None,
                 metadata: dict[str, Any] | None = None) -> None:
        self.src = src
        self.dst = dst
        self.type = type
        self.created_at = created_at
        self.evidence = evidence
        self._metadata = metadata
        self._cols: EdgeColumns = _LooseEdge(weight, updated_at)
        self._row = 0

    @property
    def weight(self) -> float:
        return self._cols.weight[self._row]  # type: ignore[no-any-return]

    @weight.setter
    def weight(self, value: float) -> None:
        self._cols.put_weight(self._row, value)

    @property
    def updated_at(self) -> datetime:
        return self._cols.updated_at_of(self._row)  # type: ignore[no-any-return]

    @updated_at.setter
    def updated_at(self, value: datetime) -> None:
        self._cols.put_updated_at(self._row, value)

    @property
    def metadata(self) -> dict[str, Any]:
        """The edge's metadata dict, made at the first read: most edges never have any,
        and an empty dict each was 64 bytes an edge."""
        found = self._metadata
        if found is None:
            found = self._metadata = {}
        return found

    @metadata.setter
    def metadata(self, value: dict[str, Any]) -> None:
        self._metadata = value

    @property
    def has_metadata(self) -> bool:
        """Whether `metadata` is not empty, without making it."""
        return bool(self._metadata)

    @classmethod
    def in_columns(cls, cols: EdgeColumns, row: int, src: str, dst: str, type: EdgeType,
                   created_at: datetime, evidence: str | None) -> MemoryEdge:
        """An edge whose weight and updated_at are already row `row` of `cols` (a graph's
        bulk load, `ContextGraph.upsert_edges`): what `bind` leaves after `__init__`,
        without the one-row columns a loose edge starts with."""
        edge = cls.__new__(cls)
        edge.src = src
        edge.dst = dst
        edge.type = type
        edge.created_at = created_at
        edge.evidence = evidence
        edge._metadata = None
        edge._cols = cols
        edge._row = row
        return edge

    def bind(self, cols: EdgeColumns) -> None:
        """Append its values to `cols` (a graph's) and read and write them there."""
        row = cols.append(self.weight, self.updated_at)
        self._cols = cols
        self._row = row

    def move_to(self, row: int) -> None:
        """Its row after the graph compacted its edge rows."""
        self._row = row

    def replaced(self, **changes: Any) -> MemoryEdge:
        """A new, unbound edge with these fields changed (`dataclasses.replace`)."""
        return MemoryEdge(**{**dict(zip(self.FIELDS, self._values(), strict=True)),
                             **changes})
