"""A configuration search over the small generated world of `replay_world`: its table
source (tables built in memory, no cache folder) and the pieces `tune` takes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from msprlab.experiments.measures.metrics import parse_metric
from msprlab.experiments.measures.scoring import Arm, Scorer, arm_of
from msprlab.experiments.measures.splits import time_split
from msprlab.experiments.replay import CandidateTable
from msprlab.experiments.tune import Objective, SearchSpace
from msprlab.experiments.tune.configuration import ConfigSearch
from msprlab.experiments.variants.space import parse_settings
from msprlab.experiments.variants.tables import Point, TableStore

from replay_world import StripedPolicy, signals, world

METRICS = (parse_metric("ndcg@10"), parse_metric("recall@10"))
BASE = signals((0.55, 0.15, 0.3, 0.0, 0.0, 0.0), intent=True, roles=False)
R = "context_graph.retrieval."
SETTINGS = {R + "expansion_depth": [0, 3], R + "algorithm": ["bfs", "ppr"],
            "mspr.feedback.boost_delta": {"low": 0.05, "high": 0.25, "step": 0.05}}


@dataclass(eq=False)
class WorldTables:
    """`stages.configurations.ConfigTables` for a dataset in memory."""

    ds: Any
    split: np.ndarray
    store: TableStore = field(init=False)

    def __post_init__(self) -> None:
        self.store = TableStore(self.ds, None, frequency="logged", policy=StripedPolicy(),
                                memory=64)

    def key(self, point: Point) -> str:
        return self.store.key(point)

    def tables(self, points: Sequence[Point]) -> list[CandidateTable]:
        return self.store.tables(points)

    def scorer(self, point: Point, table: CandidateTable, window: str) -> Scorer:
        return Scorer.of(table.subset(self.split == window), METRICS)


def search(seed: int = 1, *, settings: dict[str, Any] | None = None, points_per_state: int = 3,
           trials_per_point: int = 3) -> tuple[ConfigSearch, Scorer, Arm, SearchSpace]:
    """The configuration search of the world, its baseline train scorer, base arm and
    weight space."""
    log, _ = world(seed)
    tables = TableStore(log, None, frequency="logged", policy=StripedPolicy())
    first = tables.table(Point(BASE))
    split = time_split(first.searches, test_fraction=0.3).cast(str).to_numpy()
    source = WorldTables(log, split)
    space = parse_settings(SETTINGS if settings is None else settings, BASE, limit=None)
    config = ConfigSearch(space, BASE, None, source, points_per_state, trials_per_point)
    train = source.scorer(Point(BASE), first, "train")
    weights = SearchSpace({"alpha_dense": (0.0, 1.0), "gamma_graph": (0.0, 1.0),
                           "delta_personal": (0.0, 1.0)})
    base = arm_of("start", BASE)
    return config, train, base, weights


OBJECTIVE = [Objective("ndcg@10")]
