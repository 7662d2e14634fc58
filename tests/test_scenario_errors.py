"""Bad-input table for scenario files: `ScenarioError("file: $.json.path: what is wrong")`."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from msprlab.datasets.scenario import FORMAT, ScenarioError, load_scenario, parse_scenario

SOURCE = "s.json"
BASE: dict[str, Any] = {
    "format": FORMAT,
    "memories": [
        {"id": "m1", "text": "window seat", "embedding": [1.0, 0.0, 0.0]},
        {"id": "m2", "text": "graph only", "embedding": [0.0, 1.0, 0.0],
         "in_vector_store": False},
    ],
    "edges": [{"src": "m1", "dst": "m2", "type": "REPLY_TO", "weight": 0.5}],
    "events": [{"type": "search", "query": "seat", "query_embedding": [1.0, 0.0, 0.0],
                "user_id": "alice", "seeds": [{"id": "m1", "score": 0.9}]}],
}
EDGE_TYPES = ("REPLY_TO, TOPIC_SIMILAR, DOCUMENT_LINK, TEMPORAL_NEXT, UPDATED_FROM, CAUSAL, "
              "SUPPORTS, CONTRADICTS, REFINES, ELABORATES")


def edited(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    change(raw)
    return raw


def exact(message: str) -> str:
    return "^" + re.escape(message) + "$"


BAD = [
    ("wrong-format", edited(lambda d: d.update(format="ck-mspr-scenario/2")),
     "$.format: expected 'ck-mspr-scenario/1', got 'ck-mspr-scenario/2'"),
    ("missing-format", edited(lambda d: d.pop("format")), "$.format: is required"),
    ("format-not-a-string", edited(lambda d: d.update(format=1)),
     "$.format: expected a string, got a number 1"),
    ("top-level-not-an-object", [], "$: expected an object, got a list"),
    ("memories-not-a-list", edited(lambda d: d.update(memories={"id": "m1"})),
     "$.memories: expected a list, got an object"),
    ("memory-without-id", edited(lambda d: d["memories"][1].pop("id")),
     "$.memories[1].id: is required"),
    ("memory-id-not-a-string", edited(lambda d: d["memories"][0].update(id=5)),
     "$.memories[0].id: expected a string, got a number 5"),
    ("duplicate-memory-id", edited(lambda d: d["memories"].append({"id": "m1"})),
     "$.memories: memory id 'm1' appears more than once"),
    ("embedding-with-a-string", edited(lambda d: d["memories"][1].update(embedding=[0, 1, "x"])),
     "$.memories[1].embedding[2]: expected a finite number, got a string 'x'"),
    ("embedding-with-nan",
     edited(lambda d: d["memories"][0].update(embedding=[0.0, float("nan"), 1.0])),
     "$.memories[0].embedding[1]: expected a finite number, got a number nan"),
    ("embedding-not-a-list", edited(lambda d: d["memories"][0].update(embedding=5)),
     "$.memories[0].embedding: expected a list, got a number"),
    ("metadata-not-an-object", edited(lambda d: d["memories"][0].update(metadata=[1])),
     "$.memories[0].metadata: expected an object, got a list"),
    ("negative-access-count", edited(lambda d: d["memories"][0].update(access_count=-1)),
     "$.memories[0].access_count: must be >= 0, got -1"),
    ("bad-memory-timestamp", edited(lambda d: d["memories"][0].update(created_at="yesterday")),
     "$.memories[0].created_at: expected an ISO-8601 timestamp, got 'yesterday'"),
    ("bad-now", edited(lambda d: d.update(now="2024-13-01")),
     "$.now: expected an ISO-8601 timestamp, got '2024-13-01'"),
    ("unknown-edge-type", edited(lambda d: d["edges"][0].update(type="FOLLOWS")),
     f"$.edges[0].type: expected one of {EDGE_TYPES}, got 'FOLLOWS'"),
    ("seed-not-in-vector-store",
     edited(lambda d: d["events"][0]["seeds"].append({"id": "m2", "score": 0.5})),
     "$.events[0].seeds[1].id: seed 'm2' is not an in_vector_store memory"),
    ("seed-unknown-memory",
     edited(lambda d: d["events"][0]["seeds"].append({"id": "zz", "score": 0.5})),
     "$.events[0].seeds[1].id: seed 'zz' is not an in_vector_store memory"),
    ("search-without-query-embedding", edited(lambda d: d["events"][0].pop("query_embedding")),
     "$.events[0].query_embedding: is required ([] for no query vector)"),
    ("filters-not-an-object", edited(lambda d: d["events"][0].update(filters=[])),
     "$.events[0].filters: expected an object or null, got a list"),
    ("unknown-event-type", edited(lambda d: d["events"].append({"type": "click"})),
     "$.events[1].type: expected 'search' or 'feedback', got 'click'"),
    ("feedback-without-helpful",
     edited(lambda d: d["events"].append({"type": "feedback", "memory_id": "m1"})),
     "$.events[1].helpful: is required"),
    ("bad-event-timestamp", edited(lambda d: d["events"].append(
        {"type": "feedback", "memory_id": "m1", "helpful": True, "at": "noon"})),
     "$.events[1].at: expected an ISO-8601 timestamp, got 'noon'"),
    ("config-not-an-object", edited(lambda d: d.update(config=[])),
     "$.config: expected an object, got a list"),
    ("alpha-out-of-range", edited(lambda d: d.update(config={"retrieval": {"alpha_dense": 1.5}})),
     "$.config.retrieval.alpha_dense: must be in [0, 1], got 1.5"),
    ("unknown-algorithm", edited(lambda d: d.update(config={"retrieval": {"algorithm": "dfs"}})),
     "$.config.retrieval.algorithm: must be one of 'bfs', 'ppr', got 'dfs'"),
    ("half-life-zero", edited(lambda d: d.update(config={"decay": {"half_life_days": 0}})),
     "$.config.decay.half_life_days: must be in (0, inf], got 0"),
    ("boost-delta-out-of-range",
     edited(lambda d: d.update(config={"mspr": {"feedback": {"boost_delta": 2}}})),
     "$.config.mspr.feedback.boost_delta: must be in [0, 1], got 2"),
    ("feedback-block-not-an-object", edited(lambda d: d.update(config={"mspr": {"feedback": 5}})),
     "$.config.mspr.feedback: expected an object, got a number"),
    ("unknown-role-policy",
     edited(lambda d: d.update(config={"mspr": {"role": {"enabled": True, "policy": "rbac"}}})),
     "$.config.mspr.role.policy: expected one of none, tenant, role_scope, composite, "
     "allow_all, got 'rbac'"),
    ("role-knob-not-a-bool",
     edited(lambda d: d.update(config={"mspr": {"role": {"treat_global_as_visible": "no"}}})),
     "$.config.mspr.role.treat_global_as_visible: expected true or false, got 'no'"),
]


@pytest.mark.parametrize(("raw", "message"), [(raw, msg) for _, raw, msg in BAD],
                         ids=[name for name, _, _ in BAD])
def test_bad_scenario_is_rejected_with_an_exact_message(raw: Any, message: str) -> None:
    with pytest.raises(ScenarioError, match=exact(f"{SOURCE}: {message}")):
        parse_scenario(raw, source=SOURCE)


def test_the_base_scenario_is_valid() -> None:
    scenario = parse_scenario(BASE, source=SOURCE)
    assert [m.id for m in scenario.memories] == ["m1", "m2"]
    assert scenario.name == "s"


def test_invalid_json_names_the_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "format": "ck-mspr-scenario/1",\n  "memories": [,]\n}\n')
    with pytest.raises(ScenarioError, match=exact(
            f"{path}: line 3 column 16: not valid JSON: Expecting value")):
        load_scenario(path)


def test_load_scenario_names_the_file_and_json_path(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(edited(lambda d: d["memories"][1].update(embedding=[0, 1, "x"]))))
    with pytest.raises(ScenarioError, match=exact(
            f"{path}: $.memories[1].embedding[2]: expected a finite number, got a string 'x'")):
        load_scenario(path)


# Non-object config blocks are reported with the file and JSON path, not as a bare error.
@pytest.mark.parametrize("config", [{"mspr": "on"}, {"mspr": {"role": 5}}, {"decay": 5}],
                         ids=["mspr-string", "role-int", "decay-int"])
def test_non_object_config_blocks_are_scenario_errors(config: dict[str, Any]) -> None:
    with pytest.raises(ScenarioError, match=r"^s\.json: \$\.config"):
        parse_scenario({"format": FORMAT, "config": config}, source=SOURCE)
