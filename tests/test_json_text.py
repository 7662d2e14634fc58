"""`json_text` is `json.dumps(data, indent=...)` character for character, errors included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msprlab.datasets.atomic import json_text, write_json_atomic

SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(-(10**400), 10**400)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text())
KEYS = st.text() | st.integers() | st.floats() | st.booleans() | st.none()
VALUES = st.recursive(
    SCALARS,
    lambda inner: (st.lists(inner, max_size=5) | st.tuples(inner, inner)
                   | st.dictionaries(st.text(max_size=4), inner, max_size=5)
                   | st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=30)


# Tables: lists and dicts of non-empty flat dicts, whose strings may hold brackets.
BRACKETY = st.text(alphabet="ab{}[],: \n\"", max_size=6)
ROW = st.dictionaries(BRACKETY | KEYS, SCALARS | BRACKETY, min_size=1, max_size=4)
TABLES = (st.lists(ROW, min_size=1, max_size=4)
          | st.dictionaries(BRACKETY, ROW, min_size=1, max_size=4)
          | st.lists(ROW | VALUES, min_size=1, max_size=4))


def both(data: Any, indent: int = 1) -> tuple[str, str]:
    def run(encode: Any) -> str:
        try:
            return str(encode(data, indent=indent))
        except (TypeError, ValueError) as exc:
            return f"{type(exc).__name__}: {exc}"
    return run(json.dumps), run(json_text)


@settings(max_examples=400, deadline=None)
@given(VALUES, st.sampled_from([0, 1, 2, 4]))
def test_the_text_is_json_dumps_text(data: Any, indent: int) -> None:
    want, got = both(data, indent)
    assert got == want


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=3), TABLES, max_size=3) | TABLES,
       st.sampled_from([0, 1, 2]))
def test_tables_are_json_dumps_text(data: Any, indent: int) -> None:
    want, got = both(data, indent)
    assert got == want


@pytest.mark.parametrize("data", [
    [{"a": 1}, {"b": "x{"}], [{"a": 1}, {}], {"k": {"a": 1}, "k{": {"b": 2}},
    [{"a": {"b": 1}}, {"c": 2}], [{"a": 1}, {"c": [2]}], [{"a": "},\n  {"}, {"b": 1}],
    [{1: 2, None: 3, 2.5: 4, False: 1}], {7: {"a": 1}}, [{"a": np.float64(0.3)}],
], ids=["brace-in-string", "empty-row", "brace-in-key", "nested-dict", "nested-list",
        "separator-in-string", "non-str-keys", "int-outer-key", "float-subclass"])
def test_table_edge_cases(data: Any) -> None:
    for indent in (0, 1, 3):
        want, got = both(data, indent)
        assert got == want


@pytest.mark.parametrize("data", [
    {"a": np.float64(0.1), "b": [np.float64(-1e-07), np.float64("nan")]},  # float subclasses
    {"type": __import__("msprlab.engine.graph", fromlist=["EdgeType"]).EdgeType.CAUSAL},
    {"a": np.int64(3)},                  # not serializable: json's own TypeError
    {"a": {"b": [1, object()]}},
    {"a": [1, (2, [3, {}])]},
], ids=["float-subclass", "str-enum", "numpy-int", "object", "tuple"])
def test_unusual_values_give_json_dumps_text_or_error(data: Any) -> None:
    want, got = both(data)
    assert got == want


def test_a_cycle_is_json_dumps_error() -> None:
    loop: list[Any] = [1]
    loop.append({"back": loop})
    assert both(loop) == ("ValueError: Circular reference detected",) * 2


def test_write_json_atomic_writes_what_json_dump_wrote(tmp_path: Path) -> None:
    data = {"events": [{"index": 0, "results": [{"id": "m1", "score": 0.1 + 0.2}]}],
            "final_nodes": {"m1": {"relevance": 1.0, "archived": False}}, "none": None}
    write_json_atomic(tmp_path / "out.json", data)
    assert (tmp_path / "out.json").read_text() == json.dumps(data, indent=1) + "\n"


def test_nothing_is_written_when_the_data_cannot_be_encoded(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        write_json_atomic(tmp_path / "out.json", {"a": object()})
    assert list(tmp_path.iterdir()) == []
