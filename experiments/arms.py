"""Every configuration an experiment scores (the ladder, the side-effect arms, the test
window's references, `tuned`), the weight search's starting point, and the arms'
definitions as a frame."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from msprlab.engine import EngineConfig

from .ablation import REFERENCES, ladder, side_effects, switches, zero_new_weights
from .experiment_config import ExperimentConfig
from .measures.scoring import Arm, arm_of

__all__ = ["ExperimentArms", "arms_frame", "baseline_arm", "experiment_arms"]


@dataclass(frozen=True)
class ExperimentArms:
    """Every configuration an experiment scores: the ladder's arms (in order), the
    side-effect arms (`on-zero` less one recording block), the references the test window
    compares the tuned weights against, and `tuned` (the engine config as given, whose six
    weights the search replaces)."""

    ladder: dict[str, EngineConfig]
    effects: dict[str, EngineConfig]
    references: dict[str, EngineConfig]
    tuned: EngineConfig

    def every(self) -> dict[str, EngineConfig]:
        return {**self.ladder, **self.effects, **self.references, "tuned": self.tuned}


def experiment_arms(cfg: ExperimentConfig, *, ablation: bool) -> ExperimentArms:
    """The configurations of an experiment; without `ablation` only the references and
    `tuned` (what `tune` needs for its test window)."""
    refs = REFERENCES if cfg.engine.mspr.enabled else ("off",)
    arms = ladder(cfg.engine, cfg.ablation.arms, cfg.ablation.weights) if ablation else {}
    effects = side_effects(cfg.engine) if ablation and "on-zero" in arms else {}
    return ExperimentArms(arms, effects, ladder(cfg.engine, refs, {}), cfg.engine)


def baseline_arm(cfg: ExperimentConfig) -> Arm:
    """The tuning's starting point, enqueued as its first trial: the configured switches,
    new weights at 0 (with intent routing as configured, so not `on-zero` when it is on)."""
    return arm_of("start", zero_new_weights(cfg.engine))


def arms_frame(arms: Mapping[str, Arm], configs: Mapping[str, EngineConfig]) -> pl.DataFrame:
    """One row per arm: its full definition, the switches it runs with and the six weights
    (`intent` and `roles` as the arm scores them)."""
    rows = []
    for name, arm in arms.items():
        switch = switches(configs[name])
        rows.append({"name": name, **{k: switch[k] for k in ("mspr", "feedback", "success",
                                                             "frequency")},
                     **arm.as_dict()})
    return pl.DataFrame(rows)
