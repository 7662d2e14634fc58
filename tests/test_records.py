"""Nodes and edges whose decaying attributes live in the graph's columns (engine/records.py).

An object reads and writes its own row; it keeps its values when the graph lets it go
(replaced, removed), when rows are compacted, and across copies; values the arrays cannot
hold (an int weight) are kept as they are and flag the columns `exotic`.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

from msprlab.engine.config import DecayConfig
from msprlab.engine.decay import tick_decay
from msprlab.engine.graph import ContextGraph, EdgeType, MemoryEdge, MemoryNode

T = datetime(2026, 1, 1)


def node(memory_id: str, **fields: object) -> MemoryNode:
    return MemoryNode(id=memory_id, hash="", created_at=T, updated_at=T, **fields)  # type: ignore[arg-type]


def edge(src: str, dst: str, weight: float = 0.5) -> MemoryEdge:
    return MemoryEdge(src=src, dst=dst, type=EdgeType.REPLY_TO, weight=weight, created_at=T,
                      updated_at=T)


def test_a_node_reads_and_writes_its_row_in_the_graph() -> None:
    graph = ContextGraph()
    a, b = node("a", relevance=0.7), node("b", relevance_floor=0.2)
    graph.add_node(a)
    graph.add_node(b)
    assert a.relevance == 0.7 and b.relevance_floor == 0.2
    a.relevance = 0.4
    assert graph.node_columns.relevance[0] == 0.4 and b.relevance == 1.0
    a.last_accessed_at = T + timedelta(hours=1)
    assert graph.node_columns.anchor_us[0] - graph.node_columns.anchor_us[1] == 3_600_000_000


def test_a_replaced_node_keeps_its_values_and_the_new_one_takes_the_row() -> None:
    graph = ContextGraph()
    first = node("a", relevance=0.3)
    graph.add_node(first)
    second = node("a", relevance=0.9)
    graph.add_node(second)
    second.relevance = 0.8
    assert first.relevance == 0.3 and second.relevance == 0.8
    first.relevance = 0.1                       # no longer the graph's
    assert graph.get("a") is second and second.relevance == 0.8


def test_re_adding_the_same_node_keeps_its_values() -> None:
    graph = ContextGraph()
    a = node("a", relevance=0.3)
    graph.add_node(a)
    a.relevance = 0.25
    graph.add_node(a)
    assert a.relevance == 0.25 and len(graph.node_columns.archived) == 1


def test_removed_and_compacted_edges_keep_their_own_values() -> None:
    graph = ContextGraph()
    made = [graph.upsert_edge(edge(f"a{i % 7}", f"b{i}", weight=i / 4000)) for i in range(3000)]
    for e in made[:2000]:
        graph.remove_edge(e)                    # compacts on its own past 1024 removals
    assert len(graph.edge_columns.updated_at) < 3000
    assert [e.weight for e in made] == [i / 4000 for i in range(3000)]
    made[2500].weight = 0.99
    rows = graph.edge_rows()
    assert rows.edges[made[2500]._row] is made[2500]
    assert graph.edge_columns.weight[made[2500]._row] == 0.99
    assert rows.alive.count(1) == 1000 and len(graph.edge_columns.updated_at) > 1000  # holes
    made[0].weight = 0.123                      # removed: its own row, not the graph's
    assert 0.123 not in [e.weight for e in graph.edges()]


def test_edges_removed_together_each_keep_their_own_values() -> None:
    """`remove_edges` lets its edges go into one set of loose columns, a row each."""
    graph = ContextGraph()
    made = [graph.upsert_edge(edge("a", f"b{i}", weight=i / 10)) for i in range(5)]
    made[1].updated_at = T + timedelta(hours=1)
    assert graph.remove_edges([made[3], made[1], made[3], edge("x", "y")]) == 2
    assert [e.weight for e in made] == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert made[1].updated_at == T + timedelta(hours=1) and made[3].updated_at == T
    made[3].weight = 0.9                        # its own row only
    made[1].weight = 2                          # an int stays an int, the other row a float
    assert (made[3].weight, made[1].weight, type(made[1].weight)) == (0.9, 2, int)
    assert not graph.edge_columns.exotic
    graph.upsert_edge(made[3])                  # back in the graph with its values
    assert next(e for e in graph.edges() if e.dst == "b3").weight == 0.9
    made[3].weight = 0.7
    assert graph.edge_columns.weight[made[3]._row] == 0.7 and made[1].weight == 2
    assert sorted(e.dst for e in graph.edges()) == ["b0", "b2", "b3", "b4"]


def test_a_deep_copied_graph_is_independent() -> None:
    graph = ContextGraph()
    graph.add_node(node("a"))
    graph.upsert_edge(edge("a", "b"))
    twin = copy.deepcopy(graph)
    twin_node = twin.get("a")
    assert twin_node is not None
    twin_node.relevance = 0.1
    next(twin.edges()).weight = 0.9
    assert graph.get("a").relevance == 1.0      # type: ignore[union-attr]
    assert next(graph.edges()).weight == 0.5
    assert not twin.node_columns.exotic         # restoring the slots renames nothing


def test_a_shallow_copy_is_a_free_standing_equal_node() -> None:
    graph = ContextGraph()
    a = node("a", relevance=0.6)
    graph.add_node(a)
    twin = copy.copy(a)
    assert twin == a and twin is not a
    twin.relevance = 0.2
    assert a.relevance == 0.6 and twin != a


def test_values_the_arrays_cannot_hold_are_kept_as_they_are() -> None:
    graph = ContextGraph()
    graph.add_node(node("a"))
    e = graph.upsert_edge(edge("a", "b"))
    assert not graph.edge_columns.exotic
    e.weight = 1                                # an int stays an int
    assert type(e.weight) is int and graph.edge_columns.exotic
    n = graph.get("a")
    assert n is not None
    n.relevance_floor = 0
    assert type(n.relevance_floor) is int and graph.node_columns.exotic


def test_aware_times_and_renamed_nodes_flag_the_columns() -> None:
    graph = ContextGraph()
    graph.add_node(node("a"))
    graph.add_node(node("b"))
    graph.get("a").updated_at = T.replace(tzinfo=UTC)  # type: ignore[union-attr]
    assert graph.node_columns.exotic
    other = ContextGraph()
    other.add_node(node("c"))
    other.get("c").id = "d"                     # type: ignore[union-attr]
    assert other.node_columns.exotic


def test_a_tick_that_archives_nothing_keeps_the_access_count_peak() -> None:
    graph = ContextGraph()
    graph.add_node(node("a", access_count=3))
    graph.upsert_edge(edge("a", "b", weight=0.9))
    assert graph.peak_access_count() == 3
    report = tick_decay(graph, DecayConfig(min_node_relevance=0.02), T + timedelta(hours=2))
    assert report.archived == 0 and graph._peak == 3
    report = tick_decay(graph, DecayConfig(min_node_relevance=1.0, min_edge_weight=0.95),
                        T + timedelta(hours=4))
    assert report.archived == 1 and graph._peak is None and graph.peak_access_count() == 0


def test_the_access_count_peak_follows_added_nodes() -> None:
    graph = ContextGraph()
    assert graph.peak_access_count() == 0
    graph.add_node(node("a", access_count=-2))          # below the default: recomputed
    assert graph.peak_access_count() == -2
    graph.add_node(node("b", access_count=5))
    graph.add_node(node("c", access_count=9, archived=True))
    assert graph.peak_access_count() == 5
    graph.add_node(node("b", access_count=1))           # a replaced node may lower it
    assert graph.peak_access_count() == 1


def test_the_adjacency_cache_drops_only_the_ends_of_a_changed_edge() -> None:
    import random
    rng = random.Random(7)
    graph = ContextGraph()
    ids = [f"m{i}" for i in range(12)]
    for _ in range(400):
        src, dst = rng.choice(ids), rng.choice(ids)
        kind = rng.choice([EdgeType.REPLY_TO, EdgeType.CAUSAL])
        if rng.random() < 0.3 and list(graph.edges()):
            graph.remove_edge(rng.choice(list(graph.edges())))
        else:
            graph.upsert_edge(MemoryEdge(src=src, dst=dst, type=kind, weight=0.5,
                                         created_at=T, updated_at=T))
        cached = {n: graph.adjacent(n) for n in rng.sample(ids, 4)}
        graph._adjacent.clear()
        assert all(graph.adjacent(n) == got for n, got in cached.items())


def test_a_tick_archiving_a_node_below_the_peak_keeps_it() -> None:
    graph = ContextGraph()
    graph.add_node(node("top", access_count=7, relevance_floor=1.0))   # the floor keeps it
    graph.add_node(node("low", access_count=2))
    assert graph.peak_access_count() == 7
    report = tick_decay(graph, DecayConfig(min_node_relevance=1.0), T + timedelta(hours=4))
    assert report.archived == 1 and graph.get("low").archived   # type: ignore[union-attr]
    assert graph._peak == 7
