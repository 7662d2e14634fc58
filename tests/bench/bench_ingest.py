"""Ingest benchmark: a generated log of 1M events, validated and written to a DuckDB store.

`PYTHONPATH=tests python -m bench.bench_ingest [--events N] [--memories N] [--keep PATH]`
prints the time of each stage and the peak resident memory of the process (generation
included). The target (issue 4) is under 60 s and under 2 GB for 1M events on this kind of
machine. The events include one memory_added per memory plus their updates and deletions
(about 1.35 per memory), so `--events` must be at least that: fewer memories make room.

`generate` builds the dataset with NumPy and Polars only (no Python loop over rows) and
fills every column of every table, nulls included, so it doubles as a round-trip fixture.

Then the LoCoMo side (`--locomo-searches N`, 0 skips it), timed side by side with the
engine's former pure-Python TOPIC_SIMILAR cosines and decay tick (verbatim copies below,
patched in for the "before" runs): `msprlab ingest locomo` (`build_locomo`: its edge
synthesis stage and the whole build), a simulated log of N searches (`simulate_log`, which
ticks decay before nearly every search; two runs a side, alternated, the faster shown with
the median of its ticks), and decay ticks on the whole LoCoMo graph (median of 30, alternated).
Each pair must give identical outputs ("same"), floats compared bit for bit; the machine is
shared, so read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import itertools
import math
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from msprlab.datasets.schema import (
    EDGES,
    EMBEDDINGS,
    EVENTS,
    FEEDBACK_RECORDS,
    MEMORIES,
    QRELS,
    QUERIES,
    Dataset,
)
from msprlab.datasets.store import ingest
from msprlab.engine import decay, edges
from msprlab.engine.config import DecayConfig, EdgesConfig
from msprlab.engine.graph import (
    ContextGraph,
    EdgeType,
    MemoryEdge,
    MemoryNode,
)

_WORDS = np.array([f"w{i}" for i in range(2000)])
_START = np.datetime64(datetime(2024, 1, 1), "us")
_DAY_US = 24 * 3600 * 1_000_000
_YEAR_US = 365 * _DAY_US
_ROLES = pl.Series([["user"], ["user", "admin"], None, []], dtype=pl.List(pl.String))


def _texts(rng: np.random.Generator, n: int, words: int) -> pl.Series:
    picks = _WORDS[rng.integers(0, len(_WORDS), (n, words))]
    return pl.Series(picks.ravel()).reshape((n, words)).arr.join(" ")


def _ids(prefix: str, index: np.ndarray) -> pl.Expr:
    return pl.lit(prefix) + pl.lit(pl.Series(index, dtype=pl.Int64)).cast(pl.String).str.zfill(6)


def _times(offsets_us: np.ndarray) -> pl.Series:
    return pl.Series(_START + offsets_us.astype("timedelta64[us]"))


def _nulls_where(mask: np.ndarray, expr: pl.Expr) -> pl.Expr:
    return pl.when(pl.lit(pl.Series(mask))).then(None).otherwise(expr)


def _memories(rng: np.random.Generator, n: int) -> pl.DataFrame:
    created = np.sort(rng.integers(0, _YEAR_US // 2, n))
    updated = np.where(rng.random(n) < 0.3, created + rng.integers(0, 30 * _DAY_US, n), -1)
    deleted = np.where(rng.random(n) < 0.05, created + rng.integers(1, 60 * _DAY_US, n), -1)
    users = rng.integers(0, 500, n)
    frame = pl.DataFrame({"created_at": _times(created), "text": _texts(rng, n, 16)})
    return frame.with_columns(
        memory_id=_ids("m", np.arange(n)),
        user_id=_ids("u", users),
        agent_id=_nulls_where(rng.random(n) < 0.5, _ids("a", users % 7)),
        run_id=_ids("r", users * 10 + rng.integers(0, 10, n)),
        tenant_id=_ids("t", users % 4),
        sub_tenant_id=_nulls_where(rng.random(n) < 0.8, _ids("s", users % 9)),
        role=pl.lit(pl.Series(np.array(["user", "assistant", "admin"])[rng.integers(0, 3, n)])),
        allowed_roles=pl.lit(_ROLES.gather(rng.integers(0, len(_ROLES), n))),
        metadata=_nulls_where(rng.random(n) < 0.2, pl.concat_str(
            pl.lit('{"topic": "t'), pl.lit(pl.Series(rng.integers(0, 50, n))).cast(pl.String),
            pl.lit('"}'))),
        updated_at=_nulls_where(updated < 0, pl.lit(_times(np.maximum(updated, 0)))),
        deleted_at=_nulls_where(deleted < 0, pl.lit(_times(np.maximum(deleted, 0)))),
    ).select(MEMORIES.names()).cast(dict(MEMORIES.items()))


def _memory_events(memories: pl.DataFrame) -> pl.DataFrame:
    own = ("memory_id", "user_id", "agent_id", "run_id")
    parts = [memories.select(*own, ts=column, kind=pl.lit(kind)).drop_nulls("ts")
             for column, kind in (("created_at", "memory_added"), ("updated_at", "memory_updated"),
                                  ("deleted_at", "memory_deleted"))]
    return pl.concat(parts)


def _log_events(rng: np.random.Generator, n: int, queries: pl.DataFrame, n_memories: int,
                shown: int) -> pl.DataFrame:
    kinds = np.array(["search", "feedback", "access"])[rng.choice(3, n, p=[0.5, 0.25, 0.25])]
    q = (rng.zipf(1.3, n) - 1) % queries.height  # people ask again: Zipf popularity
    picks = rng.integers(0, n_memories, (n, shown))
    search, feedback = kinds == "search", kinds == "feedback"
    asked = queries[q]
    shown_ids = (pl.lit("m") + pl.Series(picks.ravel()).cast(pl.String).str.zfill(6))
    shown_lists = (pl.select(shown_ids).to_series().reshape((n, shown))
                   .cast(pl.List(pl.String)))
    frame = pl.DataFrame({"ts": _times(rng.integers(0, _YEAR_US, n)), "kind": kinds})
    return frame.with_columns(
        memory_id=_nulls_where(search, pl.lit(shown_lists).list.get(0)),
        query_id=_nulls_where(~(search | feedback), pl.lit(asked["query_id"])),
        user_id=pl.lit(asked["user_id"]),
        query=_nulls_where(~(search | feedback), pl.lit(asked["text"])),
        filters=_nulls_where(~search, pl.concat_str(pl.lit('{"user_id": "'),
                                                    pl.lit(asked["user_id"]), pl.lit('"}'))),
        limit=_nulls_where(~search, pl.lit(shown, dtype=pl.Int64)),
        shown=_nulls_where(~search, pl.lit(shown_lists)),
        helpful=_nulls_where(~feedback, pl.lit(pl.Series(rng.random(n) < 0.6))),
    )


def _events(rng: np.random.Generator, memories: pl.DataFrame, queries: pl.DataFrame,
            n_events: int, shown: int) -> pl.DataFrame:
    memory = _memory_events(memories)
    if n_events < memory.height:
        # The log fills what the memories' own events leave of n_events: nothing is left.
        raise ValueError(
            f"{n_events:,} events cannot hold the {memory.height:,} events of "
            f"{memories.height:,} memories (one memory_added each, plus their updates and "
            f"deletions): ask for at least {memory.height:,} events, or fewer memories")
    log = _log_events(rng, n_events - memory.height, queries, memories.height, shown)
    events = (pl.concat([memory, log], how="diagonal_relaxed")
              .sort("ts", maintain_order=True)
              .with_columns(event_id=pl.int_range(pl.len(), dtype=pl.Int64),
                            seq=pl.int_range(pl.len(), dtype=pl.Int64)))
    return events.with_columns(pl.lit(None, dtype=pl.String).alias(c) for c in EVENTS
                               if c not in events.columns).select(EVENTS.names()).cast(
        dict(EVENTS.items()))


def _queries(rng: np.random.Generator, n: int) -> pl.DataFrame:
    users = rng.integers(0, 500, n)
    types = np.array(["multi-hop", "temporal", "open-domain", "single-hop", "adversarial"])
    return pl.DataFrame({"text": _texts(rng, n, 8)}).with_columns(
        query_id=_ids("q", np.arange(n)), user_id=_ids("u", users),
        agent_id=_nulls_where(rng.random(n) < 0.5, _ids("a", users % 7)),
        run_id=_nulls_where(rng.random(n) < 0.5, _ids("r", users * 10)),
        question_type=_nulls_where(rng.random(n) < 0.1,
                                   pl.lit(pl.Series(types[rng.integers(0, 5, n)]))),
    ).select(QUERIES.names()).cast(dict(QUERIES.items()))


def _qrels(rng: np.random.Generator, n_queries: int, n_memories: int, per: int) -> pl.DataFrame:
    query = np.repeat(np.arange(n_queries), per)
    base = rng.integers(0, n_memories, n_queries)
    memory = (np.repeat(base, per) + np.tile(np.arange(per) * 97, n_queries)) % n_memories
    return pl.DataFrame({"relevance": rng.integers(0, 4, n_queries * per)}).with_columns(
        query_id=_ids("q", query), memory_id=_ids("m", memory),
    ).select(QRELS.names()).cast(dict(QRELS.items()))


def _edges(rng: np.random.Generator, memories: pl.DataFrame) -> pl.DataFrame:
    n = memories.height
    src = np.concatenate([np.arange(n - 1), np.arange(n)])
    dst = np.concatenate([np.arange(1, n), (np.arange(n) * 31 + 7) % n])
    kinds = np.repeat(np.array(["TEMPORAL_NEXT", "TOPIC_SIMILAR"]), [n - 1, n])
    keep = src != dst
    src, dst, kinds = src[keep], dst[keep], kinds[keep]
    created = memories["created_at"].gather(np.maximum(src, dst))
    return pl.DataFrame({"created_at": created, "type": kinds}).with_columns(
        src=_ids("m", src), dst=_ids("m", dst),
        weight=pl.lit(pl.Series(rng.random(len(src)))),
        updated_at=pl.col("created_at") + pl.duration(days=pl.lit(pl.Series(
            rng.integers(0, 5, len(src))))),
        evidence=_nulls_where(rng.random(len(src)) < 0.7, pl.lit("synthetic")),
    ).select(EDGES.names()).cast(dict(EDGES.items()))


def _embeddings(rng: np.random.Generator, n: int, dim: int) -> pl.DataFrame:
    vectors = rng.standard_normal((n, dim), dtype=np.float32)
    return pl.DataFrame({"vector": pl.Series(vectors).cast(pl.List(pl.Float32))}).with_columns(
        memory_id=_ids("m", np.arange(n)), embedder=pl.lit("bench-normal"),
    ).select(EMBEDDINGS.names())


def generate(*, n_memories: int = 20_000, n_queries: int = 50_000, n_events: int = 1_000_000,
             shown: int = 10, dim: int = 64, qrels_per_query: int = 3,
             seed: int = 0) -> Dataset:
    """A synthetic dataset whose every table and column is populated (some nulls included).

    Events: one memory_added per memory, updates and deletions at the memories' times,
    and searches (shown lists of `shown` ids), feedback and access filling up `n_events`.
    Raises ValueError when `n_events` is fewer than the memories' own events.
    """
    params = (f"bench/1 n_memories={n_memories} n_queries={n_queries} n_events={n_events} "
              f"shown={shown} dim={dim} qrels_per_query={qrels_per_query} seed={seed}")
    rng = np.random.default_rng(seed)
    memories = _memories(rng, n_memories)
    queries = _queries(rng, n_queries)
    events = _events(rng, memories, queries, n_events, shown)
    return Dataset(
        source="bench", version="1", digest=hashlib.sha256(params.encode()).hexdigest(),
        memories=memories, queries=queries,
        embeddings=_embeddings(rng, n_memories, dim), edges=_edges(rng, memories),
        qrels=_qrels(rng, n_queries, n_memories, qrels_per_query), events=events,
        query_embeddings=_embeddings(rng, n_queries, dim).rename({"memory_id": "query_id"})
        .with_columns(query_id=_ids("q", np.arange(n_queries))),
        feedback_records=_feedback_records(rng, events),
    )


def _feedback_records(rng: np.random.Generator, events: pl.DataFrame) -> pl.DataFrame:
    """Production's record of each feedback event: a delta, and a rank for some."""
    feedback = events.filter(pl.col("kind") == "feedback")
    n = feedback.height
    ranks = rng.integers(1, 11, n)
    return feedback.select("memory_id", "ts", "user_id", "helpful").with_columns(
        delta_applied=pl.when(pl.col("helpful")).then(0.15).otherwise(-0.1),
        metadata=_nulls_where(rng.random(n) < 0.5, pl.lit(pl.Series(
            [f'{{"rank": {r}}}' for r in ranks.tolist()]))),
        success_row=_nulls_where(rng.random(n) < 0.1, pl.lit(pl.Series(rng.random(n) < 0.9))),
    ).select(FEEDBACK_RECORDS.names()).cast(dict(FEEDBACK_RECORDS.items()))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# ---- LoCoMo: edge synthesis, simulated log and decay tick, before and after -------------
