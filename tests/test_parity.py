"""The engine agrees with the ContextKit library on random scenarios (SCENARIOS.md).

Each generated scenario runs through the library (via the adapter) and through msprlab's
engine; the outputs must not diverge under the rules of `scenario_diff`. A failure prints
the first divergence of each event with the two rankings side by side.
"""

from __future__ import annotations

import os

import pytest

# The library reads its telemetry switch when first imported, and importorskip imports it.
os.environ.setdefault("OUTHAD_CONTEXTKIT_TELEMETRY", "false")
pytest.importorskip("outhad_contextkit")

from msprlab.datasets.scenario_gen import generate_scenario
from msprlab.experiments.parity.adapter import run_scenario_with_contextkit
from msprlab.experiments.parity.scenario_diff import diff_outputs, format_divergences, tolerance_for
from msprlab.experiments.parity.scenario_run import run_scenario

pytestmark = pytest.mark.parity

SEED = 7
COUNT = 150


@pytest.mark.parametrize("index", range(COUNT), ids=lambda i: f"scn_{SEED}_{i:04d}")
def test_engine_matches_library(index: int) -> None:
    scenario = generate_scenario(SEED, index)
    expected = run_scenario_with_contextkit(scenario)
    got = run_scenario(scenario)
    divergences = diff_outputs(expected, got, tolerance=tolerance_for(scenario))
    if divergences:
        pytest.fail(format_divergences(divergences, scenario=scenario, expected=expected,
                                       got=got), pytrace=False)
