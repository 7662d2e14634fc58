"""`make bench`: 1,000 TPE trials over the six weights on LoCoMo, and where the time goes.

The data: LoCoMo with a simulated log of 3,000 searches (seed 1), ingested into `--store`
if it is missing, replayed into a candidate table (cached beside the store), and the train
window of a time split (the last 30% of searches held out). Building the store and the
first replay take a minute or more; both are timed apart from the study.

The study: `tune` with TPE (seed 0), every weight in [0, 1], objective ndcg@10, the default
journal-file storage in a fresh temporary folder; then the same study with Optuna's
in-memory storage, summed up on one line, to show what the journal costs by difference
(`--memory`: only the in-memory study, in full). Time is split by wrapping, in this
process only:

- the trials: the `tune` call up to the end of its study (preparation, creating or loading
  the study, the 1,000 trials); the target applies to this;
- sampling: `TPESampler.infer_relative_search_space`, `sample_relative`,
  `sample_independent` (Optuna's TPE itself, with the storage calls TPE makes: with the
  constant liar it writes each trial's proposal as a system attribute and re-reads the
  trials; their time is printed on a line of its own);
- harness: the trial function minus its `suggest_float` calls (so `Scorer.values`, the
  scoring and the metrics, plus building the arm and the means), the per-trial callback
  and the preparation (one baseline scoring to find the searches each objective covers);
- storage and the rest of Optuna's study loop: what is left (creating each trial, writing
  its six parameters and its state, reading the journal back after each write, deep
  copies of the trial for the callback); the journal operations per trial are counted.
  `tune.ProcessSafeJournal` appends under an `flock` without fsync; `--journal-dir
  /dev/shm` puts the journal on a tmpfs, to show what the disk costs;
- the result: the trials frame, the best arm and PED-ANOVA, computed once after the study
  (importing scikit-learn, through `optuna.importance`, is most of it): printed on its own
  line, not part of the trials' time.

Targets: 1,000 trials under 60 s, everything but the sampling under 20% of it. The machine
is shared; the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import polars as pl
from optuna.storages import InMemoryStorage, JournalStorage

from msprlab.engine.batch import WEIGHTS
from msprlab.experiments.measures.metrics import parse_metric
from msprlab.experiments.measures.scoring import Scorer, arm_of
from msprlab.experiments.measures.splits import SplitSpec, split_searches
from msprlab.experiments.tune import Objective, SearchSpace, tune
from msprlab.experiments.tune import journal as tune_journal
from msprlab.experiments.tune import space as tune_space
from msprlab.experiments.tune import study as tune_study
from msprlab.experiments.tune import workers as tune_workers

DEFAULT_STORE = Path("build/bench/locomo.duckdb")
SAMPLING = ("infer_relative_search_space", "sample_relative", "sample_independent")
STORAGE_READS_WRITES = ("get_all_trials", "get_trial", "set_trial_system_attr",
                        "set_trial_user_attr", "set_trial_param", "get_study_directions",
                        "get_study_system_attrs", "get_study_user_attrs")


class Clock:
    """Seconds spent in wrapped callables and their calls, by name. A name's group is its
    part before the first dot; calls nested in a call of the same group add no time (they
    are in it). `within`: only calls made while a call of that group runs are timed and
    counted; `count`: what a call counts for (e.g. the logs in a journal append)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.depth: dict[str, int] = defaultdict(int)

    def wrap(self, owner: Any, attribute: str, name: str, *, within: str | None = None,
             count: Callable[..., int] | None = None) -> None:
        original = getattr(owner, attribute)
        group = name.split(".")[0]

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if within is not None and not self.depth[within]:
                return original(*args, **kwargs)
            self.calls[name] += 1 if count is None else count(*args, **kwargs)
            self.depth[group] += 1
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.depth[group] -= 1
                if not self.depth[group]:
                    self.seconds[name] += time.perf_counter() - start

        setattr(owner, attribute, timed)

    def snapshot(self) -> Clock:
        copy = Clock()
        copy.seconds.update(self.seconds)
        copy.calls.update(self.calls)
        return copy

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def ensure_store(store: Path, searches: int, seed: int) -> None:
    if store.exists():
        print(f"store: {store} (exists)")
        return
    from msprlab.experiments.cli import main as cli_main
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
    from msprlab.datasets.sidecars import replay_cache_path
    from msprlab.datasets.store import load_dataset
    from msprlab.experiments.cli.replay import all_signals_config
    from msprlab.experiments.replay import cached_replay
    config = all_signals_config()
    start = time.perf_counter()
    table, cached = cached_replay(load_dataset(store), config, replay_cache_path(store))
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
    # The storage calls TPE makes (inside the sampling's time).
    for storage in (JournalStorage, InMemoryStorage):
        for method in STORAGE_READS_WRITES:
            clock.wrap(storage, method, "storage in sampling", within="sampling")
    clock.wrap(tune_journal.ProcessSafeJournal, "append_logs", "journal.appends",
               count=lambda _self, logs: len(logs))
    clock.wrap(tune_journal.ProcessSafeJournal, "read_logs", "journal.reads")
    clock.wrap(tune_space.TrialFunction, "__call__", "objective")
    clock.wrap(optuna.trial.Trial, "suggest_float", "suggest_float")
    clock.wrap(Scorer, "values", "scorer.values")
    clock.wrap(tune_workers._AfterTrial, "__call__", "callback")
    clock.wrap(tune_study, "trial_function", "prepare")
    clock.wrap(tune_study, "study_result", "result")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, default=DEFAULT_STORE)
    parser.add_argument("--searches", type=int, default=3000)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--metric", default="ndcg@10")
    parser.add_argument("--memory", action="store_true",
                        help="only the in-memory study, reported in full (by default the "
                             "journal study is, and the in-memory one on a line after it)")
    parser.add_argument("--journal-dir", type=Path, default=None,
                        help="where the study's journal file goes (default: the system's "
                             "temporary folder); on a tmpfs such as /dev/shm writing costs "
                             "no disk at all, which isolates the disk's share")
    args = parser.parse_args(argv)
    ensure_store(args.store, args.searches, seed=1)
    scorer, config = train_scorer(args.store, args.metric)
    clock = Clock()
    instrument(clock)
    with tempfile.TemporaryDirectory(prefix="bench-tune-", dir=args.journal_dir) as folder:
        storage = ":memory:" if args.memory else str(Path(folder) / "bench.journal")
        where = "in memory" if args.memory else f"journal file in {folder}"
        print(f"study: {args.trials:,} TPE trials (seed {args.seed}), six weights in [0, 1], "
              f"{args.metric}, {where}; shared machine, load average {load_average()}",
              flush=True)
        first = run_study(clock, scorer, config, args, storage)
    report(first, args.trials, journal=not args.memory)
    if not args.memory:
        clock.reset()
        memory = run_study(clock, scorer, config, args, ":memory:")
        m, j = split(memory), split(first)
        print(f"the same study in memory (Optuna's InMemoryStorage; same trials: "
              f"{same_trials(first.result, memory.result)}), just after: {m['total']:.2f} s, "
              f"sampling {m['sampling']:.2f} s, everything but the sampling {m['rest']:.2f} s "
              f"({m['rest'] / m['total']:.1%}), of which storage and the rest of Optuna's loop "
              f"{m['other']:.2f} s: the journal's cost is about {j['other'] - m['other']:.2f} s "
              f"({(j['other'] - m['other']) / args.trials * 1e3:.2f} ms per trial)")
    return 0


