"""Two arms' per-search values paired by search, as one row per query, and the paired
estimate of such a frame in either unit."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl

from .inference import Estimate, paired_estimate

__all__ = ["estimate_of", "mean_of", "means", "paired_queries"]


def paired_queries(candidate: pl.DataFrame, reference: pl.DataFrame, metric: str,
                   groups: Sequence[str] = (), extra: Sequence[str] = ()) -> pl.DataFrame:
    """Per-search frames (`event_id`, `query_id`, groups, metric) of two arms -> one row per
    query: the groups, `candidate` and `reference` (query means), their totals
    (`candidate_total`, `reference_total`) and `searches`, over the searches where both
    have a value; `extra` metrics as query means `candidate:M` / `reference:M`."""
    groups = [g for g in groups if g in reference.columns]
    both = reference.select("event_id", "query_id", *groups, pl.col(metric).alias("r"),
                            *(pl.col(x).alias(f"reference:{x}") for x in extra)).join(
        candidate.select("event_id", pl.col(metric).alias("c"),
                         *(pl.col(x).alias(f"candidate:{x}") for x in extra)),
        on="event_id", how="full", coalesce=True)
    if both.height != reference.height or both.height != candidate.height:
        raise ValueError(f"{metric}: the two arms' searches differ ({candidate.height} and "
                         f"{reference.height} searches, {both.height} together): a paired "
                         "comparison needs the same searches on both sides")
    value = [pl.col(c).cast(pl.Float64).fill_nan(None) for c in ("c", "r")]
    kept = both.filter(value[0].is_not_null() & value[1].is_not_null())
    return kept.group_by("query_id").agg(
        *(pl.col(g).first() for g in groups),
        candidate=pl.col("c").mean(), reference=pl.col("r").mean(),
        candidate_total=pl.col("c").sum(), reference_total=pl.col("r").sum(),
        searches=pl.len().cast(pl.Int64),
        **{f"{side}:{x}": pl.col(f"{side}:{x}").cast(pl.Float64).fill_nan(None).mean()
           for x in extra for side in ("candidate", "reference")},
    ).sort("query_id")


def estimate_of(paired: pl.DataFrame, unit: str) -> Estimate:
    """The paired estimate of a `paired_queries` frame in `unit`."""
    if unit == "query":
        return paired_estimate(paired["candidate"].to_numpy(), paired["reference"].to_numpy())
    return paired_estimate(paired["candidate_total"].to_numpy(),
                           paired["reference_total"].to_numpy(),
                           paired["searches"].to_numpy(), unit="search")


def means(paired: pl.DataFrame, unit: str) -> tuple[float, float]:
    if not paired.height:
        return math.nan, math.nan
    if unit == "query":
        return mean_of(paired, "candidate"), mean_of(paired, "reference")
    w = float(paired["searches"].to_numpy().sum())
    return (float(paired["candidate_total"].to_numpy().sum()) / w,
            float(paired["reference_total"].to_numpy().sum()) / w)


def mean_of(frame: pl.DataFrame, column: str) -> float:
    """The mean of a column's values (NaN where it has none)."""
    values = frame[column].cast(pl.Float64).fill_null(math.nan).to_numpy()
    values = values[~np.isnan(values)]
    return float(values.mean()) if values.size else math.nan
