"""Decay of edge weights and node relevance, and the feedback relevance bump (MSPR.md 5).

`tick_decay` computes the tick in one loop numba compiles (`_tick_rows`) over the graph's
columns (engine/records.py: the decaying attributes of every node and edge, as arrays)
and writes them in place, once a read-only pass has found nothing it cannot take. Its
values are bit for bit those of the library's loop, `_tick_one_by_one`, which still runs
whatever the columns cannot vouch for (`exotic`: a weight, relevance or floor that is not
a float, a time that is not a naive datetime or has fold=1, a renamed node; also a `now`
that is not naive, or times more than 2^53 µs apart), and raises where the library
raises. Every float operation is the loop's own, on
the same doubles in the same order (no fastmath: nothing fused or reordered, engine/jit.py),
and the comparisons are the loop's `max`/`min`, NaN included; two steps are exact by
construction:

- e^x is the C library's `exp`, which CPython's `math.exp` calls and so does numba's
  (`np.exp` may differ in the last bit).
- Δh is the µs since 1970 of `now` and of the other time subtracted as integers, then
  divided by 10^6 and 3600.0 as floats: `timedelta.total_seconds` divides the same
  integer by 10^6, rounding once, and below 2^53 µs (285 years) an int64 converts to a
  float64 exactly.

Order. The loop visits edges in storage order (`graph.edges()`: by source in node order,
then target, then type); the kernel visits the graph's edge rows (`ContextGraph.edge_rows`:
the order the keys were added, holes skipped). They differ: after A->B, C->D, A->E the
storage order is A->B, A->E, C->D and the row order A->B, C->D, A->E; a key added again
takes the last row but in storage goes last only among its pair's types (or its source's
targets). No value depends on the order:

- Edge pass: the loop lists the edges before it starts, and an edge's new weight, its
  stamp or its pruning reads only that edge's own weight and time (a removal changes no
  other edge's); the e^x memo is keyed by Δ, so it gives the same double in any order.
- Node pass: a node takes the largest live weight of its edges, by comparison only.
  Among equal values `max` keeps the first, and only ±0.0 could tell which: but
  0.8·(±0.0) + 0.2·recency is the same double either way (recency = e^x is never -0.0);
  NaN never passes the `>= min_edge_weight` filter.

Between ticks the graph keeps each node's largest live weight (`_NodeBest`,
`ContextGraph.decay_memo`), so a tick finds it again only for the nodes with an edge row the
memo cannot vouch for; for the others it is the memo's value times the tick's factor, the
same double (`_tick_rows`). Every write to an edge row outside a tick is noted in the edge
columns (`EdgeColumns.touch`: added, overwritten, removed, a weight or time set in place),
and its two ends are recomputed; a compaction, a tick by the loop or another live line
drops the memo. The random-graph tests tick through such changes against the loop.

The one order that reaches the graph is that of the removals. The dicts end the same in
any order (deleting keys leaves the others in insertion order), but the point where the
rows are compacted follows it, and so do which rows are holes until the next compaction
and which row each edge holds meanwhile. The pruned edges are removed in row order, as
they have been since the columns came in (the loop's storage order would give another row
layout, which no reader of the graph sees), in one `ContextGraph.remove_edges` call that
makes exactly the changes of a `remove_edge` call per edge.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import cast

import numpy as np

from .config import DecayConfig
from .graph import (
    STICKY_EDGE_TYPES,
    BoolArray,
    ContextGraph,
    FloatArray,
    MemoryEdge,
    PositionArray,
)
from .jit import exact_njit
from .records import epoch_us


@dataclass(frozen=True, slots=True)
class DecayReport:
    decayed: int = 0
    pruned: int = 0
    archived: int = 0


def _hours(now: datetime, then: datetime) -> float:
    return max(0.0, (now - then).total_seconds() / 3600.0)


def tick_decay(graph: ContextGraph, cfg: DecayConfig, now: datetime) -> DecayReport:
    """One full decay pass: edges in storage order, then every live node (MSPR.md 5.1)."""
    if not cfg.enabled:
        return DecayReport()
    lam = math.log(2.0) / (cfg.half_life_days * 24.0)
    plan = (None if graph.node_columns.exotic or graph.edge_columns.exotic
            else _plan_columns(graph, cfg, now, lam))
    if plan is None:
        graph.decay_memo = None      # the loop keeps no memo
        report = _tick_one_by_one(graph, cfg, now, lam)
    else:
        report = plan.apply(graph, now)
    graph.edge_columns.untouch()     # every change so far is in the memo (or none is kept)
    graph.last_decay_tick = now
    graph.decayed(plan.archive if plan is not None
                  else None if report.archived else [])
    return report


def _tick_one_by_one(graph: ContextGraph, cfg: DecayConfig, now: datetime,
                     lam: float) -> DecayReport:
    """The library's loop, edge by edge and node by node."""
    decayed = pruned = archived = 0
    for edge in list(graph.edges()):
        if edge.type in STICKY_EDGE_TYPES:
            continue
        hours = _hours(now, edge.updated_at)
        if hours == 0:
            continue
        weight = edge.weight * math.exp(-lam * hours)
        if weight < cfg.min_edge_weight:
            graph.remove_edge(edge)
            pruned += 1
        elif abs(weight - edge.weight) > 1e-6:
            edge.weight = weight
            edge.updated_at = now
            decayed += 1
    if cfg.min_node_relevance > 0:
        for node in list(graph.nodes.values()):
            if node is None or node.archived:
                continue
            live = [e.weight for e in graph.incident(node.id) if e.weight >= cfg.min_edge_weight]
            max_edge = max(live) if live else 0.0
            anchor = node.last_accessed_at or node.updated_at
            recency = math.exp(-lam * _hours(now, anchor))
            effective = max(node.relevance_floor, 0.8 * max_edge + 0.2 * recency)
            node.relevance = max(0.0, min(1.0, effective))
            if (not live and effective < cfg.min_node_relevance
                    and node.relevance_floor < cfg.min_node_relevance):
                node.archived = True
                archived += 1
    return DecayReport(decayed, pruned, archived)


