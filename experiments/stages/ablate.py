"""The ablation stage: every ladder arm and side-effect arm scored on the test window,
compared against the reference arms, with each arm's stage funnel (`Ablation`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from msprlab.engine import EngineConfig

from ..ablation import REFERENCES, AblationResult, ladder_arms
from ..arms import ExperimentArms, arms_frame
from ..experiment_config import ExperimentConfig
from ..measures.funnel import FUNNEL_COLUMNS, funnel_frame, shares, with_shares
from ..measures.metrics import parse_metric
from ..measures.scoring import Arm, Scorer
from ..measures.summaries import compare_units, summarize
from .replay_tables import Prepared, split_tables

__all__ = ["Ablation", "ablate", "ablation_stage", "arm_funnels", "side_effect_frame"]


def _negated(column: str) -> pl.Expr:
    """-x, with 0 for 0: Polars rewrites `0.0 - x` as `-x`, which writes -0.0 where nothing
    moved."""
    return pl.when(pl.col(column) == 0).then(pl.lit(0.0)).otherwise(-pl.col(column))


def side_effect_frame(on_zero: pl.DataFrame, effects: Mapping[str, pl.DataFrame],
                      cfg: ExperimentConfig, *, top10_changed: Mapping[str, int],
                      searches: int) -> pl.DataFrame:
    """Each block's effect at zero weight: one family over the blocks, each block-off arm
    (`no-feedback`, ...) against on-zero, flipped so the delta reads as on-zero minus the
    arm without the block; with the number of searches whose top 10 that block changes."""
    raw = compare_units(on_zero, effects, cfg, reference="on-zero", group_cols=())
    return raw.with_columns(
        block=pl.col("arm").str.strip_prefix("no-"),
        mean_base=pl.col("mean_arm"), mean_arm=pl.col("mean_base"),
        delta=_negated("delta"), ci_low=_negated("ci_high"), ci_high=_negated("ci_low"),
        top10_changed=pl.col("arm").replace_strict(dict(top10_changed),
                                                   return_dtype=pl.Int64),
        searches=pl.lit(searches, dtype=pl.Int64))


def ablate(cfg: ExperimentConfig, prepared: Prepared, configs: Mapping[str, EngineConfig],
           *, window: str = "test", effects: Mapping[str, EngineConfig] | None = None,
           ) -> AblationResult:
    """Every arm on the `window` searches, against each reference arm, per group and unit;
    the side-effect arms (`effects`) against `on-zero`; every arm's match rate."""
    metrics = [parse_metric(m) for m in cfg.metrics.names]
    windowed = split_tables(prepared, window)
    scorers = {key: Scorer.of(table, metrics) for key, table in windowed.items()}
    every = {**configs, **(effects or {})}
    arms = ladder_arms(every)
    frames = {name: scorers[prepared.key_of[name]].frame(arm) for name, arm in arms.items()}
    ladder_names = list(configs)
    summary = summarize({name: frames[name] for name in ladder_names}, cfg)
    # Each arm's returned lists, once: the match rates and the top-10 changes read them.
    rankings = {name: scorers[prepared.key_of[name]].rankings(arm)
                for name, arm in arms.items()}
    notes = []
    comparisons = [compare_units(frames[ref], {n: frames[n] for n in ladder_names if n != ref},
                                 cfg, reference=ref)
                   for ref in REFERENCES if ref in frames and len(ladder_names) > 1]
    comparison = pl.concat(comparisons, how="diagonal_relaxed") if comparisons else pl.DataFrame()
    if not comparisons:
        notes.append("no reference arm (off or on-zero) beside another arm: no comparisons")
    side = pl.DataFrame()
    if effects and "on-zero" in frames:
        top = [ids[:10] for ids in rankings["on-zero"]]
        changed = {name: sum(a != b[:10] for a, b in zip(top, rankings[name], strict=True))
                   for name in effects}
        side = side_effect_frame(frames["on-zero"], {n: frames[n] for n in effects}, cfg,
                                 top10_changed=changed, searches=len(top))
    match = pl.DataFrame([
        {"arm": name, **dict(zip(("matched", "logged"),
                                 scorers[prepared.key_of[name]].match_rate(
                                     arm, rankings=rankings[name]), strict=True))}
        for name, arm in arms.items()], schema={"arm": pl.String, "matched": pl.Int64,
                                                 "logged": pl.Int64}, orient="row"
    ).with_columns(rate=pl.col("matched") / pl.col("logged"))
    if "roles" in arms and cfg.replay.policy == "none":
        notes.append("roles: no role policy installed (replay.policy = none), so the roles "
                     "arm ranks exactly as on-zero")
    effects_summary = summarize({name: frames[name] for name in effects}, cfg) \
        if effects else pl.DataFrame()
    return AblationResult(arms, dict(every), frames, summary, comparison, side, match, notes,
                          effects_summary)


def arm_funnels(cfg: ExperimentConfig, prepared: Prepared, arms: Mapping[str, Arm],
           per_search: Mapping[str, pl.DataFrame], *, window: str = "test"
           ) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
    """Each arm's stage funnel on the `window` searches (`funnel.funnel_frame`, primary
    metric), per search, and summarized per group and unit like the metrics."""
    metric = parse_metric(cfg.metrics.primary)
    windowed = split_tables(prepared, window)
    frames = {name: funnel_frame(windowed[prepared.key_of[name]], per_search[name],
                                 metric=metric, roles=arm.roles)
              for name, arm in arms.items()}
    return frames, summarize(frames, cfg, metric_cols=FUNNEL_COLUMNS)


@dataclass(frozen=True)
class Ablation:
    """What the ablation stage measured, for the reporter.

    result: the ladder and side-effect arms on the test window (`ablate`).
    ladder / effects: the ladder's arm names in order, the side-effect arms' names.
    arms: every arm's definition (`arms.arms_frame`), ladder and side-effect arms.
    funnel_parts: ladder arm -> its per-search funnel (`funnel.funnel_frame`).
    funnel_wide: the ladder's funnel, one row per arm, unit and group (`funnel.shares`):
        what the funnel tables print.
    funnel: the same, long, with `share` rows (`funnel.with_shares`): bundle and MLflow.
    funnel_reference: the arm the funnel's group tables read against (`off` if present).
    effects_funnel: the side-effect arms' funnel, long like `funnel`: MLflow only.
    """

    result: AblationResult
    ladder: tuple[str, ...]
    effects: tuple[str, ...]
    arms: pl.DataFrame
    funnel_parts: dict[str, pl.DataFrame]
    funnel_wide: pl.DataFrame
    funnel: pl.DataFrame
    funnel_reference: str
    effects_funnel: pl.DataFrame


def ablation_stage(cfg: ExperimentConfig, prepared: Prepared, arms: ExperimentArms
                   ) -> Ablation:
    """The ladder (`arms.ladder`) and side-effect arms (`arms.effects`) on the test
    window, with the ladder arms' stage funnel."""
    result = ablate(cfg, prepared, arms.ladder, effects=arms.effects)
    ladder = {name: result.arms[name] for name in arms.ladder}
    parts, summary = arm_funnels(cfg, prepared, ladder, result.per_search)
    effects_funnel = pl.DataFrame()
    if arms.effects:
        effects = {name: result.arms[name] for name in arms.effects}
        effects_funnel = with_shares(arm_funnels(cfg, prepared, effects, result.per_search)[1])
    return Ablation(result, tuple(arms.ladder), tuple(arms.effects),
                    arms_frame(result.arms, result.configs), parts, shares(summary),
                    with_shares(summary), "off" if "off" in ladder else next(iter(ladder)),
                    effects_funnel)
