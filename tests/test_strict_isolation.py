"""`Corrections(strict_role_isolation=True)`: no search returns a memory the policy denies.

Judged on the memory's full stored payload (as a vector hit would carry it), so graph
neighbours, whose resolved payloads carry no tenant or role (quirk 13), cannot slip through,
and denied seeds cannot come back as neighbours (quirk 12, Example E).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msprlab.engine import Corrections, EngineConfig, SearchRequest, Seed, new_state, search
from msprlab.engine.config import MsprConfig, RetrievalConfig, RoleConfig
from msprlab.engine.graph import EdgeType
from msprlab.engine.roles import (
    CompositePolicy,
    RolePolicy,
    TenantIsolationPolicy,
    policy_from_name,
    read_field,
    role_context_from_filters,
)
from msprlab.engine.search import effective_filters, seed_payload
from msprlab.engine.state import EngineState

from spec_fixture import NO_DECAY, T0, add_edge, add_memory, fixture, ranked, request

TENANTS = ("acme", "globex")
ROLES = ("analyst", "admin", "user", "a")
tenant = st.none() | st.sampled_from(TENANTS)
role = st.none() | st.sampled_from(ROLES)
allowed_roles = st.none() | st.lists(st.sampled_from(ROLES), max_size=2) | st.sampled_from(
    ["admin", "analyst"])  # a string is read character by character (quirk 16)


def role_config(hard_filter: bool, algorithm: str = "bfs") -> EngineConfig:
    return replace(NO_DECAY, retrieval=RetrievalConfig(algorithm=algorithm),
                   mspr=MsprConfig(enabled=True, role=RoleConfig(enabled=True,
                                                                 hard_filter=hard_filter)),
                   corrections=Corrections(strict_role_isolation=True))


@st.composite
def tags(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if (t := draw(tenant)) is not None:
        out["tenant_id"] = t
    if (r := draw(role)) is not None:
        out["role"] = r
    if (a := draw(allowed_roles)) is not None:
        out["allowed_roles"] = a
    return out


@st.composite
def filters(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    nested: dict[str, Any] = {}
    for key, values in (("tenant_id", tenant), ("role", role)):
        where = draw(st.sampled_from(["absent", "flat", "nested"]))
        value = draw(values)
        if where == "flat":
            out[key] = value
        elif where == "nested":
            nested[key] = value
    if nested or draw(st.booleans()):
        out["metadata"] = nested
    return out


@st.composite
def cases(draw: st.DrawFn) -> tuple[EngineState, list[SearchRequest]]:
    hard = draw(st.booleans())
    policy = policy_from_name(draw(st.sampled_from(["composite", "tenant", "role_scope"])),
                              treat_global_as_visible=draw(st.booleans()),
                              treat_unrestricted_as_visible=draw(st.booleans()))
    config = role_config(hard, draw(st.sampled_from(["bfs", "ppr"])))
    state = new_state(config, policy=policy)
    n = draw(st.integers(2, 12))
    ids = [f"m{i}" for i in range(n)]
    for memory_id in ids:
        add_memory(state, memory_id, f"memory {memory_id} about seats", draw(
            st.none() | st.lists(st.floats(-1, 1), min_size=3, max_size=3)),
            draw(st.sampled_from(["alice", "alice", "bob"])), extra=draw(tags()))
    pick = st.sampled_from(ids)
    for src, dst, kind, weight in draw(st.lists(st.tuples(
            pick, pick, st.sampled_from(list(EdgeType)), st.floats(0.0, 1.0)), max_size=3 * n)):
        add_edge(state, src, dst, kind, weight)
    seed = st.builds(Seed, pick, st.none() | st.floats(0.0, 1.0))
    requests = [SearchRequest(query="seats", seeds=draw(st.lists(seed, min_size=1, max_size=6)),
                              query_embedding=[1.0, 0.2, 0.0], user_id="alice",
                              filters=draw(filters()), limit=draw(st.integers(0, 20)))
                for _ in range(draw(st.integers(1, 3)))]
    return state, requests


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_no_result_is_denied_on_its_full_payload(case):
    state, requests = case
    assert state.policy is not None
    for req in requests:
        ctx = role_context_from_filters(user_id=req.user_id, agent_id=req.agent_id,
                                        run_id=req.run_id, filters=effective_filters(req))
        out = search(state, req, now=T0)
        for c in [*out.results, *out.candidates]:
            full = seed_payload(c.id, state.payloads[c.id], None)
            assert state.policy.allow(full, ctx), (c.id, full, ctx)


# --- Example E (MSPR.md section 19) ----------------------------------------------------
E_FILTERS = {"metadata": {"tenant_id": "acme", "role": "analyst"}}
E_SEEDS = [Seed("m1", 0.82), Seed("m2", 0.74), Seed("m5", 0.60)]


def example_e(corrections: Corrections, *, hard_filter: bool = True) -> EngineState:
    config = replace(NO_DECAY, mspr=MsprConfig(
        enabled=True, role=RoleConfig(enabled=True, hard_filter=hard_filter)),
        corrections=corrections)
    state = fixture(config, policy=policy_from_name("composite"))
    state.payloads["m1"].update(tenant_id="acme", allowed_roles=["analyst", "admin"])
    state.payloads["m2"].update(tenant_id="globex")
    state.payloads["m5"].update(role="user")
    return state


def test_example_e_compat_leaks_the_denied_seed_back_as_a_neighbour():
    out = search(example_e(Corrections()), request(seeds=E_SEEDS, filters=E_FILTERS), now=T0)
    assert [(i, round(s, 6)) for i, s in ranked(out)] == [
        ("m1", 0.836714), ("m2", 0.766851), ("m3", 0.511373), ("m4", 0.407045)]
    m2 = out.results[1]
    assert (m2.was_seed, m2.graph, round(m2.dense, 6)) == (False, 1.0, 0.809858)


def test_example_e_strict_isolation_drops_the_denied_seed():
    strict = Corrections(strict_role_isolation=True)
    out = search(example_e(strict), request(seeds=E_SEEDS, filters=E_FILTERS), now=T0)
    assert "m2" not in {c.id for c in out.candidates}
    # m3 and m4 carry no tenant or role, so they stay visible; scores are not touched.
    assert [(i, round(s, 6)) for i, s in ranked(out)] == [
        ("m1", 0.836714), ("m3", 0.511373), ("m4", 0.407045)]


def test_example_e_strict_isolation_in_soft_mode_removes_rather_than_zeroes():
    strict = Corrections(strict_role_isolation=True)
    out = search(example_e(strict, hard_filter=False),
                 request(seeds=E_SEEDS, filters=E_FILTERS), now=T0)
    assert [(i, round(s, 6)) for i, s in ranked(out)] == [
        ("m1", 0.836714), ("m3", 0.511373), ("m4", 0.461045)]


def test_example_e_soft_keeps_denied_items_at_zero_in_their_slots():
    out = search(example_e(Corrections(), hard_filter=False),
                 request(seeds=E_SEEDS, filters=E_FILTERS), now=T0)
    assert [(i, round(s, 6)) for i, s in ranked(out)] == [
        ("m1", 0.836714), ("m3", 0.511373), ("m4", 0.461045), ("m2", 0.0), ("m5", 0.0)]


class HalfForGlobal(RolePolicy):
    """A user-written policy: memories without a tenant count half."""

    def allow(self, candidate, ctx):
        return True

    def reweight(self, candidate, ctx):
        return 0.5 if read_field(candidate, "tenant_id") is None else 1.0


def test_example_e_soft_with_tenant_isolation_and_a_custom_reweight():
    state = example_e(Corrections(), hard_filter=False)
    state.policy = CompositePolicy([TenantIsolationPolicy(), HalfForGlobal()])
    out = search(state, request(seeds=E_SEEDS, filters=E_FILTERS), now=T0)
    assert [(i, round(s, 6)) for i, s in ranked(out)] == [
        ("m1", 0.836714), ("m5", 0.325714), ("m3", 0.255686), ("m4", 0.230522), ("m2", 0.0)]