# The engine's TOPIC_SIMILAR and decay tick as they were before they read arrays: the
# engine keeps both one-at-a-time paths as its fallbacks, so "before" calls them directly.
_TOPIC_LINKS = edges._topic_links  # the current function, captured before any patching


class _OneByOne:
    """Embedding rows that always decline, so `_topic_links` scores pair by pair."""

    def similar(self, *args: object) -> None:
        return None


def _legacy_topic_links(graph: ContextGraph, cfg: EdgesConfig, memory_id: str,
                        embedding: Sequence[float] | None, now: datetime,
                        rows: object = None) -> list[MemoryEdge]:
    return _TOPIC_LINKS(graph, cfg, memory_id, embedding, now, _OneByOne())  # type: ignore[arg-type]


def _legacy_tick_decay(graph: ContextGraph, cfg: DecayConfig, now: datetime) -> decay.DecayReport:
    if not cfg.enabled:
        return decay.DecayReport()
    lam = math.log(2.0) / (cfg.half_life_days * 24.0)
    report = decay._tick_one_by_one(graph, cfg, now, lam)
    graph.last_decay_tick = now
    graph.changed()
    return report


@contextmanager
def legacy_engine() -> Iterator[None]:
    """The former pure-Python TOPIC_SIMILAR and decay tick in place of the current ones."""
    saved = edges._topic_links, decay.tick_decay
    edges._topic_links = _legacy_topic_links
    decay.tick_decay = _legacy_tick_decay
    try:
        yield
    finally:
        edges._topic_links, decay.tick_decay = saved


