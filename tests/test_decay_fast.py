"""The decay tick on arrays (engine/decay.py) against the library's loop, bit for bit.

`oracle_tick` is MSPR.md section 5.1 written as the library writes it, one edge and one
node at a time. Random graphs (bare and archived nodes, sticky and parallel edges, self
loops, floors, weights on the pruning line, Δh = 0, future times) go through several ticks
with changes in between; after every tick the report, every edge in storage order and
every node must match, floats by their bits, and the compiled tick (engine/decay.py's
`_tick_rows`) must have done it, never the loop it falls back to; one tick prunes enough
edges to compact the rows midway. Inputs the arrays leave to the loop (int
weights, aware times, a node stored under another id, spans beyond 2^53 µs) must match
too, exceptions included. `ContextGraph.edge_rows` is checked against `edges()`, and
`remove_edges` against a `remove_edge` per edge.
"""

from __future__ import annotations

import copy
import math
import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from msprlab.engine import decay
from msprlab.engine.config import DecayConfig
from msprlab.engine.decay import DecayReport, bump_relevance, tick_decay
from msprlab.engine.graph import (
    STICKY_EDGE_TYPES,
    ContextGraph,
    EdgeType,
    MemoryEdge,
    MemoryNode,
)
from msprlab.engine.records import epoch_us

T = datetime(2026, 1, 1)


def oracle_tick(graph: ContextGraph, cfg: DecayConfig, now: datetime) -> DecayReport:
    """MSPR.md 5.1, one edge and one node at a time."""
    if not cfg.enabled:
        return DecayReport()

    def hours(then: datetime) -> float:
        return max(0.0, (now - then).total_seconds() / 3600.0)

    lam = math.log(2.0) / (cfg.half_life_days * 24.0)
    decayed = pruned = archived = 0
    for edge in list(graph.edges()):
        if edge.type in STICKY_EDGE_TYPES:
            continue
        h = hours(edge.updated_at)
        if h == 0:
            continue
        weight = edge.weight * math.exp(-lam * h)
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
            recency = math.exp(-lam * hours(node.last_accessed_at or node.updated_at))
            effective = max(node.relevance_floor, 0.8 * max_edge + 0.2 * recency)
            node.relevance = max(0.0, min(1.0, effective))
            if (not live and effective < cfg.min_node_relevance
                    and node.relevance_floor < cfg.min_node_relevance):
                node.archived = True
                archived += 1
    graph.last_decay_tick = now
    graph.changed()
    return DecayReport(decayed, pruned, archived)


def bits(x: object) -> str:
    return f"{type(x).__name__}:{x.hex() if isinstance(x, float) else x!r}"


def state(graph: ContextGraph) -> list[Any]:
    """Everything a tick may change, floats as their bits, in storage and node order."""
    edges = [(e.src, e.dst, e.type.value, bits(e.weight), e.updated_at) for e in graph.edges()]
    nodes = [(key, None if n is None else (n.id, bits(n.relevance), n.archived))
             for key, n in graph.nodes.items()]
    return [edges, nodes, graph.last_decay_tick, graph.version,
            [(n, [(e.src, e.dst, e.type.value) for e in graph.incident(n)]) for n in graph.nodes]]


def tick_both(graph: ContextGraph, cfg: DecayConfig, now: datetime) -> ContextGraph:
    """Tick a copy with the oracle and `graph` itself; require the same outcome."""
    expected = copy.deepcopy(graph)
    want: DecayReport | BaseException
    try:
        want = oracle_tick(expected, cfg, now)
    except Exception as exc:  # the arrays must raise the same, at the same point
        want = exc
    got: DecayReport | BaseException
    try:
        got = tick_decay(graph, cfg, now)
    except Exception as exc:
        got = exc
    if isinstance(want, BaseException):
        assert type(got) is type(want) and str(got) == str(want)
    else:
        assert got == want
    assert state(graph) == state(expected)
    return graph


