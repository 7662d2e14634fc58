"""`make bench`: per-search latency of the sequential engine, all signals on, BFS and PPR.

Graphs of 1k, 10k and 50k memories with about five edges each, generated with a fixed seed.
When the ContextKit library is installed (msprlab[parity]) it is timed side by side on the
same graphs and the same requests (through the parity adapter's public entry point), and
the ratio printed; the library's top results are checked against the engine's ("same").
Both sides make the same calls: one warm-up search (it ticks decay), then the requests
(`--searches`; fewer for PPR, the library being slow), then the same requests again.
The first pass meets the requests for the first time, each round on a freshly built state
with the text cache emptied first. A BFS search reads memories through an index by node
position (engine/positional.py: token ids, owner codes, vectors, the integer adjacency) that
the engine brings up to date at the first search after memories are written, for all of
them; here that is the warm-up search, which indexes the whole graph. Its time is printed
beside the rates (not in them), as the library's own indexing happens in its writes, which
are not timed either. The object path (`EngineState.positional_search` off), timed in the
same rounds for BFS, keeps per-text caches instead, which start empty: its first pass
tokenizes every text it meets. The second pass is the steady state, as in a process that
has served searches for a while; the library keeps no caches, so its two passes cost about
the same. Each graph is measured in
`--rounds` rounds, the engine then the library; a ratio printed is the median of the
rounds' ratios, with their range: the machine's speed drifts, and the two sides of one
round are close in time. Only the searches are timed, on both sides: building the state
and the feedback that seeds it are not, and a full garbage collection after the warm-up
keeps the collector's debt from building the state out of the timing. The library runs
at its usual logging level while timed (the adapter otherwise listens to its debug log).

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
class Passes:
    """Searches/s of one side over the requests, twice, and its rankings each time."""

    cold: float
    warm: float
    rankings: tuple[list[Ranking], list[Ranking]]
    first: float = float("nan")  # seconds of the warm-up search, not in the rates


def time_engine(state: EngineState, reqs: Sequence[SearchRequest]) -> Passes:
    """The warm-up search, then two timed passes over `reqs`. Build `state` after
    `clear_token_cache()` for a first pass that meets every text anew."""
    start = time.perf_counter()
    search(state, reqs[0], now=NOW)  # ticks decay; indexes the memories written (BFS)
    first = time.perf_counter() - start
    gc.collect()  # settle the collector's debt from building the state, outside the timing
    rates, rankings = [], []
    for _ in range(2):
        start = time.perf_counter()
        outcomes = [search(state, req, now=NOW) for req in reqs]
        rates.append(len(reqs) / (time.perf_counter() - start))
        rankings.append([[(c.id, c.score) for c in o.results] for o in outcomes])
        del outcomes  # freed here, not inside the next pass's timing (the library's isn't)
    return Passes(rates[0], rates[1], (rankings[0], rankings[1]), first)


def profile_engine(n: int, algorithm: str, searches: int, top: int = 25) -> None:
    """cProfile of the engine's first pass over the bench requests of one graph, printed by
    own time (the profiler slows Python calls unevenly: read it for where, not how fast)."""
    rng = np.random.default_rng(0)
    world = generate(n, rng)
    reqs = requests(world, rng, request_count(algorithm, n, searches))
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
    from msprlab.experiments.parity import adapter as ck

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


def time_library(world: World, algorithm: str, reqs: Sequence[SearchRequest]) -> Passes:
    """The library making the engine's calls: the same warm-up search, then `reqs` twice.

    The world goes through the parity adapter's public entry point as one scenario: the
    feedback verdicts, the warm-up search, then the requests twice. Only the library's
    `Memory.search` calls for the requests are timed; building the Memory and the adapter's
    own work are not.
    """
    from msprlab.experiments.parity.adapter import run_scenario_with_contextkit

    feedback = [{"type": "feedback", "memory_id": memory_id, "helpful": helpful,
                 "user_id": user, "query": "what is w1 w2"}
                for memory_id, helpful, user in world.feedback]
    searches = [_search_event(req) for req in [reqs[0], *reqs, *reqs]]
    with _timed_library_searches() as elapsed:
        output = run_scenario_with_contextkit(_scenario(world, algorithm, feedback + searches))
    records = [e for e in output["events"] if e["type"] == "search"][1:]
    rankings: list[Ranking] = []
    for record in records:
        if "error" in record:
            raise RuntimeError(f"the library raised on a bench search: {record['error']}")
        rankings.append([(r["id"], r["score"]) for r in record["results"]])
    timed = elapsed[1:]
    n = len(reqs)
    if len(timed) != 2 * n:
        raise RuntimeError(f"expected {2 * n} timed library searches, got {len(timed)}")
    return Passes(n / sum(timed[:n]), n / sum(timed[n:]), (rankings[:n], rankings[n:]),
                  elapsed[0])


def agree(ours: list[Ranking], theirs: list[Ranking], tolerance: float) -> bool:
    """Same ids in the same order and scores within `tolerance`, request by request."""
    return len(ours) == len(theirs) and all(
        [i for i, _ in a] == [i for i, _ in b]
        and all(abs(x - y) <= tolerance for (_, x), (_, y) in zip(a, b, strict=True))
        for a, b in zip(ours, theirs, strict=True))


def request_count(algorithm: str, n: int, searches: int) -> int:
    """Requests per graph: `searches` for BFS; for PPR, where the library takes seconds a
    search, at most 10 (5 at 50k memories)."""
    if algorithm == "ppr":
        return max(1, min(searches, 10 if n < 50_000 else 5))
    return max(1, searches)


@dataclass(frozen=True)
class Round:
    """One round on one graph: the engine's two passes, then the library's (when measured)."""

    engine: Passes
    library: Passes | None = None
    same: bool | None = None  # the library's rankings agree with the engine's, both passes
    object_path: Passes | None = None  # BFS: the engine with its positional path off

    def ratios(self) -> tuple[float, float] | None:
        """Engine over library, first pass and second."""
        if self.library is None:
            return None
        return self.engine.cold / self.library.cold, self.engine.warm / self.library.warm


def measure_graph(world: World, algorithm: str, reqs: Sequence[SearchRequest], rounds: int,
                  with_library: bool) -> list[Round]:
    """`rounds` rounds on one graph, each: fresh state and empty text caches, the engine's
    passes, then the library's."""
    out = []
    for _ in range(rounds):
        clear_token_cache()
        engine = time_engine(build(world, algorithm), reqs)
        object_path = None
        if algorithm == "bfs":
            clear_token_cache()
            state = build(world, algorithm)
            state.positional_search = False
            object_path = time_engine(state, reqs)
            if object_path.rankings != engine.rankings:
                raise RuntimeError("the positional and object paths ranked differently")
        if not with_library:
            out.append(Round(engine, object_path=object_path))
            continue
        library = time_library(world, algorithm, reqs)
        tolerance = AGREEMENT_TOLERANCE[algorithm]
        same = all(agree(ours, theirs, tolerance)
                   for ours, theirs in zip(engine.rankings, library.rankings, strict=True))
        out.append(Round(engine, library, same, object_path))
    return out


