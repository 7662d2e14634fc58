"""Dicts that log which keys changed: the vector store's payloads and the graph's
embeddings, so the positional search (engine/positional.py) re-reads only those.

`ChangeLog.changes` lists every key whose value was put, removed or edited in place
(a payload is edited through the `StoredPayload` the store keeps), in order; a reader keeps
its place in it. The log starts afresh (a new `epoch`) once it is long, and a reader of an
older epoch then re-reads everything. A payload put in the store is copied into a
`StoredPayload`, as a vector store keeps its own copy: editing the dict one passed in later
changes nothing stored. Copies, pickles and deep copies of either are plain dicts.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

_LOG_SIZE = 1 << 16


class _PlainCopies(dict[str, Any]):
    """Copies, pickles and deep copies as plain dicts (a copy logs nothing)."""

    __slots__ = ()

    def copy(self) -> dict[str, Any]:
        return dict(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return copy.deepcopy(dict(self), memo)


class ChangeLog(_PlainCopies):
    """A dict that logs the keys whose values change (see the module docstring)."""

    __slots__ = ("changes", "epoch")

    def __init__(self, values: Mapping[str, Any] | Iterable[tuple[str, Any]] = (),
                 **more: Any) -> None:
        super().__init__()
        self.changes: list[str] = []
        self.epoch = 0
        self.update(values, **more)

    def changed(self, key: str) -> None:
        changes = self.changes
        if len(changes) >= _LOG_SIZE:
            changes.clear()
            self.epoch += 1
        changes.append(key)

    def _stored(self, key: str, value: Any) -> Any:
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, self._stored(key, value))
        self.changed(key)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self.changed(key)

    def pop(self, key: str, *default: Any) -> Any:
        found = key in self
        value = super().pop(key, *default)
        if found:
            self.changed(key)
        return value

    def popitem(self) -> tuple[str, Any]:
        key, value = super().popitem()
        self.changed(key)
        return key, value

    def clear(self) -> None:
        keys = list(self)
        super().clear()
        for key in keys:
            self.changed(key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return super().__getitem__(key)

    def update(self, values: Any = (), /, **more: Any) -> None:
        items = values.items() if isinstance(values, Mapping) else values
        for key, value in items:
            self[key] = value
        for key, value in more.items():
            self[key] = value

    def __ior__(self, other: Any) -> ChangeLog:  # type: ignore[override,misc]
        self.update(other)
        return self


class PayloadStore(ChangeLog):
    """memory id -> stored payload: each a `StoredPayload` copy of the mapping put in
    (any other value is kept as it is), whose edits are logged under its memory id."""

    __slots__ = ()

    def _stored(self, key: str, value: Any) -> Any:
        if isinstance(value, Mapping):
            return StoredPayload(self, key, value)
        return value


class StoredPayload(_PlainCopies):
    """A payload in a `PayloadStore`: edits to it are logged as changes of its memory."""

    __slots__ = ("_key", "_store")

    def __init__(self, store: ChangeLog, key: str, values: Mapping[str, Any]) -> None:
        super().__init__(values)
        self._store = store
        self._key = key

    def _changed(self) -> None:
        self._store.changed(self._key)

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._changed()

    def pop(self, key: str, *default: Any) -> Any:
        value = super().pop(key, *default)
        self._changed()
        return value

    def popitem(self) -> tuple[str, Any]:
        item = super().popitem()
        self._changed()
        return item

    def clear(self) -> None:
        super().clear()
        self._changed()

    def setdefault(self, key: str, default: Any = None) -> Any:
        value = super().setdefault(key, default)
        self._changed()
        return value

    def update(self, *values: Any, **more: Any) -> None:
        super().update(*values, **more)
        self._changed()

    def __ior__(self, other: Any) -> StoredPayload:  # type: ignore[override,misc]
        super().update(other)
        self._changed()
        return self
