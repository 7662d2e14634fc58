"""A small generated world for replay tests: a synthetic log with every signal on and its
candidate table (cached per seed for the test session)."""

from __future__ import annotations

import zlib
from dataclasses import replace
from functools import cache
from typing import Any

from msprlab.datasets.clicks import PositionBasedModel
from msprlab.datasets.simulate import simulate_log
from msprlab.datasets.synthetic import SyntheticSpec, generate_synthetic
from msprlab.engine import EngineConfig
from msprlab.engine.batch import WEIGHTS
from msprlab.engine.config import (
    FeedbackConfig,
    FrequencyConfig,
    IntentConfig,
    MsprConfig,
    RoleConfig,
    SuccessConfig,
)
from msprlab.engine.roles import RoleContext, RolePolicy
from msprlab.experiments.replay import CandidateTable, replay

SPEC = SyntheticSpec(n_users=3, memories_per_user=20, queries_per_user=4, span_days=3.0)
GRID = (0.0, 0.0, 0.25, 0.5, 1.0)


class StripedPolicy(RolePolicy):
    """A user-written soft policy: denies every 5th memory, halves every 3rd (by crc32)."""

    def allow(self, candidate: Any, ctx: RoleContext) -> bool:
        return zlib.crc32(str(candidate["id"]).encode()) % 5 != 0

    def reweight(self, candidate: Any, ctx: RoleContext) -> float:
        return 0.5 if zlib.crc32(str(candidate["id"]).encode()) % 3 == 0 else 1.0

    def __repr__(self) -> str:
        return "StripedPolicy()"


def signals(weights: tuple[float, ...], *, intent: bool, roles: bool) -> EngineConfig:
    base = EngineConfig()
    return replace(base, retrieval=replace(base.retrieval, **dict(zip(WEIGHTS, weights,
                                                                       strict=True))),
                   mspr=MsprConfig(enabled=True, intent=IntentConfig(enabled=intent),
                                   feedback=FeedbackConfig(enabled=True),
                                   frequency=FrequencyConfig(enabled=True),
                                   success=SuccessConfig(enabled=True, min_sample_size=1),
                                   role=RoleConfig(enabled=roles, hard_filter=False)))


@cache
def world(seed: int) -> tuple[Any, CandidateTable]:
    """A generated log (the logging ranker has every signal on) and its candidate table."""
    ds, truth = generate_synthetic(SPEC, seed=seed)
    logging = signals((0.55, 0.15, 0.3, 0.2, 0.3, 0.2), intent=True, roles=False)
    log = simulate_log(ds, logging_config=logging, click_model=PositionBasedModel(),
                       n_searches=60, seed=seed, mean_gap_seconds=900.0,
                       query_vectors=truth.query_vectors)
    table = replay(log, signals((0.0,) * 6, intent=True, roles=True), policy=StripedPolicy())
    return log, table
