"""TOPIC_SIMILAR on embedding rows (engine/edges.py) against the one-pair-at-a-time oracle.

The builder keeps the stored embeddings as matrix rows, rules pairs out with a BLAS
product and computes the rest with left-to-right sums. These tests run the same calls
through a builder whose TOPIC_SIMILAR step is the straightforward loop over
`text.cosine`, and require identical writes, bit for bit, on random graphs and on pairs
built to sit on the threshold or to sum differently in another order.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest

from msprlab.engine import edges
from msprlab.engine.config import EdgesConfig
from msprlab.engine.edges import EdgeBuilder, archive, same_owner
from msprlab.engine.graph import ContextGraph, EdgeType, Embedding, MemoryEdge
from msprlab.engine.text import cosine

T = datetime(2026, 1, 1)
# Vectors with huge, infinite or NaN entries warn in `Embedding.of` and in `cosine`.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def oracle_topic_links(graph: ContextGraph, cfg: EdgesConfig, memory_id: str,
                       embedding: Sequence[float] | None, now: datetime,
                       rows: object = None) -> list[MemoryEdge]:
    """MSPR.md section 4 step 5, one cosine at a time (the code before the rows)."""
    if not cfg.enable_topic_similar or embedding is None or len(embedding) == 0:
        return []
    mine = graph.embeddings[memory_id]
    scored = [(other_id, cosine(mine, other)) for other_id, other in graph.embeddings.items()
              if other_id != memory_id]
    scored = [(other_id, s) for other_id, s in scored if s >= cfg.topic_min_similarity]
    scored.sort(key=lambda pair: pair[1], reverse=True)
    node = graph.get(memory_id)
    accepted: list[tuple[str, float]] = []
    for other_id, similarity in scored:
        if len(accepted) >= cfg.topic_top_k:
            break
        if same_owner(node, graph.get(other_id)):
            accepted.append((other_id, similarity))
    return [edges._write(graph, memory_id, other_id, EdgeType.TOPIC_SIMILAR, similarity, now,
                         metadata={"similarity": similarity})
            for other_id, similarity in accepted]


@contextmanager
def oracle_builder(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with monkeypatch.context() as patch:
        patch.setattr(edges, "_topic_links", oracle_topic_links)
        yield


def bits(x: float) -> str:
    return x.hex() if isinstance(x, float) else repr(x)


def edge_row(e: MemoryEdge) -> tuple[Any, ...]:
    """Every field, floats as their exact hex and with their type."""
    meta = sorted((k, type(v).__name__, bits(v)) for k, v in e.metadata.items())
    return (e.src, e.dst, e.type.value, type(e.weight).__name__, bits(e.weight), e.evidence,
            meta, e.created_at, e.updated_at)


Op = tuple[str, str, dict[str, Any]]   # (kind, memory id, arguments)


def replay(ops: Sequence[Op], cfg: EdgesConfig, graph: ContextGraph | None = None,
           builder: EdgeBuilder | None = None) -> tuple[list[list[Any]], list[Any]]:
    """Writes per op and the stored edges in storage order."""
    graph = graph or ContextGraph()
    builder = builder or EdgeBuilder()
    calls: list[list[Any]] = []
    for kind, memory_id, args in ops:
        if kind == "delete":
            archive(graph, memory_id)
            calls.append([])
        elif kind == "drop_vector":      # a change to the graph's dict behind the builder
            graph.embeddings.pop(memory_id, None)
            calls.append([])
        else:
            hook = builder.on_memory_created if kind == "create" else builder.on_memory_updated
            calls.append([edge_row(e) for e in hook(graph, cfg, memory_id=memory_id, **args)])
    return calls, [edge_row(e) for e in graph.edges()]


def both(ops: Sequence[Op], cfg: EdgesConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = replay(ops, cfg)
    with oracle_builder(monkeypatch):
        slow = replay(ops, cfg)
    assert fast == slow


# --- random graphs -----------------------------------------------------------------
def random_vector(rng: random.Random, base: list[list[float]], dim: int) -> list[float] | None:
    r = rng.random()
    if r < 0.03:
        return None
    if r < 0.05:
        return [0.0] * dim
    if r < 0.07:
        return [1.0] * (dim + 1)                       # another length: cosine 0
    if r < 0.08:
        return [rng.choice([1e-170, 1e170, math.inf, math.nan])] + [0.5] * (dim - 1)
    if r < 0.09:                                       # subnormal squared norm
        return [1e-160] * dim
    v = rng.choice(base)
    if r < 0.35:
        return list(v)                                 # exact duplicates: tied cosines
    scale = rng.choice([1e-3, 1e-2, 0.1, 0.3])
    return [x + rng.gauss(0.0, scale) for x in v]


def random_ops(rng: random.Random, n: int, dim: int) -> list[Op]:
    base = [[rng.gauss(0.0, 1.0) for _ in range(dim)] for _ in range(4)]
    ids: list[str] = []
    ops: list[Op] = []
    for i in range(n):
        r = rng.random()
        if ids and r < 0.08:
            ops.append(("delete", rng.choice(ids), {}))
            continue
        if ids and r < 0.11:
            ops.append(("drop_vector", rng.choice(ids), {}))
            continue
        update = bool(ids) and r < 0.25
        memory_id = rng.choice(ids) if update else f"m{i}"
        user = rng.choice(["u1", "u1", "u2", None])
        args = {"text": f"text {i}", "user_id": user, "agent_id": rng.choice([None, "a"]),
                "run_id": rng.choice([None, "r1", "r2"]),
                "metadata": {"tenant_id": rng.choice([None, "t1", "t2"])},
                "embedding": random_vector(rng, base, dim),
                "now": T + timedelta(seconds=i)}
        ops.append(("update" if update else "create", memory_id, args))
        if not update:
            ids.append(memory_id)
    return ops


@pytest.mark.parametrize("seed", range(24))
def test_random_graphs_write_the_same_edges(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    cfg = EdgesConfig(topic_top_k=rng.choice([1, 3, 5, 50]),
                      topic_min_similarity=rng.choice([0.0, 0.2, 0.75, 0.9, 0.999, 1.0]))
    both(random_ops(rng, 90, rng.choice([2, 8, 33])), cfg, monkeypatch)


def test_one_builder_on_two_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows follow whichever graph the builder is handed."""
    rng = random.Random(7)
    ops_a, ops_b = random_ops(rng, 30, 4), random_ops(rng, 30, 4)
    cfg = EdgesConfig(topic_min_similarity=0.3)

    def run() -> list[Any]:
        builder, ga, gb = EdgeBuilder(), ContextGraph(), ContextGraph()
        out = []
        for a, b in zip(ops_a, ops_b, strict=True):
            out.append(replay([a], cfg, ga, builder))
            out.append(replay([b], cfg, gb, builder))
        return out

    fast = run()
    with oracle_builder(monkeypatch):
        assert fast == run()


