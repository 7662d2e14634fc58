"""The lists a generated world's users were really shown, for its verdict searches.

A world (`experiments/parity/worlds.py`) records every search in `truth/searches.parquet`
(ts, user_id, query_hash, shown in rank order). A verdict-labelled table's search is an
occurrence of a user's question, placed 1 µs before its first verdict; the search that
showed what that verdict judged is the user's last search of the same question at or
before that moment (verdicts come 25 s or more after their search, and a user's next search
of that question comes later still).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

__all__ = ["true_lists"]


def true_lists(world: Path, searches: pl.DataFrame) -> tuple[list[list[str]], float]:
    """Per search of `searches` (search, ts, user_id, question; table order) the list the
    world showed, and the share of searches matched (an unmatched one gets an empty list)."""
    logged = (pl.read_parquet(world / "truth" / "searches.parquet",
                              columns=["ts", "user_id", "query_hash", "shown"])
              .rename({"query_hash": "question", "ts": "_shown_at"}).sort("_shown_at"))
    wanted = searches.select("search", "ts", "user_id", "question").with_row_index("_row")
    matched = (wanted.sort("ts").join_asof(
        logged, left_on="ts", right_on="_shown_at", by=["user_id", "question"],
        strategy="backward", check_sortedness=False).sort("_row"))
    lists = [list(ids) if ids is not None else [] for ids in matched["shown"].to_list()]
    share = 1.0 - matched["shown"].null_count() / max(matched.height, 1)
    return lists, share
