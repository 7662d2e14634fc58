"""Decay of edge weights and node relevance, and the feedback relevance bump (MSPR.md 5)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from .config import DecayConfig
from .graph import STICKY_EDGE_TYPES, ContextGraph


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
    graph.last_decay_tick = now
    graph.changed()
    return DecayReport(decayed, pruned, archived)


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
