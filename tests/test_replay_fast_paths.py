"""Replay's fast paths against what they replaced, bit for bit: the lean engine entry
(`featurize_search`) against `search`, the cached and the planned owner seeds against a
gather per search, the remembered isolation audit against the policy run per candidate,
the column-wise table against one built row by row, and the timeline's column-wise setup."""

from __future__ import annotations

import gc
import json
import struct
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import msprlab.experiments.variants.walk as walk_module
from msprlab.datasets.timeline import (
    DEFAULT_SEEDS,
    SeedPlan,
    Timeline,
    _payload,
    corpus_of,
    owner_cosine_seeds,
    row_tops,
    to_datetime,
    vector_matrix,
)
from msprlab.engine import SearchError, SearchRequest, Seed, new_state
from msprlab.engine.batch import FEATURES
from msprlab.engine.config import FrequencyConfig, MsprConfig
from msprlab.engine.graph import EdgeType
from msprlab.engine.roles import (
    RoleContext,
    RolePolicy,
    apply_role_policy,
    policy_from_name,
    role_context_from_filters,
)
from msprlab.engine.search import effective_filters, featurize_search, search, seed_payload
from msprlab.engine.state import EngineState
from msprlab.experiments.replay import replay
from msprlab.experiments.variants.walk import AUDIT_POLICY, _Audit, _Collector

from replay_world import StripedPolicy, signals, world
from spec_fixture import NO_DECAY, fixture, request
from spec_fixture import T0 as T_FIXTURE

FULL = signals((0.0,) * 6, intent=True, roles=True)


def bits(x: Any) -> bytes:
    return struct.pack("<d", float(x))


# ---- the lean engine entry ------------------------------------------------------------------


def outcome_bits(outcome: Any) -> tuple[Any, ...]:
    """What `featurize_search` promises to share with `search`."""
    candidates = [(c.id, c.payload, c.was_seed, *map(bits, (
        c.dense, c.lexical, c.graph, c.frequency, c.personal, c.success, c.relevance,
        c.score))) for c in outcome.candidates]
    return (candidates, outcome.intent, outcome.weights, outcome.decay, outcome.notes,
            outcome.graph_path)


def state_bits(state: EngineState) -> tuple[Any, ...]:
    """Everything a search may change: node and edge state, the decay clock, the intent
    cache, the feedback and success stores."""
    graph = state.graph
    nodes = [(mid, None if n is None else (
        bits(n.relevance), bits(n.relevance_floor), n.archived, n.access_count,
        n.last_accessed_at, n.updated_at, n.helpful_count, n.unhelpful_count))
        for mid, n in graph.nodes.items()]
    edges = [(e.src, e.dst, e.type, bits(e.weight), e.updated_at) for e in graph.edges()]
    intents = None if state.intent is None else dict(state.intent._cache)
    feedback = None if state.feedback is None else len(state.feedback.rows)
    success = None if state.success is None else dict(state.success._counts)
    return nodes, edges, graph.last_decay_tick, intents, feedback, success


class TextPolicy(RolePolicy):
    """Denies a hit by a field only its whole payload has (the stored text): a hard filter
    judges every hit whole, so featurizing must not hand it stubs ({"id", "score"})."""

    def allow(self, candidate: Any, ctx: RoleContext) -> bool:
        return len(str(candidate.get("memory") or "")) % 3 != 1

    def __repr__(self) -> str:
        return "TextPolicy()"


