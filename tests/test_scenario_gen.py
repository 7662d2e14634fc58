"""msprlab.datasets.scenario_gen: deterministic, inside the SCENARIOS.md ranges, and varied."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from msprlab.datasets.scenario_gen import generate_batch, generate_scenario

# (low, high) inclusive bounds from SCENARIOS.md; ppr_damping is the open interval (0, 1).
RETRIEVAL_BOUNDS = {
    "alpha_dense": (0, 1), "beta_bm25": (0, 1), "gamma_graph": (0, 1),
    "delta_personal": (0, 1), "epsilon_frequency": (0, 1), "zeta_success": (0, 1),
    "seed_top_k": (1, 100), "expansion_depth": (0, 4), "max_candidates": (1, 500),
    "edge_weight_floor": (0, 1), "ppr_max_iter": (5, 500),
}


@pytest.fixture(scope="module")
def batch() -> list[dict[str, Any]]:
    return generate_batch(3, 60)


def test_same_seed_and_index_give_the_same_scenario() -> None:
    assert generate_scenario(5, 12) == generate_scenario(5, 12)
    assert generate_scenario(5, 12) != generate_scenario(5, 13)
    assert generate_scenario(5, 12) != generate_scenario(6, 12)


def test_batch_is_the_scenarios_by_index() -> None:
    assert generate_batch(4, 3) == [generate_scenario(4, i) for i in range(3)]
    with pytest.raises(ValueError, match="n must be >= 0"):
        generate_batch(4, -1)


def test_scenarios_are_plain_json(batch: list[dict[str, Any]]) -> None:
    for scenario in batch:
        assert json.loads(json.dumps(scenario)) == scenario


def test_config_stays_inside_the_documented_ranges(batch: list[dict[str, Any]]) -> None:
    for scenario in batch:
        retrieval = scenario["config"]["retrieval"]
        for key, (low, high) in RETRIEVAL_BOUNDS.items():
            assert low <= retrieval[key] <= high, (scenario["name"], key, retrieval[key])
        assert 0 < retrieval["ppr_damping"] < 1
        assert retrieval["ppr_tolerance"] > 0
        assert retrieval["algorithm"] in ("bfs", "ppr")
        assert scenario["config"]["decay"]["half_life_days"] > 0
        assert scenario["config"]["mspr"]["intent"]["strategy"] == "regex"


def test_seeds_are_stored_memories_and_events_are_in_time_order(
    batch: list[dict[str, Any]],
) -> None:
    for scenario in batch:
        stored = {m["id"] for m in scenario["memories"] if m["in_vector_store"]}
        times = [e["at"] for e in scenario["events"] if e.get("at")]
        assert times == sorted(times)
        for event in scenario["events"]:
            assert {s["id"] for s in event.get("seeds", [])} <= stored


def test_batch_reaches_the_corners(batch: list[dict[str, Any]]) -> None:
    seen: Counter[str] = Counter()
    for scenario in batch:
        config = scenario["config"]
        retrieval = config["retrieval"]
        seen["ppr"] += retrieval["algorithm"] == "ppr"
        seen["few iterations"] += retrieval["ppr_max_iter"] < 20
        seen["zero new weights"] += not any(
            retrieval[k] for k in ("delta_personal", "epsilon_frequency", "zeta_success"))
        seen["decay"] += config["decay"]["enabled"]
        seen["soft roles"] += not config["mspr"]["role"]["hard_filter"]
        seen["large graph"] += len(scenario["memories"]) > 100
        for memory in scenario["memories"]:
            seen["archived"] += memory["archived"]
            seen["not in graph"] += not memory["in_graph"]
            seen["not stored"] += not memory["in_vector_store"]
            seen["allowed_roles"] += "allowed_roles" in memory
        keys = Counter((e["src"], e["dst"], e["type"]) for e in scenario["edges"])
        seen["repeated edge key"] += any(n > 1 for n in keys.values())
        seen["self loop"] += any(e["src"] == e["dst"] for e in scenario["edges"])
        seen["dangling edge"] += any(e["dst"].startswith("ghost") for e in scenario["edges"])
        for event in scenario["events"]:
            seeds = event.get("seeds", [])
            seen["no session id"] += event["type"] == "search" and not any(
                event.get(k) for k in ("user_id", "agent_id", "run_id"))
            seen["null seed score"] += any(s["score"] is None for s in seeds)
            seen["duplicate seed"] += len({s["id"] for s in seeds}) < len(seeds)
            seen["limit 0"] += event.get("limit") == 0
            seen["nested filters"] += "metadata" in (event.get("filters") or {})
            seen["anonymous feedback"] += event["type"] == "feedback" and not event["user_id"]
            seen["unknown memory"] += event.get("memory_id") == "m_missing"
    missing = [corner for corner in (
        "ppr", "few iterations", "zero new weights", "decay", "soft roles", "large graph",
        "archived", "not in graph", "not stored", "allowed_roles", "repeated edge key",
        "self loop", "dangling edge", "no session id", "null seed score", "duplicate seed",
        "limit 0", "nested filters", "anonymous feedback", "unknown memory",
    ) if seen[corner] == 0]
    assert missing == []
