"""The ablation ladder: the context graph alone, what recording does at zero weight, each
signal switched on alone, all.

Every arm is a full engine configuration derived from the experiment's:

- `off`: MSPR disabled, the context graph alone (α, β, γ as configured; δ = ε = ζ = 0).
  No verdict bumps relevance and no access is counted (MSPR.md section 17): the ranking
  the ContextKit docs call "without MSPR", and the reference the rollout decision is about;
- `on-zero`: MSPR and its blocks (feedback, success, frequency) on as configured, δ = ε =
  ζ = 0, intent routing and roles off. For the same state it ranks exactly as `off`; over a
  log it differs by what the blocks record (helpful verdicts raise relevance, accesses move
  decay recency), so it is an arm of its own;
- `personal` / `frequency` / `success`: `on-zero` with δ / ε / ζ set to the ablation
  weight; `intent`: `on-zero` with routing on; `roles`: with the role policy on;
- `all`: everything at once.

`side_effects` gives `on-zero` with each recording block switched off in turn
(`no-feedback`, `no-success`, `no-frequency`): how far each block moves rankings at zero
weight. Arms that share a table key (`replay.table_key`) are scored from one replay;
`off` and each side-effect arm replay their own state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import polars as pl

from msprlab.engine import EngineConfig

from .errors import ExperimentError
from .measures.scoring import Arm, arm_of

__all__ = ["BLOCKS", "NEEDS", "REFERENCES", "AblationResult", "ladder", "ladder_arms",
           "side_effects", "switches", "zero_new_weights"]

# The state switch an arm's signal needs: without it the signal has nothing to read.
NEEDS = {"personal": "feedback", "success": "success", "frequency": "frequency"}
# The two reference arms every delta is shown against, the decision's reference first.
REFERENCES = ("off", "on-zero")
# The recording blocks whose side effects at zero weight are measured, in this order.
BLOCKS = ("feedback", "success", "frequency")


def zero_new_weights(engine: EngineConfig) -> EngineConfig:
    """`engine` with the three MSPR weights (δ, ε, ζ) at 0 and its switches as they are."""
    return replace(engine, retrieval=replace(
        engine.retrieval, delta_personal=0.0, epsilon_frequency=0.0, zeta_success=0.0))


def ladder(engine: EngineConfig, arms: Sequence[str],
           weights: Mapping[str, float]) -> dict[str, EngineConfig]:
    """The configuration of each named arm (names from `experiment_config.ARMS`)."""
    mspr = engine.mspr
    signals = [arm for arm in arms if arm != "off"]
    if signals and not mspr.enabled:
        raise ExperimentError(f"ablation: mspr.enabled must be on in the experiment's engine "
                              f"config for the arms {signals} (every arm but `off` runs MSPR)")
    for arm, switch in NEEDS.items():
        if arm in arms and not getattr(mspr, switch).enabled:
            raise ExperimentError(f"ablation: the {arm!r} arm needs mspr.{switch}.enabled in "
                                  "the engine config (its signal reads that state)")
    zero = zero_new_weights(engine)
    off = replace(zero, mspr=replace(mspr, enabled=False,
                                     intent=replace(mspr.intent, enabled=False),
                                     role=replace(mspr.role, enabled=False)))
    base = replace(zero, mspr=replace(mspr, intent=replace(mspr.intent, enabled=False),
                                      role=replace(mspr.role, enabled=False)))
    delta = weights.get("delta_personal", 0.3)
    epsilon = weights.get("epsilon_frequency", 0.1)
    zeta = weights.get("zeta_success", 0.3)

    def on(cfg: EngineConfig, signal: str) -> EngineConfig:
        r, m = cfg.retrieval, cfg.mspr
        if signal == "personal":
            return replace(cfg, retrieval=replace(r, delta_personal=delta))
        if signal == "frequency":
            return replace(cfg, retrieval=replace(r, epsilon_frequency=epsilon))
        if signal == "success":
            return replace(cfg, retrieval=replace(r, zeta_success=zeta))
        if signal == "intent":
            return replace(cfg, mspr=replace(m, intent=replace(m.intent, enabled=True)))
        if signal == "roles":
            return replace(cfg, mspr=replace(m, role=replace(m.role, enabled=True)))
        raise ValueError(f"ablation: unknown signal {signal!r}")

    out: dict[str, EngineConfig] = {}
    for name in arms:
        if name == "off":
            out[name] = off
        elif name == "on-zero":
            out[name] = base
        elif name == "all":
            cfg = base
            for signal in ("personal", "frequency", "success", "intent", "roles"):
                cfg = on(cfg, signal)
            out[name] = cfg
        else:
            out[name] = on(base, name)
    return out


def side_effects(engine: EngineConfig) -> dict[str, EngineConfig]:
    """`on-zero` with each recording block that is on switched off in turn, by name
    (`no-feedback`, ...). Empty when MSPR is off: nothing records."""
    if not engine.mspr.enabled:
        return {}
    base = ladder(engine, ["on-zero"], {})["on-zero"]
    out = {}
    for block in BLOCKS:
        mspr = base.mspr
        if getattr(mspr, block).enabled:
            out[f"no-{block}"] = replace(base, mspr=replace(
                mspr, **{block: replace(getattr(mspr, block), enabled=False)}))
    return out


def switches(config: EngineConfig) -> dict[str, bool]:
    """The switches an arm runs with, as the library reads them (each block only counts
    when MSPR is on)."""
    m = config.mspr
    return {"mspr": m.enabled, "feedback": m.enabled and m.feedback.enabled,
            "success": m.enabled and m.success.enabled,
            "frequency": m.enabled and m.frequency.enabled,
            "intent": m.enabled and m.intent.enabled, "roles": m.enabled and m.role.enabled}


def ladder_arms(configs: Mapping[str, EngineConfig]) -> dict[str, Arm]:
    return {name: arm_of(name, cfg) for name, cfg in configs.items()}


@dataclass(frozen=True)
class AblationResult:
    """The ladder on one window: per-search values per arm, aggregates and comparisons.

    per_search: arm -> one row per search (`Scorer.frame`), for the ladder's arms and the
        side-effect arms (`no-feedback`, ...).
    summary: `stats.aggregate` per arm and unit (`unit`: query or search), column `arm`.
    comparison: `stats.compare` of every arm against each reference arm present
        (`reference`: off / on-zero), per unit.
    side_effects: per block, `on-zero` against `on-zero` without that block (delta = what
        recording the block does at zero weight), per unit, with `top10_changed`: the share
        of searches whose top 10 differs.
    match: per arm, how many evaluated rankings equal the logged one (the rest see frozen
        feedback that is counterfactual for them).
    effects_summary: `summary` of the side-effect arms (their MLflow runs carry the same
        keys as the ladder's; the printed tables and the bundle's summary hold the ladder).
    """

    arms: dict[str, Arm]
    configs: dict[str, EngineConfig]
    per_search: dict[str, pl.DataFrame]
    summary: pl.DataFrame
    comparison: pl.DataFrame
    side_effects: pl.DataFrame
    match: pl.DataFrame
    notes: list[str]
    effects_summary: pl.DataFrame
