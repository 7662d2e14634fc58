"""`make bench`: per-search latency of the sequential engine, all signals on, BFS and PPR.

Graphs of 1k, 10k and 50k memories with about five edges each, generated with a fixed seed.
When the ContextKit library is installed (msprlab[parity]) it is timed side by side on the
same inputs and the ratio printed; otherwise the library's published rates from the issue
(on this kind of machine) are printed as a reference, marked as not measured here.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from datetime import datetime

import numpy as np

from msprlab.engine import EngineConfig, SearchRequest, Seed, new_state, record_feedback, search
from msprlab.engine.config import (
    FeedbackConfig,
    FrequencyConfig,
    IntentConfig,
    MsprConfig,
    RoleConfig,
    SuccessConfig,
)
from msprlab.engine.graph import EdgeType, MemoryEdge, MemoryNode
from msprlab.engine.roles import policy_from_name
from msprlab.engine.state import EngineState

NOW = datetime(2026, 1, 1)
# Searches/s of the library at 1k/10k/50k memories, from the engine issue (not measured here).
LIBRARY_REFERENCE = {"bfs": {1_000: 93, 10_000: 68, 50_000: 39},
                     "ppr": {1_000: 32, 10_000: 10, 50_000: 2}}
WORDS = [f"w{i}" for i in range(400)]


def all_signals(algorithm: str) -> EngineConfig:
    base = EngineConfig()
    return replace(
        base,
        retrieval=replace(base.retrieval, algorithm=algorithm, delta_personal=0.2,
                          epsilon_frequency=0.1, zeta_success=0.2),
        mspr=MsprConfig(enabled=True, intent=IntentConfig(enabled=True),
                        feedback=FeedbackConfig(enabled=True),
                        frequency=FrequencyConfig(enabled=True), role=RoleConfig(enabled=True),
                        success=SuccessConfig(enabled=True)))


def build(n: int, algorithm: str, rng: np.random.Generator) -> tuple[EngineState, np.ndarray]:
    state = new_state(all_signals(algorithm), policy=policy_from_name("composite"))
    vectors = rng.normal(size=(n, 32))
    users = [f"u{i}" for i in range(10)]
    for i in range(n):
        mid = f"m{i}"
        user = users[i % len(users)]
        text = " ".join(rng.choice(WORDS, size=12))
        payload = {"data": text, "hash": "", "created_at": NOW.isoformat(),
                   "updated_at": NOW.isoformat(), "user_id": user, "tenant_id": "t0"}
        state.payloads[mid] = payload
        state.graph.add_node(MemoryNode(mid, "", NOW, NOW, user_id=user, tenant_id="t0",
                                        access_count=int(rng.integers(0, 20)),
                                        metadata=payload))
        state.graph.set_embedding(mid, vectors[i].tolist())
    kinds = list(EdgeType)
    # About five edges per memory, mostly within the owner's memories so BFS expands.
    for _ in range(5 * n):
        src = int(rng.integers(n))
        dst = (src + 10 * int(rng.integers(1, 50))) % n
        state.graph.upsert_edge(MemoryEdge(f"m{src}", f"m{dst}", kinds[int(rng.integers(10))],
                                           float(rng.uniform(0.1, 1.0)), NOW, NOW))
    for _ in range(200):
        record_feedback(state, f"m{int(rng.integers(n))}", helpful=bool(rng.random() < 0.7),
                        user_id=users[int(rng.integers(10))], query="what is w1 w2", now=NOW)
    return state, vectors


def requests(n: int, vectors: np.ndarray, rng: np.random.Generator,
             count: int) -> list[SearchRequest]:
    out = []
    for _ in range(count):
        user = int(rng.integers(10))
        owned = np.arange(user, n, 10)
        picks = rng.choice(owned, size=10, replace=False)
        query = "what is " + " ".join(rng.choice(WORDS, size=4))
        out.append(SearchRequest(
            query=query, seeds=[Seed(f"m{i}", float(rng.uniform(0.3, 0.9))) for i in picks],
            query_embedding=vectors[picks[0]].tolist(), user_id=f"u{user}",
            filters={"tenant_id": "t0", "role": "user"}, limit=10))
    return out


def time_engine(state: EngineState, reqs: list[SearchRequest]) -> float:
    search(state, reqs[0], now=NOW)  # first search ticks decay and warms caches
    start = time.perf_counter()
    for req in reqs:
        search(state, req, now=NOW)
    return len(reqs) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 50_000])
    parser.add_argument("--searches", type=int, default=200)
    args = parser.parse_args()
    print("engine: searches/s, all signals on (intent, feedback, frequency, roles, success); "
          "library figures are the issue's reference rates, NOT measured in this run")
    print(f"{'algorithm':>9} {'memories':>9} {'engine/s':>10} {'library/s':>10} {'ratio':>8}")
    for algorithm in ("bfs", "ppr"):
        for n in args.sizes:
            rng = np.random.default_rng(0)
            state, vectors = build(n, algorithm, rng)
            count = args.searches if algorithm == "bfs" else max(20, args.searches // 5)
            rate = time_engine(state, requests(n, vectors, rng, count))
            reference = LIBRARY_REFERENCE[algorithm][n] if n in LIBRARY_REFERENCE[
                algorithm] else float("nan")
            print(f"{algorithm:>9} {n:>9} {rate:>10.1f} {reference:>10.0f} "
                  f"{rate / reference:>7.1f}x")


if __name__ == "__main__":
    main()
