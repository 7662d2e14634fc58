"""Writes that leave either the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable
from json import encoder as _json_encoder
from pathlib import Path
from typing import Any

# What the encoders take for a value, not a container: bool is an int.
_SCALARS = (str, int, float)
_EXACT_SCALARS = frozenset({str, int, float, bool, type(None)})


def write_json_atomic(path: Path, data: Any) -> None:
    """Write `data` as JSON through a temp file in the same folder, then `os.replace` it.

    The text is `json.dumps(data, indent=1)` and a newline (`json_text`)."""
    path = Path(path)
    text = json_text(data, indent=1)  # raises what json.dump would, before any file exists
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def json_text(data: Any, indent: int = 1) -> str:
    """`json.dumps(data, indent=indent)`, character for character, built faster.

    With an indent, `json` encodes in Python, value by value. Here every container whose
    values are all plain (strings, numbers, booleans, null) goes through json's C encoder
    in one call, with the separators of its depth, and the containers above those are
    walked in Python. Anything else (a tuple, a subclass of dict or list, a key that is
    not a string, a value json cannot encode, a cycle, json without its C encoder) makes
    the whole text come from `json.dumps` itself, so the text, or the error, is its own.

    >>> data = {"a": [1, 2.5, None], "b": {"c": "é", "d": []}, "e": {}}
    >>> json_text(data) == json.dumps(data, indent=1)
    True
    """
    make = _json_encoder.c_make_encoder
    if make is None or type(indent) is not int or indent < 0:
        return json.dumps(data, indent=indent)
    try:
        return _Indented(make, indent).text(data)
    except _Unusual:
        return json.dumps(data, indent=indent)


class _Unusual(Exception):
    """Something the fast path leaves to `json.dumps`."""


def _refuse(value: Any) -> Any:
    raise _Unusual


def _table(rows: Iterable[Any]) -> bool:
    """Whether every row is a non-empty dict, the first of plain values: worth a try of
    `_Indented.table` (which checks the others)."""
    rows = list(rows)
    return _kinds(rows) == {dict} and all(rows) and _plain(rows[0].values())


def _kinds(values: Iterable[Any]) -> set[type]:
    return set(map(type, values))


def _plain(values: Iterable[Any]) -> bool:
    """Whether no value is a container (so the C encoder writes them as json would)."""
    values = list(values)
    if set(map(type, values)) <= _EXACT_SCALARS:
        return True
    return all(v is None or isinstance(v, _SCALARS) for v in values)


class _Indented:
    def __init__(self, make: Callable[..., Any], indent: int) -> None:
        self.make, self.pad = make, " " * indent
        self.by_depth: list[tuple[Callable[[Any, int], list[str]], str, str]] = []
        self.open: set[int] = set()  # ids of the containers being walked: a cycle

    def level(self, depth: int) -> tuple[Callable[[Any, int], list[str]], str, str]:
        """For a container at `depth`: the C encoder separating its items as json's indent
        does, the break before its first item and the one before its closing bracket."""
        while len(self.by_depth) <= depth:
            d = len(self.by_depth)
            inner = "\n" + self.pad * (d + 1)
            encode = self.make(None, _refuse, _json_encoder.encode_basestring_ascii, None,
                               ": ", "," + inner, False, False, True)
            self.by_depth.append((encode, inner, "\n" + self.pad * d))
        return self.by_depth[depth]

    def text(self, data: Any) -> str:
        out: list[str] = []
        self.value(data, 0, out)
        return "".join(out)

    def value(self, value: Any, depth: int, out: list[str]) -> None:
        kind = type(value)
        if kind is dict:
            self.mapping(value, depth, out)
        elif kind is list:
            self.sequence(value, depth, out)
        elif value is None or isinstance(value, _SCALARS):
            out.append("".join(self.level(depth)[0](value, 0)))
        else:
            raise _Unusual

    def mapping(self, value: dict[Any, Any], depth: int, out: list[str]) -> None:
        if not value:
            out.append("{}")
            return
        encode, inner, close = self.level(depth)
        if _plain(value.values()) and set(map(type, value)) == {str}:
            text = "".join(encode(value, 0))
            out += ("{", inner, text[1:-1], close, "}")
            return
        if _table(value.values()) and self.table(value, depth, out):
            return
        self.enter(value)
        quote = _json_encoder.encode_basestring_ascii
        first = True
        for key, item in value.items():
            if type(key) is not str:
                raise _Unusual
            out.append(f"{{{inner}" if first else f",{inner}")
            first = False
            out.append(quote(key))
            out.append(": ")
            self.value(item, depth + 1, out)
        out.append(close + "}")
        self.open.discard(id(value))

    def sequence(self, value: list[Any], depth: int, out: list[str]) -> None:
        if not value:
            out.append("[]")
            return
        encode, inner, close = self.level(depth)
        if _plain(value):
            text = "".join(encode(value, 0))
            out += ("[", inner, text[1:-1], close, "]")
            return
        if _table(value) and self.table(value, depth, out):
            return
        self.enter(value)
        first = True
        for item in value:
            out.append(f"[{inner}" if first else f",{inner}")
            first = False
            self.value(item, depth + 1, out)
        out.append(close + "]")
        self.open.discard(id(value))

    def table(self, value: list[Any] | dict[Any, Any], depth: int, out: list[str]) -> bool:
        """A list, or dict, of `_table` rows at `depth`, in one call of the C encoder with
        the rows' separators, then re-indented by replacing the braces. Only when inside
        the outer brackets there is no bracket and no brace but one pair per row: then no
        row holds a container (each row has its own pair) and no string a brace, so the
        replacing touches the structure alone. False (nothing written) otherwise. Keys
        that are not strings come out as json writes them: the C encoder is json's own."""
        _, inner, close = self.level(depth)
        text = "".join(self.level(depth + 1)[0](value, 0))
        body, rows = text[1:-1], len(value)
        if body.count("{") != rows or body.count("}") != rows or "[" in body:
            return False
        row_open, row_close = self.level(depth + 1)[1:]
        body = (body.replace("{", "{" + row_open).replace("}", row_close + "}")
                .replace("}," + row_open, "}," + inner))
        out += (text[0], inner, body, close, text[-1])
        return True

    def enter(self, container: Any) -> None:
        if id(container) in self.open:
            raise _Unusual  # json.dumps says "Circular reference detected"
        self.open.add(id(container))


def pid_alive(pid: int) -> bool:
    """Whether a process runs (so its temp files are not stale)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
