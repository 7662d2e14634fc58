"""`make bench`: per-search latency of the sequential engine, all signals on, BFS and PPR.

Graphs of 1k, 10k and 50k memories with about five edges each, generated with a fixed seed.
When the ContextKit library is installed (msprlab[parity]) it is timed side by side on the
same graphs and the same requests (through the parity adapter's public entry point), and
the ratio printed; the library's top results are checked against the engine's ("same").
The library is slow, so it runs only the first few requests (`--library-searches`, fewer
for PPR at 50k); the engine runs all of them, each timed, and the ratio compares the two on
the same requests: the engine's time over the library's requests (the first ones of its
first pass, when its caches are coldest), not its rate over all of them, whose later
requests find more texts already tokenized. Each graph is measured in `--rounds` rounds,
the engine then the library, each round on a freshly built state, with the engine's text
caches emptied first (no round, and no algorithm after another on the same graph, starts
with texts already tokenized); the ratio printed is the median of the rounds' ratios, with
their range: the machine's speed drifts, and the two sides of one round are close in time.
Only the searches are timed, on both sides:
building the state, the feedback that seeds it and one warm-up search (it ticks decay) are
not, and a full garbage collection after the warm-up keeps the collector's debt from
building the state out of the timing. The library runs at its usual logging level while
timed (the adapter otherwise listens to its debug log). The engine's "2nd pass" repeats its
requests once its per-memory caches (token sets, adjacency) hold what they touch.

Without the library, the library's rates from the engine issue are printed instead,
labelled "reference, not measured". `--profile bfs` (or `ppr`) times nothing: it prints a
cProfile of the engine's first pass at each size, to see where a search spends its time.

The machine is often shared: read the ratios of one run, measured side by side, rather than
absolute rates, and repeat a run before trusting a change of a few percent.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import importlib.util
import logging
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from msprlab.engine import EngineConfig, SearchRequest, Seed, new_state, record_feedback, search
from msprlab.engine.config import (
    FeedbackConfig,
    FrequencyConfig,
    IntentConfig,
    MsprConfig,
    RoleConfig,
    SuccessConfig,
    as_dict,
)
from msprlab.engine.graph import EdgeType, MemoryEdge, MemoryNode
from msprlab.engine.roles import policy_from_name
from msprlab.engine.state import EngineState
from msprlab.engine.text import clear_token_cache

NOW = datetime(2026, 1, 1)
# Searches/s of the library at 1k/10k/50k memories, from the engine issue (not measured here).
LIBRARY_REFERENCE = {"bfs": {1_000: 93, 10_000: 68, 50_000: 39},
                     "ppr": {1_000: 32, 10_000: 10, 50_000: 2}}
WORDS = [f"w{i}" for i in range(400)]
USERS = [f"u{i}" for i in range(10)]
POLICY = "composite"
# Scores may differ from the library's in the last bits only for PPR (networkx vs ours).
AGREEMENT_TOLERANCE = {"bfs": 1e-9, "ppr": 1e-6}


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


@dataclass(frozen=True)
class World:
    """One generated graph: memories, edges in upsert order, and feedback verdicts."""

    vectors: np.ndarray                        # (n, 32) embeddings, row i for memory m{i}
    texts: list[str]
    access_counts: list[int]
    edges: list[tuple[str, str, EdgeType, float]]
    feedback: list[tuple[str, bool, str]]      # (memory id, helpful, user id)

    @property
    def size(self) -> int:
        return len(self.texts)


def generate(n: int, rng: np.random.Generator) -> World:
    vectors = rng.normal(size=(n, 32))
    texts, access_counts = [], []
    for _ in range(n):
        texts.append(" ".join(rng.choice(WORDS, size=12)))
        access_counts.append(int(rng.integers(0, 20)))
    kinds = list(EdgeType)
    edges = []
    # About five edges per memory, mostly within the owner's memories so BFS expands.
    for _ in range(5 * n):
        src = int(rng.integers(n))
        dst = (src + 10 * int(rng.integers(1, 50))) % n
        kind = kinds[int(rng.integers(10))]
        edges.append((f"m{src}", f"m{dst}", kind, float(rng.uniform(0.1, 1.0))))
    feedback = []
    for _ in range(200):
        memory_id = f"m{int(rng.integers(n))}"
        helpful = bool(rng.random() < 0.7)
        feedback.append((memory_id, helpful, USERS[int(rng.integers(10))]))
    return World(vectors, texts, access_counts, edges, feedback)


def payload(world: World, i: int) -> dict[str, Any]:
    user = USERS[i % len(USERS)]
    return {"data": world.texts[i], "hash": "", "created_at": NOW.isoformat(),
            "updated_at": NOW.isoformat(), "user_id": user, "tenant_id": "t0"}


def build(world: World, algorithm: str) -> EngineState:
    state = new_state(all_signals(algorithm), policy=policy_from_name(POLICY))
    for i in range(world.size):
        mid = f"m{i}"
        stored = payload(world, i)
        state.payloads[mid] = stored
        state.graph.add_node(MemoryNode(mid, "", NOW, NOW, user_id=stored["user_id"],
                                        tenant_id="t0", access_count=world.access_counts[i],
                                        metadata=stored))
        state.graph.set_embedding(mid, world.vectors[i].tolist())
    for src, dst, kind, weight in world.edges:
        state.graph.upsert_edge(MemoryEdge(src, dst, kind, weight, NOW, NOW))
    for memory_id, helpful, user in world.feedback:
        record_feedback(state, memory_id, helpful=helpful, user_id=user, query="what is w1 w2",
                        now=NOW)
    return state


def requests(world: World, rng: np.random.Generator, count: int) -> list[SearchRequest]:
    n = world.size
    out = []
    for _ in range(count):
        user = int(rng.integers(10))
        owned = np.arange(user, n, 10)
        picks = rng.choice(owned, size=10, replace=False)
        query = "what is " + " ".join(rng.choice(WORDS, size=4))
        out.append(SearchRequest(
            query=query, seeds=[Seed(f"m{i}", float(rng.uniform(0.3, 0.9))) for i in picks],
            query_embedding=world.vectors[picks[0]].tolist(), user_id=f"u{user}",
            filters={"tenant_id": "t0", "role": "user"}, limit=10))
    return out


Ranking = list[tuple[str, float]]


@dataclass(frozen=True)
class EngineTimes:
    """The engine's searches/s on one fresh state, and what the library is compared with."""

    first: float                # over every request, first pass
    shared: float               # over the first `keep` requests of that pass (the library's)
    again: float                # over every request again, caches warm
    rankings: list[Ranking]     # of those first `keep` requests


