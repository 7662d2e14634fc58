"""Personalised PageRank expansion (MSPR.md section 9), vectorised over a cached edge table.

The view, the personalisation and the power iteration reproduce what the library hands to
networkx.pagerank, without networkx: `pagerank.personalized_pagerank` matches its floats.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .bfs import EdgeKey
from .graph import ContextGraph, MemoryEdge
from .pagerank import personalized_pagerank
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


def _skip_mask(table: _EdgeTable, scope: Scope, keep: BoolArray,
               include_archived: bool) -> BoolArray:
    """Nodes left out of the view: archived ones, and with a scope non-seed conflicts."""
    skip = np.zeros(len(table.ids), dtype=bool)
    if include_archived and not scope:
        return skip
    if not include_archived:
        skip |= table.archived
    for key, want in scope.items():
        codes, column = table.owners[key]
        tagged = column >= 0
        if want is UNVERIFIABLE or want not in codes:
            conflict = tagged
        else:
            conflict = tagged & (column != codes[str(want)])
        skip |= conflict & ~keep
    return skip


def expand_ppr(graph: ContextGraph, seeds: Mapping[str, Payload], scope: Scope, *,
               max_candidates: int, edge_floor: float, include_archived: bool,
               damping: float, max_iter: int, tolerance: float, undirected: bool = False,
               ) -> tuple[dict[str, float], dict[EdgeKey, float], list[str]]:
    """Reach (seeds 1.0, others raw PPR mass), the view's edges, and fallback notes."""
    table = _edge_table(graph)
    n_graph = len(table.ids)
    seed_pos = [table.position.get(sid, -1) for sid in seeds]
    keep = np.zeros(n_graph, dtype=bool)
    keep[[p for p in seed_pos if p >= 0]] = True
    skip = _skip_mask(table, scope, keep, include_archived)
    mask = (table.weight >= edge_floor) & ~skip[table.src] & ~skip[table.dst]
    kept = np.flatnonzero(mask)
    ks, kd, kw = table.src[kept], table.dst[kept], table.weight[kept]
    edges_used = {(e.src, e.dst, e.type.value): e.weight
                  for e in (table.edges[i] for i in kept)}

    # View node order: first appearance as an endpoint, then seeds missing from the view.
    endpoints = np.empty(2 * ks.size, dtype=np.int64)
    endpoints[0::2], endpoints[1::2] = ks, kd
    uniq, first = np.unique(endpoints, return_index=True)
    order = uniq[np.argsort(first, kind="stable")]
    local = np.full(n_graph, -1, dtype=np.int64)
    local[order] = np.arange(order.size)
    view_ids = [table.ids[i] for i in order]
    in_view = set(view_ids)
    for sid in seeds:
        if sid not in in_view:
            view_ids.append(sid)
            in_view.add(sid)
    n_view = len(view_ids)

    src, dst, weight = local[ks], local[kd], kw
    if undirected:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        weight = np.concatenate([weight, weight])
    # One view edge per (src, dst) with the largest weight; successors keep the order of
    # their first edge, as repeated DiGraph.add_edge calls do.
    pair = src * max(n_view, 1) + dst
    uniq_pair, first_at, inverse = np.unique(pair, return_index=True, return_inverse=True)
    best = np.full(uniq_pair.size, -np.inf)
    np.maximum.at(best, inverse, weight)
    pair_src, pair_dst = src[first_at], dst[first_at]
    edge_order = np.lexsort((first_at, pair_src))

    raw = np.array([max(0.0, seed_score(p)) for p in seeds.values()])
    total = 0.0
    for value in raw:
        total += value
    seed_mass = raw / total if total > 0.0 else np.full(len(seeds), 1.0 / len(seeds))
    personalization = np.zeros(n_view)
    view_pos = {vid: i for i, vid in enumerate(view_ids)} if len(seeds) else {}
    for sid, mass in zip(seeds, seed_mass, strict=True):
        personalization[view_pos[sid]] = mass

    reach = dict.fromkeys(seeds, 1.0)
    notes: list[str] = []
    result = personalized_pagerank(
        n_view, pair_src[edge_order], pair_dst[edge_order], best[edge_order], personalization,
        alpha=damping, max_iter=max_iter, tol=tolerance)
    if result.scores is None:
        notes.append(f"ppr: pagerank failed ({result.error}); ranking seeds only")
        return reach, edges_used, notes
    scores = result.scores
    non_seed = [i for i in np.argsort(-scores, kind="stable") if view_ids[i] not in reach]
    for i in non_seed[:max(0, max(1, max_candidates) - len(reach))]:
        if scores[i] > 0:
            reach[view_ids[i]] = float(scores[i])
    return reach, edges_used, notes
