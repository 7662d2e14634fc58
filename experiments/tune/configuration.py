"""A search over the whole ranking configuration: the settings beside the weights
(`[tune.settings]`, `variants.space`), in a study of its own.

A trial suggests its settings first: with the experiment's configuration they make its
point (an engine configuration and a search limit), whose candidate table the table
source gives (`stages.configurations.ConfigTables`: cached by exactly the settings that
reach it, built in one walk per recorded state). It then suggests the weights as a
weights-only trial does and scores them on the point's train table. Its objectives are the
metrics' means over the train searches they cover, as in a weights-only study, and
`cost`: the engine's time per search on the point's table, measured in the replay that
built it (minimised; a timing, so a study that minimises it is not repeatable trial for
trial).

The trials run in rounds (`rounds`): a trial whose settings the sampler chose starts a
state group; `points_per_state - 1` trials queued with its state settings (feedback,
decay) fixed join it, so their points share one walk over the timeline; each new point
then gets `trials_per_point - 1` trials queued with all its settings fixed, which search
its weights on the table built for it.

A few trials per point cannot tune its weights as a weights-only study of hundreds tunes
them, and a point is judged by its best weights: so the search starts where the
weights-only study ended. With `start` (that study's best weights, when one ran), trial 1
scores them on the configured settings (after the baseline, trial 0: the configured
settings at zero new weights), and the first of each new point's queued trials (one
objective) takes the weights of the study's best trial so far; the others are the
sampler's.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import optuna

from msprlab.engine import EngineConfig

from ..errors import ExperimentError
from ..measures.scoring import Arm, Scorer
from ..replay import CandidateTable
from ..variants.settings import SETTINGS
from ..variants.space import SettingsSpace
from ..variants.tables import Point
from .attrs import COST_ATTR, SAMPLER_ATTR, TABLE_ATTR, WORKER_ATTR
from .space import Objective, SamplerName, SearchSpace, objective_means, trial_function

__all__ = ["ConfigSearch", "ConfigTrialFunction", "TableSource", "config_trial_function",
           "objective_values"]


class TableSource(Protocol):
    """Where a configuration search's tables come from (`stages.configurations`)."""

    def key(self, point: Point) -> str: ...

    def tables(self, points: Sequence[Point]) -> list[CandidateTable]: ...

    def scorer(self, point: Point, table: CandidateTable, window: str) -> Scorer: ...


@dataclass(frozen=True, eq=False)
class ConfigSearch:
    """The settings a study searches beside the weights, over `base` (the experiment's
    engine configuration; `limit`: its replay limit, None for each logged search's own),
    the source of the points' tables, and how trials are grouped (module docstring)."""

    settings: SettingsSpace
    base: EngineConfig
    limit: int | None
    source: TableSource
    points_per_state: int = 4
    trials_per_point: int = 4
    # A weights-only study's best weights (its parameters), if one ran: trial 1 scores them
    # on the configured settings, and each new point's first queued trial starts from the
    # study's best weights so far (module docstring).
    start: dict[str, float] | None = None
    # The first state groups' settings are drawn at random (`rounds`).
    startup_groups: int = 3

    def as_dict(self) -> dict[str, Any]:
        """What a resumed study must agree on."""
        return {"settings": self.settings.as_dict(), "points_per_state": self.points_per_state,
                "trials_per_point": self.trials_per_point, "start": self.start,
                "startup_groups": self.startup_groups}

    def baseline(self) -> dict[str, Any]:
        """The configured value of each searched setting: trial 0's settings."""
        return self.settings.base_values(self.base, self.limit)

    def state_params(self, values: dict[str, Any]) -> dict[str, Any]:
        """The values of the searched settings that change the recorded state."""
        return {k: v for k, v in values.items() if SETTINGS[k].touches == "state"}

    def point(self, values: dict[str, Any]) -> Point:
        return self.settings.point(self.base, values, self.limit)