# ---- the tick on the graph's columns -----------------------------------------------
_EXACT_INT = 1 << 53  # below this an int64 -> float64 conversion is exact


@dataclass(slots=True)
class _NodeBest:
    """What a tick with a node pass leaves for the next (`ContextGraph.decay_memo`): each
    node's largest live edge weight (`best`, by position; `live` False: none) after the
    tick at `stamp_us`, with `min_edge` as the live line. The next tick recomputes it only
    for the nodes with an edge row it cannot vouch for (`_tick_rows`), instead of a random
    write per edge end into `best` for every row, which was most of a tick's time on a
    graph larger than the CPU caches."""

    stamp_us: int
    min_edge: float
    best: FloatArray
    live: BoolArray


@dataclass(slots=True)
class _ColumnPlan:
    """A tick whose numbers the kernel has written into the columns (engine/records.py):
    the weights, their µs and node relevance; what is left to write (`apply`): the stamp
    that gives the stamped rows their updated_at, the removals, the archived flags and the
    memo."""

    now_us: int
    n_stamped: int              # edge rows whose weight and updated_at changed
    left: list[int]             # the rows the kernel left at the edge columns' last stamp
    pruned: list[MemoryEdge]    # in row order (see "Order" above)
    archive: list[int]          # node positions archived
    memo: _NodeBest | None      # for the next tick (None: no node pass)
    recomputed: int             # nodes whose largest weight came from their rows

    def apply(self, graph: ContextGraph, now: datetime) -> DecayReport:
        edges, nodes = graph.edge_columns, graph.node_columns
        # The stamped rows' updated_at is `now` through their µs (`EdgeColumns.stamp`).
        edges.stamp(self.now_us, now, self.left)
        # After the writes: a removal may compact the rows (and renumber them), and the
        # removed edge takes its (unchanged) row with it. One `remove_edges` call: the
        # same removals, in the same order, as a `remove_edge` each.
        if self.pruned:
            graph.remove_edges(self.pruned)
        for position in self.archive:
            nodes.put_archived(position, True)
        graph.decay_memo = self.memo
        return DecayReport(self.n_stamped, len(self.pruned), len(self.archive))


