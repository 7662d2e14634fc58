"""Running a study's trials: in this process, or in `workers=N` spawned processes on the
same study. Each worker receives the pickled `Plan` (the train `Scorer` by value: its
arrays and frames, about 15 MB for LoCoMo's 3,000 searches, unpickled in ~40 ms), so
nothing is replayed or re-prepared in a child. Determinism holds for `workers=1` only. A
worker ends as soon as its parent dies (`_exit_with_parent`); on a database each process
runs trials until the study holds its target (`database.SharedRDB` reserves them)."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

import optuna
from optuna.trial import FrozenTrial

from ..measures.scoring import Arm
from .attrs import COUNTED, FINISHED, counted_trials
from .configuration import ConfigTrialFunction
from .database import HEARTBEAT, TargetReached
from .journal import APPENDING
from .result import TrialRecord, record
from .rounds import run_rounds
from .space import PrunerName, SamplerName, TrialFunction, make_pruner, make_sampler
from .storages import is_database, open_storage, run_lock

_WAIT_SECONDS = 0.5    # a worker finding every remaining trial running looks again after
ORPHANED_EXIT = 3  # a worker's exit status when it ends because its parent died


@dataclass(frozen=True)
class Plan:
    """Everything a worker process needs (picklable)."""

    objective: TrialFunction | ConfigTrialFunction
    study_name: str
    storage: str
    sampler: SamplerName
    pruner: PrunerName
    n_trials: int            # the study's target of counted trials (`COUNTED`)
    seed: tuple[int, ...]    # (seed, trials in the study, worker index[, join index])
    heartbeat: tuple[int, int] = HEARTBEAT


def run_trials(study: optuna.Study, plan: Plan, missing: int, workers: int,
               reporter: Reporter) -> None:
    """The `missing` trials, in this process or shared among `workers` spawned ones (on a
    database each runs until the study holds its target: `_optimize`)."""
    reporter.skip(study)
    shares = [missing // workers + (k < missing % workers) for k in range(workers)]
    plans = [(replace(plan, seed=(*plan.seed[:2], k, *plan.seed[3:])), share)
             for k, share in enumerate(shares) if share > 0]
    if len(plans) == 1:
        _optimize(*plans[0], study=study, callback=reporter)
    elif plans:
        _run_workers(plans, study, reporter)


def _optimize(plan: Plan, n_trials: int, *, study: optuna.Study | None = None,
              callback: Callable[[optuna.Study, FrozenTrial], None] | None = None) -> None:
    """Run `n_trials` trials of `plan` (in this process or a spawned worker); on a database,
    trials until the study holds `plan.n_trials` (`SharedRDB` reserves them)."""
    if study is None:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.load_study(study_name=plan.study_name, storage=open_storage(
            plan.storage, target=plan.n_trials, heartbeat=plan.heartbeat))
    study.sampler = make_sampler(plan.sampler, plan.seed)
    study.pruner = make_pruner(plan.pruner)
    if isinstance(plan.objective, ConfigTrialFunction):  # a configuration search: rounds
        run_rounds(study, plan.objective, target=plan.n_trials, callback=callback,
                   n_trials=None if is_database(plan.storage) else n_trials)
        return
    callbacks = [_AfterTrial(plan.n_trials, callback)]
    if not is_database(plan.storage):
        study.optimize(plan.objective, n_trials=n_trials, callbacks=callbacks)
        return
    while counted_trials(study) < plan.n_trials:
        try:
            study.optimize(plan.objective, callbacks=callbacks)  # until the target
        except TargetReached:
            # The remaining trials all run: wait for them. Each try fails (and queues again)
            # those whose worker stopped beating first (Optuna's `_run_trial`).
            time.sleep(_WAIT_SECONDS)
        except Exception as exc:
            if not failed_elsewhere(exc):
                raise
            # This process missed its heartbeats for the grace period (stopped, starved):
            # another worker failed its trial and queued it again. It goes on with the next.
            warnings.warn("tune: a trial of this process was failed by another worker "
                          "(no heartbeat within the grace period) and queued again; going "
                          "on", stacklevel=1)


def failed_elsewhere(exc: BaseException) -> bool:
    """Whether `study.optimize` raised because another worker failed this process's trial
    while it ran (its heartbeat lapsed): Optuna's UpdateFinishedTrialError, or what Optuna 5's
    `_run_trial` raises instead when it tells the result, its own `assert False, "Should not
    reach."` over the ValueError "Cannot tell a FAIL trial." (optuna/optuna#5470)."""
    if isinstance(exc, optuna.exceptions.UpdateFinishedTrialError):
        return True
    told = exc.__context__
    return (isinstance(exc, AssertionError) and isinstance(told, ValueError)
            and str(told) == "Cannot tell a FAIL trial.")


def _worker(plan: Plan, n_trials: int) -> None:
    """A spawned worker: `_optimize`, ending with its parent, holding the run lock."""
    _exit_with_parent()
    with run_lock(plan.storage) as lock:
        if lock is not None:
            lock.share()
        _optimize(plan, n_trials)


def _exit_with_parent() -> None:
    """End this spawned process as soon as its parent is gone (`kill -9` too), so that no
    orphan goes on adding trials to the study. It waits on the pipe multiprocessing keeps
    open from the parent (`parent_process().join()`), which the kernel closes when the
    parent dies: no polling, and portable, unlike Linux's PR_SET_PDEATHSIG. Its trial is
    left RUNNING, and the next resume fails it (`storages.recover_trials`)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        with APPENDING:  # never in the middle of a journal line
            os._exit(ORPHANED_EXIT)

    threading.Thread(target=watch, name="tune-parent-watch", daemon=True).start()


@dataclass(frozen=True)
class _AfterTrial:
    """The study's one callback (Optuna deep-copies the finished trial for each callback):
    passes the trial on, then stops the study early when other processes on it already
    reached the target of finished trials, as Optuna's `MaxTrialsCallback` does; that one
    reads every trial after each trial, this only once the trial numbers reach the target
    (a study holds no more finished trials than it has trials)."""

    target: int
    then: Callable[[optuna.Study, FrozenTrial], None] | None

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if self.then is not None:
            self.then(study, trial)
        if trial.number + 1 >= self.target and counted_trials(study) >= self.target:
            study.stop()


def _run_workers(plans: list[tuple[Plan, int]], study: optuna.Study,
                 reporter: Reporter) -> None:
    """Run each (plan, share of trials) in a spawned process, reporting as trials finish."""
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_worker, args=(plan, share), daemon=True,
                                 name=f"tune-{plan.study_name}-{k}")
                 for k, (plan, share) in enumerate(plans)]
    try:
        for process in processes:
            process.start()
        while any(p.is_alive() for p in processes):
            time.sleep(0.25)
            reporter.poll(study)
        for process in processes:
            process.join()
        reporter.poll(study)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join()
    if failed := [(p.name, p.exitcode) for p in processes if p.exitcode != 0]:
        raise RuntimeError(f"tune: worker processes failed {failed} (their tracebacks are "
                           "above); the study keeps every trial they finished")


class Reporter:
    """Turns finished trials into `TrialRecord`s for `on_trial` and counts for `progress`,
    from Optuna's callback (one process) or by polling the storage (workers)."""

    def __init__(self, base: Arm, total: int, progress: Callable[[int, int], None] | None,
                 on_trial: Callable[[TrialRecord], None] | None,
                 settings: tuple[str, ...] = ()) -> None:
        self.base, self.total, self.settings = base, total, settings
        self.progress, self.on_trial = progress, on_trial
        self.seen: set[int] = set()
        self.done = 0  # trials that count toward the target (`counted_trials`)

    def skip(self, study: optuna.Study) -> None:
        """Trials finished before this call are not reported again."""
        self.seen = {t.number for t in study.get_trials(deepcopy=False, states=FINISHED)}
        self.done = counted_trials(study)

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._emit([trial])

    def poll(self, study: optuna.Study) -> None:
        self._emit([t for t in study.get_trials(deepcopy=False, states=FINISHED)
                    if t.number not in self.seen])

    def _emit(self, trials: list[FrozenTrial]) -> None:
        for trial in sorted(trials, key=lambda t: t.number):
            self.seen.add(trial.number)
            self.done += trial.state in COUNTED
            if self.on_trial is not None:
                self.on_trial(record(trial, self.base, self.settings))
            if self.progress is not None:
                self.progress(self.done, self.total)
