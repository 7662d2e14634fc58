"""Every worked example of MSPR.md section 19, with its exact numbers."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from msprlab.engine import EngineConfig, SearchError, Seed, record_feedback, search, tick_decay
from msprlab.engine.bfs import expand_bfs
from msprlab.engine.config import FeedbackConfig, MsprConfig, SuccessConfig
from msprlab.engine.graph import EdgeType, Embedding
from msprlab.engine.rerank import featurize, rank
from msprlab.engine.search import resolve_payloads, seed_payload
from msprlab.engine.seeds import trim_seeds

from spec_fixture import (
    NO_DECAY,
    QUERY,
    T0,
    add_edge,
    add_memory,
    fixture,
    ranked,
    request,
    with_retrieval,
)

approx6 = pytest.approx  # the spec rounds to 6 decimals


def direct_bfs(state, seeds, scope, embedding=(1.0, 0.2, 0.0), cfg=NO_DECAY.retrieval):
    """A direct retriever call, as the spec's examples make (no Memory.search scope)."""
    hits = [seed_payload(s.id, state.payloads[s.id], s.score) for s in seeds]
    lookup = trim_seeds(hits, cfg.seed_top_k)
    reach, _ = expand_bfs(state.graph, lookup, scope, depth=cfg.expansion_depth,
                          max_candidates=cfg.max_candidates,
                          edge_floor=cfg.edge_weight_floor, include_archived=False)
    cands = featurize(state.graph, cfg, query=QUERY, seeds=lookup, reach=reach,
                      query_embedding=Embedding.of(embedding) if embedding else None,
                      resolver=lambda ids: resolve_payloads(state, ids), personal=None,
                      success=None, tenant_id=None, sub_tenant_id=None, scope=scope)
    return rank(cands, 100)


class TestExampleA:
    def test_a1_scoped_bfs(self):
        out = search(fixture(), request(), now=T0)
        assert ranked(out) == [("m1", 0.8367142857142857), ("m2", 0.7284285714285714),
                               ("m3", 0.5113729533264617), ("m4", 0.4610446888661849)]
        m4 = out.results[3]
        assert (m4.graph, m4.lexical, m4.was_seed) == (0.48, 1 / 7, False)
        assert [(e.src, e.dst, e.type, e.weight) for e in out.subgraph] == [
            ("m1", "m2", "REPLY_TO", 1.0), ("m1", "m2", "TEMPORAL_NEXT", 0.6),
            ("m1", "m4", "DOCUMENT_LINK", 0.3), ("m2", "m3", "TOPIC_SIMILAR", 0.8),
            ("m3", "m4", "TEMPORAL_NEXT", 0.6)]

    def test_a2_unscoped_bob_first(self):
        results = direct_bfs(fixture(), [Seed("m2", 0.74), Seed("m1", 0.82)], {})
        top = results[0]
        assert (top.id, top.score) == ("m6", approx6(0.883298, abs=1e-6))
        assert (top.dense, top.lexical, top.graph) == (approx6(0.998205, abs=1e-6), 3 / 7, 0.9)

    def test_a3_no_query_embedding(self):
        out = search(fixture(), request(query_embedding=None), now=T0)
        scores = dict(ranked(out))
        assert scores["m3"] == approx6(0.24, abs=1e-6)
        assert scores["m4"] == approx6(0.165429, abs=1e-6)

    def test_a4_max_candidates_3(self):
        state = fixture(with_retrieval(NO_DECAY, max_candidates=3))
        out = search(state, request(), now=T0)
        assert [(i, round(s, 6)) for i, s in ranked(out)] == [
            ("m1", 0.836714), ("m2", 0.728429), ("m4", 0.407045)]

    def test_a5_limit_zero_returns_one(self):
        assert [c.id for c in search(fixture(), request(limit=0), now=T0).results] == ["m1"]

    def test_a6_operator_filter_keeps_only_seeds(self):
        # A6 is a direct retriever call: every non-seed is unverifiable under the scope.
        from msprlab.engine.scope import scope_from_filters
        scope = scope_from_filters({"user_id": {"$in": ["alice"]}})
        results = direct_bfs(fixture(), [Seed("m2", 0.74), Seed("m1", 0.82)], scope)
        assert sorted(c.id for c in results) == ["m1", "m2"]

    def test_operator_filter_raises_in_memory_search(self):
        # Not in MSPR.md: 0.1.4's search md5-hashes owner filters for telemetry first.
        with pytest.raises(SearchError, match="AttributeError: 'dict' object has no"):
            search(fixture(), request(user_id=None, agent_id="agent",
                                      filters={"user_id": {"$in": ["alice"]}}), now=T0)


def b1_state(config: EngineConfig | None = None):
    state = fixture(config or EngineConfig())
    state.graph.nodes["m2"].last_accessed_at = T0 + timedelta(days=9)
    return state