# --- the threshold, exactly --------------------------------------------------------
def cancelling_pair(rng: np.random.Generator, dim: int) -> tuple[list[float], list[float]]:
    """Two similar vectors whose dot product sums differently in another order."""
    while True:
        q = rng.standard_normal(dim) * np.exp(rng.uniform(-8, 8, dim))
        v = q + rng.standard_normal(dim) * np.abs(q) * 0.2
        sequential = cosine(Embedding.of(q.tolist()), Embedding.of(v.tolist()))
        blas = float(q @ v) / (math.sqrt(Embedding.of(q.tolist()).norm_sq)
                               * math.sqrt(Embedding.of(v.tolist()).norm_sq))
        if sequential != blas and 0.0 < sequential < 1.0:
            return q.tolist(), v.tolist()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_a_cosine_on_the_threshold_is_decided_by_its_left_to_right_value(
        seed: int, offset: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Threshold at the exact cosine or one ulp either side: the sequential sum decides."""
    q, v = cancelling_pair(np.random.default_rng(seed), 256)
    exact = cosine(Embedding.of(q), Embedding.of(v))
    threshold = exact if offset == 0 else math.nextafter(exact, offset * math.inf)
    ops: list[Op] = [("create", "m1", {"text": "a", "user_id": "u", "agent_id": None,
                                        "run_id": "r1", "metadata": {}, "embedding": v, "now": T}),
                     ("create", "m2", {"text": "b", "user_id": "u", "agent_id": None,
                                        "run_id": "r2", "metadata": {}, "embedding": q, "now": T})]
    cfg = EdgesConfig(topic_min_similarity=threshold)
    calls, _ = replay(ops, cfg)
    linked = [row for row in calls[1] if row[2] == "TOPIC_SIMILAR"]
    assert len(linked) == (offset <= 0)
    if linked:
        assert linked[0][4] == exact.hex()
    both(ops, cfg, monkeypatch)


def test_rows_are_rebuilt_when_a_vector_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Updating a memory's vector in place (same dict position) reaches the rows."""
    v1, v2 = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]

    def op(kind: str, memory_id: str, v: list[float], run: str) -> Op:
        return (kind, memory_id, {"text": memory_id + run, "user_id": "u", "agent_id": None,
                                  "run_id": run, "metadata": {}, "embedding": v, "now": T})

    ops = [op("create", "a", v1, "r1"), op("create", "b", v2, "r2"),
           op("update", "a", v2, "r3"), op("create", "c", v2, "r4")]
    calls, _ = replay(ops, EdgesConfig())
    assert [row[:3] for row in calls[3]] == [("c", "a", "TOPIC_SIMILAR"),
                                             ("c", "b", "TOPIC_SIMILAR")]
    both(ops, EdgesConfig(), monkeypatch)
