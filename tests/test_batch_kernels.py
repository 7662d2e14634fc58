"""The compiled batch kernels give, bit for bit, what the NumPy formulation gives.

`scores` / `ranks_of` (numba) against `scores_numpy` / `ranks_of_numpy` (the NumPy passes
they replaced) and `row_ranks` (a full stable sort per search), on random blocks built to
tie: features, relevance and weights from a few values, role multipliers 0, 0.5, 1 and 2,
limits below and above the number of candidates, empty searches and every intent label.
Scores are compared as bytes, so even the sign of a zero must agree.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msprlab.engine.batch import (
    FEATURES,
    INTENTS,
    CandidateBlock,
    _kernels,
    plan_rows,
    ranks_of,
    ranks_of_numpy,
    row_ranks,
    scores,
    scores_numpy,
    warm_up,
)

VALUES = np.array([0.0, 0.0, 0.25, 0.5, 1.0, -0.5, 1 / 3, 0.1, 0.2])
WEIGHTS = (0.0, 0.25, 0.5, 1.0, 0.1, 0.3, 0.7)


def random_block(rng: np.random.Generator, n_searches: int, width: int,
                 *, roles: bool) -> CandidateBlock:
    counts = rng.integers(0, width + 1, n_searches)
    search = rng.permutation(np.repeat(np.arange(n_searches), counts))  # searches interleaved
    n = search.size
    features = rng.choice(VALUES, (len(FEATURES), n))
    if n:  # a few continuous values among the ties
        features[0, rng.random(n) < 0.3] = rng.random()
    role = rng.choice([1.0, 1.0, 1.0, 0.5, 0.0, 2.0], n) if roles else np.ones(n)
    return CandidateBlock.build(
        search=search, features=features, relevance=rng.choice([0.0, 0.5, 0.8, 1.0], n), role=role,
        search_intent=rng.integers(0, len(INTENTS), n_searches),
        search_limit=rng.integers(0, width + 3, n_searches))


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_searches=st.integers(1, 25),
       width=st.integers(0, 14), roles=st.booleans(), intent=st.booleans(),
       weights=st.tuples(*[st.sampled_from(WEIGHTS) | st.floats(0.0, 1.0)] * 6))
def test_kernels_equal_the_numpy_formulation_bit_for_bit(seed, n_searches, width, roles,
                                                         intent, weights) -> None:
    rng = np.random.default_rng(seed)
    block = random_block(rng, n_searches, width, roles=roles)
    fast = scores(block, weights, intent=intent)
    slow = scores_numpy(block, weights, intent=intent)
    assert fast.tobytes() == slow.tobytes()
    everything = np.arange(block.n_rows)
    some = rng.choice(block.n_rows, rng.integers(0, block.n_rows + 1), replace=False)
    for rows in (everything, some, plan_rows(block, some)):
        for apply_roles in (True, False):
            expected = ranks_of_numpy(block, slow, rows, roles=apply_roles)
            assert ranks_of(block, fast, rows, roles=apply_roles).tolist() == expected.tolist()
    assert ranks_of(block, fast, everything).tolist() == row_ranks(block, slow).tolist()


@pytest.mark.parametrize("limit", [100, 10])
def test_kernels_on_a_trial_sized_block(limit: int) -> None:
    """Long rows (the vectorised loops' main bodies), many ties, roles in most searches."""
    rng = np.random.default_rng(7)
    n_searches, width = 400, 50
    n = n_searches * width
    features = np.stack([rng.random(n), np.round(rng.random(n) * 4) / 4,
                         np.where(rng.random(n) < 0.2, 1.0, rng.random(n) * 0.6),
                         np.round(rng.random(n), 2), np.tanh(rng.normal(0, 0.1, n)),
                         np.where(rng.random(n) < 0.9, 0.0, rng.random(n))])
    role = np.where(rng.random(n) < 0.1, 0.5, 1.0)
    role[rng.random(n) < 0.02] = 0.0
    block = CandidateBlock.build(
        search=np.repeat(np.arange(n_searches), width), features=features,
        relevance=np.clip(rng.normal(0.8, 0.15, n), 0, 1), role=role,
        search_intent=rng.integers(0, len(INTENTS), n_searches),
        search_limit=np.full(n_searches, limit))
    plan = plan_rows(block, rng.choice(n, 3 * n_searches, replace=False))
    for weights in (rng.random(6), (0.5, 0.25, 0.0, 0.0, 0.25, 0.0), (0.0,) * 6):
        fast, slow = scores(block, weights), scores_numpy(block, weights)
        assert fast.tobytes() == slow.tobytes()
        for apply_roles in (True, False):
            assert ranks_of(block, fast, plan, roles=apply_roles).tolist() == \
                ranks_of_numpy(block, slow, plan, roles=apply_roles).tolist()


def test_scores_into_any_out_and_checks_shapes() -> None:
    block = random_block(np.random.default_rng(3), 6, 8, roles=True)
    weights = (0.5, 0.25, 0.1, 0.0, 0.3, 0.2)
    expected = scores_numpy(block, weights)
    strided = np.zeros(2 * block.n_rows)[::2]  # not contiguous: filled through scratch
    assert scores(block, weights, out=strided) is strided
    assert strided.tobytes() == expected.tobytes()
    with pytest.raises(ValueError):
        scores(block, weights, out=np.empty(block.n_rows + 1))
    other = random_block(np.random.default_rng(4), 3, 4, roles=False)
    with pytest.raises(ValueError, match="do not match"):
        ranks_of(block, expected, plan_rows(other, [0]))
    with pytest.raises(ValueError, match="do not match"):
        ranks_of(block, expected[:-1], [0])


def test_warm_up_compiles_what_the_first_trial_uses() -> None:
    warm_up()
    block = random_block(np.random.default_rng(5), 4, 6, roles=True)
    kernels = _kernels()
    before = {name: len(k.signatures) for name, k in kernels._asdict().items()}
    ranks_of(block, scores(block, (0.5, 0.2, 0.1, 0.0, 0.3, 0.1)), np.arange(block.n_rows))
    assert {name: len(k.signatures) for name, k in kernels._asdict().items()} == before