class TestExampleB:
    def test_b1_decay_then_bfs(self):
        state = b1_state()
        report = tick_decay(state.graph, state.config.decay, T0 + timedelta(days=10))
        assert (report.decayed, report.pruned, report.archived) == (7, 0, 0)
        weights = {(e.src, e.dst, e.type): e.weight for e in state.graph.edges()}
        assert weights[("m1", "m2", EdgeType.REPLY_TO)] == approx6(0.793701, abs=1e-6)
        assert weights[("m5", "m1", EdgeType.TOPIC_SIMILAR)] == approx6(0.063496, abs=1e-6)
        relevance = {k: round(n.relevance, 6) for k, n in state.graph.nodes.items()}
        assert relevance == {"m1": 0.793701, "m2": 0.830392, "m3": 0.666708,
                             "m4": 0.539716, "m5": 0.209537, "m6": 0.730204}
        # The tick just ran, so the read path does not tick again within the hour.
        out = search(state, request(), now=T0 + timedelta(days=10))
        assert [(i, round(s, 6)) for i, s in ranked(out)] == [
            ("m1", 0.664101), ("m2", 0.604882), ("m3", 0.307927), ("m4", 0.220074)]

    def test_b2_floor_survives_archiving(self):
        state = fixture(EngineConfig())
        state.graph.nodes["m1"].relevance_floor = 0.35
        report = tick_decay(state.graph, state.config.decay, T0 + timedelta(days=150))
        assert (report.decayed, report.pruned, report.archived) == (0, 7, 5)
        m1 = state.graph.nodes["m1"]
        assert (m1.relevance, m1.archived) == (0.35, False)
        out = search(state, request(), now=T0 + timedelta(days=150))
        assert [(i, round(s, 6)) for i, s in ranked(out)] == [("m1", 0.29285), ("m2", 0.004553)]
        assert out.subgraph == []

    def test_b3_isolated_node_relevance(self):
        state = fixture(EngineConfig())
        for edge in list(state.graph.edges()):
            state.graph.remove_edge(edge)
        tick_decay(state.graph, state.config.decay, T0 + timedelta(seconds=1))
        assert {round(n.relevance, 6) for n in state.graph.nodes.values()} == {0.2}


MSPR_ALL = MsprConfig(enabled=True, feedback=FeedbackConfig(enabled=True),
                      success=SuccessConfig(enabled=True),
                      frequency=replace(MsprConfig().frequency, enabled=True),
                      intent=replace(MsprConfig().intent, enabled=True))


def example_c_state(delta=0.3, epsilon=0.1, zeta=0.2, mspr=MSPR_ALL):
    config = replace(EngineConfig(), mspr=mspr)
    config = with_retrieval(config, delta_personal=delta, epsilon_frequency=epsilon,
                            zeta_success=zeta)
    state = b1_state(config)
    now = T0 + timedelta(days=10)
    tick_decay(state.graph, config.decay, now)
    return state, now


class TestExampleC:
    query = "What is Alice's seat preference?"

    def test_c1_full_mspr(self):
        state, now = example_c_state()
        fb = [record_feedback(state, "m2", helpful=True, user_id="alice", query=self.query,
                              now=now) for _ in range(3)]
        assert [f.delta_applied for f in fb] == [0.15, 0.15, 0.15]
        assert [round(f.new_relevance, 6) for f in fb] == [0.980392, 1.0, 1.0]
        assert state.graph.nodes["m2"].relevance_floor == 1.0
        bob = record_feedback(state, "m1", helpful=False, user_id="bob", query=self.query,
                              now=now)
        assert (bob.delta_applied, round(bob.new_relevance, 6)) == (-0.1, 0.693701)
        m3 = record_feedback(state, "m3", helpful=True, user_id="bob", query="tokyo hotel",
                             now=now)
        assert round(m3.new_relevance, 6) == 0.816708
        assert state.graph.nodes["m3"].relevance_floor == m3.new_relevance
        assert record_feedback(state, "nope", helpful=True, now=now) is None
        for memory_id, count in {"m1": 9, "m2": 3, "m4": 1, "m6": 20}.items():
            state.graph.nodes[memory_id].access_count = count
        state.graph.changed()
        out = search(state, request(query=self.query, limit=3), now=now)
        assert out.intent is not None and out.intent.label == "FACTUAL"
        assert ranked(out) == [("m2", 1.0128662264930526), ("m1", 0.6118212873950437),
                               ("m3", 0.41191486848794956)]
        m2, m1, m3 = out.results
        assert (round(m2.frequency, 6), round(m2.personal, 6), m2.success) == (
            0.45534, 0.148885, 1.0)
        assert (round(m1.frequency, 6), round(m1.personal, 6), m1.success) == (
            0.756304, -0.033321, 0.0)
        assert (m3.frequency, round(m3.personal, 6)) == (0.0, 0.049958)
        counts = {k: state.graph.nodes[k].access_count for k in ("m1", "m2", "m3")}
        assert counts == {"m1": 10, "m2": 4, "m3": 1}
        assert {k: out.telemetry[k] for k in ("seed_count", "result_count", "feedback_hits",
                                              "success_hits", "frequency_hits")} == {
            "seed_count": 2, "result_count": 3, "feedback_hits": 3, "success_hits": 1,
            "frequency_hits": 2}

    def test_c2_zero_weights_equal_cgl_only(self):
        mspr = replace(MSPR_ALL, intent=replace(MSPR_ALL.intent, enabled=False))
        state, now = example_c_state(0.0, 0.0, 0.0, mspr)
        out = search(state, request(query=self.query), now=now)
        baseline_state, _ = example_c_state(0.0, 0.0, 0.0, MsprConfig())
        baseline = search(baseline_state, request(query=self.query), now=now)
        assert ranked(out) == ranked(baseline)
        assert ranked(out)[0] == ("m1", 0.6357541213132639)
        assert [(i, round(s, 6)) for i, s in ranked(out)][1:] == [
            ("m2", 0.607847), ("m3", 0.324594), ("m4", 0.235495)]
        assert all(state.graph.nodes[k].access_count == 1 for k in ("m1", "m2", "m3", "m4"))

    def test_c3_intent_reweights(self):
        state, now = example_c_state(0.0, 0.0, 0.0)
        out = search(state, request(query=self.query), now=now)
        assert [(i, round(s, 6)) for i, s in ranked(out)] == [
            ("m1", 0.647924), ("m2", 0.600097), ("m3", 0.326269), ("m4", 0.266174)]


