"""The logged searches of a verdict-labelled table as impressions: what the logging ranker
showed at each search, and which of those memories got a verdict.

A ContextKit deployment keeps no log of the lists it showed. The verdict-labelled replay
(`datasets.verdict_labels`) makes one search per verdict occurrence; the list that search
showed is reconstructed as the top k the production arm (the definition's `[engine]`)
returns there in the replay, or, on a generated world, read from the world's truth. Each
memory of the list is an impression; a verdict on it is a click (helpful: a click on a
relevant memory; unhelpful: on a non-relevant one); a verdict on a memory the list does
not hold has no logged rank, so no propensity: it is counted, never silently dropped, and
its share says how far the reconstruction is from what users saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from .click_model import IMPRESSIONS

__all__ = ["LoggedSearches", "logged_searches"]


@dataclass(frozen=True)
class LoggedSearches:
    """Impressions (`click_model.IMPRESSIONS`) and what could not become one.

    searches : searches with a verdict (the log's sessions, before any cut).
    empty : searches whose logged list is empty (their verdicts have no rank).
    verdicts, helpful : verdicts (the last per memory and search) and helpful ones.
    outside, helpful_outside : of those, on a memory the logged list does not hold.
    """

    impressions: pl.DataFrame
    source: str
    k: int
    searches: int
    empty: int
    verdicts: int
    helpful: int
    outside: int
    helpful_outside: int

    def note(self) -> str:
        inside = self.verdicts - self.outside
        share = inside / self.verdicts if self.verdicts else float("nan")
        helpful_share = ((self.helpful - self.helpful_outside) / self.helpful
                         if self.helpful else float("nan"))
        return (f"logged lists: {self.source}, top {self.k}; {inside:,} of {self.verdicts:,} "
                f"verdicts ({share:.1%}; {helpful_share:.1%} of the helpful ones) are on a "
                f"memory the list holds, the other {self.outside:,} have no logged rank and "
                f"no propensity; {self.empty:,} of {self.searches:,} searches have an empty "
                "list")


def logged_searches(searches: pl.DataFrame, verdicts: pl.DataFrame,
                    lists: Sequence[Sequence[str]], *, k: int, source: str) -> LoggedSearches:
    """Impressions of `searches` (search, query_id, question: a verdict-labelled table's)
    showing `lists` (one per search, table order, best first, cut to k) with `verdicts`
    (query_id, memory_id, relevance 1 helpful / 0 unhelpful: the table's qrels)."""
    if k < 1:
        raise ValueError(f"logged searches: `k >= 1` must hold, but got {k}")
    if len(lists) != searches.height:
        raise ValueError(f"logged searches: {len(lists)} lists for {searches.height} searches")
    shown = searches.select("search", "query_id", "question").with_columns(
        memory_id=pl.Series([list(ids[:k]) for ids in lists], dtype=pl.List(pl.String))
    ).explode("memory_id").filter(pl.col("memory_id").is_not_null()).with_columns(
        rank=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("search"))
    judged = verdicts.select("query_id", "memory_id",
                             helpful=pl.col("relevance") > 0).join(
        searches.select("query_id"), on="query_id", how="semi")
    impressions = shown.join(judged, on=["query_id", "memory_id"], how="left").select(
        pl.col("search").cast(pl.Int64), pl.col("question").cast(pl.String), "memory_id",
        "rank", clicked=pl.col("helpful").is_not_null(),
        helpful=pl.col("helpful").fill_null(False))
    outside = judged.join(shown.select("query_id", "memory_id"),
                          on=["query_id", "memory_id"], how="anti")
    return LoggedSearches(
        impressions.cast(dict(IMPRESSIONS)), source, k, searches.height,  # type: ignore[arg-type]
        sum(1 for ids in lists if not ids), judged.height, int(judged["helpful"].sum()),
        outside.height, int(outside["helpful"].sum()))
