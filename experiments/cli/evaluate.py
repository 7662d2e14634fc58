"""`msprlab evaluate QRELS RUN`: a TREC run scored with msprlab's metrics, like trec_eval.

`evaluate_run(qrels, run, metrics)` is the library form: TREC frames in
(`msprlab.datasets.trec.read_qrels/read_run`), a `RunEvaluation` out (per-query values and
the query counts). It orders each query's rows as trec_eval does, turns them into judged
ranks and calls `metrics.evaluate`, so the CLI, the tuner and the tests share one
implementation. `add_evaluate_command(commands)` adds the command to the CLI.
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from rich import box
from rich.console import Console
from rich.table import Table

from msprlab.datasets.trec import read_qrels, read_run
from msprlab.datasets.validate import IngestError
from msprlab.experiments.cli.exits import EXIT_BAD_INPUT, EXIT_OK, print_error, stdout_console
from msprlab.experiments.measures.metrics import (
    KINDS,
    Judged,
    Metric,
    accepted_forms,
    evaluate,
    judged_from_frames,
    parse_metric,
)

__all__ = ["DEFAULT_METRICS", "RunEvaluation", "add_evaluate_command", "evaluate_run",
           "rank_like_trec_eval"]

# The CLI's exit statuses (experiments/cli.py has the same; imported from there, a cycle).
DEFAULT_METRICS = ("ndcg@10", "recall@100", "mrr", "map")


@dataclass(frozen=True)
class RunEvaluation:
    """Per-query values of a run and which queries were evaluated.

    per_query : `query_id` (sorted) and one Float64 column per metric name; NaN where the
        query has no relevant memory (all metrics but judged@k).
    no_relevant : evaluated queries whose qrels hold no relevant memory.
    run_without_qrels, qrels_without_run : queries in only one of the two files; neither is
        evaluated (trec_eval without -c).
    """

    metrics: tuple[Metric, ...]
    per_query: pl.DataFrame
    no_relevant: int
    run_without_qrels: int
    qrels_without_run: int

    def summary(self) -> pl.DataFrame:
        """Per metric: mean over the queries with a value, n of them, n_no_relevant."""
        return pl.DataFrame([
            (m.name, column.mean() if column.len() else math.nan, column.len(),
             self.per_query.height - column.len())
            for m in self.metrics
            for column in [self.per_query.get_column(m.name).drop_nans()]
        ], schema={"metric": pl.String, "mean": pl.Float64, "n": pl.Int64,
                   "n_no_relevant": pl.Int64}, orient="row")


def rank_like_trec_eval(run: pl.DataFrame) -> pl.DataFrame:
    """Add `position` (0-based) per query: score descending, ties by memory_id descending.

    That is trec_eval's order (and pytrec_eval's, which embeds it): it sorts by score and
    breaks ties with strcmp on the document ids, largest first; Polars compares strings
    bytewise as strcmp does. The run's rank field is ignored, as trec_eval ignores it.
    """
    return (run.sort(["query_id", "score", "memory_id"], descending=[False, True, True])
            .with_columns(position=pl.int_range(pl.len(), dtype=pl.Int64).over("query_id")))


def _check_unique(frame: pl.DataFrame, what: str) -> None:
    key = pl.struct("query_id", "memory_id")
    repeated = frame.select(~key.is_first_distinct()).to_series()
    if not repeated.any():
        return
    row = frame.filter(repeated).row(0, named=True)
    message = (f"{what} lists memory {row['memory_id']!r} again for query {row['query_id']!r}; "
               "each (query, memory) may appear once")
    if "_row" in frame.columns:
        first = frame.filter(query_id=row["query_id"], memory_id=row["memory_id"])["_row"][0]
        message = f"{row['_file']} line {row['_row']}: {message} (first at line {first})"
    raise ValueError(message)


def _judged_pairs(ranked: pl.DataFrame, searches: pl.DataFrame,
                  qrels: pl.DataFrame) -> tuple[Judged, np.ndarray]:
    """The judged pairs of the ranked run and their 0-based positions, in `Judged` order."""
    pairs = (ranked.join(qrels.select("query_id", "memory_id", "relevance"),
                         on=["query_id", "memory_id"])
             .select("search", "memory_id", "position",
                     grade=pl.col("relevance").clip(lower_bound=0))
             .sort("search", "position"))
    return (judged_from_frames(searches, pairs, qrels),
            pairs.get_column("position").to_numpy())


def evaluate_run(qrels: pl.DataFrame, run: pl.DataFrame,
                 metrics: Sequence[Metric]) -> RunEvaluation:
    """Score a TREC run against TREC qrels (frames as `read_qrels` / `read_run` give them).

    Evaluated queries are those in both (trec_eval's default, without -c). A negative
    relevance counts as 0 (non-relevant), and bpref and the condensed-list measures skip it
    as unjudged, both as in trec_eval. Raises ValueError on a duplicate (query_id,
    memory_id) in either frame or a NaN score.
    """
    _check_unique(qrels, "qrels")
    _check_unique(run, "run")
    if run.get_column("score").is_nan().any():
        row = run.filter(pl.col("score").is_nan()).row(0, named=True)
        raise ValueError(f"run: query {row['query_id']!r} memory {row['memory_id']!r} has a "
                         "NaN score; trec_eval's order is undefined for it")
    run_queries, qrels_queries = (set(f.get_column("query_id").unique()) for f in (run, qrels))
    searches = pl.DataFrame({"query_id": sorted(run_queries & qrels_queries)},
                            schema={"query_id": pl.String}).with_row_index("search")
    ranked = rank_like_trec_eval(run).join(searches, on="query_id")
    n_returned = np.zeros(searches.height, dtype=np.int64)
    counts = ranked.group_by("search").len()
    n_returned[counts.get_column("search").to_numpy()] = counts.get_column("len").to_numpy()
    # trec_eval reads a negative relevance as "in the pool, not judged" (a sampled pool):
    # non-relevant for every measure, and skipped as unjudged by the judged-only ones
    # (bpref, the condensed lists), which are therefore scored without those rows.
    judged_only = [m for m in metrics if KINDS[m.kind].judged_only]
    groups = [(list(metrics), qrels)]
    if judged_only and (qrels.get_column("relevance") < 0).any():
        groups = [([m for m in metrics if m not in judged_only], qrels),
                  (judged_only, qrels.filter(pl.col("relevance") >= 0))]
    values: dict[str, np.ndarray] = {}
    for group, group_qrels in groups:
        judged, positions = _judged_pairs(ranked, searches, group_qrels)
        values |= evaluate(judged, positions, group, n_returned=n_returned)
    per_query = searches.select("query_id").with_columns(
        pl.Series(m.name, values[m.name], dtype=pl.Float64) for m in metrics)
    return RunEvaluation(tuple(metrics), per_query,
                         no_relevant=int(np.count_nonzero(judged.n_relevant == 0)),
                         run_without_qrels=len(run_queries - qrels_queries),
                         qrels_without_run=len(qrels_queries - run_queries))


def _number(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.4f}"


def _json_number(value: float) -> float | None:
    return None if math.isnan(value) else value


def _counts_text(result: RunEvaluation) -> str:
    return (f"{result.per_query.height} queries evaluated (in both qrels and run); "
            f"{result.no_relevant} without a relevant memory (excluded from every metric but "
            f"judged@k); {result.run_without_qrels} run queries without qrels and "
            f"{result.qrels_without_run} qrels queries without a run were not evaluated")


def _as_json(result: RunEvaluation, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "qrels": str(args.qrels), "run": str(args.run),
        "metrics": [m.name for m in result.metrics],
        "queries": {"evaluated": result.per_query.height, "no_relevant": result.no_relevant,
                    "run_without_qrels": result.run_without_qrels,
                    "qrels_without_run": result.qrels_without_run},
        "summary": [{**row, "mean": _json_number(row["mean"])}
                    for row in result.summary().iter_rows(named=True)],
    }
    if args.per_query:
        out["per_query"] = [{k: v if k == "query_id" else _json_number(v) for k, v in row.items()}
                            for row in result.per_query.iter_rows(named=True)]
    return out


def _print_tables(console: Console, result: RunEvaluation, per_query: bool) -> None:
    if per_query:
        table = Table(title="per query", title_justify="left", box=box.SIMPLE_HEAD)
        table.add_column("query_id", no_wrap=True)
        for metric in result.metrics:
            table.add_column(metric.name, justify="right")
        for row in result.per_query.iter_rows():
            table.add_row(row[0], *(_number(v) for v in row[1:]))
        console.print(table)
    table = Table(title="mean over queries with a relevant memory", title_justify="left",
                  box=box.SIMPLE_HEAD)
    table.add_column("metric")
    for column in ("mean", "n", "no relevant"):
        table.add_column(column, justify="right")
    for name, mean, n, no_relevant in result.summary().iter_rows():
        table.add_row(name, _number(mean), str(n), str(no_relevant))
    console.print(table)
    console.print(_counts_text(result), highlight=False, soft_wrap=True)


def cmd_evaluate(args: argparse.Namespace) -> int:
    errors = Console(stderr=True)
    try:
        metrics = [parse_metric(text) for text in args.metric or DEFAULT_METRICS]
        qrels = read_qrels(args.qrels, provenance=True)
        run = read_run(args.run, provenance=True)
        result = evaluate_run(qrels, run, metrics)
    except (IngestError, ValueError, OSError) as exc:
        print_error(exc, errors)
        return EXIT_BAD_INPUT
    if result.per_query.height == 0:
        errors.print(f"[red]error:[/red] no query is in both {args.qrels} and {args.run} "
                     f"({result.run_without_qrels} run queries, {result.qrels_without_run} "
                     "qrels queries): nothing to evaluate", highlight=False, soft_wrap=True)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(_as_json(result, args), indent=2))
    else:
        _print_tables(stdout_console(100), result, args.per_query)
    return EXIT_OK


DESCRIPTION = f"""\
Score a TREC run against TREC qrels with msprlab's metrics, like trec_eval.

QRELS lines are `query_id iteration memory_id relevance`; RUN lines are
`query_id Q0 memory_id rank score tag`. A memory is relevant when its relevance is > 0;
a negative relevance counts as 0 (non-relevant), and as unjudged for bpref and the
condensed lists, as in trec_eval.

Order: each query's rows are ranked by score, descending; tied scores are broken by
memory id in descending byte order (strcmp), exactly as trec_eval and pytrec_eval do, so
results agree with them on tied runs too. The rank field is ignored, as trec_eval ignores
it. (msprlab's own runs are written with strictly decreasing scores, so no tie arises.)

Queries: only queries present in both files are evaluated, as trec_eval does without -c
(pytrec_eval also skips run queries without qrels). Queries in only one file are counted
and reported, not scored. A query whose qrels hold no relevant memory has no value for any
metric but judged@K and is excluded from the means and counted apart ("no relevant");
trec_eval would score it 0 and average the 0 in.

{textwrap.fill(f"Metrics (--metric, repeatable; default: {', '.join(DEFAULT_METRICS)}): "
                f"{accepted_forms()}", width=90)}
ndcg is trec_eval's ndcg_cut (linear gain, log2(rank + 2) discount, ideal DCG from all
relevant memories of the query); precision@K divides by K; recall@K divides by all relevant
memories; map is trec_eval's map; judged@K divides by min(K, memories returned), as
ir_measures' Judged@K.
For incomplete judgments, where unjudged memories should be skipped rather than counted
non-relevant: bpref is trec_eval's bpref, (1/R) * the sum over the relevant memories
returned of 1 - min(n, R) / min(R, N), n the judged non-relevant memories above it (R
relevant and N judged non-relevant memories in the qrels, returned or not);
ndcg_condensed@K and precision_condensed@K (ndcg'@K, P'@K) are Sakai's nDCG' and P':
ndcg@K and precision@K of the condensed list, the run with its unjudged memories removed
(trec_eval's ndcg_cut and P with -J).

Output: a table of the mean of each metric, n (queries averaged) and the no-relevant count;
--per-query adds one row per query; --json prints the same as JSON on stdout (NaN as null).

Exit status: 0 success; 2 bad input (an unreadable or malformed file, named by file and
line; a duplicate (query, memory); an unknown metric, with the accepted list; no query in
common)."""


def add_evaluate_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `evaluate QRELS RUN` to the CLI's sub-parsers."""
    parser = commands.add_parser(
        "evaluate", help="score a TREC run against TREC qrels (like trec_eval)",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("qrels", type=Path, metavar="QRELS", help="TREC qrels file")
    parser.add_argument("run", type=Path, metavar="RUN", help="TREC run file")
    parser.add_argument("--metric", "-m", action="append", metavar="NAME",
                        help=f"a metric to compute, e.g. ndcg@10, P@5, recip_rank, bpref "
                             f"(repeatable; default: {', '.join(DEFAULT_METRICS)})")
    parser.add_argument("--per-query", "-q", action="store_true",
                        help="also print each query's values (trec_eval -q)")
    parser.add_argument("--json", action="store_true", help="print JSON to stdout")
    parser.set_defaults(func=cmd_evaluate)
