"""Role and tenant policies over result entries (MSPR.md section 12).

A policy decides whether an entry is visible to a requester (`allow`) and may scale its
score (`reweight`). `apply_role_policy` runs one over a list of entries, either dropping
the denied ones (hard) or zeroing their scores (soft). Where the engine calls it, and that
the hard filter only ever sees seeds (quirk 12), is the ranker's business, not this module's.

>>> ctx = RoleContext(user_id="alice", tenant_id="acme", role="analyst")
>>> entries = [{"id": "m1", "score": 0.8, "tenant_id": "acme"},
...            {"id": "m2", "score": 0.7, "metadata": {"tenant_id": "globex"}}]
>>> [e["id"] for e in apply_role_policy(entries, TenantIsolationPolicy(), ctx, hard_filter=True)]
['m1']
>>> [e["score"] for e in apply_role_policy(entries, TenantIsolationPolicy(), ctx,
...                                       hard_filter=False)]
[0.8, 0.0]
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

__all__ = [
    "POLICY_NAMES",
    "AllowAllPolicy",
    "CompositePolicy",
    "RoleContext",
    "RolePolicy",
    "RoleScopePolicy",
    "TenantIsolationPolicy",
    "apply_role_policy",
    "policy_from_name",
    "read_field",
    "role_context_from_filters",
    "role_multipliers",
]


@dataclass(frozen=True, slots=True)
class RoleContext:
    """Who is asking. Values come from search arguments and user filters, so any type."""

    user_id: object | None = None
    agent_id: object | None = None
    run_id: object | None = None
    tenant_id: object | None = None
    role: object | None = None
    sub_tenant_id: object | None = None


def role_context_from_filters(*, user_id: object | None, agent_id: object | None,
                              run_id: object | None,
                              filters: Mapping[str, Any] | None) -> RoleContext:
    """Build the context as `Memory.search` does.

    `tenant_id` and `role` come from the top level of `filters`. When either is None, both
    are refilled from `filters["metadata"]` (if a dict) with `value or nested`, so a falsy
    top-level value is replaced as well. `sub_tenant_id` is never set.
    """
    tenant_id: object | None = None
    role: object | None = None
    if isinstance(filters, Mapping):
        tenant_id = filters.get("tenant_id")
        role = filters.get("role")
        nested = filters.get("metadata")
        if (tenant_id is None or role is None) and isinstance(nested, dict):
            tenant_id = tenant_id or nested.get("tenant_id")
            role = role or nested.get("role")
    return RoleContext(user_id=user_id, agent_id=agent_id, run_id=run_id,
                       tenant_id=tenant_id, role=role)


def read_field(candidate: Mapping[str, Any], field: str) -> object | None:
    """The flat `candidate[field]` if not None, else `candidate["metadata"][field]`."""
    value: object | None = candidate.get(field)
    if value is not None:
        return value
    nested: object = candidate.get("metadata")
    if isinstance(nested, dict):
        value = nested.get(field)
        return value
    return None


def _clamp_unit(x: float) -> float:
    # The library's order, min first: NaN comes out as 1.0 (max(0, min(1, nan)) == 1.0).
    return max(0.0, min(1.0, x))


class RolePolicy(abc.ABC):
    """Decides visibility and, optionally, a score multiplier; subclass it for your own.

    `reweight` is used only in soft mode, on allowed entries, and is clamped to [0, 1] by the
    caller; the default 1.0 leaves scores alone.
    """

    @abc.abstractmethod
    def allow(self, candidate: Mapping[str, Any], ctx: RoleContext) -> bool:
        """True when `candidate` may be shown to `ctx`."""

    def reweight(self, candidate: Mapping[str, Any], ctx: RoleContext) -> float:
        return 1.0


class AllowAllPolicy(RolePolicy):
    """Everything is visible."""

    def allow(self, candidate: Mapping[str, Any], ctx: RoleContext) -> bool:
        return True

    def __repr__(self) -> str:
        return "AllowAllPolicy()"


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantIsolationPolicy(RolePolicy):
    """Deny entries tagged with a tenant other than the requester's.

    Untagged entries are global: visible when `treat_global_as_visible`. The comparison is
    plain `==`, so a tagged entry is denied to a requester without a tenant.
    """

    tenant_field: str = "tenant_id"
    treat_global_as_visible: bool = True

    def allow(self, candidate: Mapping[str, Any], ctx: RoleContext) -> bool:
        tenant = read_field(candidate, self.tenant_field)
        if tenant is None:
            return bool(self.treat_global_as_visible)
        return tenant == ctx.tenant_id


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleScopePolicy(RolePolicy):
    """Deny entries whose role restriction the requester's role does not meet.

    An `allowed_roles` value wins over a `role` value. It is read as the set of `str(x)` for
    each x in it, so a plain string such as "admin" is a set of characters (quirk 16); a
    value that cannot be iterated counts as `{str(value)}`. Roles compare as strings.
    Entries with neither field are visible when `treat_unrestricted_as_visible`.
    """

    role_field: str = "role"
    allowed_roles_field: str = "allowed_roles"
    treat_unrestricted_as_visible: bool = True

    def allow(self, candidate: Mapping[str, Any], ctx: RoleContext) -> bool:
        allowed = read_field(candidate, self.allowed_roles_field)
        if allowed is not None:
            return ctx.role is not None and str(ctx.role) in _as_role_set(allowed)
        required = read_field(candidate, self.role_field)
        if required is None:
            return bool(self.treat_unrestricted_as_visible)
        return ctx.role is not None and str(required) == str(ctx.role)


def _as_role_set(value: object) -> set[str]:
    try:
        return {str(x) for x in cast(Iterable[object], value)}
    except TypeError:
        return {str(value)}


class CompositePolicy(RolePolicy):
    """All children must allow; the reweights multiply.

    `allow` asks the children in order and stops at the first False; a child that raises
    counts as a deny. `reweight` is the product of the children's reweights clamped to
    [0, 1], with 1.0 standing in for a child that raises.
    """

    def __init__(self, children: Iterable[RolePolicy]) -> None:
        self.children: tuple[RolePolicy, ...] = tuple(children)
        if not self.children:
            raise ValueError("CompositePolicy needs at least one child policy, got none")

    def __repr__(self) -> str:
        return f"CompositePolicy({list(self.children)!r})"

    def allow(self, candidate: Mapping[str, Any], ctx: RoleContext) -> bool:
        for child in self.children:
            # A user policy that fails must not leak what it guards, so it denies.
            try:
                if not child.allow(candidate, ctx):
                    return False
            except Exception:
                return False
        return True

    def reweight(self, candidate: Mapping[str, Any], ctx: RoleContext) -> float:
        product = 1.0
        for child in self.children:
            try:
                product *= float(child.reweight(candidate, ctx))
            except Exception:
                continue  # as the library: a failing child leaves the product unchanged
        return _clamp_unit(product)


def allows(policy: RolePolicy, entry: Mapping[str, Any], ctx: RoleContext) -> bool:
    """`policy.allow`, failing closed as the library does: an `allow` that raises denies."""
    try:
        return policy.allow(entry, ctx)
    except Exception:
        return False


def reweight_or_one(policy: RolePolicy, entry: Mapping[str, Any], ctx: RoleContext) -> float:
    """`float(policy.reweight(...))`, 1.0 when it raises or is not a number (as the
    library: a failing reweight leaves the score alone)."""
    try:
        return float(policy.reweight(entry, ctx))
    except Exception:
        return 1.0


def apply_role_policy(entries: Sequence[Mapping[str, Any]], policy: RolePolicy,
                      ctx: RoleContext, *, hard_filter: bool) -> list[dict[str, Any]]:
    """Filter (hard) or rescore (soft) `entries`; returns new dicts, inputs are untouched.

    An `allow` that raises counts as a deny. Hard mode keeps the allowed entries in order.
    Soft mode keeps every entry: a denied one gets `score` 0.0, an allowed one with a
    `score` key has it multiplied by clamp(reweight, 0, 1), with a raising or non-numeric
    reweight counting as 1.0. Nothing else, `context_graph` included, changes.
    """
    out: list[dict[str, Any]] = []
    for entry in entries:
        allowed = allows(policy, entry, ctx)
        if hard_filter:
            if allowed:
                out.append(dict(entry))
            continue
        adjusted = dict(entry)
        if not allowed:
            adjusted["score"] = 0.0
        else:
            weight = reweight_or_one(policy, entry, ctx)
            if "score" in adjusted:
                adjusted["score"] = float(adjusted["score"]) * _clamp_unit(weight)
        out.append(adjusted)
    return out


def role_multipliers(entries: Sequence[Mapping[str, Any]], policy: RolePolicy,
                     ctx: RoleContext) -> list[float]:
    """What the soft pass does to each entry's score, as a factor: 0.0 when denied (the
    score is set to 0), else clamp(reweight, 0, 1) (1.0 when reweight raises or is not a
    number). `apply_role_policy(..., hard_filter=False)` is score × this factor, for
    policies that do not read the score itself (the built-in ones do not)."""
    return [_clamp_unit(reweight_or_one(policy, entry, ctx))
            if allows(policy, entry, ctx) else 0.0 for entry in entries]


# Each factory takes (treat_global_as_visible, treat_unrestricted_as_visible).
_POLICIES: Final[Mapping[str, Callable[[bool, bool], RolePolicy | None]]] = {
    "none": lambda g, u: None,
    "tenant": lambda g, u: TenantIsolationPolicy(treat_global_as_visible=g),
    "role_scope": lambda g, u: RoleScopePolicy(treat_unrestricted_as_visible=u),
    "composite": lambda g, u: CompositePolicy([
        TenantIsolationPolicy(treat_global_as_visible=g),
        RoleScopePolicy(treat_unrestricted_as_visible=u),
    ]),
    "allow_all": lambda g, u: AllowAllPolicy(),
}

POLICY_NAMES: Final = tuple(_POLICIES)


def policy_from_name(name: str, *, treat_global_as_visible: bool = True,
                     treat_unrestricted_as_visible: bool = True) -> RolePolicy | None:
    """The bundled policy a scenario names; "none" means no policy installed.

    "composite" is `CompositePolicy([TenantIsolationPolicy(), RoleScopePolicy()])`.
    """
    factory = _POLICIES.get(name)
    if factory is None:
        raise ValueError(f"unknown role policy {name!r}; expected one of "
                         f"{', '.join(map(repr, POLICY_NAMES))}")
    return factory(treat_global_as_visible, treat_unrestricted_as_visible)
