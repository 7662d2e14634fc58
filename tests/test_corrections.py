"""One test per `Corrections` switch: what it changes against compat mode (MSPR.md 18)."""

from __future__ import annotations

import math
from dataclasses import fields, replace

import pytest
from test_strict_isolation import E_FILTERS, E_SEEDS, example_e

from msprlab.engine import (
    Corrections,
    EngineConfig,
    SearchRequest,
    Seed,
    backfill_mspr,
    new_state,
    record_feedback,
    search,
)
from msprlab.engine.config import (
    FeedbackConfig,
    IntentConfig,
    MsprConfig,
    RetrievalConfig,
    SuccessConfig,
)
from msprlab.engine.graph import EdgeType
from msprlab.engine.state import EngineState

from spec_fixture import NO_DECAY, T0, add_edge, add_memory, fixture, request

COMPAT = Corrections()


def test_every_correction_is_off_by_default_and_covered_here():
    assert all(getattr(COMPAT, f.name) is False for f in fields(Corrections))
    covered = {"personal_boost_user_scoped", "strict_role_isolation", "apply_edge_type_priors",
               "idempotent_backfill", "ppr_undirected"}
    assert {f.name for f in fields(Corrections)} == covered


# --- personal_boost_user_scoped (quirk 1) ----------------------------------------------
def feedback_state(corrections: Corrections) -> EngineState:
    config = replace(NO_DECAY, corrections=corrections,
                     retrieval=RetrievalConfig(delta_personal=0.3),
                     mspr=MsprConfig(enabled=True, feedback=FeedbackConfig(enabled=True)))
    state = fixture(config)
    record_feedback(state, "m1", helpful=False, user_id="bob", query="q", now=T0)
    return state


@pytest.mark.parametrize(("corrections", "personal"), [
    (COMPAT, math.tanh(-0.1 / 3)),                        # bob's verdict reaches alice
    (Corrections(personal_boost_user_scoped=True), 0.0),  # only alice's own verdicts count
])
def test_personal_boost_user_scoped(corrections, personal):
    out = search(feedback_state(corrections), request(), now=T0)
    m1 = next(c for c in out.results if c.id == "m1")
    assert m1.personal == personal


def test_personal_boost_user_scoped_still_applies_the_users_own_verdicts():
    state = feedback_state(Corrections(personal_boost_user_scoped=True))
    record_feedback(state, "m1", helpful=True, user_id="alice", query="q", now=T0)
    m1 = next(c for c in search(state, request(), now=T0).results if c.id == "m1")
    assert m1.personal == math.tanh(0.15 / 3)


# --- strict_role_isolation (quirks 12 and 13; the property is in test_strict_isolation) -
@pytest.mark.parametrize(("corrections", "ids"), [
    (COMPAT, ["m1", "m2", "m3", "m4"]),                        # denied seed m2 leaks back
    (Corrections(strict_role_isolation=True), ["m1", "m3", "m4"]),
])
def test_strict_role_isolation(corrections, ids):
    out = search(example_e(corrections), request(seeds=E_SEEDS, filters=E_FILTERS), now=T0)
    assert [c.id for c in out.results] == ids


# --- apply_edge_type_priors (quirk 9) --------------------------------------------------
CONVERSATIONAL = "What did we discuss yesterday?"


def priors_state(corrections: Corrections) -> EngineState:
    config = replace(NO_DECAY, corrections=corrections,
                     mspr=MsprConfig(enabled=True, intent=IntentConfig(enabled=True)))
    state = new_state(config)
    for memory_id in ("s", "r", "d"):
        add_memory(state, memory_id, f"memory {memory_id}", None, "alice")
    add_edge(state, "s", "r", EdgeType.REPLY_TO, 0.7)
    add_edge(state, "s", "d", EdgeType.DOCUMENT_LINK, 0.7)
    return state


