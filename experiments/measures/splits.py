"""Time-ordered splits of a replay's searches: tune on an earlier window, report on a later
one, never a random split of a log (EVALUATION.md).

Every search gets one label, `train`, `gap` or `test`:

- `time_split`: the last `test_fraction` of the searches (by timestamp; searches sharing the
  boundary timestamp all go to test) are `test`; searches in the `gap` (an embargo) before
  the first test search are `gap` and evaluated nowhere; the rest are `train`.
  With `per_user`, the boundary is drawn in each user's own searches (by `user_id`, else
  `agent_id`, else `run_id`), so every user appears in both windows.
- `window_split`: explicit boundaries: train before `train_end`, test from `test_start`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from ..errors import ExperimentError

__all__ = ["SPLIT_LABELS", "SplitSpec", "split_searches", "time_split", "window_split"]

SPLIT_LABELS = ("train", "gap", "test")


@dataclass(frozen=True)
class SplitSpec:
    """How to split: a test fraction with an optional gap, per user or global; or explicit
    boundaries (`train_end`, `test_start`) that override the fraction."""

    test_fraction: float = 0.3
    gap: timedelta = timedelta(0)
    per_user: bool = False
    train_end: datetime | None = None
    test_start: datetime | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.test_fraction < 1.0:
            raise ExperimentError(
                f"split: test_fraction must be in (0, 1), got {self.test_fraction!r}")
        if self.gap < timedelta(0):
            raise ExperimentError(f"split: gap must be >= 0, got {self.gap}")
        if (self.train_end is None) != (self.test_start is None):
            raise ExperimentError("split: give both train_end and test_start, or neither")
        if self.train_end is not None and self.test_start is not None \
                and self.test_start < self.train_end:
            raise ExperimentError(f"split: test_start {self.test_start} is before train_end "
                             f"{self.train_end}")


def split_searches(searches: pl.DataFrame, spec: SplitSpec) -> pl.Series:
    """The label of each search of a replay's `searches` frame (row order kept)."""
    if spec.train_end is not None and spec.test_start is not None:
        return window_split(searches, train_end=spec.train_end, test_start=spec.test_start)
    return time_split(searches, test_fraction=spec.test_fraction, gap=spec.gap,
                      per_user=spec.per_user)


def time_split(searches: pl.DataFrame, *, test_fraction: float = 0.3,
               gap: timedelta = timedelta(0), per_user: bool = False) -> pl.Series:
    """`train` / `gap` / `test` per search: the last `test_fraction` of searches by time."""
    SplitSpec(test_fraction=test_fraction, gap=gap)  # validates
    owner = pl.coalesce("user_id", "agent_id", "run_id") if per_user else pl.lit("all")
    frame = searches.select(pl.col("ts"), owner.alias("owner")).with_row_index("_row")
    # The first test timestamp: the one at position floor((1 - f) * n) in time order.
    boundary = (frame.sort("ts", "_row").group_by("owner", maintain_order=True)
                .agg(test_from=pl.col("ts").get(
                    (pl.len() * (1.0 - test_fraction)).floor().cast(pl.Int64)
                    .clip(0, pl.len() - 1))))
    labelled = frame.join(boundary, on="owner", how="left").sort("_row").with_columns(
        split=pl.when(pl.col("ts") >= pl.col("test_from")).then(pl.lit("test"))
        .when(pl.col("ts") >= pl.col("test_from") - gap).then(pl.lit("gap"))
        .otherwise(pl.lit("train")))
    return labelled["split"].cast(pl.Enum(SPLIT_LABELS))


def window_split(searches: pl.DataFrame, *, train_end: datetime,
                 test_start: datetime) -> pl.Series:
    """`train` before `train_end`, `test` from `test_start`, `gap` in between."""
    SplitSpec(train_end=train_end, test_start=test_start)  # validates
    ts = pl.col("ts")
    return searches.select(
        pl.when(ts >= test_start).then(pl.lit("test"))
        .when(ts < train_end).then(pl.lit("train")).otherwise(pl.lit("gap"))
        .cast(pl.Enum(SPLIT_LABELS)).alias("split"))["split"]
