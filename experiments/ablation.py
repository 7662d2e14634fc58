"""The ablation ladder: the context-graph baseline, each signal switched on alone, all.

Every arm is a full engine configuration derived from the experiment's:

- `baseline`: α, β, γ as configured; δ = ε = ζ = 0, intent routing and roles off;
- `personal` / `frequency` / `success`: the baseline with δ / ε / ζ set to the ablation
  weight; `intent`: the baseline with routing on; `roles`: with the role policy on;
- `all`: everything at once.

The state switches (`mspr.feedback`, `mspr.success`, `mspr.frequency`) stay as configured
in every arm, so all arms replay the same logged state: in the library, feedback bumps
relevance whenever it is on, whatever δ is (MSPR.md section 17). Arms that share a table
key (`replay.table_key`) are scored from one replay; a hard role filter changes the
candidates, so its arm gets its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import polars as pl

from msprlab.engine import EngineConfig

from .evaluation import Arm, arm_of

__all__ = ["NEEDS", "AblationResult", "ladder", "ladder_arms"]

# The state switch an arm's signal needs: without it the signal has nothing to read.
NEEDS = {"personal": "feedback", "success": "success"}


def ladder(engine: EngineConfig, arms: Sequence[str],
           weights: Mapping[str, float]) -> dict[str, EngineConfig]:
    """The configuration of each named arm (names from `experiment_config.ARMS`)."""
    mspr = engine.mspr
    signals = [arm for arm in arms if arm != "baseline"]
    if signals and not mspr.enabled:
        raise ValueError(f"ablation: mspr.enabled must be on in the experiment's engine config "
                         f"for the arms {signals} (every arm but the baseline is an MSPR "
                         "signal)")
    for arm, switch in NEEDS.items():
        if arm in arms and not getattr(mspr, switch).enabled:
            raise ValueError(f"ablation: the {arm!r} arm needs mspr.{switch}.enabled in the "
                             "engine config (its signal reads that state)")
    base = replace(engine, retrieval=replace(
        engine.retrieval, delta_personal=0.0, epsilon_frequency=0.0, zeta_success=0.0),
        mspr=replace(mspr, intent=replace(mspr.intent, enabled=False),
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
        if name == "baseline":
            out[name] = base
        elif name == "all":
            cfg = base
            for signal in ("personal", "frequency", "success", "intent", "roles"):
                cfg = on(cfg, signal)
            out[name] = cfg
        else:
            out[name] = on(base, name)
    return out


def ladder_arms(configs: Mapping[str, EngineConfig]) -> dict[str, Arm]:
    return {name: arm_of(name, cfg) for name, cfg in configs.items()}


@dataclass(frozen=True)
class AblationResult:
    """Per-query values per arm (test window), the aggregates and the paired comparisons."""

    arms: dict[str, Arm]
    per_query: dict[str, pl.DataFrame]
    summary: pl.DataFrame      # stats.aggregate per arm, with an `arm` column
    comparison: pl.DataFrame   # stats.compare of every arm against the baseline
    notes: list[str]
