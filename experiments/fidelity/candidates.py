"""Which settings would explain a replay that is not production: candidates, tried.

When the definition's replay falls below a threshold, the settings production may have run
instead are tried, each replayed and scored by the same figures (`figures.measure`):

- **decay**: switched the other way; when on, at the definition's half-life, the library's
  default (30 days) and the half-life the snapshot's edges imply (a decayed edge of a type
  the library creates at a fixed weight, REPLY_TO 1.0, DOCUMENT_LINK 0.8, TEMPORAL_NEXT 0.6,
  was multiplied by exp(-lambda * hours) between its creation and its last update: the
  median lambda gives the half-life);
- **feedback**: the deltas production's `delta_applied` column shows (the most common
  positive delta is the boost, the most common negative one the penalty; a boost cut short
  shows the cap), and feedback switched on when the definition has it off but the
  artifacts hold verdict records; success recorded or not, as production's success store
  shows;
- **weights** (ranking only, no replay): on the best state's table, delta (personal) and
  zeta (success) over a small grid, scored by the share of verdicted memories in the top k
  and the recorded ranks. Epsilon (frequency) cannot be told apart: the artifacts keep no
  access log, so the replay's frequency term is zero for every candidate.

`Candidate.changes` lists what differs from the definition, as ContextKit config keys.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl

from msprlab.engine import EngineConfig
from msprlab.engine.config import DecayConfig

from .figures import Figures

__all__ = ["Candidate", "decay_options", "feedback_options", "half_life_from_edges",
           "setting_changes", "success_options", "weight_options"]

# The weight the library gives an edge of these types at creation (MSPR.md section 4).
_CREATED_AT = {"REPLY_TO": 1.0, "DOCUMENT_LINK": 0.8, "TEMPORAL_NEXT": 0.6}
# The weights tried for delta (personal) and zeta (success), beside the definition's.
WEIGHT_GRID = (0.0, 0.05, 0.1, 0.2, 0.3)
# ContextKit keys of the settings a candidate may change.
_KEYS = {
    ("decay", "enabled"): "context_graph.decay.enabled",
    ("decay", "half_life_days"): "context_graph.decay.half_life_days",
    ("mspr", "enabled"): "mspr.enabled",
    ("feedback", "enabled"): "mspr.feedback.enabled",
    ("success", "enabled"): "mspr.success.enabled",
    ("feedback", "boost_delta"): "mspr.feedback.boost_delta",
    ("feedback", "penalty_delta"): "mspr.feedback.penalty_delta",
    ("feedback", "max_boost_per_memory"): "mspr.feedback.max_boost_per_memory",
    ("retrieval", "delta_personal"): "context_graph.retrieval.delta_personal",
    ("retrieval", "zeta_success"): "context_graph.retrieval.zeta_success",
    ("retrieval", "epsilon_frequency"): "context_graph.retrieval.epsilon_frequency",
}


@dataclass(frozen=True)
class Candidate:
    """One setting tried: its name, configuration, what it changes (ContextKit key ->
    (the definition's value, this one's)) and its figures."""

    name: str
    config: EngineConfig
    changes: dict[str, tuple[Any, Any]]
    figures: Figures

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "changes": {k: list(v) for k, v in self.changes.items()},
                "figures": self.figures.as_dict()}


def _values(config: EngineConfig) -> dict[str, Any]:
    blocks = {"decay": config.decay, "mspr": config.mspr, "feedback": config.mspr.feedback,
              "success": config.mspr.success, "retrieval": config.retrieval}
    return {key: getattr(blocks[block], name) for (block, name), key in _KEYS.items()}


def setting_changes(definition: EngineConfig, candidate: EngineConfig,
                    ) -> dict[str, tuple[Any, Any]]:
    """The settings (of those a candidate may change) whose values differ; a half-life
    is not a difference while decay is off on both sides."""
    before, after = _values(definition), _values(candidate)
    changes = {key: (before[key], after[key]) for key in before if before[key] != after[key]}
    if not (definition.decay.enabled or candidate.decay.enabled):
        changes.pop("context_graph.decay.half_life_days", None)
    return changes


def half_life_from_edges(edges: pl.DataFrame) -> float | None:
    """The decay half-life in days the snapshot's edges imply (module docstring), or None
    when no edge of a fixed creation weight was decayed."""
    rows = edges.filter(pl.col("type").is_in(list(_CREATED_AT)), pl.col("updated_at")
                        > pl.col("created_at")).select(
        "weight", pl.col("type").replace_strict(_CREATED_AT, return_dtype=pl.Float64)
        .alias("w0"), hours=(pl.col("updated_at") - pl.col("created_at")).dt
        .total_microseconds() / 3.6e9).filter(pl.col("weight") < pl.col("w0") * (1 - 1e-9),
                                               pl.col("weight") > 0)
    if not rows.height:
        return None
    rates = np.log(rows["w0"].to_numpy() / rows["weight"].to_numpy()) / rows["hours"].to_numpy()
    rate = float(np.median(rates))
    return math.log(2) / (rate * 24.0) if rate > 0 else None


def decay_options(config: EngineConfig, edges: pl.DataFrame,
                  ) -> Iterator[tuple[str, DecayConfig]]:
    """The decay settings to try besides the definition's (module docstring)."""
    decay = config.decay
    estimate = half_life_from_edges(edges)
    if decay.enabled:
        yield "decay off", replace(decay, enabled=False)
    halves = [h for h in (decay.half_life_days, DecayConfig().half_life_days, estimate)
              if h is not None]
    for half in dict.fromkeys(round(h, 3) for h in halves):
        if decay.enabled and half == round(decay.half_life_days, 3):
            continue
        yield f"decay on, half-life {half:g} d", replace(decay, enabled=True,
                                                         half_life_days=float(half))