# --- random graphs -----------------------------------------------------------------
TYPES = list(EdgeType)
WEIGHTS = [0.0, 0.05, 0.0500001, 0.049999, 1.0, 0.6, 1e-7, math.nan, math.inf]


def random_time(rng: random.Random, now: datetime, shared: list[datetime]) -> datetime:
    r = rng.random()
    if r < 0.15:
        return now                                      # Δh = 0
    if r < 0.25:
        return now + timedelta(hours=rng.uniform(0, 50))  # the future: Δh = 0 too
    if r < 0.55 and shared:
        return rng.choice(shared)                       # times shared by many
    return now - timedelta(microseconds=rng.randrange(1, 10**13))


def random_weight(rng: random.Random) -> float:
    return rng.choice(WEIGHTS) if rng.random() < 0.25 else rng.random()


def add_random_edge(rng: random.Random, graph: ContextGraph, ids: list[str], now: datetime,
                    shared: list[datetime]) -> None:
    src = rng.choice(ids)
    dst = src if rng.random() < 0.05 else rng.choice(ids)
    when = random_time(rng, now, shared)
    graph.upsert_edge(MemoryEdge(src=src, dst=dst, type=rng.choice(TYPES),
                                 weight=random_weight(rng), created_at=when, updated_at=when))


def random_graph(rng: random.Random, now: datetime) -> tuple[ContextGraph, list[str]]:
    graph = ContextGraph()
    shared = [now - timedelta(hours=rng.uniform(0, 3000)) for _ in range(4)]
    ids = [f"m{i}" for i in range(rng.randrange(1, 60))]
    for memory_id in ids:
        if rng.random() < 0.1:
            continue                                    # a bare node once an edge names it
        updated = random_time(rng, now, shared)
        graph.add_node(MemoryNode(
            id=memory_id, hash="", created_at=updated, updated_at=updated,
            archived=rng.random() < 0.1,
            relevance_floor=rng.choice([0.0, 0.0, 0.01, 0.02, 0.3, 1.0, math.nan]),
            last_accessed_at=random_time(rng, now, shared) if rng.random() < 0.4 else None))
    for _ in range(rng.randrange(0, 4 * len(ids))):
        add_random_edge(rng, graph, ids, now, shared)
    return graph, ids


def random_change(rng: random.Random, graph: ContextGraph, ids: list[str], now: datetime) -> None:
    """What searches, feedback and ingest do between ticks, and one thing they do not."""
    r = rng.random()
    edges = list(graph.edges())
    if r < 0.3:
        graph.record_access(rng.choice(ids), now)
    elif r < 0.45:
        bump_relevance(graph, rng.choice(ids), rng.uniform(-0.3, 0.3), set_floor=True)
    elif r < 0.6:
        add_random_edge(rng, graph, ids, now, [])
    elif r < 0.7 and edges:
        graph.remove_edge(rng.choice(edges))
    elif r < 0.8 and edges:
        e = rng.choice(edges)                           # overwrite an existing key
        graph.upsert_edge(MemoryEdge(src=e.src, dst=e.dst, type=e.type,
                                     weight=random_weight(rng), created_at=now, updated_at=now))
    elif r < 0.85 and edges:
        rng.choice(edges).updated_at = now - timedelta(hours=rng.uniform(0, 500))
    elif r < 0.9 and edges:
        rng.choice(edges).weight = random_weight(rng)   # a weight set in place
    else:
        new_id = f"n{len(graph.nodes)}"
        ids.append(new_id)
        graph.add_node(MemoryNode(id=new_id, hash="", created_at=now, updated_at=now))


CONFIGS = [DecayConfig(), DecayConfig(min_node_relevance=0.0),
           DecayConfig(half_life_days=0.01, min_edge_weight=0.3, min_node_relevance=0.5),
           DecayConfig(half_life_days=math.inf), DecayConfig(half_life_days=1e6),
           DecayConfig(min_edge_weight=0.0, min_node_relevance=1.0),
           DecayConfig(enabled=False)]