@pytest.mark.parametrize(("corrections", "reply_graph"), [
    (COMPAT, 0.7),
    (Corrections(apply_edge_type_priors=True), 0.875),   # 0.7 × 1.25 for CONVERSATIONAL
])
def test_apply_edge_type_priors(corrections, reply_graph):
    req = SearchRequest(query=CONVERSATIONAL, seeds=[Seed("s", 0.9)], user_id="alice")
    out = search(priors_state(corrections), req, now=T0)
    assert out.intent is not None and out.intent.label == "CONVERSATIONAL"
    graph = {c.id: c.graph for c in out.results}
    assert graph == {"s": 1.0, "r": reply_graph, "d": 0.7}  # DOCUMENT_LINK has no prior here


def test_edge_type_priors_are_clamped_to_one():
    state = priors_state(Corrections(apply_edge_type_priors=True))
    add_edge(state, "s", "r", EdgeType.REPLY_TO, 0.9)   # 0.9 × 1.25 = 1.125 -> 1.0
    req = SearchRequest(query=CONVERSATIONAL, seeds=[Seed("s", 0.9)], user_id="alice")
    graph = {c.id: c.graph for c in search(state, req, now=T0).results}
    assert graph["r"] == 1.0


# --- idempotent_backfill (quirk 7) -----------------------------------------------------
def backfill_counts(corrections: Corrections) -> list[int]:
    config = replace(NO_DECAY, corrections=corrections, mspr=MsprConfig(
        enabled=True, feedback=FeedbackConfig(enabled=True), success=SuccessConfig(enabled=True)))
    state = fixture(config)
    for user, helpful in (("alice", True), ("bob", False), ("alice", True)):
        record_feedback(state, "m4", helpful=helpful, user_id=user, query="q", now=T0)
    record_feedback(state, "m4", helpful=True, user_id="carol", query=None, now=T0)  # no hash
    assert state.success is not None
    counts = [len(state.success.rows)]
    state.success.reset(None)  # as if the verdicts came before success tracking was on
    counts.append(len(state.success.rows))
    for _ in range(2):
        report = backfill_mspr(state)
        assert report.feedback_rows == 4
        counts.append(len(state.success.rows))
    return counts


@pytest.mark.parametrize(("corrections", "counts"), [
    (COMPAT, [3, 0, 3, 6]),                               # the second run duplicates
    (Corrections(idempotent_backfill=True), [3, 0, 3, 3]),
])
def test_idempotent_backfill(corrections, counts):
    assert backfill_counts(corrections) == counts


def test_idempotent_backfill_skips_rows_record_feedback_already_linked():
    config = replace(NO_DECAY, corrections=Corrections(idempotent_backfill=True),
                     mspr=MsprConfig(enabled=True, feedback=FeedbackConfig(enabled=True),
                                     success=SuccessConfig(enabled=True)))
    state = fixture(config)
    record_feedback(state, "m4", helpful=True, user_id="alice", query="q", now=T0)
    assert backfill_mspr(state).success_rows == 0


# --- ppr_undirected (quirk 27) ---------------------------------------------------------
def ppr_state(corrections: Corrections) -> EngineState:
    config = replace(EngineConfig(decay=NO_DECAY.decay), corrections=corrections,
                     retrieval=RetrievalConfig(algorithm="ppr"))
    state = new_state(config)
    for memory_id in ("s", "x"):
        add_memory(state, memory_id, f"memory {memory_id}", None, "alice")
    add_edge(state, "x", "s", EdgeType.REPLY_TO, 0.9)  # x reaches s; s does not reach x
    return state


def test_ppr_undirected():
    req = SearchRequest(query="q", seeds=[Seed("s", 0.9)], user_id="alice")
    compat = search(ppr_state(COMPAT), req, now=T0)
    assert [c.id for c in compat.results] == ["s"]
    undirected = search(ppr_state(Corrections(ppr_undirected=True)), req, now=T0)
    assert [c.id for c in undirected.results] == ["s", "x"]
    assert undirected.results[1].graph > 0.0
