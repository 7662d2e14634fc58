"""The test stage: the tuned weights scored once on the held-out test window against the
reference arms (`HeldOutResult`), per group and unit, and split by whether the query was
asked in the train window too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import polars as pl

from ..arms import ExperimentArms, arms_frame
from ..experiment_config import ExperimentConfig
from ..explore.lists import Explored, explore_arms
from ..measures.funnel import shares, with_shares
from ..measures.metrics import Metric
from ..measures.scoring import Arm, Scorer, arm_of
from ..measures.summaries import GROUPS, compare_units, summarize
from ..replay import question_of
from .ablate import arm_funnels
from .replay_tables import Prepared, window_table

__all__ = ["HeldOutResult", "held_out_stage", "trec_run"]


@dataclass(frozen=True)
class HeldOutResult:
    """The test window's comparison of the tuned weights with the references.

    references: the reference arms' names (`off`, and `on-zero` when MSPR is on).
    frames: arm -> one row per test search, with `seen` (asked in the train window too).
    comparison: `tuned` against each reference, per unit and group (`seen` among them).
    summary: every arm's aggregates per unit and group.
    funnel_wide / funnel: the arms' stage funnel as printed (`funnel.shares`) and as
        bundled and logged (`funnel.with_shares`).
    trec_runs: arm -> its rankings as a TREC run (`trec_run`).
    arms: the arms' definitions (`arms.arms_frame`), `tuned` with the best weights.
    best / snippet: the tuned arm and its library snippet, as the search gave them.
    explored: every arm's top 10 per search with its scores' parts, and the fates of the
        relevant memories outside it (`explore.lists`), from the rankings of `trec_runs`.
    """

    references: tuple[str, ...]
    frames: dict[str, pl.DataFrame]
    comparison: pl.DataFrame
    summary: pl.DataFrame
    funnel_wide: pl.DataFrame
    funnel: pl.DataFrame
    trec_runs: dict[str, str]
    arms: pl.DataFrame
    best: Arm
    snippet: dict[str, Any]
    explored: Explored


def held_out_stage(cfg: ExperimentConfig, prepared: Prepared, arms: ExperimentArms,
                   test: Scorer, best: Arm, snippet: dict[str, Any],
                   metrics: Sequence[Metric]) -> HeldOutResult:
    """The tuned weights (`best`) once on the test window (`test`, the tuned table's
    scorer), against `off` and `on-zero`, per group, per unit, and split by whether the
    query was asked in the train window; `metrics` score the other tables."""
    scorers = {"tuned": test}
    chosen = {"tuned": best}
    for name, config in arms.references.items():
        same = prepared.key_of[name] == prepared.key_of["tuned"]
        scorers[name] = test if same else Scorer.of(window_table(prepared, name, "test"),
                                                    metrics)
        chosen[name] = arm_of(name, config)
    searches = prepared.table("tuned").searches
    asked = searches.filter((prepared.split == "train").to_numpy()).select(
        question_of(searches))["query_id"].unique()
    asked = asked.implode()
    frames = {name: scorers[name].frame(arm).with_columns(
        seen=pl.when(pl.col("query_id").is_in(asked)).then(pl.lit("seen"))
        .otherwise(pl.lit("unseen")))
        for name, arm in chosen.items()}
    groups = (*GROUPS, "seen")
    comparison = pl.concat([compare_units(frames[ref], {"tuned": frames["tuned"]}, cfg,
                                          reference=ref, group_cols=groups)
                            for ref in arms.references], how="diagonal_relaxed")
    summary = summarize(frames, cfg, group_cols=groups)
    _, stages = arm_funnels(cfg, prepared, chosen, frames)
    configs = {**arms.references, "tuned": replace(arms.tuned, retrieval=replace(
        arms.tuned.retrieval, **best.named_weights._asdict()))}
    return HeldOutResult(tuple(arms.references), frames, comparison, summary, shares(stages),
                         with_shares(stages),
                         {name: trec_run(scorers[name], chosen[name]) for name in frames},
                         arms_frame(chosen, configs), best, snippet,
                         explore_arms(scorers, chosen, prepared.dataset.memories))


def trec_run(scorer: Scorer, arm: Arm) -> str:
    """The arm's rankings on the scorer's searches as a TREC run (query id = search event
    id; scores strictly decreasing with rank, so external tools keep the engine's order)."""
    lines = []
    events = scorer.table.searches["event_id"].to_list()
    for event, ids in zip(events, scorer.rankings(arm), strict=True):
        n = len(ids)
        lines += [f"e{event} Q0 {m} {r + 1} {n - r} msprlab:{arm.name}"
                  for r, m in enumerate(ids)]
    return "\n".join(lines) + "\n"