def loop_forbidden(*args: object) -> DecayReport:
    raise AssertionError("the compiled tick sent these columns to the loop")


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_tick_like_the_loop(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decay, "_tick_one_by_one", loop_forbidden)   # the kernel's, all
    rng = random.Random(seed)
    now = T
    graph, ids = random_graph(rng, now)
    cfg = CONFIGS[seed % len(CONFIGS)]
    for _ in range(10):
        now += timedelta(hours=rng.choice([0.0, 1.0, 1.0, 1.5, 24.0, 2000.0]),
                         microseconds=rng.choice([0, 0, rng.randrange(1, 10)]))
        tick_both(graph, cfg, now)
        for _ in range(rng.choice([0, 0, rng.randrange(1, 8)])):
            random_change(rng, graph, ids, now)


@pytest.mark.parametrize("seed", range(16))
def test_the_memo_of_each_nodes_largest_weight_ticks_like_the_loop(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hourly ticks with and without changes between them: the nodes the memo vouches for
    take their largest weight times the tick's factor, the others are recomputed from their
    rows, and every tick matches the loop. Some tick must have used the memo (else this
    test would not test it)."""
    monkeypatch.setattr(decay, "_tick_one_by_one", loop_forbidden)
    recomputed: list[tuple[int, int]] = []
    apply = decay._ColumnPlan.apply

    def noting(plan: Any, graph: ContextGraph, now: datetime) -> DecayReport:
        recomputed.append((plan.recomputed, len(graph.nodes)))
        return apply(plan, graph, now)
    monkeypatch.setattr(decay._ColumnPlan, "apply", noting)
    rng = random.Random(1000 + seed)
    now = T
    graph, ids = random_graph(rng, now)
    for edge in list(graph.edges()):                  # a few of the odd edges stay
        if rng.random() < 0.8:
            graph.remove_edge(edge)
    decaying = [t for t in TYPES if t not in STICKY_EDGE_TYPES]
    for _ in range(rng.randrange(len(ids), 4 * len(ids))):  # stamped together, as a load is
        graph.upsert_edge(MemoryEdge(src=rng.choice(ids), dst=rng.choice(ids),
                                     type=rng.choice(decaying), weight=rng.uniform(0.2, 1.0),
                                     created_at=now, updated_at=now))
    cfg = DecayConfig(half_life_days=rng.choice([1.0, 30.0, 3650.0]),
                      min_edge_weight=rng.choice([0.05, 0.3]))
    for _ in range(12):
        now += timedelta(hours=1.0)
        tick_both(graph, cfg, now)
        if rng.random() < 0.4:
            for _ in range(rng.randrange(1, 4)):
                random_change(rng, graph, ids, now)
        if rng.random() < 0.3:                        # a bulk load at the tick's own time
            n = rng.randrange(1, 4)
            graph.upsert_edges([rng.choice(ids) for _ in range(n)],
                               [rng.choice(ids) for _ in range(n)],
                               [rng.choice(decaying) for _ in range(n)],
                               [rng.uniform(0.5, 1.0) for _ in range(n)], [now] * n, [now] * n)
    assert any(found < nodes for found, nodes in recomputed[1:])


def test_a_tick_that_prunes_past_the_compaction_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over 1024 edges pruned in one tick: the removals compact the rows midway through."""
    monkeypatch.setattr(decay, "_tick_one_by_one", loop_forbidden)
    rng = random.Random(7)
    graph = ContextGraph()
    ids = [f"m{i}" for i in range(400)]
    for i, memory_id in enumerate(ids):
        then = T - timedelta(hours=i)
        graph.add_node(MemoryNode(id=memory_id, hash="", created_at=then, updated_at=then))
    for _ in range(4000):
        add_random_edge(rng, graph, ids, T, [])
    before = sum(1 for _ in graph.edges())
    cfg = DecayConfig(half_life_days=0.05, min_edge_weight=0.3, min_node_relevance=0.2)
    now = T + timedelta(hours=3)
    tick_both(graph, cfg, now)
    pruned = before - sum(1 for _ in graph.edges())
    assert pruned > 1024 and graph._removed_rows < pruned           # compacted
    for _ in range(3):
        now += timedelta(hours=1)
        tick_both(graph, cfg, now)


def test_graphs_without_edges_or_live_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decay, "_tick_one_by_one", loop_forbidden)
    tick_both(ContextGraph(), DecayConfig(), T)
    graph = ContextGraph()
    for i in range(5):
        graph.add_node(MemoryNode(id=f"m{i}", hash="", created_at=T, archived=i % 2 == 0,
                                  updated_at=T - timedelta(hours=100 * i)))
    for now in (T, T + timedelta(days=400)):
        tick_both(graph, DecayConfig(), now)
    assert all(n is not None and n.archived for n in graph.nodes.values())


