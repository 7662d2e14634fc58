"""Breadth-first expansion from the seeds (MSPR.md section 8)."""

from __future__ import annotations

from collections.abc import Mapping

from .graph import ContextGraph, EdgeType
from .scope import Scope, conflicts
from .seeds import Payload

EdgeKey = tuple[str, str, str]


def expand_bfs(graph: ContextGraph, seeds: Mapping[str, Payload], scope: Scope, *,
               depth: int, max_candidates: int, edge_floor: float, include_archived: bool,
               priors: Mapping[EdgeType, float] | None = None,
               ) -> tuple[dict[str, float], dict[EdgeKey, float]]:
    """Reach per candidate (seeds 1.0, others the best product of edge weights) and the
    edges walked, in discovery order, with their weights at traversal time.

    `priors` (the intent edge-type priors correction) multiplies edge weights before the
    clamp to [0, 1]; the library never applies them.
    """
    max_candidates = max(1, max_candidates)
    reach = dict.fromkeys(seeds, 1.0)
    edges_used: dict[EdgeKey, float] = {}
    frontier = [(sid, 1.0) for sid in seeds]
    out_of_scope: set[str] = set()
    judged: set[str] = set()
    for _ in range(max(0, depth)):
        if not frontier or len(reach) >= max_candidates:
            break
        next_frontier: list[tuple[str, float]] = []
        for node_id, accum in frontier:
            for edge in graph.neighbours(node_id, min_weight=edge_floor,
                                         include_archived=include_archived):
                other = edge.dst if edge.src == node_id else edge.src
                if other == node_id:
                    continue
                if scope and other not in seeds:
                    if other not in judged and other not in reach:
                        judged.add(other)
                        if conflicts(graph.get(other), scope):
                            out_of_scope.add(other)
                    if other in out_of_scope:
                        continue
                weight = edge.weight * priors.get(edge.type, 1.0) if priors else edge.weight
                propagated = accum * max(0.0, min(1.0, weight))
                if propagated <= 0.0:
                    continue
                current = reach.get(other)
                if current is None or current < propagated:
                    reach[other] = propagated
                    next_frontier.append((other, propagated))
                edges_used.setdefault((edge.src, edge.dst, edge.type.value), edge.weight)
                if len(reach) >= max_candidates:
                    break
            if len(reach) >= max_candidates:
                break
        frontier = next_frontier
    return reach, edges_used