def _tick_rows(now_us: int, neg_lam: float, min_edge: float, min_node: float,
               node_pass: bool, alive: bytearray, sticky: array[int], src: array[int],
               dst: array[int], weight: array[float], updated_us: array[int],
               anchor_us: array[int], floor: array[float], archived: bytearray,
               relevance: array[float], prev_us: int, known: BoolArray, best: FloatArray,
               live: BoolArray, stamped_us: int, has_stamp: bool, rows_within: bool
               ) -> tuple[bool, int, PositionArray, PositionArray, PositionArray, int]:
    """`_tick_one_by_one` on the columns, compiled by numba (`_kernel`): the edge rows
    (`ContextGraph.edge_rows`: alive, sticky, src, dst; holes skipped) in row order, then
    every node position. First it only reads: a span past 2^53 µs returns (False, ...)
    with nothing written (then the loop ticks); with `rows_within` (the edge columns'
    bounds say no row's span is one, `EdgeColumns.spans_within`) only the nodes' times
    are read, which saves a read of every row's time: an eighth of a tick on a graph
    larger than the CPU caches. Then it writes the edge pass into `weight`
    and `updated_us` (the graph's own columns) and the node pass into `relevance`, and
    returns (True, rows stamped, pruned rows, archived positions, nodes whose largest
    weight was found from their rows, the non-sticky rows it left at `stamped_us`: the
    edge columns' last stamp, when `has_stamp`). Every e^x argument is -λ·Δh <= 0 (or NaN): no
    overflow, where math.exp would raise. (In place, where copies of the columns were
    written before: a copy each tick was half of the tick's memory traffic.)

    The node pass needs each node's largest live weight after the edge pass. `best` and
    `live` come in holding it after the tick at `prev_us` for the positions `known` marks
    (`_NodeBest`), and leave holding it after this one. A known node whose every edge row
    is regular (stamped at `prev_us` and again now, with the same Δ, so the same factor f)
    takes best·f: a rounded product is monotone in its operand, so the largest of the
    products w·f is the product of the largest w, the same double. Any other row (sticky,
    not aging, not stamped, pruned, stamped at another time) marks its two ends unknown,
    and the unknown nodes get theirs from a pass over the rows, as `max(live)` does."""
    n_rows = len(alive)
    n_nodes = len(archived)
    pruned = np.empty(n_rows, np.intp)
    left = np.empty(n_rows, np.intp)
    n_left = 0
    left_delta = now_us - stamped_us
    archive = np.empty(n_nodes, np.intp)
    n_changed = n_pruned = n_archive = 0
    # The spans, before anything is written: the times the passes below take a Δ of.
    last = 0
    for row in range(0 if rows_within else n_rows):
        if alive[row] and not sticky[row]:
            delta = now_us - updated_us[row]
            if delta != last:
                if abs(delta) >= _EXACT_INT:
                    return False, 0, pruned[:0], archive[:0], left[:0], 0
                last = delta
    if node_pass:
        for p in range(n_nodes):
            if not archived[p]:
                delta = now_us - anchor_us[p]
                if delta != last:
                    if abs(delta) >= _EXACT_INT:
                        return False, 0, pruned[:0], archive[:0], left[:0], 0
                    last = delta
    # Rows stamped by one tick share their time: Δh and e^x again only when Δ changes
    # (the same Δ gives the same doubles). Δ = 0 (Δh = 0: skipped) fills the memo.
    last, aging, factor = 0, False, 1.0
    regular_delta = now_us - prev_us
    regular_factor = 1.0   # e^x at the regular Δ: the one the rows stamped at prev_us take
    for row in range(n_rows):
        if not alive[row]:
            continue
        stamp = False
        regular = False
        if not sticky[row]:
            delta = now_us - updated_us[row]
            if delta != last:
                hours = float(delta) / 1e6 / 3600.0     # _hours: total_seconds() / 3600.0
                hours = hours if hours > 0.0 else 0.0   # max(0.0, hours)
                last, aging, factor = delta, hours != 0.0, math.exp(neg_lam * hours)
            if aging:
                old = weight[row]
                new = old * factor
                if new < min_edge:
                    pruned[n_pruned] = row
                    n_pruned += 1
                elif abs(new - old) > 1e-6:
                    weight[row] = new
                    updated_us[row] = now_us
                    stamp = True
                    if delta == regular_delta:
                        regular, regular_factor = True, factor
            if not stamp and has_stamp and delta == left_delta:
                left[n_left] = row
                n_left += 1
        if stamp:
            n_changed += 1
        if node_pass and not regular:
            known[src[row]] = False
            known[dst[row]] = False
    n_found = 0
    if node_pass:
        for p in range(n_nodes):
            if not known[p]:
                best[p] = -np.inf
                live[p] = False
                n_found += 1
            elif live[p]:
                best[p] = best[p] * regular_factor
        if n_found:
            # From -inf, max gives the first live weight and then any greater one, as
            # max(live) does. The pruned rows are in row order: skipped as they come.
            j = 0
            for row in range(n_rows):
                if not alive[row]:
                    continue
                if j < n_pruned and pruned[j] == row:
                    j += 1
                    continue
                a, b = src[row], dst[row]
                if known[a] and known[b]:
                    continue
                w = weight[row]
                if w >= min_edge:
                    if not known[a]:
                        best[a] = max(best[a], w)
                        live[a] = True
                    if not known[b]:
                        best[b] = max(best[b], w)
                        live[b] = True
        last, recency = 0, math.exp(neg_lam * 0.0)          # the memo again, at Δ = 0
        for p in range(n_nodes):
            if archived[p]:
                continue
            delta = now_us - anchor_us[p]
            if delta != last:
                hours = float(delta) / 1e6 / 3600.0
                hours = hours if hours > 0.0 else 0.0
                last, recency = delta, math.exp(neg_lam * hours)
            max_edge = best[p] if live[p] else 0.0
            rel = 0.8 * max_edge + 0.2 * recency
            effective = rel if rel > floor[p] else floor[p]            # max(floor, rel)
            clamped = effective if effective < 1.0 else 1.0            # min(1.0, effective)
            relevance[p] = clamped if clamped > 0.0 else 0.0           # max(0.0, clamped)
            if not live[p] and effective < min_node and floor[p] < min_node:
                archive[n_archive] = p
                n_archive += 1
    return (True, n_changed, pruned[:n_pruned], archive[:n_archive], left[:n_left],
            n_found)


