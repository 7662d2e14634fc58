"""The reference rankers beside the ablation ladder (BM25, dense-only, the pool in ideal
order; `ReferenceRankers`) and SciFact's plain-BM25 sanity figure (`Bm25Sanity`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import polars as pl

from ..ablation import AblationResult
from ..experiment_config import ExperimentConfig
from ..measures.metrics import parse_metric
from ..measures.summaries import compare_units, summarize
from .replay_tables import Prepared, window_table

if TYPE_CHECKING:
    from ..references import ReferenceRun

__all__ = ["Bm25Sanity", "ReferenceRankers", "bm25_sanity", "reference_stage"]


@dataclass(frozen=True)
class ReferenceRankers:
    """The reference rankers on the ladder's test-window searches, against `base` (`off`
    if the ladder has it): each run (name, label, seconds, visible sets), its per-search
    frame, their summary and their comparison with `base`."""

    base: str
    runs: list[ReferenceRun]
    frames: dict[str, pl.DataFrame]
    summary: pl.DataFrame
    comparison: pl.DataFrame


def reference_stage(cfg: ExperimentConfig, prepared: Prepared, result: AblationResult
                    ) -> ReferenceRankers | None:
    """BM25 and dense-only on the ladder's test-window searches (`references.py`), against
    `off`; not arms, so never tuned. None when `[references] enabled = false`."""
    from ..references import reference_frame, reference_runs
    if not cfg.references.enabled:
        return None
    base = "off" if "off" in result.per_search else next(iter(result.per_search))
    table = window_table(prepared, base, "test")
    metrics = [parse_metric(m) for m in cfg.metrics.names]
    runs = reference_runs(prepared.dataset, table)
    frames = {run.name: reference_frame(table, run, metrics) for run in runs}
    summary = summarize(frames, cfg)
    comparison = compare_units(result.per_search[base], frames, cfg, reference=base)
    return ReferenceRankers(base, runs, frames, summary, comparison)


@dataclass(frozen=True)
class Bm25Sanity:
    """Plain BM25's nDCG@10 over the whole corpus on the test window's claims."""

    value: float
    claims: int


def bm25_sanity(prepared: Prepared) -> Bm25Sanity:
    """SciFact's sanity line: plain BM25 over the whole corpus on the test-window claims."""
    from msprlab.datasets.sources.scifact import bm25_ndcg10
    test = set(prepared.tables[next(iter(prepared.tables))].searches.filter(
        (prepared.split == "test").to_numpy())["query_id"].to_list())
    ds = prepared.dataset
    subset = replace(ds, queries=ds.queries.filter(pl.col("query_id").is_in(list(test))),
                       qrels=ds.qrels.filter(pl.col("query_id").is_in(list(test))))
    return Bm25Sanity(bm25_ndcg10(subset), len(test))
