"""Breadth-first expansion from the seeds (MSPR.md section 8)."""

from __future__ import annotations

from collections.abc import Mapping

from .graph import ContextGraph, EdgeKey, EdgeType
from .scope import UNVERIFIABLE, Scope
from .seeds import Payload

__all__ = ["EdgeKey", "expand_bfs"]


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
    out_of_scope: dict[str, bool] = {}  # scope verdict per non-seed node met
    nodes = graph.nodes
    check_archived = not include_archived
    scope_items = list(scope.items())
    for _ in range(max(0, depth)):
        if not frontier or len(reach) >= max_candidates:
            break
        next_frontier: list[tuple[str, float]] = []
        for node_id, accum in frontier:
            # `graph.neighbours` without building the list: the same edges in the same
            # order (self loops, which the walk skips anyway, are not listed).
            if node_id not in nodes:
                continue
            if check_archived:
                node = nodes[node_id]
                if node is not None and node.archived:
                    continue  # every edge of an archived node is left out
            for other, edge, key in zip(*graph.adjacent(node_id), strict=True):
                weight = edge.weight
                if weight < edge_floor:
                    continue
                if check_archived:
                    other_node = nodes.get(other)
                    if other_node is not None and other_node.archived:
                        continue
                if scope_items and other not in seeds:
                    # Judged once, when first met; every non-seed in `reach` got there by
                    # passing this test, so it always has a verdict.
                    excluded = out_of_scope.get(other)
                    if excluded is None:
                        excluded = False
                        # scope.conflicts(node, scope), inlined.
                        other_node = nodes.get(other)
                        if other_node is not None:
                            for field_name, want in scope_items:
                                tag = getattr(other_node, field_name)
                                if tag is not None and (
                                        want is UNVERIFIABLE
                                        or (tag if type(tag) is str else str(tag)) != want):
                                    excluded = True
                                    break
                        out_of_scope[other] = excluded
                    if excluded:
                        continue
                if priors:
                    weight = weight * priors.get(edge.type, 1.0)
                # accum * max(0.0, min(1.0, weight)), spelled out: builtin min and max are
                # slow calls, and these comparisons are theirs (NaN included).
                weight = weight if weight < 1.0 else 1.0
                propagated = accum * (weight if weight > 0.0 else 0.0)
                if propagated <= 0.0:
                    continue
                current = reach.get(other)
                if current is None or current < propagated:
                    reach[other] = propagated
                    next_frontier.append((other, propagated))
                if key not in edges_used:
                    edges_used[key] = edge.weight
                if len(reach) >= max_candidates:
                    break
            if len(reach) >= max_candidates:
                break
        frontier = next_frontier
    return reach, edges_used