@cache
def _kernel() -> Callable[..., tuple[bool, int, PositionArray, PositionArray,
                                      PositionArray, int]]:
    return exact_njit(_tick_rows)


def _plan_columns(graph: ContextGraph, cfg: DecayConfig, now: datetime,
                  lam: float) -> _ColumnPlan | None:
    """The tick on the columns, whose values are all floats and naive times (none
    `exotic`): its numbers written, the rest to `apply`; None, with nothing written, sends
    the tick to the loop (a `now` that is not naive, spans past 2^53 µs)."""
    now_us = epoch_us(now)
    if now_us is None:
        return None
    rows = graph.edge_rows()
    edges, nodes = graph.edge_columns, graph.node_columns
    # Not exotic: these columns are array('d')/array('q') and bytearrays, which numba
    # takes as they are (buffers, no conversion); so are the edge rows and the archived
    # flags, which the kernel only reads. It writes weight, updated_us and relevance in
    # place, once it has found no span it cannot take.
    min_edge = float(cfg.min_edge_weight)
    node_pass = cfg.min_node_relevance > 0
    prev_us, known, best, live = _known_best(graph, min_edge, node_pass)
    ok, n_stamped, pruned, archive, left, recomputed = _kernel()(
        now_us, -lam, min_edge, float(cfg.min_node_relevance), node_pass, rows.alive,
        rows.sticky, rows.src, rows.dst, edges.weight, edges.updated_us, nodes.anchor_us,
        nodes.floor, nodes.archived_flags, nodes.relevance, prev_us, known, best, live,
        edges.stamp_us or 0, edges.stamp_us is not None,
        edges.spans_within(now_us, _EXACT_INT))
    if not ok:
        return None
    edges.bound(now_us)          # the rows it stamped
    return _ColumnPlan(now_us=now_us, n_stamped=int(n_stamped), left=left.tolist(),
                       pruned=cast(list[MemoryEdge],
                                   list(map(rows.edges.__getitem__, pruned.tolist()))),
                       archive=archive.tolist(),
                       memo=_NodeBest(now_us, min_edge, best, live) if node_pass else None,
                       recomputed=int(recomputed))


def _known_best(graph: ContextGraph, min_edge: float, node_pass: bool
                ) -> tuple[int, BoolArray, FloatArray, BoolArray]:
    """The last tick's `_NodeBest` as the kernel takes it: its time, which positions it
    still vouches for (none when it is missing, for another live line, or the rows
    written since are not all known; not the ends of a row written since; not a position
    added since), and copies of `best` and `live`."""
    n = len(graph.node_columns.archived_flags) if node_pass else 0
    known = np.zeros(n, np.bool_)
    best = np.full(n, -np.inf)
    live = np.zeros(n, np.bool_)
    memo = graph.decay_memo
    edges = graph.edge_columns
    if (not node_pass or not isinstance(memo, _NodeBest) or edges.touched_lost
            or memo.min_edge != min_edge):
        return 0, known, best, live
    held = memo.best.size
    known[:held] = True
    best[:held] = memo.best
    live[:held] = memo.live
    if edges.touched:
        touched = np.frombuffer(edges.touched, np.int64)
        rows = graph.edge_rows()
        known[np.frombuffer(rows.src, np.int64)[touched]] = False
        known[np.frombuffer(rows.dst, np.int64)[touched]] = False
    return memo.stamp_us, known, best, live


def maybe_tick_decay(graph: ContextGraph, cfg: DecayConfig, now: datetime) -> DecayReport | None:
    """The read-path tick: first search of the process, then at most once an hour."""
    if not (cfg.enabled and cfg.tick_on_read):
        return None
    last = graph.last_decay_tick
    if last is not None and (now - last).total_seconds() < 3600:
        return None
    return tick_decay(graph, cfg, now)


def bump_relevance(graph: ContextGraph, memory_id: str, delta: float, *,
                   set_floor: bool) -> float | None:
    """Add delta to relevance (clamped); a positive bump may pin the floor (MSPR.md 5.4)."""
    node = graph.get(memory_id)
    if node is None:
        return None
    floor = max(0.0, min(1.0, node.relevance + delta)) if set_floor and delta > 0 else None
    new = max(0.0, min(1.0, node.relevance + delta))
    node.relevance = new
    if floor is not None:
        node.relevance_floor = max(node.relevance_floor, floor)
    return new
