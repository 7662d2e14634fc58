"""Session scope and tenant rules (MSPR.md section 7)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .graph import MemoryNode

SCOPE_KEYS: Final = ("user_id", "agent_id", "run_id")


class _Unverifiable:
    """A scope value that cannot be compared (an operator filter): it matches nothing."""

    def __repr__(self) -> str:
        return "<unverifiable>"


UNVERIFIABLE: Final = _Unverifiable()
Scope = dict[str, "str | _Unverifiable"]


def scope_from_filters(filters: Mapping[str, Any] | None) -> Scope:
    scope: Scope = {}
    for key in SCOPE_KEYS:
        value = (filters or {}).get(key)
        if value is None:
            continue
        if isinstance(value, str | int) and not isinstance(value, bool):
            scope[key] = str(value)
        else:
            scope[key] = UNVERIFIABLE
    return scope


def conflicts(node: MemoryNode | None, scope: Scope) -> bool:
    """Traversal test: the node is tagged with a different owner (None is not a conflict)."""
    if not scope or node is None:
        return False
    for key, want in scope.items():
        value = getattr(node, key)
        if value is not None and (want is UNVERIFIABLE or str(value) != want):
            return True
    return False


def confirmed(payload: Mapping[str, Any] | None, node: MemoryNode | None, scope: Scope) -> bool:
    """Rerank test for non-seeds: every scoped owner id is confirmed by payload or node."""
    for key, want in scope.items():
        if want is UNVERIFIABLE:
            return False
        value = payload.get(key) if payload else None
        if value is None and node is not None:
            value = getattr(node, key)
        if value is None or str(value) != want:
            return False
    return True


def tenant_skipped(node: MemoryNode | None, tenant_id: str | None,
                   sub_tenant_id: str | None) -> bool:
    """Hard skip of a candidate whose node carries a different non-null tenant tag."""
    if node is None:
        return False
    if tenant_id is not None and node.tenant_id is not None and node.tenant_id != tenant_id:
        return True
    return (sub_tenant_id is not None and node.sub_tenant_id is not None
            and node.sub_tenant_id != sub_tenant_id)
