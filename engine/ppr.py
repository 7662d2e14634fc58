"""Personalised PageRank expansion (MSPR.md section 9), vectorised over a cached edge table.

The view, the personalisation and the power iteration reproduce what the library hands to
networkx.pagerank, without networkx: `pagerank.personalized_pagerank` matches its floats.

Per graph version, the edge table is built once, and so is the view of each search shape
(scope, edge floor, archived switch, direction) with its PageRank transition matrix: a
search then only appends its missing seeds, runs the power iteration and picks the top
nodes. `edges_used` is a lazy mapping over the view, so a search that reports only the
edges among its candidates (every search with a scope) never lists the whole view.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .bfs import EdgeKey
from .graph import ContextGraph, MemoryEdge
from .pagerank import Transition, pagerank_on, personalized_pagerank, transition
from .scope import SCOPE_KEYS, UNVERIFIABLE, Scope
from .seeds import Payload, seed_score

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class _EdgeTable:
    """Every stored edge in storage order, as arrays over node positions."""

    ids: list[str]
    position: dict[str, int]
    archived: BoolArray
    owners: dict[str, tuple[dict[str, int], IntArray]]  # key -> (value code, code per node)
    src: IntArray
    dst: IntArray
    weight: npt.NDArray[np.float64]
    edges: list[MemoryEdge]
    # Built views by search shape, each with the seeds it must not be used for.
    views: dict[tuple[object, ...], tuple[BoolArray, _View]] = field(default_factory=dict)


_TABLES: weakref.WeakKeyDictionary[ContextGraph, tuple[int, _EdgeTable]] = (
    weakref.WeakKeyDictionary())


def _edge_table(graph: ContextGraph) -> _EdgeTable:
    cached = _TABLES.get(graph)
    if cached is not None and cached[0] == graph.version:
        return cached[1]
    ids = list(graph.nodes)
    position = {nid: i for i, nid in enumerate(ids)}
    nodes = list(graph.nodes.values())
    archived = np.array([n is not None and n.archived for n in nodes], dtype=bool)
    owners: dict[str, tuple[dict[str, int], IntArray]] = {}
    for key in SCOPE_KEYS:
        codes: dict[str, int] = {}
        values = [None if n is None else getattr(n, key) for n in nodes]
        column = np.array([-1 if v is None else codes.setdefault(str(v), len(codes))
                           for v in values], dtype=np.int64)
        owners[key] = (codes, column)
    edges = list(graph.edges())
    src = np.array([position[e.src] for e in edges], dtype=np.int64)
    dst = np.array([position[e.dst] for e in edges], dtype=np.int64)
    weight = np.array([e.weight for e in edges], dtype=np.float64)
    table = _EdgeTable(ids, position, archived, owners, src, dst, weight, edges)
    _TABLES[graph] = (graph.version, table)
    return table


def _scope_conflicts(table: _EdgeTable, scope: Scope) -> BoolArray:
    """Nodes tagged with an owner other than the scope's, for any scoped key (section 7)."""
    conflict = np.zeros(len(table.ids), dtype=bool)
    for key, want in scope.items():
        codes, column = table.owners[key]
        tagged = column >= 0
        if want is UNVERIFIABLE or want not in codes:
            conflict |= tagged
        else:
            conflict |= tagged & (column != codes[str(want)])
    return conflict


def _skip_mask(table: _EdgeTable, scope: Scope, keep: BoolArray,
               include_archived: bool) -> BoolArray:
    """Nodes left out of the view: archived ones, and with a scope non-seed conflicts."""
    skip = np.zeros(len(table.ids), dtype=bool)
    if include_archived and not scope:
        return skip
    if not include_archived:
        skip |= table.archived
    if scope:
        skip |= _scope_conflicts(table, scope) & ~keep
    return skip


@dataclass(frozen=True, slots=True)
class _View:
    """The view before seeds are appended (MSPR.md 9.3): its edges and its PageRank matrix.

    `kept` are the view's stored edges (indices into the table, storage order), `order` the
    view's nodes (table positions) in view order and `local` the inverse map (-1: not in
    the view). `graph` is the transition of the merged edges over `order`, or None when a
    weight is not finite (pagerank then raises, as it always did).
    """

    kept: IntArray
    kept_src: IntArray  # table positions of each kept edge's endpoints
    kept_dst: IntArray
    order: IntArray
    local: IntArray
    graph: Transition | None
    # Without `graph`: the merged edges (src, dst, weight) in the order pagerank gets them.
    merged: tuple[IntArray, IntArray, npt.NDArray[np.float64]] | None


