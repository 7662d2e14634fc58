"""Decay of edge weights and node relevance, and the feedback relevance bump (MSPR.md 5).

`tick_decay` reads the graph into arrays (`ContextGraph.edge_table` and one pass per node
attribute), computes the tick with NumPy and writes the changes back. Its values are bit
for bit those of the library's loop, `_tick_one_by_one`, which still runs the inputs the
arrays leave out (see `_plan`). Every float operation is the loop's own, on the same
doubles in the same order (no fused or reordered arithmetic), with two exceptions that
are exact by construction:

- e^x is `math.exp`, called per value: `np.exp` may differ in the last bit.
- Δh of an edge is the loop's `_hours`, once per distinct `updated_at`. Δh of a node is
  its anchor's microseconds since 1970 subtracted as integers, then divided by 10^6 and
  3600.0 as floats: `timedelta.total_seconds` divides the same integer by 10^6, rounding
  once, and below 2^53 µs (285 years) an int64 converts to a float64 exactly.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

import numpy as np

from .config import DecayConfig
from .graph import STICKY_EDGE_TYPES, ContextGraph, FloatArray, MemoryEdge, MemoryNode


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
    plan = _plan(graph, cfg, now, lam)
    report = _tick_one_by_one(graph, cfg, now, lam) if plan is None else plan.apply(graph, now)
    graph.last_decay_tick = now
    graph.changed()
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


# ---- the tick on arrays ----------------------------------------------------------------
# A `map` per attribute: transposing tuples (`zip(*rows)`) is several times slower.
_WEIGHT = operator.attrgetter("weight")
_UPDATED = operator.attrgetter("updated_at")
_ARCHIVED = operator.attrgetter("archived")
_FLOOR = operator.attrgetter("relevance_floor")
_ID = operator.attrgetter("id")

_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = _EPOCH.resolution
# Naive datetime -> microseconds since 1970, for node anchors. Anchors rarely change, so
# most are found here; the memo is emptied when it grows past this many entries.
_EPOCH_US: dict[datetime, int] = {}
_EPOCH_US_SIZE = 1 << 18
_EXACT_INT = 1 << 53  # below this an int64 -> float64 conversion is exact


@dataclass(slots=True)
class _Plan:
    """A tick computed but not yet written: what `apply` changes."""

    pruned: list[MemoryEdge]
    decayed: list[MemoryEdge]
    weights: list[float]
    nodes: list[MemoryNode]
    relevance: list[float]
    archive: list[MemoryNode]

    def apply(self, graph: ContextGraph, now: datetime) -> DecayReport:
        # Neither the writes nor the removals depend on each other, so their order (edge
        # table order, not storage order) changes nothing: a dict keeps the order of the
        # keys left whatever order the others were deleted in.
        for edge in self.pruned:
            graph.remove_edge(edge)
        for edge, weight in zip(self.decayed, self.weights, strict=True):
            edge.weight = weight
            edge.updated_at = now
        for node, relevance in zip(self.nodes, self.relevance, strict=True):
            node.relevance = relevance
        for node in self.archive:
            node.archived = True
        return DecayReport(len(self.decayed), len(self.pruned), len(self.archive))


def _floats(values: Sequence[object]) -> FloatArray | None:
    """The values as an array, or None unless every one is a float (no int, bool, str)."""
    if not set(map(type, values)) <= {float}:
        return None
    return np.fromiter(values, dtype=np.float64, count=len(values))


def _plan(graph: ContextGraph, cfg: DecayConfig, now: datetime, lam: float) -> _Plan | None:
    """The tick's changes, without writing them; None when the arrays cannot be trusted.

    None sends the tick to the loop, which then raises wherever it raises: a weight or
    floor that is not a float, an `updated_at` the loop's `_hours` rejects, a node stored
    under another id, a timezone-aware time, or times more than 2^53 µs apart.
    """
    table = graph.edge_table()
    edges = table.edges
    weight = _floats(list(map(_WEIGHT, edges)))
    if weight is None:
        return None
    aging_at = np.flatnonzero(~table.sticky)
    aging = edges if len(aging_at) == len(edges) else [edges[i] for i in aging_at.tolist()]
    when = list(map(_UPDATED, aging))
    factor_of: dict[datetime, float] = {}
    try:
        for then in dict.fromkeys(when):
            hours = _hours(now, then)
            # -1.0 marks Δh = 0 (the edge is skipped); e^x is never negative.
            factor_of[then] = math.exp(-lam * hours) if hours != 0 else -1.0
    except Exception:  # the loop meets the same time and raises there, as the library does
        return None
    factor = np.fromiter(map(factor_of.__getitem__, when), dtype=np.float64, count=len(when))
    old = weight[aging_at]
    with np.errstate(all="ignore"):
        new = old * factor
        moves = factor >= 0.0
        prune = moves & (new < cfg.min_edge_weight)
        change = moves & ~prune & (np.abs(new - old) > 1e-6)
    plan = _Plan(pruned=list(itertools.compress(aging, prune.tolist())),
                 decayed=list(itertools.compress(aging, change.tolist())),
                 weights=new[change].tolist(), nodes=[], relevance=[], archive=[])
    if cfg.min_node_relevance <= 0:
        return plan
    # The node pass sees the weights after the edge pass, of the edges left.
    weight[aging_at[change]] = new[change]
    kept = np.ones(len(edges), dtype=bool)
    kept[aging_at[prune]] = False
    live = kept & (weight >= cfg.min_edge_weight)
    # Live weights are >= min_edge_weight >= 0, so -inf is "no live edge".
    best = np.full(len(graph.nodes), -np.inf)
    np.maximum.at(best, table.src[live], weight[live])
    np.maximum.at(best, table.dst[live], weight[live])
    return plan if _plan_nodes(plan, graph, cfg, now, lam, best) else None


def _plan_nodes(plan: _Plan, graph: ContextGraph, cfg: DecayConfig, now: datetime,
                lam: float, best: FloatArray) -> bool:
    """Fill in the node pass of `plan`; `best` is the top live weight at each node position.

    False when the arrays cannot be trusted.
    """
    stored = list(graph.nodes.values())
    keys: Sequence[str] = list(graph.nodes)
    where: Sequence[int] = range(len(stored))
    if any(map(operator.is_, stored, itertools.repeat(None))):   # bare nodes: skipped
        where = list(itertools.compress(where, map(operator.is_not, stored,
                                                   itertools.repeat(None))))
        keys = [keys[i] for i in where]
        stored = [stored[i] for i in where]
    nodes = cast(list[MemoryNode], stored)     # no None left
    if not nodes:
        return True
    keep = list(map(operator.not_, map(_ARCHIVED, nodes)))
    active = list(itertools.compress(nodes, keep))
    # The loop reads the edges of `node.id`: the node's own position, checked here.
    if list(map(_ID, active)) != list(itertools.compress(keys, keep)):
        return False
    floor = _floats(list(map(_FLOOR, active)))
    since = _hours_since(now, [n.last_accessed_at or n.updated_at for n in active])
    if floor is None or since is None:
        return False
    best = best[np.fromiter(itertools.compress(where, keep), dtype=np.intp, count=len(active))]
    has_live = best != -np.inf
    max_edge = np.where(has_live, best, 0.0)
    recency = np.fromiter(map(math.exp, ((-lam) * since).tolist()), dtype=np.float64,
                          count=len(active))
    with np.errstate(all="ignore"):
        rel = 0.8 * max_edge + 0.2 * recency
        effective = np.where(rel > floor, rel, floor)           # max(floor, rel)
        clamped = np.where(effective < 1.0, effective, 1.0)       # min(1.0, effective)
        relevance = np.where(clamped > 0.0, clamped, 0.0)         # max(0.0, clamped)
        archive = (~has_live & (effective < cfg.min_node_relevance)
                   & (floor < cfg.min_node_relevance))
    plan.nodes = active
    plan.relevance = relevance.tolist()
    plan.archive = list(itertools.compress(active, archive.tolist()))
    return True


def _hours_since(now: datetime, anchors: list[datetime]) -> FloatArray | None:
    """`[_hours(now, a) for a in anchors]` for naive datetimes; None for anything else."""
    if type(now) is not datetime or now.tzinfo is not None:
        return None
    if len(_EPOCH_US) > _EPOCH_US_SIZE:
        _EPOCH_US.clear()
    try:
        found = list(map(_EPOCH_US.get, anchors))
    except TypeError:   # unhashable: let the loop meet it
        return None
    for i in itertools.compress(range(len(found)), map(operator.is_, found,
                                                       itertools.repeat(None))):
        anchor = anchors[i]
        if type(anchor) is not datetime or anchor.tzinfo is not None:
            return None
        found[i] = _EPOCH_US[anchor] = (anchor - _EPOCH) // _MICROSECOND
    now_us = (now - _EPOCH) // _MICROSECOND
    delta = now_us - np.array(found, dtype=np.int64)
    if delta.size and int(np.abs(delta).max()) >= _EXACT_INT:
        return None
    seconds = delta.astype(np.float64) / 1e6     # timedelta.total_seconds: µs / 10**6
    hours = seconds / 3600.0
    return np.where(hours > 0.0, hours, 0.0)     # max(0.0, hours)


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
