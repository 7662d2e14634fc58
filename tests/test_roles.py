"""Role and tenant policies (MSPR.md section 12, Example E)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, get_args

import pytest

from msprlab.engine.config import PolicyName
from msprlab.engine.roles import (
    POLICY_NAMES,
    AllowAllPolicy,
    CompositePolicy,
    RoleContext,
    RolePolicy,
    RoleScopePolicy,
    TenantIsolationPolicy,
    apply_role_policy,
    policy_from_name,
    read_field,
    role_context_from_filters,
)

# --- Example E entries ------------------------------------------------------------------
# Context: alice, tenant acme, role analyst. Scores are the BFS ones of Example A1
# (default weights, relevance 1.0); m5 is a seed with dense 0.6, lexical 1/7, reach 1.0.
ACME_ANALYST = RoleContext(user_id="alice", tenant_id="acme", role="analyst")

M5_SCORE = (0.55 * 0.6 + 0.15 * (1 / 7) + 0.30 * 1.0) * 1.0


def _entry(memory_id: str, score: float, seed: bool, **payload: Any) -> dict[str, Any]:
    return {"id": memory_id, "memory": f"text of {memory_id}", "score": score,
            "user_id": "alice", **payload,
            "context_graph": {"graph": 1.0 if seed else 0.5, "was_seed": seed}}


M1 = _entry("m1", 0.8367142857142857, True,
            metadata={"tenant_id": "acme", "allowed_roles": ["analyst", "admin"]})
M2 = _entry("m2", 0.7284285714285714, True, metadata={"tenant_id": "globex"})
M5 = _entry("m5", M5_SCORE, True, role="user")
# Resolved graph neighbours carry no tenant, role or metadata.
M3 = _entry("m3", 0.5113729533264617, False)
M4 = _entry("m4", 0.4610446888661849, False)
RESULTS = [M1, M2, M5, M3, M4]       # the retriever's order, before the soft pass

EXAMPLE_E_POLICY = CompositePolicy([TenantIsolationPolicy(), RoleScopePolicy()])


def soft_ranking(entries: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """The engine's re-sort after the soft pass: stable, descending by score."""
    ranked = sorted(entries, key=lambda e: float(e.get("score") or 0.0), reverse=True)
    return [(e["id"], round(e["score"], 6)) for e in ranked]


def test_example_e_filters_give_the_role_context() -> None:
    ctx = role_context_from_filters(
        user_id="alice", agent_id=None, run_id=None,
        filters={"user_id": "alice", "metadata": {"tenant_id": "acme", "role": "analyst"}})
    assert ctx == ACME_ANALYST


def test_example_e_hard_keeps_only_m1_among_the_seeds() -> None:
    seeds = [M1, M2, M5]
    kept = apply_role_policy(seeds, EXAMPLE_E_POLICY, ACME_ANALYST, hard_filter=True)
    assert kept == [M1]


def test_example_e_soft_zeroes_denied_entries_in_place() -> None:
    out = apply_role_policy(RESULTS, EXAMPLE_E_POLICY, ACME_ANALYST, hard_filter=False)
    assert [e["id"] for e in out] == ["m1", "m2", "m5", "m3", "m4"]
    assert soft_ranking(out) == [("m1", 0.836714), ("m3", 0.511373), ("m4", 0.461045),
                                 ("m2", 0.0), ("m5", 0.0)]


class HalfForGlobal(RolePolicy):
    """A user policy: allows everything, halves memories that carry no tenant."""

    def allow(self, candidate: Mapping[str, Any], ctx: RoleContext) -> bool:
        return True

    def reweight(self, candidate: Mapping[str, Any], ctx: RoleContext) -> float:
        return 0.5 if read_field(candidate, "tenant_id") is None else 1.0


def test_example_e_soft_with_a_custom_reweight() -> None:
    policy = CompositePolicy([TenantIsolationPolicy(), HalfForGlobal()])
    out = apply_role_policy(RESULTS, policy, ACME_ANALYST, hard_filter=False)
    assert soft_ranking(out) == [("m1", 0.836714), ("m5", 0.325714), ("m3", 0.255686),
                                 ("m4", 0.230522), ("m2", 0.0)]
    assert out[2]["score"] == M5_SCORE * 0.5


class TenantWithHalfForGlobal(TenantIsolationPolicy):
    """The same custom reweight, written as a subclass of a bundled policy."""

    def reweight(self, candidate: Mapping[str, Any], ctx: RoleContext) -> float:
        return 0.5 if read_field(candidate, "tenant_id") is None else 1.0


