"""Decay of edge weights and node relevance, and the feedback relevance bump (MSPR.md 5).

`tick_decay` computes the tick in one loop numba compiles (`_tick_rows`) over the graph's
columns (engine/records.py: the decaying attributes of every node and edge, as arrays)
and writes the changed columns back whole. Its values are bit for bit those of the
library's loop, `_tick_one_by_one`, which still runs whatever the columns cannot vouch
for (`exotic`: a weight, relevance or floor that is not a float, a time that is not a
naive datetime, a renamed node; also a `now` that is not naive, or times more than 2^53 µs
apart), and raises where the library raises. Every float operation is the loop's own, on
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
    ContextGraph,
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
    report = _tick_one_by_one(graph, cfg, now, lam) if plan is None else plan.apply(graph, now)
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
class _ColumnPlan:
    """A tick computed on copies of the columns (engine/records.py), not yet written."""

    changed: PositionArray      # edge rows whose weight and updated_at change
    others: PositionArray       # the other rows of live edges (pruned ones included)
    weight: array[float]        # the weight column after the tick (pruned rows unchanged)
    updated_us: array[int]      # and its µs since 1970 of updated_at
    pruned: list[MemoryEdge]    # in row order (see "Order" above)
    relevance: array[float]     # the node relevance column after the tick
    archive: list[int]          # node positions archived

    def apply(self, graph: ContextGraph, now: datetime) -> DecayReport:
        edges, nodes = graph.edge_columns, graph.node_columns
        if self.changed.size:
            edges.weight = self.weight
            edges.updated_us = self.updated_us
            if self.others.size < self.changed.size:
                # Mostly `now`: stamp every row, then put the few others back (rows of
                # removed edges, the holes, may take `now`: nothing reads them).
                old = edges.updated_at
                stamped = [now] * len(old)
                for row in self.others.tolist():
                    stamped[row] = old[row]
                edges.updated_at = stamped
            else:
                for row in self.changed.tolist():
                    edges.updated_at[row] = now
        # After the writes: a removal may compact the rows (and renumber them), and the
        # removed edge takes its (unchanged) row with it. One `remove_edges` call: the
        # same removals, in the same order, as a `remove_edge` each.
        if self.pruned:
            graph.remove_edges(self.pruned)
        nodes.relevance = self.relevance
        for position in self.archive:
            nodes.put_archived(position, True)
        return DecayReport(int(self.changed.size), len(self.pruned), len(self.archive))


def _tick_rows(now_us: int, neg_lam: float, min_edge: float, min_node: float,
               node_pass: bool, alive: bytearray, sticky: array[int], src: array[int],
               dst: array[int], weight: array[float], updated_us: array[int],
               anchor_us: array[int], floor: array[float], archived: bytearray,
               relevance: array[float]) -> tuple[bool, PositionArray, PositionArray,
                                                 PositionArray, PositionArray]:
    """`_tick_one_by_one` on the columns, compiled by numba (`_kernel`): the edge rows
    (`ContextGraph.edge_rows`: alive, sticky, src, dst; holes skipped) in row order, then
    every node position. Writes the edge pass into `weight` and `updated_us` (by row) and
    the node pass into `relevance`, all copies; returns (False, ...) for a span past 2^53
    µs (then the loop ticks), else (True, changed rows, the other live rows, pruned rows,
    archived positions). Every e^x argument is -λ·Δh <= 0 (or NaN): no overflow, where
    math.exp would raise."""
    n_rows = len(alive)
    changed = np.empty(n_rows, np.intp)
    others = np.empty(n_rows, np.intp)
    pruned = np.empty(n_rows, np.intp)
    archive = np.empty(len(archived), np.intp)
    n_changed = n_others = n_pruned = n_archive = 0
    # The node pass's largest live weight of each node, taken as the edge pass goes (a
    # row's weight after the tick reads only that row, so it is final once its row is
    # done). The values are compared, never summed, so any order gives them (see "Order"
    # above). From -inf, max gives the first live weight and then any greater one, as
    # max(live) does; written as stores, not branches, which random weights mispredict.
    best = np.full(len(archived) if node_pass else 0, -np.inf)
    live = np.zeros(len(archived) if node_pass else 0, np.bool_)
    # Rows stamped by one tick share their time: Δh and e^x again only when Δ changes
    # (the same Δ gives the same doubles). Δ = 0 (Δh = 0: skipped) fills the memo.
    last, aging, factor = 0, False, 1.0
    for row in range(n_rows):
        if not alive[row]:
            continue
        stamp = False
        kept = True
        if not sticky[row]:
            delta = now_us - updated_us[row]
            if delta != last:
                if abs(delta) >= _EXACT_INT:
                    return False, changed[:0], others[:0], pruned[:0], archive[:0]
                hours = float(delta) / 1e6 / 3600.0     # _hours: total_seconds() / 3600.0
                hours = hours if hours > 0.0 else 0.0   # max(0.0, hours)
                last, aging, factor = delta, hours != 0.0, math.exp(neg_lam * hours)
            if aging:
                old = weight[row]
                new = old * factor
                if new < min_edge:
                    kept = False
                    pruned[n_pruned] = row
                    n_pruned += 1
                elif abs(new - old) > 1e-6:
                    weight[row] = new
                    updated_us[row] = now_us
                    stamp = True
        if stamp:
            changed[n_changed] = row
            n_changed += 1
        else:
            others[n_others] = row
            n_others += 1
        w = weight[row]
        if node_pass and kept and w >= min_edge:
            a, b = src[row], dst[row]
            best[a] = max(best[a], w)
            live[a] = True
            best[b] = max(best[b], w)
            live[b] = True
    if node_pass:
        last, recency = 0, math.exp(neg_lam * 0.0)          # the memo again, at Δ = 0
        for p in range(len(archived)):
            if archived[p]:
                continue
            delta = now_us - anchor_us[p]
            if delta != last:
                if abs(delta) >= _EXACT_INT:
                    return False, changed[:0], others[:0], pruned[:0], archive[:0]
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
    return (True, changed[:n_changed], others[:n_others], pruned[:n_pruned],
            archive[:n_archive])


@cache
def _kernel() -> Callable[..., tuple[bool, PositionArray, PositionArray, PositionArray,
                                      PositionArray]]:
    return exact_njit(_tick_rows)


def _plan_columns(graph: ContextGraph, cfg: DecayConfig, now: datetime,
                  lam: float) -> _ColumnPlan | None:
    """The tick's changes from the columns, whose values are all floats and naive times
    (none `exotic`); None sends the tick to the loop (a `now` that is not naive, spans
    past 2^53 µs)."""
    now_us = epoch_us(now)
    if now_us is None:
        return None
    rows = graph.edge_rows()
    edges, nodes = graph.edge_columns, graph.node_columns
    # Not exotic: these columns are array('d')/array('q') and bytearrays, which numba
    # takes as they are (buffers, no conversion); so are the edge rows and the archived
    # flags, which the kernel only reads. It writes into copies of weight, updated_us and
    # relevance: `apply` puts them in place of the columns.
    weight = cast("array[float]", edges.weight)[:]
    updated_us = edges.updated_us[:]
    relevance = cast("array[float]", nodes.relevance)[:]
    ok, changed, others, pruned, archive = _kernel()(
        now_us, -lam, float(cfg.min_edge_weight), float(cfg.min_node_relevance),
        cfg.min_node_relevance > 0, rows.alive, rows.sticky, rows.src, rows.dst, weight,
        updated_us, nodes.anchor_us, nodes.floor, nodes.archived_flags, relevance)
    if not ok:
        return None
    return _ColumnPlan(changed=changed, others=others, weight=weight, updated_us=updated_us,
                       pruned=cast(list[MemoryEdge],
                                   list(map(rows.edges.__getitem__, pruned.tolist()))),
                       relevance=relevance, archive=archive.tolist())


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