# Views per (scope, floor, archived switch, direction), rebuilt when the graph changes.
_VIEW_CACHE_SIZE = 32


def _build_view(table: _EdgeTable, skip: BoolArray, edge_floor: float,
                undirected: bool) -> _View:
    mask = (table.weight >= edge_floor) & ~skip[table.src] & ~skip[table.dst]
    kept = np.flatnonzero(mask)
    ks, kd, kw = table.src[kept], table.dst[kept], table.weight[kept]
    # View node order: first appearance as an endpoint.
    endpoints = np.empty(2 * ks.size, dtype=np.int64)
    endpoints[0::2], endpoints[1::2] = ks, kd
    uniq, first = np.unique(endpoints, return_index=True)
    order = uniq[np.argsort(first, kind="stable")]
    local = np.full(len(table.ids), -1, dtype=np.int64)
    local[order] = np.arange(order.size)
    src, dst, weight = local[ks], local[kd], kw
    if undirected:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        weight = np.concatenate([weight, weight])
    # One view edge per (src, dst) with the largest weight. The PageRank matrix does not
    # depend on the edge order (pagerank.py), so the pairs stay sorted by (src, dst).
    width = max(order.size, 1)
    pair = src * width + dst
    uniq_pair, inverse = np.unique(pair, return_inverse=True)
    best = np.full(uniq_pair.size, -np.inf)
    np.maximum.at(best, inverse, weight)
    pair_src, pair_dst = uniq_pair // width, uniq_pair % width
    if np.isfinite(best).all():
        return _View(kept, ks, kd, order, local,
                     transition(order.size, pair_src, pair_dst, best), None)
    # pagerank rejects the weight, naming its index: keep the edge order it always saw,
    # by source, then by first appearance of the pair.
    first_at = np.unique(pair, return_index=True)[1]
    edge_order = np.lexsort((first_at, pair_src))
    return _View(kept, ks, kd, order, local, None,
                 (pair_src[edge_order], pair_dst[edge_order], best[edge_order]))


def _view(table: _EdgeTable, scope: Scope, seed_pos: list[int], *, edge_floor: float,
          include_archived: bool, undirected: bool) -> _View:
    """The view for this search; shared by every search of the same shape, unless a seed
    would be skipped for its owner tags, which only that search's view keeps."""
    key = (tuple(scope.items()), edge_floor, include_archived, undirected)
    cached = table.views.get(key)
    if cached is not None and not cached[0][[p for p in seed_pos if p >= 0]].any():
        return cached[1]
    keep = np.zeros(len(table.ids), dtype=bool)
    keep[[p for p in seed_pos if p >= 0]] = True
    skip = _skip_mask(table, scope, keep, include_archived)
    view = _build_view(table, skip, edge_floor, undirected)
    if cached is None:
        # Seeds that a shared view would skip: scope conflicts that are not archived.
        kept_only_here = (_scope_conflicts(table, scope) if scope
                          else np.zeros(len(table.ids), dtype=bool))
        if not include_archived:
            kept_only_here &= ~table.archived
        if not kept_only_here[keep].any():
            if len(table.views) >= _VIEW_CACHE_SIZE:
                table.views.clear()
            table.views[key] = (kept_only_here, view)
    return view


class ViewEdges(Mapping[EdgeKey, float]):
    """`edges_used` of a PPR search: every edge of the view, in storage order, with its
    weight, built only when read (a view can hold hundreds of thousands of edges).

    The weights are read when the mapping is first used; read it before changing the graph.
    `between` gives the subgraph among some nodes without building the mapping.
    """

    __slots__ = ("_edges", "_items", "_kept", "_kept_dst", "_kept_src", "_position")

    def __init__(self, table: _EdgeTable, kept: IntArray, kept_src: IntArray,
                 kept_dst: IntArray) -> None:
        self._position = table.position
        self._edges = table.edges
        self._kept = kept
        self._kept_src = kept_src
        self._kept_dst = kept_dst
        self._items: dict[EdgeKey, float] | None = None

    def _mapping(self) -> dict[EdgeKey, float]:
        if self._items is None:
            edges = self._edges
            self._items = {(e.src, e.dst, e.type._value_): e.weight
                           for e in (edges[i] for i in self._kept.tolist())}
        return self._items

    def __getitem__(self, key: EdgeKey) -> float:
        return self._mapping()[key]

    def __iter__(self) -> Iterator[EdgeKey]:
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self._mapping())

    def between(self, ids: Iterable[str]) -> list[tuple[EdgeKey, float]]:
        """The (key, weight) items whose two endpoints are both in `ids`, in order."""
        if self._items is not None:
            wanted = set(ids)
            return [(k, w) for k, w in self._items.items() if k[0] in wanted and k[1] in wanted]
        inside = np.zeros(len(self._position), dtype=bool)
        inside[[p for p in map(self._position.get, ids) if p is not None]] = True
        chosen = self._kept[inside[self._kept_src] & inside[self._kept_dst]]
        edges = self._edges
        return [((e.src, e.dst, e.type._value_), e.weight)
                for e in (edges[i] for i in chosen.tolist())]


