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
    size = len(reach)
    edges_used: dict[EdgeKey, float] = {}
    record_edge = edges_used.setdefault  # keeps the weight of an edge's first traversal
    frontier = [(sid, 1.0) for sid in seeds]
    nodes = graph.nodes
    check_archived = not include_archived
    scope_items = list(scope.items())
    only_field, only_want = scope_items[0] if len(scope_items) == 1 else (None, None)
    # Whether the walk may not step onto a node: archived (unless included), or, for a
    # non-seed, out of scope (judged once, when first met; every non-seed in `reach` got
    # there by passing this test). Nothing changes a node during the walk.
    blocked: dict[str, bool] | None = {} if check_archived or scope_items else None
    for _ in range(max(0, depth)):
        if not frontier or size >= max_candidates:
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
                if blocked is not None:
                    verdict = blocked.get(other)
                    if verdict is None:
                        other_node = nodes.get(other)
                        verdict = check_archived and other_node is not None and other_node.archived
                        if not verdict and scope_items and other_node is not None and (
                                other not in seeds):
                            # scope.conflicts(node, scope), inlined; a scope of one owner
                            # (the usual case) without the loop.
                            if only_field is not None:
                                tag = getattr(other_node, only_field)
                                verdict = tag is not None and (
                                    only_want is UNVERIFIABLE
                                    or (tag if type(tag) is str else str(tag)) != only_want)
                            else:
                                for field_name, want in scope_items:
                                    tag = getattr(other_node, field_name)
                                    if tag is not None and (
                                            want is UNVERIFIABLE
                                            or (tag if type(tag) is str else str(tag)) != want):
                                        verdict = True
                                        break
                        blocked[other] = verdict
                    if verdict:
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
                    if current is None:
                        size += 1
                    reach[other] = propagated
                    next_frontier.append((other, propagated))
                record_edge(key, edge.weight)
                if size >= max_candidates:
                    break
            if size >= max_candidates:
                break
        frontier = next_frontier
    return reach, edges_used
