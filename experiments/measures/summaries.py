"""An experiment's summaries and paired comparisons of per-search frames, per query and
per search (`stats.aggregate` and `compare.compare` with the experiment's settings)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from ..experiment_config import ExperimentConfig
from .compare import compare
from .stats import aggregate

__all__ = ["GROUPS", "UNITS", "compare_units", "summarize"]

GROUPS = ("intent", "question_type")
UNITS = ("query", "search")


def _stats_settings(cfg: ExperimentConfig) -> dict[str, Any]:
    return {"n_resamples": cfg.metrics.bootstrap, "seed": cfg.seed,
            "min_support": cfg.metrics.min_support}


def summarize(frames: Mapping[str, pl.DataFrame], cfg: ExperimentConfig, *,
              group_cols: tuple[str, ...] = GROUPS,
              metric_cols: tuple[str, ...] | None = None) -> pl.DataFrame:
    """`stats.aggregate` of each arm's per-search frame per query and per search, with an
    `arm` column; `metric_cols` defaults to the experiment's metrics."""
    names = list(cfg.metrics.names if metric_cols is None else metric_cols)
    return pl.concat([
        aggregate(frame, metric_cols=names, group_cols=group_cols, unit=unit,
                  cluster="query_id", stream=name, **_stats_settings(cfg))
        .select(pl.lit(name).alias("arm"), pl.all())
        for name, frame in frames.items() for unit in UNITS], how="diagonal_relaxed")


def compare_units(base: pl.DataFrame, arms: Mapping[str, pl.DataFrame], cfg: ExperimentConfig,
                  *, reference: str, group_cols: tuple[str, ...] = GROUPS) -> pl.DataFrame:
    """`compare.compare` per query and per search, with a `reference` column; per-search
    frames in, paired by search event, clustered by query; exploratory rows, corrected
    within each breakdown (`metrics.correction`) at the decision's alpha."""
    names = list(cfg.metrics.names)
    return pl.concat([
        compare(base, arms, metric_cols=names, group_cols=group_cols, key="event_id",
                unit=unit, cluster="query_id", correction=cfg.metrics.correction,
                alpha=cfg.decision.alpha, min_support=cfg.metrics.min_support)
        .select(pl.lit(reference).alias("reference"), pl.all())
        for unit in UNITS], how="diagonal_relaxed")