class TestExampleD:
    ppr = with_retrieval(NO_DECAY, algorithm="ppr")

    def test_scoped_ppr(self):
        out = search(fixture(self.ppr), request(), now=T0)
        assert [(i, round(s, 6)) for i, s in ranked(out)] == [
            ("m1", 0.836714), ("m2", 0.728429), ("m4", 0.393236), ("m3", 0.347695)]
        assert [round(c.graph, 6) for c in out.results[2:]] == [0.25397, 0.254407]

    def test_disconnected_island_gets_residual_mass(self):
        state = fixture(self.ppr)
        add_memory(state, "x1", "island one", [1.0, 0.2, 0.0], "alice")
        add_memory(state, "x2", "island two", None, "alice")
        add_edge(state, "x1", "x2", EdgeType.TOPIC_SIMILAR, 0.9)
        add_edge(state, "x2", "x1", EdgeType.TOPIC_SIMILAR, 0.9)
        out = search(state, request(), now=T0)
        by_id = {c.id: c for c in out.results}
        assert by_id["x1"].graph == approx6(8.249e-06, rel=1e-3)
        assert [c.id for c in out.results][:3] == ["m1", "m2", "x1"]
        assert round(by_id["x1"].score, 6) == 0.550002
        assert by_id["x2"].score == approx6(2e-06, abs=1e-6)

    def test_non_convergence_falls_back_to_seeds_and_says_so(self):
        state = fixture(with_retrieval(self.ppr, ppr_max_iter=5, ppr_tolerance=1e-300))
        out = search(state, request(), now=T0)
        assert [c.id for c in out.results] == ["m1", "m2"]
        assert out.notes and "ranking seeds only" in out.notes[0]


class TestExampleF:
    def test_feedback_arithmetic(self):
        config = replace(NO_DECAY, mspr=MsprConfig(
            enabled=True, feedback=FeedbackConfig(enabled=True),
            success=SuccessConfig(enabled=True)))
        state = fixture(config)
        state.graph.nodes["m4"].relevance = 0.539716
        steps = [("alice", True)] * 5 + [("carol", True), ("alice", False), ("alice", True),
                                         (None, True)]
        got = []
        for user, helpful in steps:
            r = record_feedback(state, "m4", helpful=helpful, user_id=user, query="q",
                                now=T0)
            got.append((r.delta_applied, None if r.new_relevance is None
                        else round(r.new_relevance, 6),
                        round(state.graph.nodes["m4"].relevance_floor, 6)))
        assert got == [(0.15, 0.689716, 0.689716), (0.15, 0.839716, 0.839716),
                       (0.15, 0.989716, 0.989716), (0.15, 1.0, 1.0), (0.0, None, 1.0),
                       (0.15, 1.0, 1.0), (-0.1, 0.9, 1.0), (0.09999999999999998, 1.0, 1.0),
                       (0.0, None, 1.0)]
        assert state.feedback.net("m4") == pytest.approx(0.75)
        assert state.success.hit_rate(
            state.feedback.rows[0].query_hash, "m4", user_id="alice", min_samples=3) == (
            pytest.approx(6 / 7))