def test_custom_subclass_of_a_bundled_policy() -> None:
    out = apply_role_policy(RESULTS, TenantWithHalfForGlobal(), ACME_ANALYST,
                            hard_filter=False)
    assert [e["score"] for e in out] == [M1["score"], 0.0, M5_SCORE * 0.5,
                                         M3["score"] * 0.5, M4["score"] * 0.5]


# --- single checks of Example E ---------------------------------------------------------

def test_allowed_roles_string_is_read_character_by_character() -> None:
    policy = RoleScopePolicy()
    memory = {"id": "x", "allowed_roles": "admin"}
    assert policy.allow(memory, RoleContext(role="a")) is True
    assert policy.allow(memory, RoleContext(role="admin")) is False


def test_tagged_memory_is_denied_to_a_context_without_tenant() -> None:
    assert TenantIsolationPolicy().allow({"tenant_id": "acme"}, RoleContext()) is False


def test_flat_tenant_wins_over_nested() -> None:
    memory = {"tenant_id": "acme", "metadata": {"tenant_id": "globex"}}
    assert read_field(memory, "tenant_id") == "acme"
    assert TenantIsolationPolicy().allow(memory, RoleContext(tenant_id="acme")) is True
    assert TenantIsolationPolicy().allow(memory, RoleContext(tenant_id="globex")) is False


# --- field lookup and context -----------------------------------------------------------

@pytest.mark.parametrize(("candidate", "expected"), [
    ({"tenant_id": "acme"}, "acme"),
    ({"tenant_id": "acme", "metadata": {"tenant_id": "globex"}}, "acme"),
    ({"tenant_id": None, "metadata": {"tenant_id": "globex"}}, "globex"),
    ({"tenant_id": "", "metadata": {"tenant_id": "globex"}}, ""),   # falsy is still present
    ({"tenant_id": 0}, 0),
    ({"metadata": {"tenant_id": None}}, None),
    ({"metadata": "tenant_id"}, None),                              # metadata must be a dict
    ({"metadata": None}, None),
    ({}, None),
])
def test_read_field(candidate: dict[str, Any], expected: object) -> None:
    assert read_field(candidate, "tenant_id") == expected


@pytest.mark.parametrize(("filters", "tenant", "role"), [
    (None, None, None),
    ({}, None, None),
    ({"tenant_id": "acme", "role": "admin"}, "acme", "admin"),
    ({"tenant_id": "acme", "metadata": {"tenant_id": "globex", "role": "x"}}, "acme", "x"),
    ({"role": "admin", "metadata": {"tenant_id": "globex", "role": "x"}}, "globex", "admin"),
    # When either is None both are refilled with `value or nested`, so a falsy top-level
    # value is replaced too, even by None.
    ({"tenant_id": "", "metadata": {"tenant_id": "globex"}}, "globex", None),
    ({"tenant_id": 0, "metadata": {}}, None, None),
    # Both set: the nested dict is not consulted, falsy or not.
    ({"tenant_id": "", "role": "", "metadata": {"tenant_id": "g", "role": "r"}}, "", ""),
    ({"metadata": "acme"}, None, None),
    ({"metadata": {"tenant_id": 7, "role": ["a"]}}, 7, ["a"]),
])
def test_role_context_from_filters(filters: dict[str, Any] | None, tenant: object,
                                   role: object) -> None:
    ctx = role_context_from_filters(user_id="u", agent_id="ag", run_id=None, filters=filters)
    assert ctx == RoleContext(user_id="u", agent_id="ag", run_id=None, tenant_id=tenant,
                              role=role, sub_tenant_id=None)


# --- bundled policies -------------------------------------------------------------------

@pytest.mark.parametrize(("memory", "ctx_tenant", "global_visible", "allowed"), [
    ({}, "acme", True, True),
    ({}, "acme", False, False),
    ({"tenant_id": None}, None, True, True),
    ({"metadata": {"tenant_id": "acme"}}, "acme", True, True),
    ({"metadata": {"tenant_id": "acme"}}, "globex", True, False),
    ({"tenant_id": "acme"}, None, True, False),
    ({"tenant_id": 1}, "1", True, False),     # plain equality, no str()
    ({"tenant_id": ""}, "", False, True),     # "" is a tenant, not "global"
])
def test_tenant_isolation(memory: dict[str, Any], ctx_tenant: object, global_visible: bool,
                          allowed: bool) -> None:
    policy = TenantIsolationPolicy(treat_global_as_visible=global_visible)
    assert policy.allow(memory, RoleContext(tenant_id=ctx_tenant)) is allowed
    assert policy.reweight(memory, RoleContext(tenant_id=ctx_tenant)) == 1.0


