"""Decay of edge weights and node relevance, and the feedback relevance bump (MSPR.md 5).

`tick_decay` computes the tick with NumPy on the graph's columns (engine/records.py: the
decaying attributes of every node and edge, as arrays) and writes the changed columns
back whole. Its values are bit for bit those of the library's loop, `_tick_one_by_one`,
which still runs whatever the columns cannot vouch for (`exotic`: a weight, relevance or
floor that is not a float, a time that is not a naive datetime, a renamed node; also a
`now` that is not naive, or times more than 2^53 µs apart), and raises where the library
raises. Every float operation is the loop's own, on the same doubles in the same order
(no fused or reordered arithmetic), with two exceptions that are exact by construction:

- e^x is the C library's `exp`, which CPython's `math.exp` calls, run over the arrays by
  a loop numba compiles (`_exp_each`): `np.exp` may differ in the last bit.
- Δh is the µs since 1970 of `now` and of the other time subtracted as integers, then
  divided by 10^6 and 3600.0 as floats: `timedelta.total_seconds` divides the same
  integer by 10^6, rounding once, and below 2^53 µs (285 years) an int64 converts to a
  float64 exactly.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cache

import numpy as np
import numpy.typing as npt

from .config import DecayConfig
from .graph import (
    STICKY_EDGE_TYPES,
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
    """A tick computed on the columns (engine/records.py) but not yet written."""

    changed: PositionArray      # edge rows whose weight and updated_at change
    weights: FloatArray         # every edge row's weight after the tick (pruned ones kept)
    every_edge: bool            # whether `changed` holds every edge (holes aside)
    pruned: list[MemoryEdge]
    active: PositionArray       # node positions the node pass wrote
    relevance: FloatArray       # their relevance
    archive: list[int]          # node positions archived

    def apply(self, graph: ContextGraph, now: datetime) -> DecayReport:
        edges, nodes = graph.edge_columns, graph.node_columns
        if self.changed.size:
            edges.weight = array("d", self.weights.tobytes())
            now_us = epoch_us(now)
            assert now_us is not None          # _plan_columns checked it
            if self.every_edge:     # the holes' placeholders may take `now` too
                edges.updated_at = [now] * len(edges.updated_at)
            else:
                for row in self.changed.tolist():
                    edges.updated_at[row] = now
            updated_us = np.array(edges.updated_us, dtype=np.int64)
            updated_us[self.changed] = now_us
            edges.updated_us = array("q", updated_us.tobytes())
        # After the writes: a removal may compact the rows (and renumber them).
        for edge in self.pruned:
            graph.remove_edge(edge)
        if self.active.size:
            relevance = np.array(nodes.relevance, dtype=np.float64)
            relevance[self.active] = self.relevance
            nodes.relevance = array("d", relevance.tobytes())
        for position in self.archive:
            nodes.archived[position] = True
        return DecayReport(int(self.changed.size), len(self.pruned), len(self.archive))


def _hours_of(now_us: int, then_us: npt.NDArray[np.int64]) -> FloatArray | None:
    """`_hours(now, then)` from µs since 1970 (module docstring); None past 2^53 µs."""
    delta = now_us - then_us
    if delta.size and int(np.abs(delta).max()) >= _EXACT_INT:
        return None
    hours = delta.astype(np.float64) / 1e6 / 3600.0
    return np.where(hours > 0.0, hours, 0.0)


def _exp_of(lam: float, then_us: npt.NDArray[np.int64], now_us: int,
            *, zero: float | None) -> FloatArray | None:
    """e^(-λ·Δh) per time; `zero` where Δh = 0 when given. None past 2^53 µs."""
    hours = _hours_of(now_us, then_us)
    if hours is None:
        return None
    exps = np.empty(hours.size)
    _exp_kernel()((-lam) * hours, exps)      # -lam * h, as the loop writes it
    if zero is not None:
        exps[hours == 0] = zero
    return exps


def _exp_each(x: FloatArray, out: FloatArray) -> None:
    # Compiled by numba: its math.exp calls the C library's exp, the very function behind
    # CPython's math.exp, so each value is the loop's (np.exp may differ in the last bit).
    # The arguments are -λ·Δh <= 0: no overflow, where math.exp would raise.
    for i in range(x.size):
        out[i] = math.exp(x[i])


@cache
def _exp_kernel() -> Callable[[FloatArray, FloatArray], None]:
    return exact_njit(_exp_each)


def _plan_columns(graph: ContextGraph, cfg: DecayConfig, now: datetime,
                  lam: float) -> _ColumnPlan | None:
    """The tick's changes from the columns, whose values are all floats and naive times
    (none `exotic`); None sends the tick to the loop (a `now` that is not naive, spans
    past 2^53 µs)."""
    now_us = epoch_us(now)
    if now_us is None:
        return None
    table = graph.edge_table()              # `aging_at` indexes it, `rows` the columns
    edges = graph.edge_columns
    weight = np.array(edges.weight, dtype=np.float64)
    aging_at = np.flatnonzero(~table.sticky)
    aging_rows = table.rows[aging_at]
    # -1.0 marks Δh = 0 (the edge is skipped); e^x is never negative.
    factor = _exp_of(lam, np.array(edges.updated_us, dtype=np.int64)[aging_rows], now_us,
                     zero=-1.0)
    if factor is None:
        return None
    old = weight[aging_rows]
    with np.errstate(all="ignore"):
        new = old * factor
        moves = factor >= 0.0
        prune = moves & (new < cfg.min_edge_weight)
        change = moves & ~prune & (np.abs(new - old) > 1e-6)
    changed = aging_rows[change]
    weight[changed] = new[change]
    plan = _ColumnPlan(changed=changed, weights=weight,
                       every_edge=changed.size == len(table.edges),
                       pruned=[table.edges[i] for i in aging_at[prune].tolist()],
                       active=np.empty(0, dtype=np.intp), relevance=np.empty(0), archive=[])
    if cfg.min_node_relevance <= 0:
        return plan
    # The node pass sees the weights after the edge pass, of the edges left.
    kept = np.ones(len(table.edges), dtype=bool)
    kept[aging_at[prune]] = False
    table_weight = weight[table.rows]
    live = kept & (table_weight >= cfg.min_edge_weight)
    nodes = graph.node_columns
    # Live weights are >= min_edge_weight >= 0, so -inf is "no live edge".
    best = np.full(len(nodes.relevance), -np.inf)
    np.maximum.at(best, table.src[live], table_weight[live])
    np.maximum.at(best, table.dst[live], table_weight[live])
    active = np.flatnonzero(~np.array(nodes.archived, dtype=bool))
    if not active.size:
        return plan
    recency = _exp_of(lam, np.array(nodes.anchor_us, dtype=np.int64)[active], now_us,
                      zero=None)
    if recency is None:
        return None
    floor = np.array(nodes.floor, dtype=np.float64)[active]
    best = best[active]
    has_live = best != -np.inf
    max_edge = np.where(has_live, best, 0.0)
    with np.errstate(all="ignore"):
        rel = 0.8 * max_edge + 0.2 * recency
        effective = np.where(rel > floor, rel, floor)           # max(floor, rel)
        clamped = np.where(effective < 1.0, effective, 1.0)       # min(1.0, effective)
        relevance = np.where(clamped > 0.0, clamped, 0.0)         # max(0.0, clamped)
        archive = (~has_live & (effective < cfg.min_node_relevance)
                   & (floor < cfg.min_node_relevance))
    plan.active = active
    plan.relevance = relevance
    plan.archive = active[archive].tolist()
    return plan


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
