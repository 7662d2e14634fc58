"""`make bench`: msprlab's vectorised metrics against pytrec_eval and ranx, side by side.

One synthetic run, generated with a fixed seed: `--queries` searches (10k) with
`--candidates` candidates each (50), about two judged candidates per search plus judged
relevant memories that are not candidates. Each tool computes ndcg@10, recall@100 and mrr
over the same ranking, and the means are printed so that agreement can be seen.

- msprlab: `metrics.evaluate` from the judged pairs' ranks, which is all the batch scorer
  produces per trial; building `Judged` happens once per study and is timed apart. Also
  `--trials` trials at once, per trial.
- pytrec_eval: building its qrels/run dicts (one entry per returned memory) is timed apart
  from `RelevanceEvaluator(...)` plus `evaluate(run)`.
- ranx: `Qrels`/`Run` construction from the same dicts apart from `evaluate`; numba
  compiles on the first call, which a tiny warm-up run absorbs (its time is printed: about
  2 minutes the very first time here, ~12 s when loaded from numba's disk cache).

Times are medians of `--repeats` runs; the machine is shared (2 cores, other jobs may run),
so read the ratios, not the absolute times, and rerun when the load average is high.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from msprlab.experiments.measures.metrics import Judged, evaluate, judged_from_frames, parse_metric

METRICS = ("ndcg@10", "recall@100", "mrr")
PYTREC_MEASURES = {"ndcg_cut.10", "recall.100", "recip_rank"}
PYTREC_NAMES = {"ndcg@10": "ndcg_cut_10", "recall@100": "recall_100", "mrr": "recip_rank"}


@dataclass(frozen=True)
class Synthetic:
    judged: Judged
    ranks: np.ndarray        # (N,) rank of each judged pair among the candidates
    n_returned: np.ndarray   # (n_searches,)
    qrels: dict[str, dict[str, int]]
    run: dict[str, dict[str, float]]
    judged_seconds: float    # judged_from_frames, once per study


def generate(n_queries: int, n_candidates: int, seed: int) -> Synthetic:
    """Every query has >= 1 relevant memory, so all three tools average the same queries."""
    rng = np.random.default_rng(seed)
    query_ids = [f"q{q}" for q in range(n_queries)]
    candidate_ids = np.array([f"m{i}" for i in range(n_candidates)])
    # A strictly decreasing score per position, so no tool has to break a tie.
    scores = np.sort(rng.random((n_queries, n_candidates)), axis=1)[:, ::-1]
    n_judged = np.clip(rng.poisson(2.0, n_queries), 1, n_candidates)
    search = np.repeat(np.arange(n_queries), n_judged)
    # Positions of the judged candidates: distinct within a search, sorted for readability.
    positions = np.concatenate([np.sort(rng.choice(n_candidates, k, replace=False))
                                for k in n_judged])
    grades = rng.integers(0, 4, search.size)
    first = np.r_[0, np.cumsum(n_judged)[:-1]]
    grades[first] = rng.integers(1, 4, n_queries)  # at least one relevant candidate
    extra = rng.poisson(0.5, n_queries)            # relevant memories outside the candidates
    qrels: dict[str, dict[str, int]] = {q: {} for q in query_ids}
    for s, p, g in zip(search.tolist(), positions.tolist(), grades.tolist(), strict=True):
        qrels[query_ids[s]][f"m{p}"] = g
    for q, count in enumerate(extra.tolist()):
        for i in range(count):
            qrels[query_ids[q]][f"x{i}"] = int(rng.integers(1, 4))
    start = time.perf_counter()
    judged = judged_from_frames(
        pl.DataFrame({"search": np.arange(n_queries), "query_id": query_ids}),
        pl.DataFrame({"search": search, "memory_id": candidate_ids[positions], "grade": grades}),
        pl.DataFrame([(q, m, r) for q, docs in qrels.items() for m, r in docs.items()],
                     schema=["query_id", "memory_id", "relevance"], orient="row"))
    judged_seconds = time.perf_counter() - start
    run = {q: dict(zip(candidate_ids.tolist(), row.tolist(), strict=True))
           for q, row in zip(query_ids, scores, strict=True)}
    return Synthetic(judged, positions, np.full(n_queries, n_candidates), qrels, run,
                     judged_seconds)


def median_time(work: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """(median seconds over `repeats` calls, the last result)."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def bench_ours(data: Synthetic, trials: int, repeats: int) -> dict[str, Any]:
    metrics = [parse_metric(m) for m in METRICS]
    evaluate(data.judged, data.ranks, metrics, n_returned=data.n_returned)  # caches ideal DCG
    one, values = median_time(
        lambda: evaluate(data.judged, data.ranks, metrics, n_returned=data.n_returned),
        repeats * 20)
    rng = np.random.default_rng(1)
    # Other trials rank the judged candidates elsewhere among the same 50.
    many = np.stack([data.ranks, *(rng.permutation(data.ranks) for _ in range(trials - 1))])
    batch, _ = median_time(
        lambda: evaluate(data.judged, many, metrics, n_returned=data.n_returned), repeats)
    return {"evaluate": one, "per_trial_batched": batch / trials,
            "means": {m: float(np.nanmean(values[m])) for m in METRICS}}