# --- what the arrays leave to the loop ---------------------------------------------
def small_graph(tz: timezone | None = None) -> ContextGraph:
    graph = ContextGraph()
    t0 = T.replace(tzinfo=tz)
    for i, hours in enumerate([1.0, 30.0, 900.0]):
        graph.add_node(MemoryNode(id=f"m{i}", hash="", created_at=t0,
                                  updated_at=t0 - timedelta(hours=hours)))
    for src, dst, weight in (("m0", "m1", 0.9), ("m1", "m2", 0.06), ("m2", "m2", 0.5)):
        graph.upsert_edge(MemoryEdge(src=src, dst=dst, type=EdgeType.TEMPORAL_NEXT,
                                     weight=weight, created_at=t0,
                                     updated_at=t0 - timedelta(hours=5)))
    return graph


def node(graph: ContextGraph, memory_id: str) -> MemoryNode:
    found = graph.get(memory_id)
    assert found is not None
    return found


def test_an_int_weight_or_floor_goes_through_the_loop() -> None:
    graph = small_graph()
    next(iter(graph.edges())).weight = 1           # stays an int where the loop keeps it
    node(graph, "m0").relevance_floor = 0
    tick_both(graph, DecayConfig(), T + timedelta(hours=2))


def test_aware_times_tick_like_the_loop() -> None:
    tick_both(small_graph(UTC), DecayConfig(), T.replace(tzinfo=UTC) + timedelta(hours=2))


@pytest.mark.parametrize("where", ["edge", "node"])
def test_mixing_naive_and_aware_raises_where_the_loop_raises(where: str) -> None:
    graph = small_graph()
    if where == "edge":   # the second edge: the loop has already decayed the first
        list(graph.edges())[1].updated_at = T.replace(tzinfo=UTC)
    else:
        node(graph, "m2").last_accessed_at = T.replace(tzinfo=UTC)
    with pytest.raises(TypeError):
        oracle_tick(copy.deepcopy(graph), DecayConfig(), T + timedelta(hours=2))
    tick_both(graph, DecayConfig(), T + timedelta(hours=2))


def test_a_node_under_another_id_reads_the_edges_of_its_own_id() -> None:
    graph = small_graph()
    node(graph, "m0").id = "m2"
    tick_both(graph, DecayConfig(), T + timedelta(hours=2))


@pytest.mark.parametrize("odd", ["int weight", "aware time"])
def test_columns_turning_exotic_after_ticks_keep_every_edges_time(odd: str) -> None:
    """A tick gives the rows it stamps its `now` through their µs only; an int weight or
    an aware time turning the columns exotic must leave every other edge's updated_at as
    the ticks left it, and the loop then ticks them like the oracle."""
    graph = small_graph()
    for hours in (2, 4, 30):
        tick_both(graph, DecayConfig(), T + timedelta(hours=hours))
    before = [(e.src, e.dst, e.type, e.updated_at) for e in graph.edges()]
    assert {when for *_, when in before} >= {T + timedelta(hours=30)}
    first = next(iter(graph.edges()))
    if odd == "int weight":
        first.weight = 1  # type: ignore[assignment]
    else:
        first.updated_at = (T + timedelta(hours=30)).replace(tzinfo=UTC)
    assert graph.edge_columns.exotic
    after = [(e.src, e.dst, e.type, e.updated_at) for e in graph.edges()]
    assert after[1:] == before[1:]
    tick_both(graph, DecayConfig(), T + timedelta(hours=40) if odd == "int weight"
              else (T + timedelta(hours=40)).replace(tzinfo=UTC))


