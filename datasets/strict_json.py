"""JSON parsing that refuses a key given twice in one object.

`json.loads` keeps the last of two equal keys without a word, so `{"memory_id": "m1",
"memory_id": "m2"}` would ingest as m2. Every JSON text an ingest reads goes through
`loads` instead, which raises `DuplicateKeyError` naming the key and where it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["DuplicateKeyError", "loads"]


class DuplicateKeyError(ValueError):
    """A JSON object gives a key twice.

    `path` leads from the top to the repeated key (`["metadata", "topic"]`), `field` is its
    first step (the record's field) and `key` its last.
    """

    def __init__(self, path: list[str | int]) -> None:
        self.path, self.key = path, str(path[-1])
        self.field = str(path[0])
        shown = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
        shown = shown.removeprefix(".")
        super().__init__(f"duplicate key {self.key!r} at {shown} (JSON keeps only the "
                         "last value); give each key once")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record = dict(pairs)
    if len(record) < len(pairs):
        raise DuplicateKeyError([pairs[0][0]])  # placeholder: `loads` finds the real path
    return record


class _Object(list[tuple[str, Any]]):
    """An object's (key, value) pairs, told apart from an array."""


def _repeated(value: Any, path: list[str | int]) -> list[str | int] | None:
    """The path of the first repeated key in `value` (its own keys before nested ones)."""
    items: Iterable[tuple[str | int, Any]]
    if isinstance(value, _Object):
        seen: set[str] = set()
        for name, _ in value:
            if name in seen:
                return [*path, name]
            seen.add(name)
        items = value
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, inner in items:
        if (found := _repeated(inner, [*path, key])) is not None:
            return found
    return None


def loads(text: str | bytes) -> Any:
    """`json.loads(text)`, but a key repeated within one object raises `DuplicateKeyError`.

    >>> loads('{"a": 1, "b": {"a": 2}}')
    {'a': 1, 'b': {'a': 2}}
    >>> try:
    ...     loads('{"a": 1, "b": [{"c": 2, "c": 3}]}')
    ... except DuplicateKeyError as error:
    ...     print(error)
    duplicate key 'c' at b[0].c (JSON keeps only the last value); give each key once
    """
    try:
        return json.loads(text, object_pairs_hook=_unique)
    except DuplicateKeyError:
        # Parsed again only on this rare path, keeping the pairs, to say where the key is.
        path = _repeated(json.loads(text, object_pairs_hook=_Object), [])
        raise DuplicateKeyError(path or ["?"]) from None
