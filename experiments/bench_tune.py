"""`make bench`: 1,000 TPE trials over the six weights on LoCoMo, and where the time goes.

The data: LoCoMo with a simulated log of 3,000 searches (seed 1), ingested into `--store`
if it is missing, replayed into a candidate table (cached beside the store), and the train
window of a time split (the last 30% of searches held out). Building the store and the
first replay take a minute or more; both are timed apart from the study.

The study: `tune` with TPE (seed 0), every weight in [0, 1], objective ndcg@10, the default
journal-file storage in a fresh temporary folder. Time is split by wrapping, in this
process only:

- sampling: `TPESampler.infer_relative_search_space`, `sample_relative`,
  `sample_independent` (Optuna's TPE itself);
- harness: the trial function minus its `suggest_float` calls (so `Scorer.values`, the
  scoring and the metrics, plus building the arm and the means), the per-trial callback
  and the preparation (one baseline scoring to find the searches each objective covers);
- storage and other Optuna: the rest of the study loop (trial creation and the journal's
  appends, about 8 per trial, and its reads; `tune.ProcessSafeJournal` does not fsync each
  append); `--journal-dir /dev/shm` puts the journal on a tmpfs, to show what the disk costs;
- result: the trials frame, the best arm and PED-ANOVA, once at the end.

Targets: 1,000 trials under 60 s, the harness under 20% of it. The machine is shared; the
load average is printed.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import polars as pl

from msprlab.engine.batch import WEIGHTS

from . import tune as tune_module
from .evaluation import Scorer, arm_of
from .metrics import parse_metric
from .splits import SplitSpec, split_searches
from .tune import Objective, SearchSpace, tune

DEFAULT_STORE = Path("build/bench/locomo.duckdb")
SAMPLING = ("infer_relative_search_space", "sample_relative", "sample_independent")


class Clock:
    """Seconds spent in wrapped callables, by name (outermost calls only per name)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        original = getattr(owner, attribute)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
                self.calls[name] += 1

        setattr(owner, attribute, timed)


def ensure_store(store: Path, searches: int, seed: int) -> None:
    if store.exists():
        print(f"store: {store} (exists)")
        return
    from .cli import main as cli_main
    store.parent.mkdir(parents=True, exist_ok=True)
    print(f"store: {store} missing; ingesting LoCoMo with {searches:,} simulated searches "
          f"(seed {seed}), about a minute ...", flush=True)
    start = time.perf_counter()
    code = cli_main(["ingest", "locomo-log", "--store", str(store), "--searches",
                     str(searches), "--seed", str(seed)])
    if code != 0:
        raise SystemExit(f"ingest failed with exit code {code}")
    print(f"store: built in {time.perf_counter() - start:.1f} s")


def train_scorer(store: Path, metric: str) -> tuple[Scorer, Any]:
    from msprlab.datasets.store import load_dataset

    from .replay import cached_replay
    from .replay_cli import all_signals_config
    config = all_signals_config()
    start = time.perf_counter()
    table, cached = cached_replay(load_dataset(store), config,
                                  store.with_name(store.name + ".cache"))
    how = "read from the cache" if cached else "replayed (first time; cached for next runs)"
    print(f"candidate table: {table.searches.height:,} searches, {table.candidates.height:,} "
          f"candidates, {how} in {time.perf_counter() - start:.1f} s")
    split = split_searches(table.searches, SplitSpec(test_fraction=0.3))
    train = table.subset((split == "train").to_numpy())
    start = time.perf_counter()
    scorer = Scorer.of(train, [parse_metric(metric)])
    print(f"train window: {train.searches.height:,} searches; Scorer.of "
          f"{time.perf_counter() - start:.2f} s")
    return scorer, config