def test_times_centuries_apart() -> None:
    graph = small_graph()
    node(graph, "m1").last_accessed_at = datetime(1700, 1, 1)   # 2^53 µs is 285 years
    tick_both(graph, DecayConfig(min_node_relevance=1e-300), T + timedelta(hours=2))


def test_an_edge_centuries_old_sends_the_tick_to_the_loop_with_nothing_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel writes the columns in place, so it must find the span it cannot take
    before it writes anything, even on the last row: the loop then ticks the graph as
    it was."""
    graph = small_graph()
    graph.edge_rows().edges[-1].updated_at = datetime(1700, 1, 1)
    assert loop_ticks(graph, T + timedelta(hours=2), monkeypatch) == 1


def loop_ticks(graph: ContextGraph, now: datetime, monkeypatch: pytest.MonkeyPatch) -> int:
    """`tick_both` at `now`, and how many times the library's loop ticked."""
    loop, calls = decay._tick_one_by_one, []

    def counted(*args: Any) -> DecayReport:
        calls.append(args)
        return loop(*args)
    monkeypatch.setattr(decay, "_tick_one_by_one", counted)
    tick_both(graph, DecayConfig(), now)
    return len(calls)


@pytest.mark.parametrize("when", [datetime(1700, 1, 1), datetime(2400, 1, 1)],
                         ids=["centuries old", "centuries ahead"])
