"""`[tune.settings]`: the ranking settings a configuration search explores, read strictly
(every value the library accepts, the configured value among them, a setting that can act)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import optuna
import pytest

from msprlab.engine import EngineConfig
from msprlab.engine.config import FeedbackConfig, MsprConfig, SuccessConfig
from msprlab.experiments.errors import ExperimentError
from msprlab.experiments.variants.settings import LIMIT
from msprlab.experiments.variants.space import parse_settings

R = "context_graph.retrieval."
BASE = replace(EngineConfig(), mspr=MsprConfig(enabled=True,
                                               feedback=FeedbackConfig(enabled=True),
                                               success=SuccessConfig(enabled=True)))
SHIPPED = {
    R + "expansion_depth": [1, 3],
    R + "max_candidates": {"low": 25, "high": 200, "step": 25},
    R + "edge_weight_floor": {"low": 0.0, "high": 0.2, "step": 0.05},
    R + "algorithm": ["bfs", "ppr"],
    "mspr.feedback.boost_delta": {"low": 0.05, "high": 0.3, "step": 0.05},
    "mspr.feedback.pin_floor_on_boost": [True, False],
    LIMIT: {"choices": [10, 20]},
}


def test_a_space_lists_its_values_and_starts_from_the_configured_ones() -> None:
    space = parse_settings(SHIPPED, BASE, limit=10)
    assert space.keys == [R + "expansion_depth", R + "max_candidates", R + "edge_weight_floor",
                          R + "algorithm", "mspr.feedback.boost_delta",
                          "mspr.feedback.pin_floor_on_boost", LIMIT]  # SETTINGS order
    assert space.ranges[R + "edge_weight_floor"].values() == [0.0, 0.05, 0.1, 0.15, 0.2]
    assert space.ranges[R + "max_candidates"].values()[:3] == [25, 50, 75]
    assert space.state_keys() == ["mspr.feedback.boost_delta",
                                  "mspr.feedback.pin_floor_on_boost"]
    start = space.base_values(BASE, 10)
    assert start == {R + "expansion_depth": 2, R + "max_candidates": 50,
                     R + "edge_weight_floor": 0.1, R + "algorithm": "bfs",
                     "mspr.feedback.boost_delta": 0.15,
                     "mspr.feedback.pin_floor_on_boost": True, LIMIT: 10}
    point = space.point(BASE, {**start, R + "algorithm": "ppr", LIMIT: 20})
    assert point.config.retrieval.algorithm == "ppr" and point.limit == 20
    assert space.point(BASE, start).config == BASE


def test_a_trial_suggests_every_setting_on_its_grid() -> None:
    space = parse_settings(SHIPPED, BASE, limit=10)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen: dict[str, set[Any]] = {k: set() for k in space.keys}
    for _ in range(60):
        trial = study.ask()
        for key, r in space.ranges.items():
            value = r.suggest(trial)
            assert value in r.values(), (key, value)
            seen[key].add(value)
        study.tell(trial, 0.0)
    assert seen[R + "edge_weight_floor"] <= {0.0, 0.05, 0.1, 0.15, 0.2}
    assert len(seen[R + "edge_weight_floor"]) > 2


@pytest.mark.parametrize("raw, message", [
    ({"context_graph.retrieval.alpha_dense": [0, 1]}, "not a ranking setting"),
    ({R + "expansion_depth": [1, 5]}, "expansion_depth must be in [0, 4], got 5"),
    ({R + "ppr_damping": {"low": 0.5, "high": 1.0, "step": 0.25},
      R + "algorithm": ["bfs", "ppr"]}, "ppr_damping must be in (0, 1), got 1.0"),
    ({R + "edge_weight_floor": [0.0, 0.2]}, "searched on a grid"),
    ({R + "edge_weight_floor": {"low": 0.0, "high": 0.2}}, "add step"),
    ({R + "edge_weight_floor": {"low": 0.0, "high": 0.2, "step": 0.03}},
     "whole number of steps"),
    ({R + "max_candidates": {"low": 100, "high": 200, "step": 50}},
     "configured value 50 is not among the values searched [100, 150, 200]"),
    ({R + "algorithm": ["bfs", "dfs"]}, "must be one of 'bfs', 'ppr'"),
    ({R + "algorithm": {"choices": ["bfs", "bfs"]}}, "name a value twice"),
    ({R + "expansion_depth": {"low": 1, "high": 3, "by": 1}}, "unknown key 'by'"),
    ({R + "ppr_damping": {"low": 0.5, "high": 0.85, "step": 0.35}},
     "cannot act in this experiment: the algorithm is BFS"),
    ({R + "algorithm": ["ppr"], R + "expansion_depth": [1, 3]},
     "configured value 'bfs' is not among"),
    ({LIMIT: {"choices": [0, 10]}}, "search.limit must be an integer >= 1"),
])
def test_a_space_the_library_or_the_replay_cannot_take_is_refused_naming_the_key(
        raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ExperimentError, match=_literal(message)):
        parse_settings(raw, BASE, limit=10)


def test_a_searched_limit_needs_a_replay_limit_to_start_from() -> None:
    with pytest.raises(ExperimentError, match=r"set replay\.limit"):
        parse_settings({LIMIT: {"choices": [10, 20]}}, BASE, limit=None)


def test_a_setting_whose_block_is_off_is_refused() -> None:
    off = replace(BASE, mspr=replace(BASE.mspr, feedback=FeedbackConfig(enabled=False)))
    with pytest.raises(ExperimentError, match=r"mspr\.feedback is off"):
        parse_settings({"mspr.feedback.boost_delta": {"low": 0.05, "high": 0.3, "step": 0.05}},
                       off, limit=None)
    no_decay = replace(BASE, decay=replace(BASE.decay, tick_on_read=False))
    with pytest.raises(ExperimentError, match="decay"):
        parse_settings({"context_graph.decay.half_life_days": {"low": 10, "high": 30,
                                                               "step": 10}},
                       no_decay, limit=None)


def test_the_notes_say_where_seed_top_k_meets_the_limit() -> None:
    space = parse_settings({R + "seed_top_k": [5, 20]}, BASE, limit=None)
    assert any("each search keeps its logged limit" in n for n in space.notes(BASE, None))
    assert any("above 10" in n for n in space.notes(BASE, 10))


def _literal(text: str) -> str:
    import re
    return re.escape(text)