HARD = replace(FULL, mspr=replace(FULL.mspr, role=replace(FULL.mspr.role, hard_filter=True)))
CONFIGS = {
    "soft roles": (FULL, StripedPolicy()),
    "hard roles": (HARD, policy_from_name("composite")),
    "hard roles, by the payload": (HARD, TextPolicy()),
    "strict isolation": (replace(FULL, corrections=replace(
        FULL.corrections, strict_role_isolation=True)), policy_from_name("tenant")),
    "ppr": (replace(FULL, retrieval=replace(FULL.retrieval, algorithm="ppr")), None),
}


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", CONFIGS)
def test_featurize_search_is_search_up_to_the_candidates(seed: int, name: str,
                                                         monkeypatch: Any) -> None:
    """A replay through `featurize_search` and one through `search`: every search has the
    same candidates (ids, order, payloads, every feature bit), intent, weights and decay,
    the engine states end the same, and so do the tables."""
    config, policy = CONFIGS[name]
    log, _ = world(seed)
    runs: dict[str, list[tuple[EngineState, Any]]] = {"lean": [], "full": []}

    def recorded(kind: str, run: Any) -> Any:
        def call(state: EngineState, req: SearchRequest, *, now: Any) -> Any:
            outcome = run(state, req, now=now)
            runs[kind].append((state, outcome))
            return outcome
        return call

    monkeypatch.setattr(walk_module, "featurize_search", recorded("lean", featurize_search))
    lean = replay(log, config, policy=policy)
    monkeypatch.setattr(walk_module, "featurize_search", recorded("full", search))
    full = replay(log, config, policy=policy)
    assert len(runs["lean"]) == len(runs["full"]) == log.events.filter(
        pl.col("kind") == "search").height
    assert sum(len(o.candidates) for _, o in runs["lean"]) > 0
    for (_, got), (_, want) in zip(runs["lean"], runs["full"], strict=True):
        assert outcome_bits(got) == outcome_bits(want)
        assert got.results == got.subgraph == [] and got.telemetry is None
    assert state_bits(runs["lean"][-1][0]) == state_bits(runs["full"][-1][0])
    assert lean.searches.equals(full.searches) and lean.candidates.equals(full.candidates)


def test_featurize_search_refuses_access_counting_and_raises_as_search() -> None:
    counting = replace(NO_DECAY, mspr=MsprConfig(enabled=True,
                                                 frequency=FrequencyConfig(enabled=True)))
    with pytest.raises(ValueError, match="run `search` instead"):
        featurize_search(fixture(counting), request(), now=T_FIXTURE)
    state = fixture()
    for bad in (replace(request(), user_id=None), replace(request(), seeds=[Seed("nope", 0.5)]),
                replace(request(), threshold=0.5, seeds=[Seed("m1", None)])):
        with pytest.raises(SearchError) as lean:
            featurize_search(state, bad, now=T_FIXTURE)
        with pytest.raises(SearchError) as full:
            search(state, bad, now=T_FIXTURE)
        assert str(lean.value) == str(full.value)
    vector_only = replace(request(), use_context_graph=False)
    assert featurize_search(state, vector_only, now=T_FIXTURE).candidates == []
    assert search(state, vector_only, now=T_FIXTURE).candidates == []


def test_a_query_vector_may_be_an_array() -> None:
    state = fixture()
    listed = search(state, request(), now=T_FIXTURE)
    vector = np.array(request().query_embedding, dtype=np.float64)
    as_array = search(state, replace(request(), query_embedding=vector), now=T_FIXTURE)
    assert outcome_bits(as_array) == outcome_bits(listed)
    empty = search(state, replace(request(), query_embedding=np.array([])), now=T_FIXTURE)
    assert outcome_bits(empty) == outcome_bits(
        search(state, replace(request(), query_embedding=None), now=T_FIXTURE))


# ---- owner seeds ------------------------------------------------------------------------


def gathered_seeds(corpus: Any, timeline: Timeline, q: int, vector: np.ndarray,
                   count: int = DEFAULT_SEEDS) -> list[Seed]:
    """The seeds as computed before the cache: the live rows gathered per search."""
    rows = corpus.scope_rows[q]
    rows = rows[timeline.seedable[rows]]
    if rows.size == 0:
        return []
    scores = corpus.vectors[rows] @ vector
    top = np.argsort(-scores, kind="stable")[:count]
    return [Seed(corpus.memory_ids[rows[i]], float(scores[i])) for i in top]


def with_deletions(seed: int, every: int, part: int) -> Any:
    """World `seed` with every `every`-th memory deleted at 1/`part` of its time span."""
    log, _ = world(seed)
    created = log.memories["created_at"]
    moment = created.min() + (created.max() - created.min()) / part  # type: ignore[operator]
    doomed = log.memories["memory_id"].gather(list(range(0, log.memories.height, every)))
    return replace(log, memories=log.memories.with_columns(deleted_at=pl.when(
        pl.col("memory_id").is_in(doomed.implode())).then(pl.lit(moment))
        .otherwise(pl.col("deleted_at"))))


