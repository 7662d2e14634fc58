"""`build_state` of a scenario: embeddings made in bulk are `Embedding.of` each, and the
collector's thresholds come back after `spaced_gc`."""

from __future__ import annotations

import gc

import numpy as np

from msprlab.datasets.scenario import parse_scenario
from msprlab.datasets.scenario_gen import generate_scenario
from msprlab.engine.graph import Embedding
from msprlab.experiments.parity.scenario_run import build_state, spaced_gc


def test_bulk_embeddings_are_embedding_of_each_vector() -> None:
    seen_lengths: set[int] = set()
    for index in range(60):
        scenario = parse_scenario(generate_scenario(5, index))
        embeddings = build_state(scenario).graph.embeddings
        expected = {m.id: Embedding.of(m.embedding) for m in scenario.memories
                    if m.in_graph and m.embedding is not None}
        assert list(embeddings) == list(expected)  # the same ids, in the same order
        for memory_id, want in expected.items():
            got = embeddings[memory_id]
            assert got.vector.dtype == np.float64 and got.vector.shape == want.vector.shape
            assert got.vector.tobytes() == want.vector.tobytes()
            assert type(got.norm_sq) is float and got.norm_sq == want.norm_sq
            seen_lengths.add(want.vector.size)
    assert {0, 7, 8} <= seen_lengths  # empty and length-mismatched vectors were among them


def test_spaced_gc_puts_the_thresholds_back() -> None:
    before = gc.get_threshold()
    with spaced_gc(young=before[0] + 1000):
        assert gc.get_threshold() == (before[0] + 1000, *before[1:])
    assert gc.get_threshold() == before
    gc.disable()
    try:
        with spaced_gc():
            assert not gc.isenabled() and gc.get_threshold() == before
    finally:
        gc.enable()