def print_object_path(rounds: Sequence[Round]) -> None:
    """The engine's object path (positional path off) in the same rounds, and how much
    faster the positional path was (median of the rounds' ratios, both measured on the same
    requests, rankings identical)."""
    pairs = [(r.engine, r.object_path) for r in rounds if r.object_path is not None]
    if not pairs:
        return
    median = statistics.median
    cold = median(o.cold for _, o in pairs)
    warm = median(o.warm for _, o in pairs)
    gain_cold = median(e.cold / o.cold for e, o in pairs)
    gain_warm = median(e.warm / o.warm for e, o in pairs)
    print(f"{'':>19} object path only: {cold:.1f} / {warm:.1f} searches/s (1st / 2nd pass); "
          f"the positional path {gain_cold:.2f}x / {gain_warm:.2f}x of it, same rankings",
          flush=True)
    first = median(e.first for e, _ in pairs) * 1e3
    first_object = median(o.first for _, o in pairs) * 1e3
    library = [r.library.first for r in rounds if r.library is not None]
    also = f", the library {median(library) * 1e3:.0f} ms" if library else ""
    print(f"{'':>19} the warm-up search (not in the rates): {first:.0f} ms, indexing every "
          f"memory written (the object path {first_object:.0f} ms{also})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 50_000])
    parser.add_argument("--searches", type=int, default=50,
                        help="requests per BFS graph, the same on both sides (PPR: at most "
                             "10, 5 at 50k)")
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
    print(f"searches/s, all signals on (intent, feedback, frequency, roles, success), over "
          f"{args.searches} BFS / {request_count('ppr', 0, args.searches)} PPR "
          f"({request_count('ppr', 50_000, args.searches)} at 50k) requests, then the same "
          "requests again, after one warm-up search; 1st pass: the requests met for the "
          "first time on a freshly built state (cold caches; BFS: the memories indexed by "
          "the warm-up search, whose time is shown apart), 2nd pass: the same requests "
          f"again (steady state); medians of {args.rounds} rounds, each on a fresh state")
    if measure:
        print("the library is measured in this run, making the same calls right after the "
              "engine in each round; ratio = median over the rounds of engine/s / "
              "library/s, [lowest-highest]")
        side = f"{'engine/s':>9} {'library/s':>9} {'ratio':>7} {'range':>13}"
        print(f"{'':>19} {'1st pass (cold)':^41} {'2nd pass (steady state)':^41}")
        print(f"{'algorithm':>9} {'memories':>9} {side} {side}  results")
    else:
        print("the ContextKit library is not installed, so library/s is the issue's rate: "
              "reference, NOT measured in this run")
        print(f"{'algorithm':>9} {'memories':>9} {'engine/s':>9} {'2nd pass':>9} "
              f"{'library/s':>9} {'ratio':>7}  (reference, not measured; 1st pass)")
    # Compile (or load) the positional path's loops on a small graph first, so that no
    # round's warm-up search pays numba's one-time cost.
    small = generate(200, np.random.default_rng(1))
    search(build(small, "bfs"), requests(small, np.random.default_rng(1), 1)[0], now=NOW)
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
            count = request_count(algorithm, n, args.searches)
            reqs = requests(world, rng, count)
            rounds = measure_graph(world, algorithm, reqs, args.rounds, measure)
            cold = median(r.engine.cold for r in rounds)
            warm = median(r.engine.warm for r in rounds)
            head = f"{algorithm:>9} {n:>9}"
            if not measure:
                reference = LIBRARY_REFERENCE[algorithm].get(n, float("nan"))
                print(f"{head} {cold:>9.1f} {warm:>9.1f} {reference:>9.0f} "
                      f"{cold / reference:>6.1f}x", flush=True)
                print_object_path(rounds)
                continue
            cells = []
            for i, (engine_rate, library_rate) in enumerate((
                    (cold, median(r.library.cold for r in rounds if r.library)),
                    (warm, median(r.library.warm for r in rounds if r.library)))):
                ratios = [pair[i] for r in rounds if (pair := r.ratios()) is not None]
                spread = f"[{min(ratios):.1f}-{max(ratios):.1f}]"
                cells.append(f"{engine_rate:>9.1f} {library_rate:>9.2f} "
                             f"{median(ratios):>6.1f}x {spread:>13}")
            same = all(r.same for r in rounds)
            print(f"{head} {' '.join(cells)}  {'same' if same else 'DIFFER'} ({count} "
                  "requests, both passes)", flush=True)
            print_object_path(rounds)


if __name__ == "__main__":
    main()