def _mode(values: list[float]) -> float | None:
    if not values:
        return None
    counts = Counter(round(v, 9) for v in values)
    return max(counts.items(), key=lambda item: (item[1], abs(item[0])))[0]


def feedback_options(config: EngineConfig, records: pl.DataFrame,
                     ) -> Iterator[tuple[str, EngineConfig]]:
    """Feedback settings production's verdict records point to, where they differ."""
    if not records.height:
        return
    deltas = records["delta_applied"].to_list()
    helpful = records["helpful"].to_list()
    boost = _mode([d for d, h in zip(deltas, helpful, strict=True) if h and d > 0])
    penalty = _mode([-d for d, h in zip(deltas, helpful, strict=True) if not h and d < 0])
    feedback = config.mspr.feedback
    cap = feedback.max_boost_per_memory
    if boost is not None:  # a helpful verdict cut short by the cap shows it
        net: dict[tuple[Any, Any], float] = {}
        for memory, user, is_helpful, delta in records.select(
                "memory_id", "user_id", "helpful", "delta_applied").iter_rows():
            key = (memory, user)
            before = net.get(key, 0.0)
            if is_helpful and 0 <= delta < boost - 1e-9:
                cap = round(max(0.0, before) + delta, 9)
            net[key] = before + delta
    found = replace(feedback, enabled=True,
                    boost_delta=feedback.boost_delta if boost is None else float(boost),
                    penalty_delta=feedback.penalty_delta if penalty is None else float(penalty),
                    max_boost_per_memory=float(min(1.0, cap)))
    mspr = replace(config.mspr, enabled=True, feedback=found)
    candidate = replace(config, mspr=mspr)
    if candidate != config:
        yield (f"feedback as recorded (boost {found.boost_delta:g}, penalty "
               f"{found.penalty_delta:g}, cap {found.max_boost_per_memory:g})"), candidate


def success_options(config: EngineConfig, records: pl.DataFrame,
                    ) -> Iterator[tuple[str, EngineConfig]]:
    """Success recorded or not, as production's success store shows it, where the
    definition says otherwise (nothing when no success store was ingested)."""
    rowed = records["success_row"].drop_nulls()
    if not rowed.len():
        return
    mspr = config.mspr
    recorded = mspr.enabled and mspr.success.enabled
    if bool(rowed.any()) != recorded:
        on = bool(rowed.any())
        success = replace(mspr.success, enabled=on)
        yield (f"success {'on' if on else 'off'}",
               replace(config, mspr=replace(mspr, enabled=mspr.enabled or on, success=success)))


def weight_options(config: EngineConfig) -> Iterator[EngineConfig]:
    """The definition's weights, then delta and zeta over `WEIGHT_GRID` (the blocks they
    need switched on with them; intent and the other weights as defined)."""
    yield config
    retrieval, mspr = config.retrieval, config.mspr
    for delta, zeta in itertools.product(WEIGHT_GRID, WEIGHT_GRID):
        if (delta, zeta) == (retrieval.delta_personal, retrieval.zeta_success):
            continue
        if (delta > 0 and not mspr.feedback.enabled) or (zeta > 0 and not mspr.success.enabled):
            continue
        yield replace(config, retrieval=replace(retrieval, delta_personal=delta,
                                                zeta_success=zeta))


def best(candidates: list[Candidate], score: Callable[[Figures], tuple[float, ...]],
         ) -> Candidate:
    """The candidate with the highest score; the earliest on a tie (the definition first)."""
    return max(enumerate(candidates), key=lambda ic: (score(ic[1].figures), -ic[0]))[1]
