"""Do feedback labels order the arms as the truth does? The check on a world whose truth is
known (a ContextKit usage period on LoCoMo, `experiments/contextkit_world.py`).

The ladder is scored twice on the same searches (the verdict occurrences of an experiment
with `labels = "verdicts"`): with the verdict labels, and with the world's true qrels
(TREC qrels keyed by query hash) laid on the same candidate tables. Per metric it reports
each arm's mean under both, Kendall's tau between the two arm orders (`scipy.stats.
kendalltau`, tau-b: ties allowed), and Pearson's r between the arms' changes against
`off`. Where they disagree, the arm's judged share says why: an arm that surfaces memories
no verdict covers scores low on verdicts whatever the truth.

    python -m msprlab.experiments.label_check EXPERIMENT --truth DIR/truth/qrels.tsv
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
from rich.console import Console
from rich.table import Table
from scipy import stats

from msprlab.datasets.trec import read_qrels

from . import pipeline as P
from .exits import EXIT_BAD_INPUT, EXIT_OK, print_error, stdout_console
from .experiment_config import ExperimentConfig, load_experiment
from .replay import CandidateTable
from .tables import fmt

__all__ = ["agreement", "truth_prepared", "with_truth"]


def with_truth(table: CandidateTable, truth: pl.DataFrame) -> CandidateTable:
    """`table` (verdict labelled: `question` per search) with the true qrels of each
    search's question as its labels: the same searches and candidates, other grades."""
    occurrence = table.searches.select("query_id", "question").unique()
    qrels = (occurrence.join(truth.rename({"query_id": "question"}), on="question")
             .select("query_id", "memory_id", "relevance"))
    of_search = table.searches.select("search", "query_id")
    candidates = (table.candidates.drop("grade").join(of_search, on="search", how="left",
                                                      maintain_order="left")
                  .join(qrels.rename({"relevance": "grade"}), on=["query_id", "memory_id"],
                        how="left", maintain_order="left")
                  .drop("query_id").select(table.candidates.columns))
    return CandidateTable(table.searches, candidates, qrels, table.meta)


def truth_prepared(prepared: P.Prepared, truth: pl.DataFrame) -> P.Prepared:
    """`prepared` with every table relabelled by the truth (`with_truth`)."""
    tables = {key: with_truth(table, truth) for key, table in prepared.tables.items()}
    return replace(prepared, tables=tables, labels=P.Labels("world qrels (the truth)"))


def agreement(truth: pl.DataFrame, verdicts: pl.DataFrame, *, metric: str,
              truth_metric: str, unit: str = "query") -> dict[str, object]:
    """Kendall's tau-b of the arm orders and Pearson's r of the changes against `off`,
    `verdicts`' `metric` against `truth`'s `truth_metric` (ladder summaries, overall)."""
    def means(summary: pl.DataFrame, name: str) -> dict[str, float]:
        rows = summary.filter(pl.col("metric") == name, pl.col("group_by") == "overall",
                              pl.col("unit") == unit)
        return dict(zip(rows["arm"], rows["mean"], strict=True))
    a, b = means(truth, truth_metric), means(verdicts, metric)
    arms = [arm for arm in a if arm in b]
    x, y = np.array([a[arm] for arm in arms]), np.array([b[arm] for arm in arms])
    tau = stats.kendalltau(x, y).statistic if len(arms) > 1 else math.nan
    r = math.nan
    if "off" in arms and len(arms) > 2:
        dx = np.array([a[arm] - a["off"] for arm in arms if arm != "off"])
        dy = np.array([b[arm] - b["off"] for arm in arms if arm != "off"])
        if dx.std() > 0 and dy.std() > 0:
            r = float(stats.pearsonr(dx, dy).statistic)
    return {"metric": metric, "arms": arms, "truth": a, "verdicts": b,
            "tau": float(tau), "delta_r": r}


def _run(cfg: ExperimentConfig, root: Path, truth_path: Path, console: Console) -> int:
    truth = read_qrels(truth_path)
    store = P.prepare_store(cfg, root)
    arms = P.experiment_arms(cfg, ablation=True)
    prepared = P.tables(cfg, store, arms.ladder)
    on_verdicts = P.ablate(cfg, prepared, arms.ladder)
    on_truth = P.ablate(cfg, truth_prepared(prepared, truth), arms.ladder)
    primary = cfg.metrics.primary
    judged = [m for m in cfg.metrics.names if m.startswith("judged")]
    scored = [m for m in cfg.metrics.names if not m.startswith("judged")]
    table = Table(title=f"feedback labels against the truth, test window, per query "
                        f"({prepared.labels.occurrences:,} verdict searches; truth: "
                        f"{truth_path})", title_justify="left")
    table.add_column("arm")
    table.add_column(f"truth {primary}", justify="right")
    for m in scored + judged:
        table.add_column(f"verdicts {m}", justify="right")
    results = [agreement(on_truth.summary, on_verdicts.summary, metric=m,
                         truth_metric=primary) for m in scored]
    verdict_means = {m: agreement(on_truth.summary, on_verdicts.summary, metric=m,
                                  truth_metric=primary)["verdicts"] for m in scored + judged}
    truth_means = results[0]["truth"]
    for arm in arms.ladder:
        table.add_row(arm, fmt(truth_means.get(arm)),  # type: ignore[union-attr]
                      *(fmt(verdict_means[m].get(arm)) for m in scored + judged))  # type: ignore[union-attr]
    console.print(table)
    for res in results:
        if math.isnan(res["tau"]):  # type: ignore[arg-type]
            console.print(f"{res['metric']} on verdicts gives every arm the same value (or one "
                          "arm only): it cannot order the arms", highlight=False)
            continue
        console.print(f"{res['metric']} on verdicts vs {primary} on the truth: Kendall's tau-b "
                      f"{res['tau']:.3f} over {len(res['arms'])} arms (target >= 0.8); "  # type: ignore[arg-type]
                      f"Pearson r of the changes against off {res['delta_r']:.3f}",
                      highlight=False)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m msprlab.experiments.label_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", help="a definition with labels = \"verdicts\"")
    parser.add_argument("--truth", type=Path, required=True,
                        help="TREC qrels of the world, keyed by query hash")
    parser.add_argument("--root", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    console = stdout_console()
    try:
        cfg = load_experiment(args.experiment)
        if cfg.dataset.labels != "verdicts":
            raise ValueError(f"{args.experiment}: dataset.labels must be \"verdicts\"")
        return _run(cfg, args.root, args.truth, console)
    except (ValueError, OSError) as exc:
        print_error(exc, console)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