def _exactly_equal(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    """Same columns, rows and values; floats bit for bit (so NaN == NaN, 0.0 != -0.0)."""
    if a.schema != b.schema or a.shape != b.shape:
        return False
    floats = [c for c, t in a.schema.items() if t in (pl.Float32, pl.Float64)]
    bits = [pl.col(c).to_physical().reinterpret(signed=False).alias(c) for c in floats]
    return a.with_columns(bits).equals(b.with_columns(bits))


def _graph_state(graph: ContextGraph) -> list[tuple[Any, ...]]:
    return ([(e.src, e.dst, e.type.value, e.weight.hex(), e.updated_at) for e in graph.edges()]
            + [(n.id, n.relevance.hex(), n.archived) for n in graph.nodes.values()
               if n is not None])


def _locomo_graph(ds: Dataset) -> tuple[ContextGraph, datetime]:
    """Every LoCoMo memory and edge in one graph, the edges stamped an hour before the end."""
    end = ds.memories["created_at"].max()
    assert isinstance(end, datetime)
    graph = ContextGraph()
    for row in ds.memories.iter_rows(named=True):
        graph.add_node(MemoryNode(id=row["memory_id"], hash="", created_at=row["created_at"],
                                  updated_at=row["created_at"], user_id=row["user_id"]))
    for row in ds.edges.iter_rows(named=True):
        graph.upsert_edge(MemoryEdge(
            src=row["src"], dst=row["dst"], type=EdgeType(row["type"]), weight=row["weight"],
            created_at=row["created_at"], updated_at=end - timedelta(hours=1)))
    return graph, end


def _ratio(label: str, before: float, after: float, unit: str, same: bool) -> None:
    print(f"  {label:<34} before {before:9.2f} {unit:<9} after {after:9.2f} {unit:<9} "
          f"x{before / after:6.1f}   {'same' if same else 'DIFFERENT'}")


def bench_locomo(n_searches: int, n_ticks: int = 30) -> bool:
    """LoCoMo ingest, simulated log and decay tick, before vs after; True when all agree."""
    from msprlab.datasets.build import LocomoBuild, LogSpec, build_locomo
    from msprlab.datasets.embed import TfidfSvdEmbedder

    def build() -> tuple[LocomoBuild, float, float]:
        marks: dict[str, float] = {}

        def progress(stage: str, done: int, total: int) -> None:
            marks[stage.split(" (")[0]] = time.perf_counter()

        started = time.perf_counter()
        built = build_locomo(TfidfSvdEmbedder(), progress=progress)
        ended = time.perf_counter()
        return built, marks["anomalies"] - marks["edge synthesis"], ended - started

    print("LoCoMo, the former pure-Python engine paths (before) vs the current ones (after):")
    with legacy_engine():
        old, old_edges, old_total = build()
    new, new_edges, new_total = build()
    same = agree = _exactly_equal(old.dataset.edges, new.dataset.edges)
    _ratio("ingest locomo: edge synthesis", old_edges, new_edges, "s", same)
    _ratio("ingest locomo: whole build", old_total, new_total, "s", same)

    ds = new.dataset
    vectors = new.embedder.embed(ds.queries["text"].to_list())
    spec = LogSpec(n_searches=n_searches)

    def simulate() -> tuple[pl.DataFrame, float, list[float]]:
        """The log, the seconds it took, and the seconds of each decay tick in it."""
        ticks: list[float] = []
        tick = decay.tick_decay

        def timed(graph: ContextGraph, cfg: DecayConfig, now: datetime) -> decay.DecayReport:
            started = time.perf_counter()
            try:
                return tick(graph, cfg, now)
            finally:
                ticks.append(time.perf_counter() - started)

        decay.tick_decay = timed
        try:
            started = time.perf_counter()
            events = spec.simulate(ds, seed=0, query_vectors=vectors).events
            return events, time.perf_counter() - started, ticks
        finally:
            decay.tick_decay = tick

    logs: dict[str, list[tuple[pl.DataFrame, float, list[float]]]] = {"before": [], "after": []}
    for name in ("before", "after", "after", "before"):   # alternate: fair noise
        if name == "before":
            with legacy_engine():
                logs[name].append(simulate())
        else:
            logs[name].append(simulate())
    (old_events, old_s, old_ticks), (_, new_s, new_ticks) = (
        min(logs[name], key=lambda run: run[1]) for name in ("before", "after"))
    same = all(_exactly_equal(old_events, run[0]) for runs in logs.values() for run in runs)
    agree = agree and same
    _ratio(f"simulate_log, {n_searches} searches", 1e3 * old_s / n_searches,
           1e3 * new_s / n_searches, "ms/search", same)
    print(f"  {'':<34} ({n_searches / old_s:.1f} -> {n_searches / new_s:.1f} searches/s)")
    _ratio(f"  its {len(new_ticks)} decay ticks", 1e3 * statistics.median(old_ticks),
           1e3 * statistics.median(new_ticks), "ms", same)

    graph, end = _locomo_graph(ds)
    runs: dict[str, tuple[ContextGraph, Callable[..., object], list[float]]] = {
        "before": (copy.deepcopy(graph), _legacy_tick_decay, []),
        "after": (copy.deepcopy(graph), decay.tick_decay, [])}
    cfg = DecayConfig()
    for k in range(1, n_ticks + 1):
        order = ("before", "after") if k % 2 else ("after", "before")  # alternate: fair noise
        for name in order:
            state, tick, times = runs[name]
            started = time.perf_counter()
            tick(state, cfg, end + timedelta(hours=k))
            times.append(time.perf_counter() - started)
    same = _graph_state(runs["before"][0]) == _graph_state(runs["after"][0])
    edges_left = sum(1 for _ in runs["after"][0].edges())
    _ratio(f"decay tick ({len(graph.nodes)} nodes, {edges_left} edges)",
           1e3 * statistics.median(runs["before"][2]), 1e3 * statistics.median(runs["after"][2]),
           "ms", same)
    return same and agree


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--memories", type=int, default=20_000, metavar="N",
                        help="memories (each brings ~1.35 of the events; default 20,000)")
    parser.add_argument("--keep", type=Path, default=None, metavar="PATH",
                        help="write the store here instead of a temp folder")
    parser.add_argument("--locomo-searches", type=int, default=500, metavar="N",
                        help="searches in the LoCoMo before/after run (0 skips it)")
    args = parser.parse_args(argv)
    if args.events < 0 or args.memories < 1:
        parser.error("--events must be >= 0 and --memories >= 1")
    started = time.perf_counter()
    try:
        ds = generate(n_memories=args.memories, n_events=args.events)
    except ValueError as exc:       # too few events for the memories
        parser.error(str(exc))
    generated = time.perf_counter()
    stages: dict[str, float] = {}

    def progress(stage: str, done: int, total: int) -> None:
        stages[stage] = time.perf_counter()

    with tempfile.TemporaryDirectory() as folder:
        path = args.keep or Path(folder) / "bench.duckdb"
        report = ingest(ds, path, replace=True, progress=progress)
        size_mb = path.stat().st_size / 2**20
    ended = time.perf_counter()
    marks = list(stages.items())
    print(f"generated {ds.counts()} in {generated - started:.2f} s")
    for (stage, at), (_, until) in itertools.pairwise(marks):
        print(f"  {stage:<11} {until - at:7.2f} s")
    print(f"validate+ingest: {report.seconds:.2f} s (target < 60 s); store {size_mb:.0f} MiB")
    print(f"total {ended - started:.2f} s; peak RSS {_peak_rss_mb():.0f} MiB (target < 2048 MiB)")
    ok = report.seconds < 60 and _peak_rss_mb() < 2048
    if args.locomo_searches > 0:
        ok = bench_locomo(args.locomo_searches) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