@dataclass(frozen=True)
class Run:
    clock: Clock
    wall: float              # the tune call, result included
    cpu: float               # this process's CPU time up to the last trial's callback
    marks: list[float]       # time at every 100 finished trials
    result: Any


def run_study(clock: Clock, scorer: Scorer, config: Any, args: argparse.Namespace,
              storage: str) -> Run:
    marks: list[float] = []
    cpu = [time.process_time()]
    start = time.perf_counter()

    def progress(done: int, total: int) -> None:
        if done % 100 == 0 or done == total:
            marks.append(time.perf_counter() - start)
        if done == total:
            cpu.append(time.process_time())

    result = tune(scorer, arm_of("base", config), SearchSpace.unit(WEIGHTS),
                  [Objective(args.metric)], n_trials=args.trials, seed=args.seed,
                  study_name="bench", storage=storage, progress=progress)
    wall = time.perf_counter() - start
    return Run(clock.snapshot(), wall, cpu[-1] - cpu[0], marks, result)


def split(run: Run) -> dict[str, float]:
    """The trials' time (the tune call but its one-time result) and its parts."""
    s = run.clock.seconds
    total = run.wall - s["result"]
    sampling = sum(s[f"sampling.{m}"] for m in SAMPLING)
    harness = s["objective"] - s["suggest_float"] + s["callback"] + s["prepare"]
    return {"total": total, "sampling": sampling, "rest": total - sampling,
            "harness": harness, "other": total - sampling - harness}


def same_trials(a: Any, b: Any) -> str:
    return "yes" if a.trials.drop("seconds").equals(b.trials.drop("seconds")) else "NO"


def load_average() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def report(run: Run, trials: int, *, journal: bool) -> None:
    clock, result = run.clock, run.result
    s = clock.seconds
    parts = split(run)
    total = parts["total"]

    def line(label: str, seconds: float, note: str = "") -> None:
        print(f"  {label:44s} {seconds:8.2f} s  {seconds / total:6.1%}   "
              f"{seconds / trials * 1e3:7.2f} ms/trial  {note}")

    print(f"{trials:,} trials in {total:.2f} s, {total / trials * 1e3:.2f} ms per trial "
          f"(target: < 60 s); this process's CPU time {run.cpu:.2f} s (wall minus CPU: waiting "
          "for the disk or for a core on the shared machine)")
    line("Optuna sampling (TPE)", parts["sampling"])
    for method in SAMPLING:
        line(f"  {method}", s[f"sampling.{method}"])
    line("  of which TPE's own storage calls", s["storage in sampling"],
         "(constant liar: its proposal as a system attr, the trials re-read)")
    line("everything but Optuna's sampling", parts["rest"], "(target: < 20%)")
    line("  harness (scoring, metrics, bookkeeping)", parts["harness"])
    line("    Scorer.values (scores + metrics)", s["scorer.values"])
    line("  Optuna storage and the rest of its loop", parts["other"],
         "(journal: flock'ed appends, no fsync)" if journal else "(in-memory storage)")
    if journal:
        print(f"  journal operations per trial: {clock.calls['journal.appends'] / trials:.2f} "
              f"appends, {clock.calls['journal.reads'] / trials:.2f} reads (whole study)")
    print("  cumulative time every 100 trials: " + " ".join(f"{m:.1f}" for m in run.marks))
    print(f"once, after the study (not in the {total:.2f} s above): result (trials frame, best "
          f"arm, PED-ANOVA importance) {s['result']:.2f} s, most of it importing scikit-learn "
          f"through optuna.importance; the tune call took {run.wall:.2f} s in all; load "
          f"average now {load_average()}")
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