def bench_pytrec_eval(data: Synthetic, repeats: int) -> dict[str, Any] | None:
    try:
        import pytrec_eval
    except ImportError:
        return None

    def build() -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
        return ({q: dict(docs) for q, docs in data.qrels.items()},
                {q: dict(docs) for q, docs in data.run.items()})

    build_time, (qrels, run) = median_time(build, repeats)

    def score() -> dict[str, dict[str, float]]:
        result: dict[str, dict[str, float]] = (
            pytrec_eval.RelevanceEvaluator(qrels, PYTREC_MEASURES).evaluate(run))
        return result

    evaluate_time, result = median_time(score, repeats)
    means = {m: float(np.mean([v[PYTREC_NAMES[m]] for v in result.values()])) for m in METRICS}
    return {"build": build_time, "evaluate": evaluate_time, "means": means}


def bench_ranx(data: Synthetic, repeats: int) -> dict[str, Any] | None:
    try:
        import ranx  # imported here: it configures numba's threading layer on import
    except ImportError:
        return None
    with warnings.catch_warnings():
        # ranx's ndcg kernel casts uint64 to int64 (harmless at these sizes); numba warns.
        warnings.filterwarnings("ignore", message="unsafe cast from uint64 to int64")
        start = time.perf_counter()
        ranx.evaluate(ranx.Qrels({"q": {"a": 1}}), ranx.Run({"q": {"a": 1.0, "b": 0.5}}),
                      list(METRICS))
        compile_time = time.perf_counter() - start
        build_time, (qrels, run) = median_time(
            lambda: (ranx.Qrels(data.qrels), ranx.Run(data.run)), repeats)
        evaluate_time, means = median_time(
            lambda: ranx.evaluate(qrels, run, list(METRICS), save_results_in_run=False),
            repeats)
    return {"build": build_time, "evaluate": evaluate_time, "compile": compile_time,
            "means": {m: float(means[m]) for m in METRICS}}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:10.2f} ms"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    data = generate(args.queries, args.candidates, args.seed)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"metrics benchmark: {args.queries:,} queries x {args.candidates} candidates, "
          f"{data.judged.search.size:,} judged pairs, metrics {', '.join(METRICS)}; "
          f"median of {args.repeats} repeats; shared machine, load average {load}")
    ours = bench_ours(data, args.trials, args.repeats)
    print(f"  msprlab  Judged built once  {_ms(data.judged_seconds)}")
    print(f"  msprlab  evaluate, 1 trial  {_ms(ours['evaluate'])}")
    print(f"  msprlab  {args.trials} trials at once   {_ms(ours['per_trial_batched'])} per trial")
    rows = [("msprlab", ours["means"])]
    for name, result in (("pytrec_eval", bench_pytrec_eval(data, args.repeats)),
                         ("ranx", bench_ranx(data, args.repeats))):
        if result is None:
            print(f"  {name}: not installed (pip install -e '.[dev]'), skipped")
            continue
        if "compile" in result:
            print(f"  {name:11s} first call: numba compile or disk-cache load (once per "
                  f"process) {_ms(result['compile'])}")
        total = result["build"] + result["evaluate"]
        print(f"  {name:11s} build inputs     {_ms(result['build'])}")
        print(f"  {name:11s} evaluate         {_ms(result['evaluate'])}   msprlab is "
              f"{result['evaluate'] / ours['evaluate']:,.0f}x faster "
              f"({result['evaluate'] / ours['per_trial_batched']:,.0f}x batched)")
        print(f"  {name:11s} build + evaluate {_ms(total)}   msprlab is "
              f"{total / ours['evaluate']:,.0f}x faster")
        rows.append((name, result["means"]))
    print("  means (agreement check): " + "; ".join(
        f"{name} " + " ".join(f"{m}={v:.6f}" for m, v in means.items()) for name, means in rows))
    print("  note: msprlab starts from the judged pairs' ranks (what the batch scorer gives per "
          "trial), the others from the full run of every returned memory.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