@dataclass(frozen=True, eq=False)
class ConfigTrialFunction:
    """A configuration trial: settings, then weights (picklable: workers get it by value
    and load the store themselves)."""

    search: ConfigSearch
    base: Arm
    space: SearchSpace
    objectives: tuple[Objective, ...]
    sampler: SamplerName = "tpe"

    def settings(self, trial: optuna.Trial) -> dict[str, Any]:
        """The trial's settings (suggested, or fixed when it was queued with them)."""
        return {key: r.suggest(trial) for key, r in self.search.settings.ranges.items()}

    def point(self, trial: optuna.Trial) -> Point:
        return self.search.point(self.settings(trial))

    def score(self, trial: optuna.Trial, point: Point,
              table: CandidateTable) -> float | tuple[float, ...]:
        """The trial's weights scored on its point's train table."""
        source = self.search.source
        cost = float(table.meta["cost"]["ms_per_search"])
        trial.set_user_attr(TABLE_ATTR, source.key(point)[:16])
        trial.set_user_attr(COST_ATTR, cost)
        scorer = source.scorer(point, table, "train")
        values = objective_values(scorer, self.space.suggest(trial, self.base),
                                  self.objectives, cost=cost)
        return values[0] if len(values) == 1 else values

    def __call__(self, trial: optuna.Trial) -> float | tuple[float, ...]:
        """One trial alone: its point's table built (or found) for it."""
        trial.set_user_attr(SAMPLER_ATTR, self.sampler)
        trial.set_user_attr(WORKER_ATTR, f"{socket.gethostname()}:{os.getpid()}")
        point = self.point(trial)
        return self.score(trial, point, self.search.source.tables([point])[0])


def objective_values(scorer: Scorer, arm: Arm, objectives: Sequence[Objective], *,
                     cost: float | None = None) -> tuple[float, ...]:
    """Each objective's value of `arm` on `scorer` as a trial computes it: a metric's mean
    over the searches it covers (`space.objective_means`), `cost` as given."""
    values = scorer.values(arm)
    labels = scorer.table.searches["intent_label"].to_numpy()
    means = iter(objective_means(values, [o for o in objectives if not o.is_cost], labels))
    out = []
    for o in objectives:
        if o.is_cost:
            if cost is None:
                raise ValueError("objective_values: the cost objective needs the table's cost")
            out.append(cost)
        else:
            out.append(next(means))
    return tuple(out)


def config_trial_function(train: Scorer, base: Arm, space: SearchSpace,
                          objectives: tuple[Objective, ...], search: ConfigSearch, *,
                          pruner: str, sampler: SamplerName = "tpe") -> ConfigTrialFunction:
    """The trial function of a configuration search, its objectives checked on `train`
    (the configured point's train table) as a weights-only study checks them."""
    if pruner != "none":
        raise ExperimentError(f"tune: pruner={pruner!r} reports a trial's steps as it is "
                              "scored; a configuration search scores its trials in rounds, "
                              "so it runs without a pruner (tune.pruner = \"none\")")
    if sampler == "cmaes":
        raise ExperimentError("tune: sampler='cmaes' samples continuous parameters only, and a "
                              "configuration search has integer and categorical settings; "
                              "use 'tpe' or 'random'")
    if not 1 <= search.points_per_state <= 64 or not 1 <= search.trials_per_point <= 1000:
        raise ExperimentError(f"tune: points_per_state must be in [1, 64] and "
                              f"trials_per_point in [1, 1000], got {search.points_per_state} "
                              f"and {search.trials_per_point}")
    metrics = tuple(o for o in objectives if not o.is_cost)
    if not metrics:
        raise ExperimentError("tune: a configuration search needs a metric to maximise "
                              "beside cost, e.g. objectives = [\"ndcg@10\", \"cost\"]")
    trial_function(train, base, space, metrics, pruner="none")  # the metrics' checks
    return ConfigTrialFunction(search, base, space, objectives, sampler)