def instrument(clock: Clock) -> None:
    for method in SAMPLING:
        clock.wrap(optuna.samplers.TPESampler, method, f"sampling.{method}")
    clock.wrap(tune_module._Objective, "__call__", "objective")
    clock.wrap(optuna.trial.Trial, "suggest_float", "suggest_float")
    clock.wrap(Scorer, "values", "scorer.values")
    clock.wrap(tune_module._Reporter, "__call__", "callback")
    clock.wrap(tune_module, "_prepare", "prepare")
    clock.wrap(tune_module, "_result", "result")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, default=DEFAULT_STORE)
    parser.add_argument("--searches", type=int, default=3000)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--metric", default="ndcg@10")
    parser.add_argument("--memory", action="store_true",
                        help="an in-memory study instead of the journal file: what Optuna's "
                             "persistence costs, by difference")
    parser.add_argument("--journal-dir", type=Path, default=None,
                        help="where the study's journal file goes (default: the system's "
                             "temporary folder); on a tmpfs such as /dev/shm the journal's "
                             "fsync costs nothing, which isolates the disk's share")
    args = parser.parse_args(argv)
    ensure_store(args.store, args.searches, seed=1)
    scorer, config = train_scorer(args.store, args.metric)
    clock = Clock()
    instrument(clock)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    folder = tempfile.TemporaryDirectory(prefix="bench-tune-", dir=args.journal_dir)
    print(f"study: {args.trials:,} TPE trials (seed {args.seed}), six weights in [0, 1], "
          f"{args.metric}, journal file in {folder.name}; shared machine, load average "
          f"{load}", flush=True)
    marks: list[float] = []
    cpu = time.process_time()
    start = time.perf_counter()

    def progress(done: int, total: int) -> None:
        if done % 100 == 0 or done == total:
            marks.append(time.perf_counter() - start)

    with folder:
        result = tune(scorer, arm_of("base", config), SearchSpace.unit(WEIGHTS),
                      [Objective(args.metric)], n_trials=args.trials, seed=args.seed,
                      study_name="bench",
                      storage=":memory:" if args.memory else Path(folder.name) / "bench.journal",
                      progress=progress)
        total = time.perf_counter() - start
    report(clock, total, time.process_time() - cpu, args.trials, marks, result)
    return 0


def report(clock: Clock, total: float, cpu: float, trials: int, marks: list[float],
           result: Any) -> None:
    s = clock.seconds
    sampling = sum(s[f"sampling.{m}"] for m in SAMPLING)
    harness = s["objective"] - s["suggest_float"] + s["callback"] + s["prepare"]
    other = total - sampling - harness - s["result"]

    def line(label: str, seconds: float, note: str = "") -> None:
        print(f"  {label:42s} {seconds:8.2f} s  {seconds / total:6.1%}   "
              f"{seconds / trials * 1e3:7.2f} ms/trial  {note}")

    print(f"total {total:.2f} s for {trials:,} trials: {total / trials * 1e3:.2f} ms per trial "
          f"(target: < 60 s); this process's CPU time {cpu:.2f} s (wall minus CPU: waiting "
          "for the disk's fsync or for a core on the shared machine)")
    line("Optuna sampling (TPE)", sampling)
    for method in SAMPLING:
        line(f"  {method}", s[f"sampling.{method}"])
    line("everything but Optuna's sampling", total - sampling,
         "(the target's harness share: < 20%)")
    line("  harness (scoring, metrics, bookkeeping)", harness)
    line("  Scorer.values (scores + metrics)", s["scorer.values"])
    line("  Optuna storage and study loop", other, "(journal appends, not fsync'ed)")
    line("  result (frame, best arm, PED-ANOVA)", s["result"],
         "(includes optuna.importance's scikit-learn import)")
    print("  cumulative time every 100 trials: " + " ".join(f"{m:.1f}" for m in marks))
    best = result.best[0]
    frame: pl.DataFrame = result.trials
    print(f"  best {result.objectives[0].label()} {result.best_values[0][0]:.4f} "
          f"(baseline {frame.filter(pl.col('baseline'))[result.objectives[0].label()][0]:.4f})"
          f", trial {best.name}: " + ", ".join(
              f"{n}={w:.3f}" for n, w in zip(WEIGHTS, best.weights, strict=True)))
    importance = result.importance.get(result.objectives[0].label(), {})
    if importance:
        print("  PED-ANOVA importance: " + ", ".join(f"{n} {v:.2f}"
                                                     for n, v in importance.items()))
    for note in result.notes:
        print(f"  note: {note}")


if __name__ == "__main__":
    raise SystemExit(main())