@pytest.mark.parametrize(("memory", "ctx_role", "unrestricted_visible", "allowed"), [
    ({}, "analyst", True, True),
    ({}, None, True, True),
    ({}, "analyst", False, False),
    ({"allowed_roles": ["analyst", "admin"]}, "analyst", True, True),
    ({"metadata": {"allowed_roles": ["analyst", "admin"]}}, "guest", True, False),
    ({"allowed_roles": ["analyst"]}, None, True, False),
    ({"allowed_roles": []}, "analyst", True, False),
    ({"allowed_roles": [1, 2]}, 1, True, True),                # compared as strings
    ({"allowed_roles": 5}, "5", True, True),                   # not iterable -> {"5"}
    ({"allowed_roles": {"admin": 1}}, "admin", True, True),    # a dict iterates its keys
    ({"allowed_roles": ["admin"], "role": "analyst"}, "analyst", True, False),  # list wins
    ({"role": "user"}, "analyst", True, False),
    ({"role": "user"}, "user", True, True),
    ({"role": "user"}, None, True, False),
    ({"metadata": {"role": 3}}, "3", True, True),
    ({"role": None, "metadata": {"role": "user"}}, "user", False, True),
])
def test_role_scope(memory: dict[str, Any], ctx_role: object, unrestricted_visible: bool,
                    allowed: bool) -> None:
    policy = RoleScopePolicy(treat_unrestricted_as_visible=unrestricted_visible)
    assert policy.allow(memory, RoleContext(role=ctx_role)) is allowed


def test_policies_read_their_own_field_names() -> None:
    memory = {"org": "acme", "grants": ["ops"], "tenant_id": "globex", "role": "x"}
    assert TenantIsolationPolicy(tenant_field="org").allow(memory, RoleContext(tenant_id="acme"))
    scope = RoleScopePolicy(allowed_roles_field="grants")
    assert scope.allow(memory, RoleContext(role="ops"))
    assert not scope.allow(memory, RoleContext(role="x"))


def test_allow_all_and_the_abstract_base() -> None:
    assert AllowAllPolicy().allow({"tenant_id": "x"}, RoleContext()) is True
    assert AllowAllPolicy().reweight({}, RoleContext()) == 1.0
    with pytest.raises(TypeError, match="abstract"):
        RolePolicy()  # type: ignore[abstract]


# --- composite --------------------------------------------------------------------------

class Fixed(RolePolicy):
    """Answers fixed values (or raises them) and logs each call to a shared list."""

    def __init__(self, name: str, log: list[str], allow: object = True,
                 weight: object = 1.0) -> None:
        self.name, self.log, self._allow, self._weight = name, log, allow, weight

    def allow(self, candidate: Mapping[str, Any], ctx: RoleContext) -> bool:
        self.log.append(self.name)
        if isinstance(self._allow, Exception):
            raise self._allow
        return self._allow  # type: ignore[return-value]

    def reweight(self, candidate: Mapping[str, Any], ctx: RoleContext) -> float:
        if isinstance(self._weight, Exception):
            raise self._weight
        return self._weight  # type: ignore[return-value]


def test_composite_needs_a_child() -> None:
    with pytest.raises(ValueError, match="at least one child"):
        CompositePolicy([])


@pytest.mark.parametrize(("answers", "allowed", "asked"), [
    ([True, True, True], True, ["a", "b", "c"]),
    ([True, False, True], False, ["a", "b"]),        # stops at the first deny
    ([False, RuntimeError("boom"), True], False, ["a"]),
    ([True, RuntimeError("boom"), True], False, ["a", "b"]),   # an exception denies
    ([1, "yes", True], True, ["a", "b", "c"]),       # truthiness, as the library
    ([True, 0, True], False, ["a", "b"]),
])
def test_composite_allow_is_an_ordered_and(answers: list[object], allowed: bool,
                                           asked: list[str]) -> None:
    log: list[str] = []
    policy = CompositePolicy([Fixed(n, log, allow=a) for n, a in zip("abc", answers,
                                                                     strict=True)])
    assert policy.allow({}, RoleContext()) is allowed
    assert log == asked


@pytest.mark.parametrize(("weights", "expected"), [
    ([1.0, 1.0], 1.0),
    ([0.5, 0.5], 0.25),
    ([0.5, RuntimeError("boom")], 0.5),     # a failing child counts as 1.0
    ([0.5, "abc"], 0.5),                    # so does one float() cannot read
    ([0.5, "0.5"], 0.25),
    ([3.0, 0.5], 1.0),                      # product clamped, not each factor
    ([4.0, 0.125], 0.5),
    ([-1.0, 0.5], 0.0),
    ([float("nan"), 0.5], 1.0),             # the library's clamp: max(0, min(1, nan))
])
def test_composite_reweight_is_a_clamped_product(weights: list[object],
                                                 expected: float) -> None:
    policy = CompositePolicy([Fixed(str(i), [], weight=w) for i, w in enumerate(weights)])
    assert policy.reweight({}, RoleContext()) == expected