def prepare_edges(graph: ContextGraph) -> None:
    """The graph's edge table for its current version, built as the next PPR search would
    build it (a cache: a search after this finds it built)."""
    _edge_table(graph)


def expand_ppr(graph: ContextGraph, seeds: Mapping[str, Payload], scope: Scope, *,
               max_candidates: int, edge_floor: float, include_archived: bool,
               damping: float, max_iter: int, tolerance: float, undirected: bool = False,
               ) -> tuple[dict[str, float], Mapping[EdgeKey, float], list[str]]:
    """Reach (seeds 1.0, others raw PPR mass), the view's edges, and fallback notes."""
    table = _edge_table(graph)
    seed_pos = [table.position.get(sid, -1) for sid in seeds]
    view = _view(table, scope, seed_pos, edge_floor=edge_floor,
                 include_archived=include_archived, undirected=undirected)
    edges_used = ViewEdges(table, view.kept, view.kept_src, view.kept_dst)

    # Seeds missing from the view are appended in seed order.
    n_base = view.order.size
    seed_view: list[int] = []
    appended: list[str] = []
    for sid, pos in zip(seeds, seed_pos, strict=True):
        at = int(view.local[pos]) if pos >= 0 else -1
        if at < 0:
            at = n_base + len(appended)
            appended.append(sid)
        seed_view.append(at)
    n_view = n_base + len(appended)

    raw = np.array([max(0.0, seed_score(p)) for p in seeds.values()])
    total = 0.0
    for value in raw:
        total += value
    seed_mass = raw / total if total > 0.0 else np.full(len(seeds), 1.0 / len(seeds))
    personalization = np.zeros(n_view)
    for at, mass in zip(seed_view, seed_mass, strict=True):
        personalization[at] = mass

    reach = dict.fromkeys(seeds, 1.0)
    notes: list[str] = []
    if view.graph is None:  # a weight that is not finite: pagerank raises on it
        assert view.merged is not None
        src, dst, weight = view.merged
        result = personalized_pagerank(n_view, src, dst, weight, personalization,
                                       alpha=damping, max_iter=max_iter, tol=tolerance)
    else:
        result = pagerank_on(view.graph.with_isolated(len(appended)), personalization,
                             alpha=damping, max_iter=max_iter, tol=tolerance)
    if result.scores is None:
        notes.append(f"ppr: pagerank failed ({result.error}); ranking seeds only")
        return reach, edges_used, notes
    scores = result.scores
    take = max(0, max(1, max_candidates) - len(reach))
    ranked = stable_top_prefix(-scores, take + len(seed_view))
    is_seed = np.zeros(n_view, dtype=bool)
    is_seed[seed_view] = True
    ids = table.ids
    order = view.order
    for i in ranked[~is_seed[ranked]][:take].tolist():
        if scores[i] > 0:
            reach[ids[order[i]] if i < n_base else appended[i - n_base]] = float(scores[i])
    return reach, edges_used, notes


def stable_top_prefix(values: npt.NDArray[np.float64], m: int) -> IntArray:
    """A prefix, at least `m` long, of `np.argsort(values, kind="stable")`, found without
    sorting everything: every value up to the m-th smallest, ties included, sorted stably."""
    if m >= values.size or np.isnan(values).any():
        return np.argsort(values, kind="stable")
    if m <= 0:
        return np.zeros(0, dtype=np.int64)
    kth = np.partition(values, m - 1)[m - 1]
    head = np.flatnonzero(values <= kth)  # ascending positions: ties stay in view order
    return head[np.argsort(values[head], kind="stable")]
