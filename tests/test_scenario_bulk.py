"""The bulk checks of `parse_scenario` give what the value-by-value walk gives: the same
records (same values, same types) for a valid document, the same error for a bad one."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msprlab.datasets import scenario as scenario_module
from msprlab.datasets.scenario import FORMAT, ScenarioError, parse_scenario
from msprlab.datasets.scenario_gen import generate_scenario

BULK = ("_bulk_memories", "_bulk_edges", "_bulk_events")
SHIPPED = sorted([*Path(__file__).parent.joinpath("scenarios").glob("*.json"),
                  *Path(scenario_module.__file__).parent.parent.joinpath(
                      "experiments", "scenarios").glob("*.json")])


@contextmanager
def walk_only() -> Iterator[None]:
    """Every bulk check declines: the precise walk reads everything."""
    with mock.patch.multiple(scenario_module, **{name: lambda *a: None for name in BULK}):
        yield


@contextmanager
def bulk_must_pass() -> Iterator[None]:
    """Each bulk check must give records itself (the fast path is the one taken)."""
    def strict(name: str) -> Any:
        inner = getattr(scenario_module, name)

        def run(*args: Any) -> Any:
            found = inner(*args)
            assert found is not None, f"{name} declined a valid list"
            return found
        return run
    with mock.patch.multiple(scenario_module, **{name: strict(name) for name in BULK}):
        yield


def outcome(raw: Any) -> str:
    """repr of the records (types show: 1 is not 1.0), or the error."""
    try:
        return repr(parse_scenario(raw, source="s.json"))
    except (ScenarioError, OverflowError) as exc:
        return f"{type(exc).__name__}: {exc}"


def test_generated_scenarios_take_the_bulk_path_and_match_the_walk() -> None:
    for index in range(150):
        raw = generate_scenario(11, index)
        with bulk_must_pass():
            fast = outcome(raw)
        with walk_only():
            assert outcome(raw) == fast, index
        assert not fast.startswith("ScenarioError"), fast


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_scenarios_take_the_bulk_path_and_match_the_walk(path: Path) -> None:
    raw = json.loads(path.read_text(encoding="utf-8"))
    with bulk_must_pass():
        fast = outcome(raw)
    with walk_only():
        assert outcome(raw) == fast


BASE: dict[str, Any] = {
    "format": FORMAT, "now": "2024-06-01T00:00:00",
    "memories": [
        {"id": "m1", "text": "window seat", "user_id": "u0", "agent_id": "", "run_id": None,
         "tenant_id": "t1", "sub_tenant_id": None, "role": "admin", "allowed_roles": ["ops"],
         "metadata": {"topic": "travel"}, "embedding": [1.0, 0, -0.5],
         "created_at": "2024-05-01T10:00:00+02:00", "updated_at": None,
         "last_accessed_at": "2024-05-02T10:00:00", "relevance": 1, "relevance_floor": 0.25,
         "access_count": 3, "archived": False, "in_graph": True, "in_vector_store": True},
        {"id": "m2", "text": "graph only", "embedding": None, "in_vector_store": False},
        {"id": "m3"},
    ],
    "edges": [{"src": "m1", "dst": "m2", "type": "REPLY_TO", "weight": 0.5,
               "updated_at": "2024-05-03T00:00:00"},
              {"src": "m2", "dst": "ghost", "type": "CAUSAL"}],
    "events": [
        {"type": "feedback", "memory_id": "m1", "helpful": True, "user_id": "u0",
         "agent_id": None, "run_id": None, "query": "seat", "metadata": {"rank": 1},
         "at": None},
        {"type": "search", "query": "seat", "query_embedding": [1, 0.0, 0.0],
         "user_id": "u0", "agent_id": None, "run_id": "r1", "filters": {"tenant_id": "t1"},
         "limit": 5, "threshold": 0.1, "include_archived": True,
         "seeds": [{"id": "m1", "score": 0.9}, {"id": None, "score": None}, {"id": "m3"}],
         "at": "2024-06-02T00:00:00"},
        {"type": "search", "query": "", "query_embedding": [], "seeds": None},
    ],
}
ODD = [None, True, False, 0, 1, -1, 2.5, float("nan"), float("inf"), 10**400, -(10**400),
       1e308, "", "x", "m1", "m2", "REPLY_TO", "search", "feedback",
       "2024-01-01T00:00:00+05:00", "0001-01-01T00:00:00+01:00", "noon", [], [1, 2.0],
       [1, "x"], [True], {}, {"id": "m1"}, [{"id": "m2"}], [{"id": 3}], [{"score": "x"}]]


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


ALL_PATHS = paths(BASE)


def mutate(raw: Any, path: tuple[Any, ...], action: str, value: Any) -> None:
    parent = raw
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if action == "delete" and isinstance(parent, dict):
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent[f"{last}_extra"] = value
    else:
        parent[last] = value


@settings(max_examples=600, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(ALL_PATHS), st.sampled_from(["set", "delete", "add"]),
                          st.sampled_from(ODD)), min_size=1, max_size=3))
def test_mutated_documents_get_what_the_walk_gives(changes: list[Any]) -> None:
    raw = copy.deepcopy(BASE)
    for path, action, value in changes:
        try:
            mutate(raw, path, action, copy.deepcopy(value))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed or replaced what this one names
    fast = outcome(raw)
    with walk_only():
        assert outcome(raw) == fast


def test_the_base_document_takes_the_bulk_path() -> None:
    with bulk_must_pass():
        fast = outcome(BASE)
    with walk_only():
        assert outcome(BASE) == fast


def test_records_made_a_field_at_a_time_are_the_dataclass_records() -> None:
    from msprlab.datasets.scenario import _FIELDS, _records

    for cls, names in _FIELDS.items():
        assert not hasattr(cls, "__post_init__"), cls
        columns = [[f"{name}{i}" for i in range(3)] for name in names]
        made = _records(cls, *columns)
        assert made == list(map(cls, *columns))
        assert [type(r) for r in made] == [cls] * 3
        with pytest.raises(AttributeError):  # frozen as ever
            made[0].__setattr__(names[0], "x")
    with pytest.raises(AssertionError, match="unequal"):
        _records(cls, *[[1, 2]] * (len(names) - 1), [1])
