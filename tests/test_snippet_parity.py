"""The library, configured from `best_weights.contextkit.json`, ranks as the engine does under
the tuned experiment.

An experiment with non-default ranking settings (algorithm, seed_top_k, expansion depth,
decay, feedback and success settings) is tuned to an arm; `best_config_snippet` turns the
two into the library's config fragment. Each generated scenario then runs twice:

- through the ContextKit library (the adapter), with the snippet as the library's config;
- through msprlab's engine with `tuned_config(experiment, arm)`: the experiment itself.

The outputs must not diverge under `scenario_diff`'s rules (tie-aware order, scores to
1e-9 for BFS and 1e-6 for PPR). So that the comparison can fail, the same scenarios run
through the engine with the library's defaults and the tuned weights and switches only
(what a snippet of the six weights and the switches gives) must rank differently.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import pytest

# The library reads its telemetry switch when first imported, and importorskip imports it.
os.environ.setdefault("OUTHAD_CONTEXTKIT_TELEMETRY", "false")
pytest.importorskip("outhad_contextkit")

from msprlab.datasets.scenario import parse_scenario
from msprlab.datasets.scenario_gen import generate_scenario
from msprlab.engine import EngineConfig, config_from_dict
from msprlab.experiments.measures.scoring import Arm
from msprlab.experiments.parity.adapter import run_scenario_with_contextkit
from msprlab.experiments.parity.scenario_diff import diff_outputs, format_divergences, tolerance_for
from msprlab.experiments.parity.scenario_run import run_parsed
from msprlab.experiments.tune import best_config_snippet, tuned_config

pytestmark = pytest.mark.parity

SEED = 11
SCENARIOS = range(8)
MSPR = {"enabled": True, "intent": {"enabled": True},
        "feedback": {"enabled": True, "boost_delta": 0.25, "penalty_delta": 0.05},
        "frequency": {"enabled": True}, "success": {"enabled": True, "min_sample_size": 1}}
EXPERIMENTS = {
    "ppr": {"context_graph": {
        "enabled": True,
        "retrieval": {"algorithm": "ppr", "seed_top_k": 3, "expansion_depth": 1,
                      "max_candidates": 20, "ppr_damping": 0.7},
        "decay": {"half_life_days": 2.0, "min_edge_weight": 0.2, "min_node_relevance": 0.1}},
        "mspr": MSPR},
    "bfs": {"context_graph": {
        "enabled": True,
        "retrieval": {"seed_top_k": 2, "expansion_depth": 1, "edge_weight_floor": 0.3},
        "decay": {"half_life_days": 3.0, "tick_on_read": True}},
        "mspr": MSPR},
}
ARM = Arm("tuned", (0.5, 0.2, 0.35, 0.1, 0.3, 0.25), intent=True, roles=False)


def _library_scenario(scenario: dict[str, Any], snippet: dict[str, Any]) -> dict[str, Any]:
    """`scenario` with the snippet as its config, in the scenario format the adapter turns
    into `Memory.from_config` keys. A scenario's decay defaults to off, the library's to
    on: a snippet that leaves `decay.enabled` out means the library's default. Edge
    synthesis settings have no scenario counterpart (scenarios give their edges), and the
    adapter switches the context graph on itself."""
    graph = snippet["context_graph"]
    assert set(graph) <= {"enabled", "retrieval", "decay", "edges"} and graph["enabled"]
    mspr = {**snippet["mspr"], "role": {**snippet["mspr"]["role"], "policy": "none"}}
    return {**scenario, "config": {"retrieval": graph["retrieval"],
                                   "decay": {"enabled": True, **graph.get("decay", {})},
                                   "mspr": mspr}}


def _engine(scenario: dict[str, Any], config: EngineConfig) -> dict[str, Any]:
    return run_parsed(replace(parse_scenario(scenario), config=config))


def _keys_exist(model: Any, fragment: dict[str, Any], path: str) -> None:
    """Every key of `fragment` is a field of the library's pydantic model (which would
    ignore an unknown one), and the model holds the fragment's value."""
    for key, value in fragment.items():
        assert key in type(model).model_fields, f"{path}.{key} is not a library setting"
        if isinstance(value, dict):
            _keys_exist(getattr(model, key), value, f"{path}.{key}")
        else:
            assert getattr(model, key) == value, f"{path}.{key}"


@pytest.mark.parametrize("experiment", sorted(EXPERIMENTS))
def test_the_library_ranks_as_the_tuned_experiment_from_the_snippet(experiment: str) -> None:
    from outhad_contextkit.memory.context_graph.config import ContextGraphConfig
    from outhad_contextkit.memory.personalized.config import MSPRConfig

    config = config_from_dict(EXPERIMENTS[experiment])
    snippet = best_config_snippet(config, ARM)
    assert config_from_dict(snippet) == tuned_config(config, ARM)
    _keys_exist(ContextGraphConfig(**snippet["context_graph"]), snippet["context_graph"],
                "context_graph")
    _keys_exist(MSPRConfig(**snippet["mspr"]), snippet["mspr"], "mspr")

    tuned = tuned_config(config, ARM)
    switches_only = tuned_config(config_from_dict({
        "context_graph": {"enabled": True}, "mspr": {
            block: ({"enabled": True} if block != "enabled" else True) for block in MSPR}}),
        ARM)
    differs = 0
    for index in SCENARIOS:
        scenario = generate_scenario(SEED, index)
        library = _library_scenario(scenario, snippet)
        expected = run_scenario_with_contextkit(library)
        got = _engine(scenario, tuned)
        divergences = diff_outputs(expected, got, tolerance=tolerance_for(library))
        if divergences:
            pytest.fail(format_divergences(divergences, scenario=library, expected=expected,
                                           got=got), pytrace=False)
        differs += bool(diff_outputs(expected, _engine(scenario, switches_only),
                                     tolerance=tolerance_for(library)))
    assert differs >= len(SCENARIOS) // 2, (
        f"only {differs} of {len(SCENARIOS)} scenarios rank differently without the "
        "experiment's settings: they do not test that the snippet carries them")