def test_owner_seeds_are_the_gathered_seeds_as_memories_come_and_go() -> None:
    log = with_deletions(3, every=7, part=2)
    corpus = corpus_of(log)
    timeline = Timeline(log, corpus, new_state(FULL))
    rng = np.random.default_rng(3)
    vectors = corpus.vectors
    assert vectors is not None
    moments = sorted({op[0] for op in timeline.ops})
    checked = 0
    for at in [*moments[::max(1, len(moments) // 60)], moments[-1] + 1]:
        timeline.advance(at)
        for q in rng.choice(len(corpus.query_ids), 5):
            vector = vectors[rng.integers(len(vectors))]
            got = owner_cosine_seeds(corpus, timeline, int(q), vector, DEFAULT_SEEDS)
            want = gathered_seeds(corpus, timeline, int(q), vector)
            assert [(s.id, bits(s.score)) for s in got] == [(s.id, bits(s.score)) for s in want]
            checked += len(got)
    assert checked > 0 and not timeline.seedable.all()


def test_planned_seeds_are_the_seeds_at_each_search() -> None:
    """A plan made up front gives, search by search, what the timeline gives when it gets
    there, with memories deleted on the way and queries of several owners interleaved, each
    search with its own seed count (searches of one query at one time asking for more and
    for fewer)."""
    log = with_deletions(2, every=5, part=3)
    created = log.memories["created_at"]
    corpus = corpus_of(log)
    vectors = corpus.vectors
    assert vectors is not None
    rng = np.random.default_rng(2)
    start, end = created.cast(pl.Int64).min(), created.cast(pl.Int64).max()
    times = np.sort(rng.integers(start - 10, end + 10, 300)).tolist()  # type: ignore[operator]
    times[100:104] = [times[100]] * 4  # several searches at one time
    searches = [(t, int(q)) for t, q in zip(times, rng.choice(len(corpus.query_ids), 300),
                                            strict=True)]
    queries = vectors[rng.integers(len(vectors), size=len(corpus.query_ids))]
    counts = rng.integers(1, 25, size=len(searches)).tolist()
    searches[104:108] = [searches[100]] * 4  # one query at one time, counts differing
    timeline = Timeline(log, corpus, new_state(FULL))
    plan = SeedPlan(corpus, timeline, searches, queries, counts)
    for k, (at, q) in enumerate(searches):
        timeline.advance(at)
        want = gathered_seeds(corpus, timeline, q, queries[q], counts[k])
        assert [(s.id, bits(s.score)) for s in plan.seeds(k)] == [
            (s.id, bits(s.score)) for s in want]
    assert not timeline.seedable.all() and timeline.seedable.any()


@settings(max_examples=600, deadline=None)
@given(st.integers(1, 6), st.integers(0, 40), st.integers(0, 15), st.data())
def test_row_tops_are_each_rows_stable_head(rows: int, width: int, k: int,
                                            data: st.DataObject) -> None:
    """Ties, ±0, infinities and NaN included: each row's positions are those of the
    stable argsort of its negated scores (a search's seeds, planned or one at a time)."""
    values = data.draw(st.lists(st.one_of(
        st.sampled_from([0.0, -0.0, 0.5, -0.5, 1.0, np.nan, np.inf, -np.inf]),
        st.floats(-2, 2)), min_size=rows * width, max_size=rows * width))
    scores = np.array(values, dtype=np.float64).reshape(rows, width)
    want = [np.argsort(-row, kind="stable")[:k].tolist() for row in scores]
    assert row_tops(scores, k).tolist() == want


# ---- the isolation audit ------------------------------------------------------------------


def audited(payloads: dict[str, Any], ids: list[str], ctx: RoleContext) -> list[bool]:
    """The audit as it was: AUDIT_POLICY over every candidate's hit, per search."""
    full = [seed_payload(m, payloads.get(m, {}), None) for m in ids]
    allowed = {e["id"] for e in apply_role_policy(full, AUDIT_POLICY, ctx, hard_filter=True)}
    return [m in allowed for m in ids]


def test_remembered_audit_verdicts_follow_the_payloads_and_the_searcher() -> None:
    payloads: dict[str, Any] = {
        "m1": {"data": "a", "tenant_id": "acme"},
        "m2": {"data": "b", "tenant_id": "globex", "role": "admin"},
        "m3": {"data": "c", "allowed_roles": ["1", "analyst"]},
        "m4": {"data": "d"}}
    ids = ["m1", "m2", "m3", "m4", "gone"]
    audit = _Audit(payloads)
    searchers = [RoleContext(tenant_id="acme", role="analyst"), RoleContext(tenant_id="globex",
                 role="admin"), RoleContext(), RoleContext(tenant_id="acme", role=1),
                 RoleContext(tenant_id="acme", role=True), RoleContext(tenant_id=["acme"])]
    for step in range(3):
        for ctx in searchers:
            got = audit.visible(ids, ctx)
            assert got == audited(payloads, ids, ctx), (step, ctx)
        # the timeline replaces payloads, it never edits them in place
        payloads["m1"] = {"data": "a", "tenant_id": "globex"}
        payloads["m4"] = {"data": "d", "role": "analyst"}
        payloads.pop("m2", None)


def test_the_audit_judges_each_search_by_its_own_filters() -> None:
    """One user's searches carry different tenants and roles in their filters: each
    candidate's `visible` is the audit policy on its stored payload for that search's
    context (the replay remembers contexts by the event fields they are made from)."""
    log, _ = world(1)
    n = log.memories.height
    tenants = pl.Series(["t1", None, "t2"] * n)[:n]
    roles = pl.Series([None, "admin", None, "support"] * n)[:n]
    allowed = pl.Series([None, None, None, None, ["support", "admin"]] * n,
                        dtype=pl.List(pl.String))[:n]
    memories = log.memories.with_columns(tenant_id=tenants, role=roles, allowed_roles=allowed)
    choices = [None, '{"tenant_id": "t1"}', '{"tenant_id": "t2", "role": "admin"}',
               '{"role": "support"}', '{"metadata": {"tenant_id": "t1", "role": "admin"}}']
    searches = pl.col("kind") == "search"
    order = pl.int_range(pl.len()).cast(pl.Int64)
    events = log.events.with_columns(filters=pl.when(searches).then(
        order.map_elements(lambda i: choices[i % len(choices)], return_dtype=pl.String))
        .otherwise(pl.col("filters")))
    ds = replace(log, memories=memories, events=events)
    table = replay(ds, FULL)
    stored = {row["memory_id"]: _payload(row) for row in memories.iter_rows(named=True)}
    rows = table.candidates.join(table.searches.select("search", "event_id", "user_id",
                                                       "agent_id", "run_id"), on="search")
    filters_of = dict(zip(events["event_id"], events["filters"], strict=True))
    per_search = rows.group_by("event_id").agg(pl.col("user_id").first()).height
    assert per_search > 10 and not rows["visible"].all() and rows["visible"].any()
    for row in rows.iter_rows(named=True):
        request = SearchRequest(query="", seeds=[], user_id=row["user_id"],
                                agent_id=row["agent_id"], run_id=row["run_id"],
                                filters=json.loads(filters_of[row["event_id"]] or "{}"))
        ctx = role_context_from_filters(user_id=row["user_id"], agent_id=row["agent_id"],
                                        run_id=row["run_id"],
                                        filters=effective_filters(request))
        want = audited(stored, [row["memory_id"]], ctx)[0]
        assert row["visible"] == want, (row["event_id"], row["memory_id"], ctx)


# ---- the table ------------------------------------------------------------------------


def rows_built(calls: list[dict[str, Any]], events: pl.DataFrame,
               ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The table as it was built before it went column-wise: a row per search and per
    candidate, each from the search's event and what the replay handed over."""
    searches, candidates = [], []
    for k, call in enumerate(calls):
        event = events.row(call["event"], named=True)
        searches.append({"search": k, **{name: event[name] for name in (
            "event_id", "ts", "query_id", "query", "user_id", "agent_id", "run_id")},
            "limit": call["limit"], "intent": call["intent"], "intent_label": call["label"],
            "question_type": call["question_type"], "n_candidates": len(call["ids"]),
            "error": call["error"], "logged": call["logged"]})
        ranks = {m: r for r, m in enumerate(call["logged"] or [])}
        for i, memory_id in enumerate(call["ids"]):
            was_seed, *features, relevance = (column[i] for column in call["values"])
            candidates.append({
                "search": k, "position": i, "memory_id": memory_id, "was_seed": was_seed,
                **dict(zip(FEATURES, features, strict=True)), "relevance": relevance,
                "role": 1.0 if call["multipliers"] is None else call["multipliers"][i],
                "visible": True if call["visible"] is None else call["visible"][i],
                "logged_rank": ranks.get(memory_id), "grade": call["grades"].get(memory_id)})
    return (pl.DataFrame(searches, schema=_SEARCHES, orient="row").with_columns(
                pl.col("ts").cast(pl.Datetime("us"))),
            pl.DataFrame(candidates, schema=_CANDIDATES, orient="row"))


_SEARCHES = {"search": pl.Int64, "event_id": pl.Int64, "ts": pl.Int64, "query_id": pl.String,
             "query": pl.String, "user_id": pl.String, "agent_id": pl.String,
             "run_id": pl.String, "limit": pl.Int64, "intent": pl.String,
             "intent_label": pl.String, "question_type": pl.String,
             "n_candidates": pl.Int64, "error": pl.String, "logged": pl.List(pl.String)}
_CANDIDATES = {"search": pl.Int64, "position": pl.Int64, "memory_id": pl.String,
               "was_seed": pl.Boolean, **dict.fromkeys(FEATURES, pl.Float64),
               "relevance": pl.Float64, "role": pl.Float64, "visible": pl.Boolean,
               "logged_rank": pl.Int64, "grade": pl.Int64}


@pytest.mark.parametrize("name", ["soft roles", "strict isolation"])
def test_table_columns_are_the_rows_the_replay_handed_over(name: str,
                                                           monkeypatch: Any) -> None:
    config, policy = CONFIGS[name]
    log = with_deletions(1, every=6, part=2)
    calls: list[dict[str, Any]] = []
    walked: list[pl.DataFrame] = []
    search, frames = _Collector.search, _Collector.frames

    def recorded_search(self: _Collector, **call: Any) -> None:
        calls.append(call)
        search(self, **call)

    def recorded_frames(self: _Collector, events: pl.DataFrame, with_engine: bool) -> Any:
        walked.append(events)
        return frames(self, events, with_engine)

    monkeypatch.setattr(_Collector, "search", recorded_search)
    monkeypatch.setattr(_Collector, "frames", recorded_frames)
    table = replay(log, config, policy=policy)
    want_searches, want_candidates = rows_built(calls, walked[0])
    assert table.searches.equals(want_searches) and table.candidates.equals(want_candidates)
    assert table.candidates["logged_rank"].is_not_null().any()
    assert table.candidates["grade"].is_not_null().any()
    assert (table.candidates["role"] != 1.0).any() or name != "soft roles"


def test_replay_leaves_the_garbage_collector_as_it_found_it() -> None:
    log, _ = world(1)
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            replay(log, FULL)
            assert gc.isenabled() is enabled
            with pytest.raises(ValueError, match="no memory embeddings"):
                replay(replace(log, embeddings=log.embeddings.clear()), FULL)
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


# ---- the timeline's setup ---------------------------------------------------------------


def test_timeline_refuses_edges_to_unknown_memories_or_of_unknown_types() -> None:
    log, _ = world(1)
    corpus = corpus_of(log)
    first = log.edges.head(1)
    stray = pl.concat([log.edges, first.with_columns(dst=pl.lit("no-such-memory"))])
    with pytest.raises(ValueError, match=rf"edges: row {log.edges.height} joins .*'no-such-"):
        Timeline(replace(log, edges=stray), corpus, new_state(FULL))
    odd = pl.concat([log.edges, first.with_columns(type=pl.lit("LIKES"))])
    with pytest.raises(ValueError, match=rf"row {log.edges.height} has type 'LIKES'; known: "):
        Timeline(replace(log, edges=odd), corpus, new_state(FULL))


def test_edges_enter_at_their_own_time_or_with_their_later_end() -> None:
    log, _ = world(1)
    timeline = Timeline(log, corpus_of(log), new_state(FULL))
    created = dict(zip(log.memories["memory_id"].to_list(),
                       log.memories["created_at"].cast(pl.Int64).to_list(), strict=True))
    own = log.edges["created_at"].cast(pl.Int64).fill_null(0).to_list()
    want = sorted([(t, 0, i) for i, t in enumerate(created.values())] + [
        (max(own[j], created[s], created[d]), 1, j) for j, (s, d) in enumerate(zip(
            log.edges["src"].to_list(), log.edges["dst"].to_list(), strict=True))])
    assert timeline.ops == want


@pytest.mark.parametrize("rows", [
    [[0.5, 1.0], [0.25, -2.0]], [[0.5, None], [1.0, 2.0]], [[1.0], [1.0, 2.0]], [None, [1.0]],
])
def test_vector_columns_read_as_numpy_reads_the_lists(rows: list[Any]) -> None:
    column = pl.Series(rows, dtype=pl.List(pl.Float32))
    try:
        want = np.asarray(column.to_list(), dtype=np.float64)
    except (TypeError, ValueError) as exc:
        with pytest.raises(type(exc)):
            vector_matrix(column)
        return
    got = vector_matrix(column)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def test_timeline_payloads_are_built_from_the_columns() -> None:
    log, _ = world(2)
    state = new_state(FULL)
    corpus = corpus_of(log)
    Timeline(log, corpus, state).advance(1 << 62)
    row = log.memories.row(3, named=True)
    payload = state.payloads[row["memory_id"]]
    assert payload["data"] == row["text"]
    assert payload["created_at"] == row["created_at"].isoformat()
    assert payload["tenant_id"] == row["tenant_id"] and payload["role"] == row["role"]
    assert payload["allowed_roles"] == list(row["allowed_roles"])
    node = state.graph.get(row["memory_id"])
    assert node is not None and node.metadata == payload
    vectors = corpus.vectors
    assert vectors is not None
    stored = state.graph.embeddings[row["memory_id"]]
    assert stored.vector.tobytes() == vectors[3].tobytes()


def test_edges_enter_with_their_time_type_and_clamped_weight() -> None:
    log, _ = world(2)
    timeline = Timeline(log, corpus_of(log), new_state(FULL))
    entered = {index: at for at, phase, index in timeline.ops if phase == 1}
    moments = sorted(set(entered.values()))
    for moment in [*moments[::max(1, len(moments) // 20)], moments[-1]]:
        timeline.advance(moment)  # in steps: each edge gets its own time, not its step's
    stored = {(e.src, e.dst, e.type): e for e in timeline.state.graph.edges()}
    keys = log.edges.select("src", "dst", "type")
    once = ~keys.is_duplicated()  # a repeated key keeps its first created_at
    assert once.sum() > 0
    for j, (src, dst, kind, weight) in enumerate(log.edges.select(
            "src", "dst", "type", "weight").iter_rows()):
        edge = stored[(src, dst, EdgeType(kind))]
        assert type(edge.type) is EdgeType and edge.type.value == kind
        if once[j]:
            assert edge.created_at == edge.updated_at == to_datetime(entered[j])
            assert edge.weight == max(0.0, min(1.0, weight))


@pytest.mark.parametrize("name", ["soft roles", "hard roles"])
@pytest.mark.parametrize("frequency", ["logged", "closed_loop"])
def test_table_is_the_same_whether_searches_run_on_positions_or_objects(
        name: str, frequency: str, monkeypatch: Any) -> None:
    """The table's values come from the positional path's columns where it ran (not from a
    Candidate each): bit for bit the table the object path gives."""
    config, policy = CONFIGS[name]
    log = with_deletions(2, every=5, part=2)
    tables = []
    for positional in (True, False):
        def state(*args: Any, on: bool = positional, **kwargs: Any) -> EngineState:
            made = new_state(*args, **kwargs)
            made.positional_search = on
            return made
        monkeypatch.setattr(walk_module, "new_state", state)
        tables.append(replay(log, config, frequency=frequency, policy=policy))
    on, off = tables
    assert on.candidates.height > 100
    assert on.searches.equals(off.searches) and on.candidates.equals(off.candidates)