def time_engine(state: EngineState, reqs: Sequence[SearchRequest], keep: int) -> EngineTimes:
    """Time each request of a first pass over `reqs` after one warm-up search, then a
    second pass (every cache then holds what these requests touch). Build `state` after
    `clear_token_cache()` for a first pass that meets every text anew."""
    search(state, reqs[0], now=NOW)  # first search ticks decay and warms caches
    gc.collect()  # settle the collector's debt from building the state, outside the timing
    rankings: list[Ranking] = []
    elapsed = []
    clock = time.perf_counter
    for req in reqs:
        start = clock()
        outcome = search(state, req, now=NOW)
        elapsed.append(clock() - start)
        if len(rankings) < keep:
            rankings.append([(c.id, c.score) for c in outcome.results])
    start = clock()
    for req in reqs:
        search(state, req, now=NOW)
    again = len(reqs) / (clock() - start)
    return EngineTimes(len(reqs) / sum(elapsed), keep / sum(elapsed[:keep]), again, rankings)


def profile_engine(n: int, algorithm: str, searches: int, top: int = 25) -> None:
    """cProfile of the engine's first pass over the bench requests of one graph, printed by
    own time (the profiler slows Python calls unevenly: read it for where, not how fast)."""
    rng = np.random.default_rng(0)
    world = generate(n, rng)
    count = searches if algorithm == "bfs" else max(20, searches // 5)
    reqs = requests(world, rng, count)
    clear_token_cache()  # as in every timed round
    state = build(world, algorithm)
    search(state, reqs[0], now=NOW)  # the untimed warm-up search, as in time_engine
    gc.collect()
    profiler = cProfile.Profile()
    profiler.enable()
    for req in reqs:
        search(state, req, now=NOW)
    profiler.disable()
    print(f"---- {algorithm} at {n} memories, {len(reqs)} searches (first pass)")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


# ---- the library, through the parity adapter ---------------------------------------------


def library_available() -> bool:
    return importlib.util.find_spec("outhad_contextkit") is not None


def _scenario(world: World, algorithm: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The world as a ck-mspr-scenario/1 document (SCENARIOS.md) with the given events."""
    from msprlab.experiments import contextkit_adapter as ck

    config = all_signals(algorithm)
    mspr = as_dict(config.mspr)
    mspr["role"]["policy"] = POLICY
    memories = []
    for i in range(world.size):
        stored = payload(world, i)
        memories.append({"id": f"m{i}", "text": stored["data"], "user_id": stored["user_id"],
                         "tenant_id": stored["tenant_id"], "created_at": stored["created_at"],
                         "updated_at": stored["updated_at"],
                         "access_count": world.access_counts[i],
                         "embedding": world.vectors[i].tolist()})
    edges = [{"src": src, "dst": dst, "type": kind.value, "weight": weight,
              "updated_at": NOW.isoformat()} for src, dst, kind, weight in world.edges]
    return {"format": ck.SCENARIO_FORMAT, "name": f"bench-{algorithm}-{world.size}",
            "now": NOW.isoformat(),
            "config": {"retrieval": as_dict(config.retrieval), "decay": as_dict(config.decay),
                       "mspr": mspr},
            "memories": memories, "edges": edges, "events": events}


def _search_event(req: SearchRequest) -> dict[str, Any]:
    return {"type": "search", "query": req.query,
            "seeds": [{"id": s.id, "score": s.score} for s in req.seeds],
            "query_embedding": list(req.query_embedding or []), "user_id": req.user_id,
            "filters": dict(req.filters or {}), "limit": req.limit}


@contextmanager
def _timed_library_searches() -> Iterator[list[float]]:
    """Seconds spent in each `Memory.search` call of the library while inside."""
    # As the adapter does before it first imports the library: no telemetry, scratch home.
    os.environ.setdefault("OUTHAD_CONTEXTKIT_TELEMETRY", "false")
    os.environ.setdefault("OUTHAD_CONTEXTKIT_DIR",
                          str(Path(tempfile.gettempdir()) / "msprlab-contextkit-home"))
    memory_class = importlib.import_module("outhad_contextkit.memory.main").Memory
    search_method = memory_class.search
    elapsed: list[float] = []
    # The adapter listens to the library's debug logs (to report swallowed errors); a timed
    # search runs at the logging level the library has without the adapter.
    logger = logging.getLogger("outhad_contextkit")
    level = logger.level

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(elapsed) == 1:  # after the warm-up search, as for the engine
            gc.collect()
        session_level = logger.level
        logger.setLevel(level)
        start = time.perf_counter()
        try:
            return search_method(self, *args, **kwargs)
        finally:
            elapsed.append(time.perf_counter() - start)
            logger.setLevel(session_level)

    memory_class.search = timed
    try:
        yield elapsed
    finally:
        memory_class.search = search_method


def time_library(world: World, algorithm: str,
                 reqs: Sequence[SearchRequest]) -> tuple[float, list[Ranking]]:
    """Searches/s of the library over `reqs` after the same warm-up search, and rankings.

    The world goes through the parity adapter's public entry point as one scenario: the
    feedback verdicts, the warm-up search, then `reqs`. Only the library's `Memory.search`
    calls for `reqs` are timed; building the Memory and the adapter's own work are not.
    """
    from msprlab.experiments.contextkit_adapter import run_scenario_with_contextkit

    feedback = [{"type": "feedback", "memory_id": memory_id, "helpful": helpful,
                 "user_id": user, "query": "what is w1 w2"}
                for memory_id, helpful, user in world.feedback]
    searches = [_search_event(req) for req in [reqs[0], *reqs]]
    with _timed_library_searches() as elapsed:
        output = run_scenario_with_contextkit(_scenario(world, algorithm, feedback + searches))
    records = [e for e in output["events"] if e["type"] == "search"][1:]
    rankings: list[Ranking] = []
    for record in records:
        if "error" in record:
            raise RuntimeError(f"the library raised on a bench search: {record['error']}")
        rankings.append([(r["id"], r["score"]) for r in record["results"]])
    timed = elapsed[1:]
    if len(timed) != len(reqs):
        raise RuntimeError(f"expected {len(reqs)} timed library searches, got {len(timed)}")
    return len(reqs) / sum(timed), rankings


def agree(ours: list[Ranking], theirs: list[Ranking], tolerance: float) -> bool:
    """Same ids in the same order and scores within `tolerance`, request by request."""
    return len(ours) == len(theirs) and all(
        [i for i, _ in a] == [i for i, _ in b]
        and all(abs(x - y) <= tolerance for (_, x), (_, y) in zip(a, b, strict=True))
        for a, b in zip(ours, theirs, strict=True))


def library_count(algorithm: str, n: int, requested: int) -> int:
    if algorithm == "ppr":
        return max(1, min(requested, 10 if n < 50_000 else 5))
    return max(1, requested)


@dataclass(frozen=True)
class Round:
    """One round on one graph: the engine's two passes, then the library (when measured)."""

    engine: EngineTimes
    library: float | None = None  # searches/s over the engine's `shared` requests
    same: bool | None = None      # the library's rankings agree with the engine's

    @property
    def ratio(self) -> float | None:
        """Engine over library, on the same requests."""
        return None if self.library is None else self.engine.shared / self.library


def measure_graph(world: World, algorithm: str, reqs: Sequence[SearchRequest], rounds: int,
                  lib_count: int, with_library: bool) -> list[Round]:
    """`rounds` rounds on one graph, each: fresh state and empty text caches, the engine's
    passes, then the library over the first `lib_count` requests."""
    out = []
    for _ in range(rounds):
        clear_token_cache()
        times = time_engine(build(world, algorithm), reqs, lib_count)
        if not with_library:
            out.append(Round(times))
            continue
        lib_rate, theirs = time_library(world, algorithm, reqs[:lib_count])
        same = agree(times.rankings, theirs, AGREEMENT_TOLERANCE[algorithm])
        out.append(Round(times, lib_rate, same))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 50_000])
    parser.add_argument("--searches", type=int, default=200,
                        help="engine searches per BFS graph (PPR: a fifth, at least 20)")
    parser.add_argument("--library-searches", type=int, default=50,
                        help="library searches per BFS graph (PPR: at most 10, 5 at 50k)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds per graph (engine, then library), the median ratio shown")
    parser.add_argument("--no-library", action="store_true",
                        help="do not run the library even when it is installed")
    parser.add_argument("--profile", choices=("bfs", "ppr"),
                        help="instead of timing: cProfile the engine's first pass of this "
                             "algorithm at each size (no library) and print the top functions")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.profile:
        for n in args.sizes:
            profile_engine(n, args.profile, args.searches)
        return
    measure = library_available() and not args.no_library
    print("searches/s, all signals on (intent, feedback, frequency, roles, success); engine/s "
          "is the first pass over the requests, 2nd pass the same requests again (caches "
          f"warm); medians of {args.rounds} rounds, each on a fresh state with empty caches")
    if measure:
        print("the library is measured in this run on the same graphs, over only the first "
              f"{args.library_searches} BFS / {library_count('ppr', 0, 10)} PPR "
              f"({library_count('ppr', 50_000, 10)} at 50k) requests because it is slow, "
              "right after the engine in each round; 'same reqs' is the engine's first pass "
              "over those requests alone; ratio = median over the rounds of same reqs / "
              "library/s, [lowest-highest]")
        header = f"{'same reqs':>10} {'library/s':>10} {'ratio':>8} {'range':>13}  results"
    else:
        print("the ContextKit library is not installed, so library/s is the issue's rate: "
              "reference, NOT measured in this run")
        header = f"{'library/s':>10} {'ratio':>8}  (reference, not measured)"
    print(f"{'algorithm':>9} {'memories':>9} {'engine/s':>10} {'2nd pass':>10} {header}")
    worlds = {}
    for n in args.sizes:  # one graph per size for both algorithms, as if generated anew
        rng = np.random.default_rng(0)
        worlds[n] = (generate(n, rng), rng.bit_generator.state)
    median = statistics.median
    for algorithm in ("bfs", "ppr"):
        for n in args.sizes:
            world, after = worlds[n]
            rng = np.random.default_rng(0)
            rng.bit_generator.state = after
            count = args.searches if algorithm == "bfs" else max(20, args.searches // 5)
            reqs = requests(world, rng, count)
            lib_count = min(count, library_count(algorithm, n, args.library_searches))
            rounds = measure_graph(world, algorithm, reqs, args.rounds, lib_count, measure)
            rate = median(r.engine.first for r in rounds)
            row = (f"{algorithm:>9} {n:>9} {rate:>10.1f} "
                   f"{median(r.engine.again for r in rounds):>10.1f}")
            if measure:
                ratios = [r.ratio for r in rounds if r.ratio is not None]
                lib_rate = median(r.library for r in rounds if r.library is not None)
                same = all(r.same for r in rounds)
                spread = f"[{min(ratios):.1f}-{max(ratios):.1f}]"
                print(f"{row} {median(r.engine.shared for r in rounds):>10.1f} "
                      f"{lib_rate:>10.2f} {median(ratios):>7.1f}x {spread:>13}  "
                      f"{'same' if same else 'DIFFER'} ({lib_count} library searches)",
                      flush=True)
            else:
                reference = LIBRARY_REFERENCE[algorithm].get(n, float("nan"))
                print(f"{row} {reference:>10.0f} {rate / reference:>7.1f}x", flush=True)


if __name__ == "__main__":
    main()