def test_a_bulk_loaded_edge_centuries_away_sends_the_tick_to_the_loop(
        when: datetime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel reads no row's time when the edge columns' bounds vouch for every span
    (`EdgeColumns.spans_within`), so a time far from the tick's, loaded in bulk
    (`upsert_edges`) after the first tick, must widen the bounds: then the spans are read
    and the tick goes to the loop."""
    graph = small_graph()
    tick_both(graph, DecayConfig(), T + timedelta(hours=1))
    graph.upsert_edges(["m0", "m1"], ["m2", "m0"], [EdgeType.TEMPORAL_NEXT] * 2, [0.5, 0.7],
                       [T, T], [T, when])
    assert loop_ticks(graph, T + timedelta(hours=2), monkeypatch) == 1


def test_the_edge_bounds_let_a_tick_skip_reading_the_rows_only_when_they_vouch() -> None:
    """Bounds that every written time lies in (removals and compaction may leave them
    wider, never narrower), and the check on both sides of the tick's time."""
    graph = small_graph()
    cols = graph.edge_columns
    times = [epoch_us(t) for t in cols.updated_at]
    assert (cols.us_lo, cols.us_hi) == (min(times), max(times))
    now = epoch_us(T)
    assert now is not None and cols.spans_within(now, 1 << 53)
    assert not cols.spans_within(now + (1 << 53) + max(times), 1 << 53)
    assert not cols.spans_within(min(times) - (1 << 53), 1 << 53)
    tick_decay(graph, DecayConfig(), T + timedelta(hours=3))   # stamps rows at its time
    assert (cols.us_lo, cols.us_hi) == (min(times), epoch_us(T + timedelta(hours=3)))
    graph.remove_edges(list(graph.edges()))
    assert (cols.us_lo, cols.us_hi) == (min(times), epoch_us(T + timedelta(hours=3)))

# --- ContextGraph.edge_rows and remove_edges ---------------------------------------
def check_rows(graph: ContextGraph, added: list[MemoryEdge]) -> None:
    """The rows hold every stored edge once, in the order the keys were added (`added`,
    each key's last addition), at its own row, with its ends' positions; holes say so."""
    rows = graph.edge_rows()
    stored = [e for e in rows.edges if e is not None]
    assert sorted(map(id, stored)) == sorted(map(id, graph.edges()))
    last = {(e.src, e.dst, e.type): i for i, e in enumerate(added)}
    assert stored == sorted(stored, key=lambda e: last[(e.src, e.dst, e.type)])
    assert list(rows.alive) == [e is not None for e in rows.edges]
    assert rows.alive.count(0) == graph._removed_rows
    assert len(rows.src) == len(rows.dst) == len(rows.sticky) == len(rows.edges)
    assert len(graph.edge_columns.updated_at) == len(rows.edges)
    position = {key: i for i, key in enumerate(graph.nodes)}
    for row, e in enumerate(rows.edges):
        if e is None:
            continue
        assert e._row == row and e._cols is graph.edge_columns
        assert (rows.src[row], rows.dst[row]) == (position[e.src], position[e.dst])
        assert rows.sticky[row] == (e.type in STICKY_EDGE_TYPES)


class Recorder(ContextGraph):
    """A graph that notes every key it is asked to add, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[MemoryEdge] = []

    def upsert_edge(self, edge: MemoryEdge) -> MemoryEdge:
        stored = super().upsert_edge(edge)
        if stored is edge:                  # a new key, not an overwrite
            self.added.append(edge)
        return stored


@pytest.mark.parametrize("seed", range(10))
def test_edge_rows_list_every_edge_once_with_its_end_positions(seed: int) -> None:
    rng = random.Random(seed)
    graph = Recorder()
    ids = [f"m{i}" for i in range(rng.choice([3, 30]))]    # few: keys come back often
    for _ in range(400):
        random_change(rng, graph, ids, T)
        if rng.random() < 0.3:
            check_rows(graph, graph.added)
            assert graph.edge_rows().alive is graph._alive      # the graph's own, no copy


def test_edge_rows_after_many_removals() -> None:
    """Removed rows are compacted away, on their own once they outnumber the live ones."""
    graph = ContextGraph()
    made = [graph.upsert_edge(MemoryEdge(src=f"a{i % 50}", dst=f"b{i}", type=EdgeType.REPLY_TO,
                                         weight=1.0, created_at=T, updated_at=T))
            for i in range(3000)]
    for edge in made[:2900]:
        graph.remove_edge(edge)
    assert len(graph._rows) < 3000                      # compacted
    check_rows(graph, made)
    assert [e.dst for e in graph.edge_rows().edges if e] == [e.dst for e in made[2900:]]
    graph.upsert_edge(made[0])                          # a removed key comes back last
    assert graph.edge_rows().edges[-1] is made[0]
    check_rows(graph, made[1:] + made[:1])


def internals(graph: ContextGraph) -> list[Any]:
    """`state` and the row layout: holes, positions, columns (floats by their bits)."""
    rows = graph.edge_rows()
    cols = graph.edge_columns
    return [state(graph), [None if e is None else (e.src, e.dst, e.type.value, e._row)
                           for e in rows.edges],
            bytes(rows.alive), rows.src.tobytes(), rows.dst.tobytes(), rows.sticky.tobytes(),
            [bits(w) for w in cols.weight], cols.updated_at, cols.updated_us.tobytes(),
            graph._removed_rows, sorted(graph._adjacent),
            [(n, [(other, _pair(pair)) for other, pair in adjacency[n].items()])
             for adjacency in (graph._succ, graph._pred) for n in graph.nodes]]


def _pair(pair: Any) -> tuple[str, list[tuple[str, int]]]:
    """A (src, dst) pair's edges by type, and its shape: the edge alone or a dict by type."""
    if isinstance(pair, dict):
        return "dict", [(kind.value, bits(e.weight)) for kind, e in pair.items()]
    return "edge", [(pair.type.value, bits(pair.weight))]


@pytest.mark.parametrize("seed", range(12))
def test_remove_edges_is_a_remove_edge_per_edge(seed: int) -> None:
    """Same graph down to the row layout and the compaction point, whatever the batch:
    duplicates, keys not stored, stand-in objects with a stored key, past 1024 holes."""
    rng = random.Random(seed)
    graph = ContextGraph()
    ids = [f"m{i}" for i in range(rng.choice([5, 40, 200]))]
    for _ in range(rng.choice([50, 800, 3000])):
        add_random_edge(rng, graph, ids, T, [])
    for _ in range(4):
        for n in rng.sample(ids, min(len(ids), 10)):
            graph.adjacent(n)
        edges = list(graph.edges())
        batch = rng.sample(edges, rng.randrange(0, len(edges) + 1))
        batch += rng.sample(batch, min(len(batch), 5))              # twice: once removed
        if batch:
            e = batch[0]
            batch.append(MemoryEdge(src=e.src, dst=e.dst, type=e.type, weight=0.0,
                                    created_at=T, updated_at=T))    # a stand-in
        batch.append(MemoryEdge(src="nobody", dst=ids[0], type=EdgeType.CAUSAL,
                                weight=0.0, created_at=T, updated_at=T))
        rng.shuffle(batch)
        one_by_one = copy.deepcopy(graph)
        twin = {id(a): b for a, b in zip(graph.edges(), one_by_one.edges(), strict=True)}
        for e in batch:
            one_by_one.remove_edge(twin.get(id(e), e))
        removed = graph.remove_edges(batch)
        assert removed == len({(e.src, e.dst, e.type) for e in batch} & {
            (e.src, e.dst, e.type) for e in edges})
        assert internals(graph) == internals(one_by_one)
        for e in batch:                                 # let go, their values kept
            assert e._cols is not graph.edge_columns
            e2 = twin.get(id(e), e)
            assert (bits(e.weight), e.updated_at) == (bits(e2.weight), e2.updated_at)
        for _ in range(rng.randrange(0, 400)):
            add_random_edge(rng, graph, ids, T, [])


def library_access(graph: ContextGraph, memory_id: str, now: datetime) -> None:
    """The library's access counting, as writes of the node's attributes (MSPR.md 15)."""
    node = graph.nodes.get(memory_id)
    if node is not None:
        node.access_count = max(0, node.access_count + 1)
        node.last_accessed_at = now


@pytest.mark.parametrize("seed", range(12))
def test_record_accesses_is_the_library_access_per_id(seed: int) -> None:
    """`record_accesses` of a run and `record_access` per id give the counts, times and
    the tick's anchors of the library's attribute writes, one access at a time, and keep
    the cached peak right; runs with unknown and repeated ids, counts below zero and
    archived nodes among them; an aware time goes exotic as an attribute write does."""
    rng = random.Random(seed)
    now = T
    graph, ids = random_graph(rng, now)
    for node in rng.sample([n for n in graph.nodes.values() if n is not None],
                           k=min(3, sum(n is not None for n in graph.nodes.values()))):
        node.access_count = rng.choice([-3, -1, 7])
    graph.peak_access_count()                           # a cached peak, kept up to date
    one_by_one, written = copy.deepcopy(graph), copy.deepcopy(graph)
    for step in range(8):
        now += timedelta(minutes=rng.choice([0, 1, 90]))
        when = now.replace(tzinfo=UTC) if seed % 4 == 0 and step == 5 else now
        run = [rng.choice([*ids, "nobody"]) for _ in range(rng.randrange(0, 12))]
        graph.record_accesses(run, when)
        for memory_id in run:
            one_by_one.record_access(memory_id, when)
            library_access(written, memory_id, when)
        want = written.node_columns
        for got in (graph, one_by_one):
            assert ([(n.access_count, n.last_accessed_at) for n in got.nodes.values() if n]
                    == [(n.access_count, n.last_accessed_at)
                        for n in written.nodes.values() if n])
            cols = got.node_columns
            assert (cols.access, cols.anchor_us, cols.accessed, cols.exotic) == (
                want.access, want.anchor_us, want.accessed, want.exotic)
            assert got._peak == max((n.access_count for n in got.nodes.values()
                                     if n is not None and not n.archived), default=0)


def _exp_each(x: Any, out: Any) -> None:
    for i in range(x.size):
        out[i] = math.exp(x[i])


def test_the_compiled_exp_is_math_exp_bit_for_bit() -> None:
    """The tick's e^x (numba's math.exp, the C library's exp, compiled as the kernel is)
    against CPython's math.exp."""
    import numpy as np

    from msprlab.engine.jit import exact_njit
    rng = np.random.default_rng(0)
    x = np.concatenate([-rng.random(200_000) * 50, -rng.random(50_000) * 1e-3,
                        -rng.exponential(3, 50_000), -rng.random(10_000) * 745,
                        [0.0, -0.0, -np.inf, np.nan, -745.2, -1e-300, -5e-324]])
    out = np.empty_like(x)
    exact_njit(_exp_each)(x, out)
    want = np.array([math.exp(v) for v in x.tolist()])
    assert out.tobytes() == want.tobytes()


def random_batch(rng: random.Random, ids: list[str], n: int) -> list[tuple[Any, ...]]:
    """(src, dst, type, weight, created_at, updated_at, evidence) rows for `upsert_edges`:
    repeated keys, self loops, ids no node has yet, the odd int weight or aware time."""
    out = []
    for _ in range(n):
        src = rng.choice(ids) if rng.random() < 0.9 else f"new{rng.randrange(20)}"
        dst = src if rng.random() < 0.05 else rng.choice(ids)
        when = random_time(rng, T, [])
        r = rng.random()
        weight: Any = 1 if r < 0.02 else random_weight(rng)
        if 0.02 <= r < 0.04:
            when = when.replace(tzinfo=UTC)
        evidence = rng.choice([None, None, "seen together", ""])
        out.append((src, dst, rng.choice(TYPES), weight, when - timedelta(hours=1), when,
                    evidence))
    return out


def index_state(graph: ContextGraph) -> list[Any]:
    """The adjacency index: each position's entries, in order, and which are stale."""
    index = graph._index
    return [[[a.tolist() for a in ends] for ends in index.ends], sorted(index.stale)]


@pytest.mark.parametrize("seed", range(12))
def test_upsert_edges_is_an_upsert_edge_per_edge(seed: int) -> None:
    """The bulk load leaves the graph of one `upsert_edge` call per edge, down to the row
    layout, the adjacency index and the columns (exotic or not), batch after batch, with
    removals and adjacency reads in between."""
    rng = random.Random(seed)
    bulk, one_by_one = ContextGraph(), ContextGraph()
    ids = [f"m{i}" for i in range(rng.choice([3, 30, 150]))]
    clean = rng.random() < 0.5                          # no int weight, no aware time
    for _ in range(4):
        batch = random_batch(rng, ids, rng.choice([0, 1, 40, 900]))
        if clean:
            batch = [(s, d, k, float(w), c, u.replace(tzinfo=None), e)
                     for s, d, k, w, c, u, e in batch]
        with_evidence = rng.random() < 0.8
        if not with_evidence:
            batch = [(*row[:6], None) for row in batch]
        for s, d, k, w, c, u, e in batch:
            one_by_one.upsert_edge(MemoryEdge(src=s, dst=d, type=k, weight=w, created_at=c,
                                              updated_at=u, evidence=e))
        columns = [list(c) for c in zip(*batch, strict=True)] or [[] for _ in range(7)]
        bulk.upsert_edges(*columns[:6], evidence=columns[6] if with_evidence else None)
        if rng.random() < 0.5:
            for graph in (bulk, one_by_one):
                for n in ids[:10]:
                    graph.adjacent(n)
        doomed = rng.sample(range(len(list(bulk.edges()))), min(5, len(list(bulk.edges()))))
        for graph in (bulk, one_by_one):
            edges = list(graph.edges())
            graph.remove_edges([edges[i] for i in doomed])
        assert bulk.edge_columns.exotic == one_by_one.edge_columns.exotic
        assert internals(bulk) == internals(one_by_one)
        assert index_state(bulk) == index_state(one_by_one)
        assert [(e.created_at, e.evidence, e.metadata) for e in bulk.edges()] == [
            (e.created_at, e.evidence, e.metadata) for e in one_by_one.edges()]
