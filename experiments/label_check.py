"""Do feedback labels order the arms as the truth does? The check on a world whose truth is
known (a ContextKit usage period on LoCoMo, `experiments/parity/world.py`).

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
from rich.markup import escape
from rich.table import Table
from scipy import stats

from msprlab.datasets.trec import read_qrels
from msprlab.engine import EngineConfig

from .arms import experiment_arms
from .cli.exits import EXIT_BAD_INPUT, EXIT_OK, print_error, stdout_console
from .console_tables import fmt
from .experiment_config import ExperimentConfig, judged_metric, load_experiment
from .fidelity.stage import fidelity_stage, with_fidelity
from .measures.metrics import parse_metric
from .measures.summaries import summarize
from .replay import CandidateTable
from .stages.ablate import ablate
from .stages.prepare import prepare_store
from .stages.replay_tables import Labels, Prepared, replay_tables, window_table

__all__ = ["agreement", "summaries", "truth_prepared", "with_truth"]


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


def truth_prepared(prepared: Prepared, truth: pl.DataFrame) -> Prepared:
    """`prepared` with every table relabelled by the truth (`with_truth`)."""
    tables = {key: with_truth(table, truth) for key, table in prepared.tables.items()}
    return replace(prepared, tables=tables, labels=Labels("world qrels (the truth)"))


def agreement(truth: pl.DataFrame, verdicts: pl.DataFrame, *, metric: str,
              truth_metric: str, arms: list[str], unit: str = "query") -> dict[str, object]:
    """Kendall's tau-b of the orders of `arms` and Pearson's r of their changes against
    `off`: `verdicts`' `metric` against `truth`'s `truth_metric` (summaries, overall)."""
    a, b = _means(truth, truth_metric, unit), _means(verdicts, metric, unit)
    arms = [arm for arm in arms if arm in a and arm in b]
    x, y = np.array([a[arm] for arm in arms]), np.array([b[arm] for arm in arms])
    tau = stats.kendalltau(x, y).statistic if len(arms) > 1 and np.ptp(y) > 0 else math.nan
    r = math.nan
    if "off" in arms and len(arms) > 2:
        dx = np.array([a[arm] - a["off"] for arm in arms if arm != "off"])
        dy = np.array([b[arm] - b["off"] for arm in arms if arm != "off"])
        if dx.std() > 0 and dy.std() > 0:
            r = float(stats.pearsonr(dx, dy).statistic)
    return {"metric": metric, "arms": arms, "tau": float(tau), "delta_r": r}


def _means(summary: pl.DataFrame, metric: str, unit: str) -> dict[str, float]:
    rows = summary.filter(pl.col("metric") == metric, pl.col("group_by") == "overall",
                          pl.col("unit") == unit)
    return dict(zip(rows["arm"], rows["mean"], strict=True))


def summaries(cfg: ExperimentConfig, prepared: Prepared,
              ladder: dict[str, EngineConfig]) -> pl.DataFrame:
    """The ladder's arms and the BM25 and dense references on the test window, under the
    labels `prepared` carries (the pool in ideal order reads the labels: left out)."""
    from .references import reference_frame, reference_runs
    result = ablate(cfg, prepared, ladder)
    table = window_table(prepared, "off" if "off" in ladder else next(iter(ladder)), "test")
    metrics = [parse_metric(m) for m in cfg.metrics.names]
    frames = {f"reference:{run.name}": reference_frame(table, run, metrics)
              for run in reference_runs(prepared.dataset, table) if run.name != "pool-ideal"}
    return pl.concat([result.summary, summarize(frames, cfg)], how="diagonal_relaxed")


def _run(cfg: ExperimentConfig, root: Path, truth_path: Path, console: Console) -> int:
    truth = read_qrels(truth_path)
    store = prepare_store(cfg, root)
    ladder = experiment_arms(cfg, ablation=True).ladder
    prepared = replay_tables(cfg, store, ladder)
    prepared = with_fidelity(prepared, fidelity_stage(cfg, prepared))
    if prepared.fidelity is not None:  # a check goes on either way: it says so
        console.print(escape(prepared.fidelity.summary()), highlight=False)
    on_verdicts = summaries(cfg, prepared, ladder)
    on_truth = summaries(cfg, truth_prepared(prepared, truth), ladder)
    primary = cfg.metrics.primary
    judged = judged_metric(cfg.metrics.names)
    scored = [m for m in cfg.metrics.names if m != judged]
    shown = scored + ([judged] if judged else [])
    every = list(dict.fromkeys(on_truth.filter(pl.col("unit") == "query")["arm"]))
    table = Table(title=f"feedback labels against the truth, test window, per query "
                        f"({prepared.labels.occurrences:,} verdict searches; truth: "
                        f"{truth_path})", title_justify="left", caption=(
                  "reference:bm25 and reference:dense rank every memory the searcher can "
                  "see, not MSPR's pool: where their judged share is far below the ladder's, "
                  "verdicts cannot score them"), caption_justify="left")
    for column in ("arm", f"truth {primary}", *(f"verdicts {m}" for m in shown)):
        table.add_column(column, justify="left" if column == "arm" else "right")
    truth_means = _means(on_truth, primary, "query")
    verdict_means = {m: _means(on_verdicts, m, "query") for m in shown}
    for arm in every:
        table.add_row(arm, fmt(truth_means.get(arm)),
                      *(fmt(verdict_means[m].get(arm)) for m in shown))
    console.print(table)
    for name, arms in (("the ladder's arms", list(ladder)), ("the arms and references", every)):
        for metric in scored:
            res = agreement(on_truth, on_verdicts, metric=metric, truth_metric=primary,
                            arms=arms)
            if math.isnan(res["tau"]):  # type: ignore[arg-type]
                console.print(f"{name}: {metric} on verdicts gives every arm the same value: "
                              "it cannot order them", highlight=False)
                continue
            console.print(f"{name}: {metric} on verdicts vs {primary} on the truth: "
                          f"Kendall's tau-b {res['tau']:.3f} over {len(res['arms'])} "  # type: ignore[arg-type]
                          f"(target >= 0.8); Pearson r of the changes against off "
                          f"{res['delta_r']:.3f}", highlight=False)
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
