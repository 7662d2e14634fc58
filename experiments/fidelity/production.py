"""Production's end state as the artifacts record it: what a faithful replay must reach.

A store ingested from ContextKit's artifacts (`datasets/sources/contextkit.py`) holds it:

- per memory, the graph node's state at export (`metadata.contextkit_node`): relevance,
  relevance floor, archived, access count, helpful and unhelpful counts;
- the graph's edges at export (the store's `edges`: src, dst, type, weight) and, where
  production ran decay, when its last tick changed them (`last_tick`);
- per verdict, the delta production applied, whether it wrote a success row, and the
  metadata the application passed (`feedback_records`; `metadata.rank`, the 1-based rank
  the memory was shown at, where the application recorded it).

A store without node state (a simulated log, a generic folder) has no production end state
to compare with: `production_of` returns None.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from msprlab.datasets.schema import Dataset
from msprlab.datasets.sources.contextkit import NODE_STATE_KEY, last_tick

__all__ = ["Production", "production_of"]

NODE_COLUMNS = ("relevance", "relevance_floor", "archived", "access_count", "helpful_count",
                "unhelpful_count")


@dataclass(frozen=True)
class Production:
    """nodes: memory_id and NODE_COLUMNS (live and archived nodes); edges: src, dst, type,
    weight; records: memory_id, ts, user_id, helpful, delta_applied, success_row (null
    without a success store), rank (null where not recorded), in the order production
    wrote them."""

    nodes: pl.DataFrame
    edges: pl.DataFrame
    records: pl.DataFrame
    last_tick: datetime | None = None  # when production's decay last changed an edge

    @property
    def ranked(self) -> int:
        """Verdicts whose application recorded the rank shown."""
        return int(self.records["rank"].is_not_null().sum())


def _rank(metadata: str | None) -> int | None:
    """`metadata.rank` as a 1-based rank, or None (absent, not a positive whole number)."""
    if not metadata:
        return None
    try:
        value = json.loads(metadata).get("rank")
    except (ValueError, AttributeError):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 1 \
            or value != int(value):
        return None
    return int(value)


def production_of(ds: Dataset) -> Production | None:
    """The end state `ds` records (module docstring), or None when it records none."""
    rows = []
    for memory_id, metadata in ds.memories.select("memory_id", "metadata").iter_rows():
        state = json.loads(metadata or "{}").get(NODE_STATE_KEY) if metadata else None
        if isinstance(state, dict):
            rows.append({"memory_id": memory_id, **{c: state.get(c) for c in NODE_COLUMNS}})
    if not rows:
        return None
    nodes = pl.DataFrame(rows, schema={"memory_id": pl.String, "relevance": pl.Float64,
                                       "relevance_floor": pl.Float64, "archived": pl.Boolean,
                                       "access_count": pl.Int64, "helpful_count": pl.Int64,
                                       "unhelpful_count": pl.Int64})
    edges = ds.edges.select("src", "dst", "type", "weight")
    records = ds.feedback_records.select(
        "memory_id", "ts", "user_id", "helpful", "delta_applied", "success_row",
        rank=pl.col("metadata").map_elements(_rank, return_dtype=pl.Int64))
    return Production(nodes, edges, records, last_tick(ds.edges))