# --- apply_role_policy ------------------------------------------------------------------

ENTRIES: list[dict[str, Any]] = [
    {"id": "a", "score": 0.9, "tenant_id": "acme", "context_graph": {"dense": 0.9}},
    {"id": "b", "score": 0.8, "tenant_id": "globex", "context_graph": {"dense": 0.8}},
    {"id": "c", "score": 0.7, "context_graph": {"dense": 0.7}},
    {"id": "d", "tenant_id": "globex"},                        # no score key
    {"id": "e", "tenant_id": "acme"},
]
ACME = RoleContext(tenant_id="acme")


def test_hard_keeps_allowed_entries_in_order() -> None:
    before = copy.deepcopy(ENTRIES)
    out = apply_role_policy(ENTRIES, TenantIsolationPolicy(), ACME, hard_filter=True)
    assert [e["id"] for e in out] == ["a", "c", "e"]
    assert out == [ENTRIES[0], ENTRIES[2], ENTRIES[4]]
    assert before == ENTRIES


def test_soft_copies_every_entry_and_zeroes_the_denied() -> None:
    before = copy.deepcopy(ENTRIES)
    out = apply_role_policy(ENTRIES, TenantIsolationPolicy(), ACME, hard_filter=False)
    assert [e.get("score") for e in out] == [0.9, 0.0, 0.7, 0.0, None]
    assert [e["context_graph"] for e in out[:3]] == [e["context_graph"] for e in ENTRIES[:3]]
    assert all(o is not e for o, e in zip(out, ENTRIES, strict=True))
    assert before == ENTRIES


@pytest.mark.parametrize(("weight", "scores"), [
    (0.5, [0.45, 0.4, 0.35]),
    (2.0, [0.9, 0.8, 0.7]),                      # clamped to 1
    (-0.5, [0.0, 0.0, 0.0]),
    (RuntimeError("boom"), [0.9, 0.8, 0.7]),     # a raising reweight leaves scores alone
    ("abc", [0.9, 0.8, 0.7]),                    # as does an unreadable one
    (float("nan"), [0.9, 0.8, 0.7]),
])
def test_soft_reweight(weight: object, scores: list[float]) -> None:
    out = apply_role_policy(ENTRIES[:3], Fixed("p", [], weight=weight), ACME,
                            hard_filter=False)
    assert [e["score"] for e in out] == scores


def test_raising_allow_denies_in_both_modes() -> None:
    policy = Fixed("p", [], allow=KeyError("tenant_id"))
    assert apply_role_policy(ENTRIES, policy, ACME, hard_filter=True) == []
    soft = apply_role_policy(ENTRIES, policy, ACME, hard_filter=False)
    assert [e["score"] for e in soft] == [0.0] * 5


def test_empty_input() -> None:
    assert apply_role_policy([], AllowAllPolicy(), ACME, hard_filter=True) == []
    assert apply_role_policy([], AllowAllPolicy(), ACME, hard_filter=False) == []


# --- policy names -----------------------------------------------------------------------

def test_policy_names_match_the_config_literal() -> None:
    assert set(POLICY_NAMES) == set(get_args(PolicyName))


@pytest.mark.parametrize(("name", "expected"), [
    ("none", None),
    ("allow_all", AllowAllPolicy),
    ("tenant", TenantIsolationPolicy),
    ("role_scope", RoleScopePolicy),
    ("composite", CompositePolicy),
])
def test_policy_from_name(name: str, expected: type[RolePolicy] | None) -> None:
    policy = policy_from_name(name)
    if expected is None:
        assert policy is None
    else:
        assert type(policy) is expected


def test_composite_from_name_is_tenant_then_role_scope() -> None:
    policy = policy_from_name("composite", treat_global_as_visible=False,
                              treat_unrestricted_as_visible=False)
    assert isinstance(policy, CompositePolicy)
    assert policy.children == (TenantIsolationPolicy(treat_global_as_visible=False),
                               RoleScopePolicy(treat_unrestricted_as_visible=False))


def test_flags_reach_the_named_policies() -> None:
    assert policy_from_name("tenant", treat_global_as_visible=False) == \
        TenantIsolationPolicy(treat_global_as_visible=False)
    assert policy_from_name("role_scope", treat_unrestricted_as_visible=False) == \
        RoleScopePolicy(treat_unrestricted_as_visible=False)


@pytest.mark.parametrize("name", ["Tenant", "tenant_isolation", "", "all"])
def test_unknown_policy_name(name: str) -> None:
    with pytest.raises(ValueError, match=r"unknown role policy .*expected one of 'none', "
                                         r"'tenant', 'role_scope', 'composite', 'allow_all'"):
        policy_from_name(name)
