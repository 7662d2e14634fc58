"""Tune the six ranking weights with Optuna on a prepared `Scorer` (EVALUATION.md, "Optuna 5").

A trial maps Optuna's suggestions to an `Arm` (the searched weights from the trial, the
others from the base arm), scores it on the train scorer with one vectorised
`Scorer.values` call, and returns the mean of each `Objective` over the searches it covers.

- The base arm is enqueued as trial 0 (once per study, resumes included), so every study
  starts from the baseline.
- A weight whose signal the experiment's engine config switches off is not searched: it is
  fixed at 0 (`search_space`, `fixed_weights`), and the result's notes and the study say so.
- The sampler and its seed belong to the study (stored when it is created): resuming with
  another is refused unless `switch_sampler`, and each trial records the sampler it ran
  under.
- Samplers are seeded: TPE (Optuna 5 defaults: multivariate for one objective, independent
  for several, constant liar on), CMA-ES (needs the `cmaes` package; one objective) or
  random. A call's sampler seed is derived from `seed`, the number of trials the study
  already holds and the worker index, so a resumed study does not replay its first
  proposals and parallel workers do not propose the same points.
- `pruner="wilcoxon"` (one objective) reports the objective's per-query values as steps:
  the covered searches in a fixed seeded order, cut into `WILCOXON_STEPS` blocks; step k is
  block k's mean, so steps pair across trials and resumes. `trial.should_prune()` runs
  every `PRUNE_EVERY` steps. Blocks, not single queries: every report is one storage write
  and every check re-reads the steps, so one step per query with a check every 200
  (LoCoMo, 3,000 searches) took 10-12 s per trial here (when the journal fsync'ed each
  write), against ~2 ms for the scoring; 32 blocks with a check every 8 add 50-110 ms to a
  trial. Without the pruner a trial writes no intermediate value. The pruner
  saves no scoring (a trial's values come from one vectorised call): it marks trials that
  are worse than the best one as pruned, which TPE then learns from.
- Storage: a journal file by default (`DEFAULT_STUDY_DIR`/<study name>.journal, written
  through `ProcessSafeJournal`: an `flock`, no fsync), or an RDB URL (`sqlite:///...`,
  `postgresql://...`, through psycopg 3: `databases.sqlalchemy_url`). Every step of a
  trial is written as it happens (about 10 journal appends a trial: its creation, six
  parameters, TPE's constant-liar proposal, its sampler and worker, its state), so a
  killed study resumes with every finished trial (`load_if_exists`); `n_trials` is the
  number of COMPLETE (or PRUNED) trials the study should hold when `tune` returns. A killed
  process's lock goes with it.
- `workers=N` runs N spawned processes on the same study; each receives the pickled
  objective (the train `Scorer` by value: its arrays and frames, about 15 MB for LoCoMo's
  3,000 searches, unpickled in ~40 ms), so nothing is replayed or re-prepared in a child.
  Determinism holds for `workers=1` only.
- A killed run is recovered on resume (journal storage): a torn last journal line is cut
  off (`ProcessSafeJournal.drop_torn_tail`), and when no other process works on the study
  (`_RunLock`) the trials a dead process left RUNNING are marked FAIL and tagged
  `STALE_ATTR`; they do not count toward `n_trials`, so they are run again. A worker ends
  as soon as its parent dies (`_exit_with_parent`). `tune` reports each of these
  (`on_recovered`, `TuneResult.recovered`).
- On a database (`_SharedRDB`) the study can be shared by `tune` processes on several
  hosts, started independently:
  - the first one records the dataset digest and the config hash (`identity`) in the
    study; a later one whose differ is refused before it touches the study;
  - every running trial beats (Optuna's heartbeat, `heartbeat=(interval, grace)`); a
    trial whose worker stopped beating for `grace` seconds is failed by the next worker
    that asks for a trial and queued again with its parameters
    (`RetryHeartbeatStaleTrialCallback`), so a host killed mid-trial costs that trial's
    time, not the trial;
  - trials are reserved: a worker starts a trial only while the study's COMPLETE, PRUNED
    and RUNNING trials number fewer than `n_trials`, checked and created under a lock
    (PostgreSQL: an advisory lock; SQLite: an `flock` beside the file), so concurrent
    workers never overshoot; one that finds every remaining trial running waits for them,
    and fails and reruns those whose worker died, so the study ends with exactly
    `n_trials` counted trials while one worker lives;
  - the study's setup (creation, the checks, the baseline) runs under the same lock, so
    workers starting at the same moment enqueue one baseline.

>>> result = tune(train, arm_of("base", config), SearchSpace.unit(WEIGHTS),   # doctest: +SKIP
...               [Objective("ndcg@10")], n_trials=200, study_name="locomo-ndcg")
>>> best_config_snippet(config, result.best[0])                               # doctest: +SKIP
"""

from __future__ import annotations

import fcntl
import json
import math
import multiprocessing
import os
import re
import socket
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np
import optuna
import polars as pl
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

from msprlab.engine import EngineConfig
from msprlab.engine.batch import INTENTS, WEIGHTS, Weights

from .bundle import SNIPPET
from .databases import driver_hint, sqlalchemy_url
from .errors import ExperimentError, redact_url
from .measures.metrics import parse_metric
from .measures.scoring import Arm, Scorer

__all__ = ["DEFAULT_STUDY_DIR", "HEARTBEAT", "MIN_IMPORTANCE_TRIALS", "PRUNERS", "SAMPLERS",
           "STALE_ATTR", "WORKER_ATTR", "Objective", "SearchSpace", "TrialRecord", "TuneResult",
           "best_config_snippet", "fixed_weights", "is_database", "search_space",
           "snippet_notes", "trials_message", "tune", "tuned_config"]

SamplerName = Literal["tpe", "cmaes", "random"]
PrunerName = Literal["none", "wilcoxon"]
SAMPLERS: tuple[SamplerName, ...] = ("tpe", "cmaes", "random")
PRUNERS: tuple[PrunerName, ...] = ("none", "wilcoxon")
DEFAULT_STUDY_DIR = Path("studies")
WILCOXON_STEPS = 32
PRUNE_EVERY = 8
# PED-ANOVA contrasts the top 10% of completed trials with all of them; Optuna advises at
# least 5 trials in that top quantile.
MIN_IMPORTANCE_TRIALS = 50
BASELINE_ATTR = "msprlab_baseline"
SETTINGS_ATTR = "msprlab_tune"
# On the study: {"name", "seed"} of the sampler it runs with; on each trial: the name.
SAMPLER_ATTR = "msprlab_sampler"
SWITCHES_ATTR = "msprlab_sampler_switches"  # on the study: each switch, in order
FIXED_ATTR = "msprlab_fixed"                # on the study: `SearchSpace.note()`
STALE_ATTR = "msprlab_stale"  # on a trial a dead process left RUNNING, failed on resume
WORKER_ATTR = "msprlab_worker"  # on each trial: "HOST:PID" of the process that ran it
JOINS_ATTR = "msprlab_joins"    # on a database study: how many tune processes joined it
IDENTITY_PREFIX = "msprlab_"    # + each `identity` key: "msprlab_dataset_digest", ...
# Optuna's heartbeat on a database, in seconds: a running trial beats every `interval`; one
# without a beat for `grace` is failed by the next worker asking for a trial, and retried.
HEARTBEAT = (10, 30)
MAX_RETRIES = 3        # a trial is queued again at most this many times after going stale
_WAIT_SECONDS = 0.5    # a worker finding every remaining trial running looks again after
# Settings added after studies were first stored, with the value an older study had.
_LATER_SETTINGS: dict[str, Any] = {"fixed": {}}
ORPHANED_EXIT = 3  # a worker's exit status when it ends because its parent died
_STEP_ORDER_SEED = 20260105  # fixed: steps must pair across trials, calls and resumes
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
_COUNTED = (TrialState.COMPLETE, TrialState.PRUNED)  # toward the target; a FAIL never is
DROPPED_ATTR = "msprlab_dropped_retry"  # on a queued retry the study no longer needed
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_JSON = json.JSONEncoder(separators=(",", ":")).encode  # a journal line, as Optuna writes it
_LABELS = tuple(label.value for label in INTENTS)
# Held around every journal append in this process, so that a worker ending itself
# (`_exit_with_parent`) never cuts a line it is writing.
_APPENDING = threading.Lock()


@dataclass(frozen=True)
class SearchSpace:
    """Which weights are searched, each in a range within [0, 1]; `fixed` weights are held
    at 0 in every trial (weight -> why, e.g. "mspr.success off"); the others keep the base
    arm's values. Both stored in `WEIGHTS` order whatever the order given.

    `search_space(ranges, config)` builds one for an engine configuration: it fixes the
    weights whose signal the configuration switches off."""

    ranges: Mapping[str, tuple[float, float]]
    fixed: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.ranges, Mapping) or not self.ranges:
            raise ExperimentError("SearchSpace: name at least one weight to search "
                                  f"({', '.join(WEIGHTS)}), got {self.ranges!r}")
        if unknown := [name for name in self.ranges if name not in WEIGHTS]:
            raise ExperimentError(f"SearchSpace: unknown weights {unknown}; the weights are "
                                  f"{', '.join(WEIGHTS)}")
        if not isinstance(self.fixed, Mapping) or not all(
                isinstance(why, str) and why for why in self.fixed.values()):
            raise ExperimentError("SearchSpace: fixed must map weights to the reason each is held "
                                  f"at 0, e.g. {{'zeta_success': 'mspr.success off'}}, got "
                                  f"{self.fixed!r}")
        if unknown := [name for name in self.fixed if name not in WEIGHTS]:
            raise ExperimentError(f"SearchSpace: unknown fixed weights {unknown}; the weights are "
                                  f"{', '.join(WEIGHTS)}")
        if both := [name for name in WEIGHTS if name in self.ranges and name in self.fixed]:
            raise ExperimentError(f"SearchSpace: {', '.join(both)} both searched and fixed at 0; "
                                  "leave each out of one of them")
        object.__setattr__(self, "fixed", {name: self.fixed[name] for name in WEIGHTS
                                           if name in self.fixed})
        ordered: dict[str, tuple[float, float]] = {}
        for name in WEIGHTS:
            if name not in self.ranges:
                continue
            given = self.ranges[name]
            if not (isinstance(given, tuple | list) and len(given) == 2
                    and all(_is_number(x) for x in given)):
                raise ExperimentError(f"SearchSpace: {name} must be a (low, high) pair of numbers, "
                                      f"got {given!r}")
            low, high = float(given[0]), float(given[1])
            if not 0.0 <= low < high <= 1.0:
                raise ExperimentError(f"SearchSpace: `0 <= low < high <= 1` must hold for {name}, "
                                      f"but got ({low}, {high}); to fix a weight, leave it out of "
                                      "the space (it then keeps the base arm's value)")
            ordered[name] = (low, high)
        object.__setattr__(self, "ranges", ordered)

    @staticmethod
    def unit(names: Sequence[str] = WEIGHTS) -> SearchSpace:
        """Each named weight searched over [0, 1]."""
        return SearchSpace(dict.fromkeys(names, (0.0, 1.0)))

    def as_dict(self) -> dict[str, list[float]]:
        """The searched ranges (the fixed weights are `fixed`)."""
        return {name: [low, high] for name, (low, high) in self.ranges.items()}

    def note(self) -> str | None:
        """"fixed at 0: zeta_success (mspr.success off)", or None when nothing is fixed."""
        if not self.fixed:
            return None
        return "fixed at 0: " + ", ".join(f"{name} ({why})" for name, why in self.fixed.items())


# The switches each new weight's term needs (MSPR.md section 1, step 5, and sections 15, 17).
_SIGNAL_SWITCH = {"epsilon_frequency": "frequency", "delta_personal": "feedback",
                  "zeta_success": "success"}


def fixed_weights(config: EngineConfig) -> dict[str, str]:
    """The new weights whose term `config` keeps at 0 in the library, each with the switch
    that does it, in `WEIGHTS` order.

    - delta_personal: the personal-boost provider is built only when `mspr.enabled` and
      `mspr.feedback.enabled` (MSPR.md 1, step 5.6); without it the term is 0.
    - zeta_success: the success provider needs `mspr.enabled` and `mspr.success.enabled`
      (MSPR.md 1, step 5.7).
    - epsilon_frequency: the term itself is read whenever ε > 0, even with MSPR off
      (MSPR.md 15 and 17, quirk 22), but it reads access counts, and the library counts
      accesses only when `mspr.enabled` and `mspr.frequency.enabled` (step 5.10). A
      `logged` replay takes the counts from the log whatever the switches, so a searched ε
      would score counts that a deployment of this configuration never accumulates (only
      counts restored from a snapshot or bumped by decay-v2 would exist there).

    With `mspr.enabled` false all three are fixed, for "mspr off".
    """
    mspr = config.mspr
    gates = {"frequency": mspr.frequency.enabled, "feedback": mspr.feedback.enabled,
             "success": mspr.success.enabled}
    return {name: "mspr off" if not mspr.enabled else f"mspr.{switch} off"
            for name, switch in _SIGNAL_SWITCH.items()
            if not (mspr.enabled and gates[switch])}


def search_space(ranges: Mapping[str, tuple[float, float]], config: EngineConfig
                 ) -> SearchSpace:
    """`ranges` as a SearchSpace for an experiment replayed with `config`: the weights whose
    signal is off there (`fixed_weights`) are fixed at 0, searched or not."""
    fixed = fixed_weights(config)
    searched = {name: bounds for name, bounds in ranges.items() if name not in fixed}
    if ranges and not searched:
        raise ExperimentError(f"tune: every weight in the search space is fixed at 0 "
                              f"({', '.join(f'{n} ({fixed[n]})' for n in ranges)}); add a weight "
                              "whose signal is on to tune.ranges, or switch its signal on")
    return SearchSpace(searched, fixed=fixed)


@dataclass(frozen=True)
class Objective:
    """A metric to maximise, averaged over the searches with a relevant memory, optionally
    only those whose intent label (`searches.intent_label`) is `intent`."""

    metric: str
    intent: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str):
            raise ExperimentError(f"Objective: metric must be a name such as 'ndcg@10', "
                                  f"got {self.metric!r}")
        object.__setattr__(self, "metric", parse_metric(self.metric).name)  # canonical name
        if self.intent is not None and self.intent not in _LABELS:
            raise ExperimentError(f"Objective: intent must be one of {', '.join(_LABELS)} or None, "
                                  f"got {self.intent!r}")

    def label(self) -> str:
        """The objective's name in results: "ndcg@10" or "ndcg@10/intent/FACTUAL"."""
        return self.metric if self.intent is None else f"{self.metric}/intent/{self.intent}"

    def key(self) -> str:
        """`label` as an MLflow-safe metric key: "ndcg_at_10/intent/FACTUAL"."""
        key = parse_metric(self.metric).key
        return key if self.intent is None else f"{key}/intent/{self.intent}"


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial: state "COMPLETE", "PRUNED" or "FAIL"; `values` in objective
    order (None unless complete); all six weights (`WEIGHTS` order); the sampler the trial
    ran under (None for a trial from before trials recorded it)."""

    number: int
    state: str
    values: tuple[float, ...] | None
    weights: tuple[float, ...]
    seconds: float | None
    baseline: bool
    sampler: str | None = None


@dataclass(frozen=True)
class TuneResult:
    """What a study found.

    best : the best arm (one objective) or the Pareto-optimal arms (several), by trial
        number; `best_values[i]` holds arm i's objective values.
    trials : one row per finished trial: number, state, baseline, sampler, one column per
        objective label, the six weights, seconds.
    importance : objective label -> {searched weight: PED-ANOVA importance, summing to 1};
        empty, with a note, when fewer than `MIN_IMPORTANCE_TRIALS` trials completed.
    notes : what the reader should know (weights fixed at 0, a sampler switch, importance
        not computed, trials left running).
    recovered : what was recovered from a killed run when the call began (`tune`'s
        `on_recovered`).
    held : finished trials the study held when the call began (those that count toward the
        target: not the stale ones failed on resume); `added` those it gained
        during the call (the call's own, and any another process finished meanwhile).
    """

    study: optuna.Study
    storage: str
    objectives: tuple[Objective, ...]
    best: tuple[Arm, ...]
    best_values: tuple[tuple[float, ...], ...]
    trials: pl.DataFrame
    importance: dict[str, dict[str, float]]
    notes: tuple[str, ...] = field(default=())
    recovered: tuple[str, ...] = field(default=())
    held: int = 0
    added: int = 0

    @property
    def study_name(self) -> str:
        return self.study.study_name


@dataclass(frozen=True, eq=False)
class _Objective:
    """The trial function (picklable, so spawned workers get it by value)."""

    scorer: Scorer
    base: Arm
    space: SearchSpace
    metrics: tuple[str, ...]          # metric name of each objective
    covered: tuple[np.ndarray, ...]   # searches each objective averages over
    steps: tuple[np.ndarray, ...] | None  # Wilcoxon blocks of searches, in step order
    sampler: SamplerName = "tpe"      # recorded on each trial

    def arm(self, trial: optuna.Trial) -> Arm:
        weights = list(self.base.weights)  # the fixed weights are 0 there (`_with_fixed`)
        for name, (low, high) in self.space.ranges.items():
            weights[WEIGHTS.index(name)] = trial.suggest_float(name, low, high)
        return Arm(f"trial {trial.number}", tuple(weights), self.base.intent, self.base.roles)

    def __call__(self, trial: optuna.Trial) -> float | tuple[float, ...]:
        trial.set_user_attr(SAMPLER_ATTR, self.sampler)  # first: failed trials record it too
        trial.set_user_attr(WORKER_ATTR, f"{socket.gethostname()}:{os.getpid()}")
        values = self.scorer.values(self.arm(trial))
        means = tuple(float(values[m][rows].mean())
                      for m, rows in zip(self.metrics, self.covered, strict=True))
        if self.steps is not None:
            column = values[self.metrics[0]]
            for step, rows in enumerate(self.steps):
                trial.report(float(column[rows].mean()), step)
                if (step + 1) % PRUNE_EVERY == 0 and step + 1 < len(self.steps) \
                        and trial.should_prune():
                    raise optuna.TrialPruned()
        return means[0] if len(means) == 1 else means


@dataclass(frozen=True)
class _Plan:
    """Everything a worker process needs (picklable)."""

    objective: _Objective
    study_name: str
    storage: str
    sampler: SamplerName
    pruner: PrunerName
    n_trials: int            # the study's target of counted trials (`_COUNTED`)
    seed: tuple[int, ...]    # (seed, trials in the study, worker index[, join index])
    heartbeat: tuple[int, int] = HEARTBEAT


def tune(train: Scorer, base: Arm, space: SearchSpace, objectives: Sequence[Objective], *,
         n_trials: int, study_name: str, seed: int = 0, sampler: SamplerName = "tpe",
         pruner: PrunerName = "none", storage: str | Path | None = None, workers: int = 1,
         switch_sampler: bool = False, identity: Mapping[str, str] | None = None,
         heartbeat: tuple[int, int] = HEARTBEAT,
         on_start: Callable[[int, int], None] | None = None,
         on_recovered: Callable[[str], None] | None = None,
         progress: Callable[[int, int], None] | None = None,
         on_trial: Callable[[TrialRecord], None] | None = None) -> TuneResult:
    """Search the weights of `space` to maximise `objectives` on `train`.

    Parameters
    ----------
    train : the scorer of the tuning window (a logged-frequency table: a closed-loop table
        is bound to its weights and is refused).
    base : the arm trial 0 scores; unsearched weights, intent and roles come from it
        (the space's fixed weights are set to 0 in it).
    objectives : one (maximised) or several (Pareto front); each metric must be one the
        scorer computes.
    n_trials : the target total: the number of COMPLETE (or PRUNED) trials the study holds
        when this returns; a FAIL never counts. A resumed study runs only the missing ones,
        none when it already holds `n_trials` or more (`trials_message`). Trials a killed
        process left RUNNING are failed and run again (module docstring). On a database,
        every process and worker on the study stops at exactly `n_trials`.
    seed : seeds the sampler (with the study's trial count and the worker index).
    sampler : "tpe", "cmaes" (one objective; needs `pip install cmaes`) or "random". The
        sampler and `seed` are stored in the study when it is created; resuming it with
        another one raises ValueError unless `switch_sampler` (the switch is then stored
        and noted). Each trial records the sampler it ran under (the `sampler` column).
    pruner : "none" or "wilcoxon" (one objective; module docstring).
    storage : None (journal file `DEFAULT_STUDY_DIR/<study_name>.journal`), a journal file
        path, ":memory:" (a throwaway study: nothing to resume, one worker), or an RDB URL
        such as "postgresql://user@host/db" or "sqlite:///tune.db" (SQLite is not
        recommended for parallel workers). A resumed study must have been created with
        the same objectives, space, base arm, pruner and train data.
    workers : processes sharing the study (spawned); results are then not deterministic.
        Independent `tune` calls on one study also work: on a database from several
        hosts at once (module docstring); on a journal once the study exists.
    identity : what the study belongs to, e.g. {"dataset_digest": ..., "config_hash": ...}:
        stored in the study (user attrs `msprlab_<key>`) by the call that creates it; a
        call with other values is refused (ValueError naming both) before it changes the
        study or runs a trial.
    heartbeat : (interval, grace) in seconds, on a database: each running trial beats every
        `interval`; a trial without a beat for `grace` is failed and run again.
    on_start : called once the study is open, with (finished trials it holds, n_trials).
    on_recovered : called, before that, with each message on what was recovered from a
        killed run: a journal's torn last line cut off, trials a dead process left RUNNING
        marked FAIL (they do not count toward `n_trials`: they are run again), or RUNNING
        trials left alone because another process works on the study (`TuneResult.recovered`
        holds them too).
    progress : called with (finished trials, n_trials) after each trial.
    on_trial : called with each newly finished trial's record.
    """
    objectives = tuple(objectives)
    if str(storage) == MEMORY and workers != 1:
        raise ExperimentError("tune: an in-memory study (storage=':memory:') cannot be shared by "
                              f"{workers} worker processes; use a journal file or an RDB URL")
    base = _with_fixed(base, space)
    _check_arguments(base, space, objectives, n_trials=n_trials, study_name=study_name,
                     seed=seed, sampler=sampler, pruner=pruner, workers=workers)
    _check_heartbeat(heartbeat)
    objective = _prepare(train, base, space, objectives, pruner=pruner, sampler=sampler)
    spec = _storage_spec(storage, study_name)
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # progress comes from callbacks
    try:
        with _run_lock(spec) as lock:
            alone = lock is not None and lock.alone()
            recovered = _recover_journal(spec)  # before Optuna appends to it
            opened = _open_storage(spec, target=n_trials, heartbeat=heartbeat)
            with _setup_lock(opened, study_name):  # one process at a time sets a study up
                study = optuna.create_study(
                    study_name=study_name, storage=opened, load_if_exists=True,
                    directions=["maximize"] * len(objectives))
                _check_identity(study, identity, spec)
                _check_settings(study, _settings(train, base, space, objectives, pruner),
                                spec)
                recovered += _recover_trials(study, opened, lock, alone)
                if lock is not None:
                    lock.share()  # before any worker starts: each takes it shared too
                for message in recovered:
                    if on_recovered is not None:
                        on_recovered(message)
                notes = _check_sampler(study, {"name": sampler, "seed": seed}, spec,
                                       switch=switch_sampler)
                if space.fixed and study.user_attrs.get(FIXED_ATTR) != space.note():
                    study.set_user_attr(FIXED_ATTR, space.note())
                join = _join(study, opened)
                plan = _Plan(objective, study_name, spec, sampler, pruner, n_trials,
                             (seed, len(study.get_trials(deepcopy=False)), 0)
                             + ((join,) if join else ()), heartbeat)
                _enqueue_baseline(study, base, space)
                held = _counted(study)
            if on_start is not None:
                on_start(held, n_trials)
            _run(study, plan, n_trials - held, workers,
                 _Reporter(base, n_trials, progress, on_trial))
            result = _result(study, spec, base, objectives)
            return replace(result, notes=tuple(filter(None, [space.note(), *notes]))
                           + result.notes, recovered=tuple(recovered), held=held,
                           added=_counted(study) - held)
    finally:
        optuna.logging.set_verbosity(verbosity)


def _recover_journal(spec: str) -> list[str]:
    """Cut the torn last line a killed writer left in the journal (`drop_torn_tail`)."""
    journal = _journal_path(spec)
    if journal is None or not journal.exists():
        return []
    dropped = ProcessSafeJournal(str(journal)).drop_torn_tail()
    return [torn_tail_message(journal, dropped)] if dropped else []


def _enqueue_baseline(study: optuna.Study, base: Arm, space: SearchSpace) -> None:
    """The base arm as the next trial, unless the study has one, finished, running or
    queued (a failed one does not count: the baseline is run again; a database queues a
    baseline whose worker died again itself)."""
    if not any(t.user_attrs.get(BASELINE_ATTR) and t.state != TrialState.FAIL
               for t in study.get_trials(deepcopy=False)):
        study.enqueue_trial({name: base.weights[WEIGHTS.index(name)] for name in space.ranges},
                            user_attrs={BASELINE_ATTR: True})


def _run(study: optuna.Study, plan: _Plan, missing: int, workers: int,
         reporter: _Reporter) -> None:
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


def tuned_config(config: EngineConfig, arm: Arm) -> EngineConfig:
    """`config` (the configuration the table was replayed with) ranking as `arm`: its six
    weights, intent routing and the role policy as the arm scores them, and the MSPR master
    switch on when either is."""
    mspr = config.mspr
    return replace(
        config, retrieval=replace(config.retrieval, **Weights(*map(float, arm.weights))._asdict()),
        mspr=replace(mspr, enabled=mspr.enabled or arm.intent or arm.roles,
                     intent=replace(mspr.intent, enabled=arm.intent),
                     role=replace(mspr.role, enabled=arm.roles)))


def best_config_snippet(config: EngineConfig, arm: Arm) -> dict[str, Any]:
    """The ContextKit config fragment (for `Memory.from_config`) that ranks as `arm` on the
    experiment of `config`: `tuned_config(config, arm)` in the library's nested keys.

    It always holds the six weights, `context_graph.enabled` (off by default in the library)
    and every `enabled` switch of `mspr`, and besides them every ranking setting that
    differs from the library's default (seeds, expansion, algorithm, decay, edge synthesis,
    feedback, intent, role and success settings), so `config_from_dict(snippet)` gives
    `tuned_config(config, arm)` back but for `corrections`. Those are msprlab's own switches,
    which the library does not have: they are left out, and `snippet_notes` says which ones
    the snippet therefore cannot reproduce."""
    tuned = tuned_config(config, arm)
    default = EngineConfig()
    graph = {"enabled": tuned.context_graph_enabled,
             **{block: _differing(getattr(tuned, block), getattr(default, block),
                                  keep=WEIGHTS if block == "retrieval" else ())
                for block in ("retrieval", "decay", "edges")}}
    return {"context_graph": {k: v for k, v in graph.items() if v != {}},
            "mspr": _differing(tuned.mspr, default.mspr, keep=("enabled",))}


def _differing(value: Any, default: Any, *, keep: Sequence[str] = ()) -> dict[str, Any]:
    """A config dataclass as a nested dict of the fields that differ from `default`, and
    those in `keep` (here and in every nested block) whatever their value."""
    out: dict[str, Any] = {}
    for f in fields(value):
        mine, theirs = getattr(value, f.name), getattr(default, f.name)
        if hasattr(mine, "__dataclass_fields__"):
            out[f.name] = _differing(mine, theirs, keep=keep)
        elif f.name in keep or mine != theirs:
            out[f.name] = float(mine) if f.name in WEIGHTS else mine
    return out


# What each msprlab correction changes, as MSPR.md section 18 numbers the library's quirks.
_CORRECTED_QUIRK = {"personal_boost_user_scoped": "quirk 1", "strict_role_isolation":
                    "quirks 12 and 13", "apply_edge_type_priors": "quirk 9",
                    "idempotent_backfill": "quirk 7", "ppr_undirected": "quirk 27"}


def snippet_notes(config: EngineConfig) -> tuple[str, ...]:
    """What `best_config_snippet` cannot carry: each msprlab correction on in `config`."""
    return tuple(
        f"msprlab.corrections.{f.name} is on in this experiment, and the library has no such "
        f"setting (MSPR.md 18, {_CORRECTED_QUIRK[f.name]}): {SNIPPET} "
        "leaves it out, so the library ranks with that quirk, not as the tuned engine did"
        for f in fields(config.corrections) if getattr(config.corrections, f.name))


# -- preparation -------------------------------------------------------------------------

def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(float(value))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_arguments(base: Arm, space: SearchSpace, objectives: tuple[Objective, ...], *,
                     n_trials: int, study_name: str, seed: int, sampler: str, pruner: str,
                     workers: int) -> None:
    if not objectives:
        raise ExperimentError("tune: give at least one Objective, e.g. [Objective('ndcg@10')]")
    labels = [o.label() for o in objectives]
    if len(set(labels)) != len(labels):
        raise ExperimentError(f"tune: objectives must differ, got {labels}")
    if not (_is_int(n_trials) and n_trials >= 1):
        raise ExperimentError(f"tune: `n_trials >= 1` must hold, but got {n_trials!r}")
    if not (_is_int(workers) and workers >= 1):
        raise ExperimentError(f"tune: `workers >= 1` must hold, but got {workers!r}")
    if not _is_int(seed):
        raise ExperimentError(f"tune: seed must be an integer, got {seed!r}")
    if not (isinstance(study_name, str) and study_name.strip()):
        raise ExperimentError(f"tune: study_name must be a non-empty string, got {study_name!r}")
    if sampler not in SAMPLERS:
        raise ExperimentError(f"tune: sampler must be one of {', '.join(SAMPLERS)}, "
                              f"got {sampler!r}")
    if pruner not in PRUNERS:
        raise ExperimentError(f"tune: pruner must be one of {', '.join(PRUNERS)}, got {pruner!r}")
    single = [f"{option}={value!r}" for option, value in (("sampler", sampler),
                                                           ("pruner", pruner))
              if value in ("cmaes", "wilcoxon")]
    if single and len(objectives) > 1:
        raise ExperimentError(f"tune: {' and '.join(single)} handles a single objective, but got "
                              f"{len(objectives)} ({', '.join(labels)}); use sampler='tpe' or "
                              "'random' without a pruner for a Pareto front")
    if sampler == "cmaes":
        import importlib.util
        if importlib.util.find_spec("cmaes") is None:
            raise ImportError("tune: sampler='cmaes' needs the cmaes package, which is not "
                              "installed: pip install cmaes (or use sampler='tpe')")
    for name, (low, high) in space.ranges.items():
        value = base.weights[WEIGHTS.index(name)]
        if not low <= value <= high:
            raise ExperimentError(f"tune: the base arm's {name} = {value} lies outside its "
                                  f"searched range ({low}, {high}), so the baseline cannot be "
                                  "trial 0; "
                                  "widen the range to include it")


def _with_fixed(base: Arm, space: SearchSpace) -> Arm:
    """`base` with the space's fixed weights at 0."""
    if not space.fixed:
        return base
    return replace(base, weights=tuple(0.0 if name in space.fixed else value
                                       for name, value in base.named_weights._asdict().items()))


def _prepare(train: Scorer, base: Arm, space: SearchSpace, objectives: tuple[Objective, ...],
             *, pruner: str, sampler: SamplerName = "tpe") -> _Objective:
    """Which searches each objective averages over (fixed: NaN marks a search without a
    relevant memory, whatever the weights) and, for the pruner, the step blocks."""
    computed = [m.name for m in train.metrics]
    for o in objectives:
        if o.metric not in computed:
            raise ExperimentError(f"tune: objective {o.label()!r} needs the scorer to compute "
                                  f"{o.metric}, but it computes {', '.join(computed)}; build it "
                                  f"with Scorer.of(table, [..., parse_metric({o.metric!r})])")
    values = train.values(base)  # also refuses a table bound to other weights
    labels = train.table.searches["intent_label"].to_numpy()
    covered = []
    for o in objectives:
        keep = ~np.isnan(values[o.metric])
        if o.intent is not None:
            keep &= labels == o.intent
        if not keep.any():
            counts = dict(zip(*np.unique(labels[~np.isnan(values[o.metric])],
                                         return_counts=True), strict=True))
            raise ExperimentError(f"tune: objective {o.label()!r} covers no train search with a "
                                  f"relevant memory; searches with one, by intent label: "
                                  f"{ {str(k): int(v) for k, v in counts.items()} }")
        covered.append(np.flatnonzero(keep))
    steps = None
    if pruner == "wilcoxon":
        order = np.random.default_rng(_STEP_ORDER_SEED).permutation(covered[0])
        steps = tuple(np.array_split(order, min(WILCOXON_STEPS, order.size)))
    return _Objective(train, base, space, tuple(o.metric for o in objectives), tuple(covered),
                      steps, sampler)


def _settings(train: Scorer, base: Arm, space: SearchSpace, objectives: tuple[Objective, ...],
              pruner: str) -> dict[str, Any]:
    """What a study is about: a resumed study must agree on all of it (the pruner too: a
    Wilcoxon trial pairs its steps with the best trial's)."""
    return {"objectives": [o.label() for o in objectives], "space": space.as_dict(),
            "fixed": dict(space.fixed), "pruner": pruner,
            "base": [float(w) for w in base.weights], "intent": base.intent,
            "roles": base.roles, "data": train.table.meta["dataset"]["digest"],
            "train_searches": train.n_searches}


def _check_settings(study: optuna.Study, settings: dict[str, Any], spec: str) -> None:
    stored = study.user_attrs.get(SETTINGS_ATTR)
    if stored is None:
        study.set_user_attr(SETTINGS_ATTR, settings)
        return
    stored = {**_LATER_SETTINGS, **stored}
    keys = [*settings, *(k for k in stored if k not in settings)]
    if differ := [k for k in keys if stored.get(k) != settings.get(k)]:
        detail = "; ".join(f"{k}: study has {stored.get(k)!r}, now {settings.get(k)!r}"
                           for k in differ)
        raise ExperimentError(f"tune: study {study.study_name!r} in {redact_url(spec)} was "
                              f"created for other settings ({detail}); resume it with the same "
                              "ones or pick another study_name")


def _check_sampler(study: optuna.Study, sampler: dict[str, Any], spec: str, *,
                   switch: bool) -> list[str]:
    """Store the sampler ({"name", "seed"}) in a new study; refuse another one on resume
    unless `switch`, which stores the switch. Returns the notes to report."""
    def shown(s: Mapping[str, Any]) -> str:
        return f"{s.get('name')} (seed {s.get('seed')})"

    stored = study.user_attrs.get(SAMPLER_ATTR)
    finished = _counted(study)
    if stored == sampler:
        return []
    if stored is None:
        study.set_user_attr(SAMPLER_ATTR, sampler)
        if finished:
            return [f"the study's first {finished} trials recorded no sampler (a study from "
                    f"before samplers were stored); it runs with {shown(sampler)} from now on"]
        return []
    if not switch:
        raise ExperimentError(
            f"tune: study {study.study_name!r} in {redact_url(spec)} runs with sampler "
            f"{shown(stored)}, not {shown(sampler)}; resume it with the same sampler "
            f"(msprlab tune --sampler {stored.get('name')}), or switch it knowingly with "
            "switch_sampler=True (msprlab tune --switch-sampler): each trial records the "
            "sampler it ran under")
    switches = [*study.user_attrs.get(SWITCHES_ATTR, []),
                {"from": stored, "to": sampler, "after_trials": finished}]
    study.set_user_attr(SWITCHES_ATTR, switches)
    study.set_user_attr(SAMPLER_ATTR, sampler)
    return [f"sampler switched from {shown(stored)} to {shown(sampler)} after {finished} "
            "finished trials (the trials' sampler column says which ran each)"]


def _counted(study: optuna.Study) -> int:
    """The trials that count toward the target: COMPLETE and PRUNED, never a FAIL (a trial
    a dead process left RUNNING, failed on resume or by the heartbeat, is run again)."""
    return len(study.get_trials(deepcopy=False, states=_COUNTED))


def _check_heartbeat(heartbeat: tuple[int, int]) -> None:
    if not (isinstance(heartbeat, tuple) and len(heartbeat) == 2
            and all(_is_int(x) for x in heartbeat) and 1 <= heartbeat[0] < heartbeat[1]):
        raise ExperimentError(f"tune: heartbeat must be (interval, grace) in whole seconds "
                              f"with `1 <= interval < grace`, got {heartbeat!r}")


def _check_identity(study: optuna.Study, identity: Mapping[str, str] | None,
                    spec: str) -> None:
    """Store `identity` in a study that has none; refuse a study that holds other values."""
    if not identity:
        return
    stored = {key: study.user_attrs.get(IDENTITY_PREFIX + key) for key in identity}
    if all(value is None for value in stored.values()):
        for key, value in identity.items():
            study.set_user_attr(IDENTITY_PREFIX + key, value)
        return
    if all(stored[key] in (None, value) for key, value in identity.items()):
        return

    def shown(values: Mapping[str, Any]) -> str:
        return " and ".join(f"{key.replace('_', ' ')} {values[key]}" for key in identity)

    raise ExperimentError(
        f"tune: study {study.study_name!r} in {redact_url(spec)} was created from "
        f"{shown(stored)}; this process has {shown(identity)} (another store, or another "
        "definition), so it does not join it: start every worker with the same definition "
        "on a store built from the same data, or give this one its own study (--study NAME)")


def _join(study: optuna.Study, storage: BaseStorage) -> int:
    """On a database: this process's join index (0 for the first `tune` on the study), so
    that processes started at the same moment seed their samplers apart. Elsewhere 0."""
    if not isinstance(storage, _SharedRDB):
        return 0
    join = int(study.user_attrs.get(JOINS_ATTR, 0))
    study.set_user_attr(JOINS_ATTR, join + 1)
    return join


def _fail_stale(study: optuna.Study, storage: BaseStorage) -> list[int]:
    """Mark FAIL, tagged `STALE_ATTR`, every RUNNING trial (called only when no other
    process works on the study: `_RunLock.alone`); returns their numbers."""
    stale = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    study_id = storage.get_study_id_from_name(study.study_name)
    for number in stale:
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
        storage.set_trial_user_attr(trial_id, STALE_ATTR, True)  # first: a FAIL is frozen
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
    return stale


def _recover_trials(study: optuna.Study, storage: BaseStorage, lock: _RunLock | None,
                    alone: bool) -> list[str]:
    """Fail the RUNNING trials of dead processes when that can be told; say what was done."""
    if isinstance(storage, _SharedRDB):
        return _recover_stale(study, storage)
    if lock is None:
        return []  # memory: nothing to recover
    if alone:
        if stale := _fail_stale(study, storage):
            return [f"{len(stale)} trials left RUNNING by a process that is no longer alive "
                    f"({stale}) marked FAIL; they do not count toward the target and are "
                    "run again"]
        return []
    if running := [t.number for t in study.get_trials(deepcopy=False,
                                                      states=(TrialState.RUNNING,))]:
        return [f"{len(running)} RUNNING trials ({running}) left as they are: another tune "
                "process works on the study, so they may be its own; a resume when no other "
                "process holds the study fails those still RUNNING"]
    return []


def _recover_stale(study: optuna.Study, storage: _SharedRDB) -> list[str]:
    """On a database: fail (and queue again) the trials whose worker stopped beating, as
    every worker does before it asks for a trial; say which."""
    before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    if not before:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    failed = sorted(t.number for t in study.get_trials(deepcopy=False,
                                                       states=(TrialState.FAIL,))
                    if t.number in before)
    if not failed:
        return []
    return [f"{len(failed)} trials whose worker sent no heartbeat for {storage.grace_period} s "
            f"({failed}) marked FAIL and queued again with their parameters; they do not "
            "count toward the target"]


def trials_message(held: int, target: int) -> str:
    """What `tune(n_trials=target)` does to a study holding `held` finished trials."""
    if held >= target:
        return (f"0 new trials: the study already holds {held} (of {target} requested); "
                f"--trials {held + 100} adds 100")
    return f"adding {target - held} trials to the study's {held} (target {target})"


MEMORY = ":memory:"


def _storage_spec(storage: str | Path | None, study_name: str) -> str:
    if storage is None:
        safe = re.sub(r"[^\w.-]", "_", study_name)
        return str(DEFAULT_STUDY_DIR / f"{safe}.journal")
    return str(storage)


def is_database(spec: str | Path | None) -> bool:
    """Whether a storage spec is a database URL (shared by hosts), not a journal file."""
    return spec is not None and str(spec) != MEMORY and bool(_URL.match(str(spec)))


def _journal_path(spec: str) -> Path | None:
    """The journal file a storage spec names (its folder created), None for memory or RDB."""
    if spec == MEMORY or _URL.match(spec):
        return None
    path = Path(spec)
    if path.is_dir():
        raise ExperimentError(f"--storage {spec}: is a folder; give a journal file path "
                              "(e.g. runs/study.journal) or a database URL")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise ExperimentError(f"--storage {spec}: {parent} is a file, not a folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _open_storage(spec: str, *, target: int | None = None,
                  heartbeat: tuple[int, int] = HEARTBEAT) -> BaseStorage:
    """":memory:" (nothing kept), an RDB URL (`_SharedRDB`: reserving trials up to `target`
    when given), else a journal file (its folder is created)."""
    if spec == MEMORY:
        return optuna.storages.InMemoryStorage()
    if _URL.match(spec):
        return _open_rdb(spec, target=target, heartbeat=heartbeat)
    _journal_path(spec)
    return JournalStorage(ProcessSafeJournal(spec))


def _open_rdb(spec: str, *, target: int | None, heartbeat: tuple[int, int]) -> _SharedRDB:
    """An RDB storage, or one message saying why it cannot be opened (exit 2)."""
    import sqlalchemy.exc

    scheme = spec.split("://", 1)[0]
    try:
        return _SharedRDB(sqlalchemy_url(spec), target=target, heartbeat=heartbeat)
    except sqlalchemy.exc.NoSuchModuleError:
        raise ExperimentError(
            f"--storage: unknown database scheme {scheme!r}; give a journal file path, or a "
            "URL such as sqlite:///study.db or postgresql://user@host/db") from None
    except ImportError:
        raise ExperimentError(
            f"--storage: the database driver for {scheme!r} is not installed; "
            f"{driver_hint(spec)} into msprlab's environment, or use a journal file"
        ) from None
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.OperationalError) as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise ExperimentError(f"--storage {redact_url(spec)}: cannot open it ({reason})") from None


class _TargetReached(Exception):
    """Raised by `_SharedRDB` instead of starting a trial: the study's counted and running
    trials already make the target (`_optimize` waits for the running ones, or ends)."""

    def __init__(self, counted: int, running: int) -> None:
        super().__init__(f"{counted} counted and {running} running trials")
        self.counted, self.running = counted, running


_LOCK_CLASS = 0x6D73  # "ms": the first key of msprlab's PostgreSQL advisory locks


class _SharedRDB(RDBStorage):
    """Optuna's RDB storage for a study shared by hosts (module docstring): heartbeats with
    retries, trials reserved up to `target` under a per-study lock, and RUNNING trials
    that never beat (their worker died between creating them and its first beat) failed
    too once `grace` old.

    A stale trial's FAIL and the queueing of its retry are one step under the study's lock
    (`_fail_stale`). Optuna fails the stale trials first and queues their retries after
    (`fail_stale_trials`), and a fresh trial created between the two took the retry's slot:
    likely, not rare, when the dead worker's trial was the last one the others waited for.

    PostgreSQL connections give up connecting after 10 s and end a transaction left idle
    for over a minute (a host that vanished mid-transaction, without closing its socket,
    cannot hold a lock for longer)."""

    def __init__(self, url: str, *, target: int | None = None,
                 heartbeat: tuple[int, int] = HEARTBEAT) -> None:
        import sqlalchemy

        self.target = target
        self._names: dict[int, str] = {}
        self._stale: set[int] = set()  # listed as stale, to be failed with their retry
        self._held = threading.local()  # the study locks this thread holds (`locked`)
        kwargs: dict[str, Any] = {}
        if url.lower().startswith("postgresql"):
            idle = max(60, 2 * heartbeat[1])
            kwargs = {"pool_pre_ping": True, "connect_args": {
                "connect_timeout": 10,
                "options": f"-c idle_in_transaction_session_timeout={idle}s"}}
        interval, grace = heartbeat
        # Two processes creating Optuna's tables in a new database at once collide: the
        # first one creates them while the others wait.
        engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool,
                                          **{k: v for k, v in kwargs.items()
                                             if k != "pool_pre_ping"})
        try:
            with _database_lock(engine, "optuna tables"), warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                super().__init__(url, engine_kwargs=kwargs, heartbeat_interval=interval,
                                 grace_period=grace, heartbeat_stale_trial_callback=(
                                     optuna.storages.RetryHeartbeatStaleTrialCallback(
                                         max_retry=MAX_RETRIES)))
        finally:
            engine.dispose()
        # `_fail_stale` queues the retries (Optuna's callback, run by it): none is left for
        # `fail_stale_trials` to run after the FAILs.
        self._retry = self.heartbeat_stale_trial_callback
        self.heartbeat_stale_trial_callback = self.failed_trial_callback = None

    @contextmanager
    def locked(self, study_name: str) -> Iterator[None]:
        """The study's lock, held by one process at a time, and entered again freely by the
        thread holding it (a setup fails stale trials, and so queues retries, under it: a
        second database lock from another connection would wait for itself)."""
        held: set[str] = self._held.__dict__.setdefault("names", set())
        if study_name in held:
            yield
            return
        with _database_lock(self.engine, study_name):
            held.add(study_name)
            try:
                yield
            finally:
                held.discard(study_name)

    def _create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None
                          ) -> FrozenTrial:
        if template_trial is not None or self.target is None:  # queued: nothing starts
            return super()._create_new_trial(study_id, template_trial)
        # A queued retry holds its slot: a fresh trial must not take the place of the trial
        # a dead worker left (it would leave the retry queued for good).
        with self._reserving(study_id, queued_hold=True):
            return super()._create_new_trial(study_id, template_trial)

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        if state == TrialState.FAIL and trial_id in self._stale:
            self._stale.discard(trial_id)
            return self._fail_stale(trial_id)
        if state != TrialState.RUNNING or self.target is None:
            return super().set_trial_state_values(trial_id, state, values)
        study_id = self._study_of(trial_id)
        try:
            with self._reserving(study_id):  # a queued trial
                return super().set_trial_state_values(trial_id, state, values)
        except _TargetReached:
            # Another worker may have started this queued trial since this one listed it
            # (its start is what fills the target): then it is that worker's, to be left
            # alone. Only a trial still WAITING, checked under the study's lock (every start
            # takes it), is dropped: the study reached N without it (queued before this
            # process's target, say, by a run asking for more trials), and it is marked,
            # not left WAITING for ever.
            with self.locked(self._name(study_id)):
                if self.get_trial(trial_id).state != TrialState.WAITING:
                    return False
                self.set_trial_system_attr(trial_id, DROPPED_ATTR,
                                           "the study reached its target")
                super().set_trial_state_values(trial_id, TrialState.FAIL)
            raise

    def _fail_stale(self, trial_id: int) -> bool:
        """Fail a stale trial and queue its retry (Optuna's `RetryHeartbeatStaleTrialCallback`,
        up to its retries) under the study's lock, which every start takes: a WAITING retry
        holds its slot (`_create_new_trial`), so no fresh trial can take it in between."""
        study_id = self._study_of(trial_id)
        with self.locked(self._name(study_id)):
            if not super().set_trial_state_values(trial_id, TrialState.FAIL):
                return False
            if self._retry is not None:
                self._retry(_Queue(self, study_id), self.get_trial(trial_id))
        return True

    def _name(self, study_id: int) -> str:
        if study_id not in self._names:
            self._names[study_id] = self.get_study_name_from_id(study_id)
        return self._names[study_id]

    def _study_of(self, trial_id: int) -> int:
        import sqlalchemy
        from optuna.storages._rdb import models

        query = sqlalchemy.select(models.TrialModel.study_id).where(
            models.TrialModel.trial_id == trial_id)
        with self.engine.connect() as connection:
            return int(connection.execute(query).scalar_one())

    @contextmanager
    def _reserving(self, study_id: int, *, queued_hold: bool = False) -> Iterator[None]:
        """Under the study's lock: go on (start the trial) only while its COMPLETE, PRUNED
        and RUNNING trials (and, with `queued_hold`, the WAITING ones) number fewer than
        the target; else `_TargetReached`."""
        assert self.target is not None
        with self.locked(self._name(study_id)):
            counts = self._states(study_id)
            counted = sum(counts.get(state, 0) for state in _COUNTED)
            running = counts.get(TrialState.RUNNING, 0) + (
                counts.get(TrialState.WAITING, 0) if queued_hold else 0)
            if counted + running >= self.target:
                raise _TargetReached(counted, running)
            yield

    def _states(self, study_id: int) -> dict[TrialState, int]:
        import sqlalchemy
        from optuna.storages._rdb import models

        query = (sqlalchemy.select(models.TrialModel.state, sqlalchemy.func.count())
                 .where(models.TrialModel.study_id == study_id)
                 .group_by(models.TrialModel.state))
        with self.engine.connect() as connection:
            return {TrialState[getattr(state, "name", str(state))]: int(n)
                    for state, n in connection.execute(query)}

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        """Optuna's stale trials (RUNNING, last beat over `grace` ago) and the RUNNING
        trials that never beat and started over `grace` ago (Optuna skips those)."""
        import sqlalchemy
        from optuna.storages._rdb import models

        stale = super()._get_stale_trial_ids(study_id)
        assert self.heartbeat_interval is not None
        grace = self.grace_period or 2 * self.heartbeat_interval
        cutoff = datetime.now() - timedelta(seconds=grace)
        running = self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
        if not running:
            return stale
        query = (sqlalchemy.select(models.TrialHeartbeatModel.trial_id)
                 .where(models.TrialHeartbeatModel.trial_id.in_(
                     [t._trial_id for t in running])))
        with self.engine.connect() as connection:
            beating = set(connection.execute(query).scalars())
        found = stale + [t._trial_id for t in running
                         if t._trial_id not in beating and t._trial_id not in stale
                         and t.datetime_start is not None and t.datetime_start < cutoff]
        self._stale.update(found)
        return found


@dataclass(frozen=True)
class _Queue:
    """What Optuna's retry callback needs of a study, `add_trial`: the retry goes straight
    into the storage, inside `_SharedRDB._fail_stale`'s lock."""

    storage: _SharedRDB
    study_id: int

    def add_trial(self, trial: FrozenTrial) -> None:
        self.storage.create_new_trial(self.study_id, template_trial=trial)


@contextmanager
def _database_lock(engine: Any, name: str) -> Iterator[None]:
    """A lock named `name`, across processes and hosts: a PostgreSQL advisory lock held by a
    transaction (released when it ends, or when its connection dies), an `flock` beside
    a SQLite file; other databases: none (README, "Scaling out")."""
    import sqlalchemy

    dialect, database = engine.dialect.name, engine.url.database
    if dialect == "postgresql":
        key = zlib.crc32(name.encode()) - (1 << 31)  # int4
        with engine.begin() as connection:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_xact_lock(:a, :b)"),
                               {"a": _LOCK_CLASS, "b": key})
            yield
    elif dialect == "sqlite" and database and database != ":memory:":
        try:
            f = open(f"{database}.msprlab.lock", "ab")  # noqa: SIM115 (closed below)
        except OSError:  # a folder that cannot hold the file: SQLite itself says why
            yield
            return
        with f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield
    else:
        yield


def _setup_lock(storage: BaseStorage, study_name: str) -> Any:
    return storage.locked(study_name) if isinstance(storage, _SharedRDB) else nullcontext()


class _RunLock:
    """Which processes work on a journal study now: every `tune` process on it (the caller
    and each worker) holds a shared `flock` on `<journal>.run.lock` while it runs, and the
    kernel drops it when the process dies, however it dies. A caller that can take it
    exclusively (`alone`) knows that no other process works on the study, so a trial still
    RUNNING was left by a dead one. This relies on every process that runs trials of the
    study being a `tune` on this machine (the journal's `flock` is local already); trials
    run by other means, or over an RDB URL (where Optuna's heartbeat is the tool), are
    never failed. The lock file is left in place (empty)."""

    def __init__(self, journal: Path) -> None:
        self._file = open(f"{journal}.run.lock", "ab")  # noqa: SIM115 (closed in __exit__)

    def __enter__(self) -> _RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()  # releases the lock

    def alone(self) -> bool:
        """True, holding the lock exclusively, when no other process holds it (`share` it
        before starting workers); False when one does."""
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def share(self) -> None:
        """Hold the lock shared (blocks only while another caller holds it exclusively,
        which is briefly, at its start)."""
        fcntl.flock(self._file, fcntl.LOCK_SH)


def _run_lock(spec: str) -> _RunLock | nullcontext[None]:
    try:
        journal = _journal_path(spec)
        return nullcontext() if journal is None else _RunLock(journal)
    except OSError as err:  # e.g. a folder that cannot be written: bad input, not a crash
        raise ExperimentError(f"tune: cannot write the study's journal {spec} or its lock "
                              f"file beside it ({err.strerror}); give a writable path"
                              ) from err


class ProcessSafeJournal(JournalFileBackend):
    """Optuna's journal file, appended under an inter-process lock without the fsync after
    every append, and read and written through files kept open.

    A TPE study appends about 9 logs a trial and reads the file after each write and before
    each read of its trials (15 reads a trial). Optuna's backend opens the file each time,
    takes its `JournalFileSymlinkLock` (a lock file created, then renamed away) around each
    append and fsyncs it. Here (local disk) an append costs ~15 us against ~150 us for
    Optuna's without its fsync, and a read with nothing new ~8 us against ~30 us.

    - The lock is an advisory `flock` on the journal itself, on this process's own open file
      description, so processes exclude each other as with Optuna's lock, and the kernel
      releases it when a process is killed (no stale lock file to wait out). It excludes
      only writers that take the same lock: while a study runs, write its journal through
      this class (`tune`), not Optuna's own file backend; reading it from anywhere is fine.
      `flock` (POSIX) is local to a machine: over NFS, use an RDB URL.
    - The files are opened on first use, and again in a forked child or after unpickling.
    - What is written is in the operating system's page cache before the append returns,
      so a study whose process is killed resumes with every finished trial; only a crash
      of the machine itself can lose the last appends, as with any unsynced file.
    - A last line without its newline, under the lock, was left by a writer that died
      mid-append (a live one would hold the lock): `drop_torn_tail` cuts it, and so does
      every append before writing, so that a new log is never glued onto a torn one
      (which would make the line, and so the whole journal, unreadable).
    """

    def __init__(self, file_path: str) -> None:
        super().__init__(file_path)
        self._writer: BinaryIO | None = None  # unbuffered, in append mode; holds the lock
        self._reader: BinaryIO | None = None
        self._pid = -1                        # the process that opened them

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_writer=None, _reader=None, _pid=-1)
        return state

    def _files(self) -> tuple[BinaryIO, BinaryIO]:
        """The writer and the reader, opened by this process (a forked child's copies share
        the parent's open file descriptions, hence its lock: it opens its own)."""
        if self._pid != os.getpid() or self._writer is None or self._reader is None:
            # read too (a+): a torn tail is found with pread (`_cut_torn_tail`)
            self._writer = open(self._file_path, "a+b", buffering=0)  # noqa: SIM115
            self._reader = open(self._file_path, "rb")  # noqa: SIM115 (both kept open)
            self._pid = os.getpid()
        return self._writer, self._reader

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        data = memoryview(("\n".join(map(_JSON, logs)) + "\n").encode("utf-8"))
        with self._locked() as writer:
            if dropped := _cut_torn_tail(writer):
                warnings.warn(torn_tail_message(self._file_path, dropped), stacklevel=2)
            while data:
                data = data[writer.write(data):]

    def drop_torn_tail(self) -> int:
        """Cut a last line that a writer killed mid-append left without its newline; returns
        the number of bytes dropped (0: the journal ends with a whole line)."""
        with self._locked() as writer:
            return _cut_torn_tail(writer)

    @contextmanager
    def _locked(self) -> Generator[BinaryIO, None, None]:
        """The writer, under the journal's lock (and `_APPENDING`, see there)."""
        with _APPENDING:
            writer = self._files()[0]
            fcntl.flock(writer, fcntl.LOCK_EX)
            try:
                yield writer
            finally:
                fcntl.flock(writer, fcntl.LOCK_UN)

    def read_logs(self, log_number_from: int) -> Generator[dict[str, Any], None, None]:
        """`JournalFileBackend.read_logs` of Optuna 5.0, on the reader kept open: the logs
        from number `log_number_from` on, up to the file's size when called (a line being
        appended meanwhile waits for the next call)."""
        f = self._files()[1]
        remaining_log_size = os.fstat(f.fileno()).st_size
        log_number_start = 0
        offset = self._log_number_offset.get(log_number_from)
        if offset is not None:
            log_number_start = log_number_from
            remaining_log_size -= offset
        f.seek(offset or 0)
        last_decode_error: Exception | None = None
        for log_number, line in enumerate(f, start=log_number_start):
            byte_len = len(line)
            remaining_log_size -= byte_len
            if remaining_log_size < 0:
                break
            if last_decode_error is not None:  # not the last line: not a torn tail
                raise ExperimentError(
                    f"journal {self._file_path}: line {log_number} is unreadable "
                    f"({last_decode_error}) and lines follow it, so it is not a torn last "
                    "line: restore the journal from a copy, or start another study in "
                    "another file") from last_decode_error
            if not line.endswith(b"\n"):  # a line is complete once its newline is written
                last_decode_error = ValueError("Invalid log format.")
                continue
            if log_number + 1 not in self._log_number_offset:
                self._log_number_offset[log_number + 1] = (
                    self._log_number_offset[log_number] + byte_len)
            if log_number < log_number_from:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as err:
                last_decode_error = err
                del self._log_number_offset[log_number + 1]


def _cut_torn_tail(f: BinaryIO, block: int = 1 << 16) -> int:
    """Truncate `f` (held under the journal's lock) after its last newline; returns the
    number of bytes cut."""
    fd = f.fileno()
    size = end = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return 0
    while end > 0:  # backwards, a block at a time: a line can be long (the study's settings)
        start = max(0, end - block)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    os.ftruncate(fd, end)
    return size - end


def torn_tail_message(path: str | Path, dropped: int) -> str:
    return (f"journal {path}: its last line was cut off mid-write ({dropped} bytes, left by a "
            "process killed while appending); dropped it, every complete line before it is "
            "kept")


def _make_sampler(name: SamplerName, seed: tuple[int, ...]) -> optuna.samplers.BaseSampler:
    derived = int(np.random.SeedSequence(list(seed)).generate_state(1)[0])
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=derived)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=derived)
    return optuna.samplers.RandomSampler(seed=derived)


def _make_pruner(name: PrunerName) -> optuna.pruners.BasePruner:
    if name == "none":
        return optuna.pruners.NopPruner()
    with warnings.catch_warnings():  # experimental since 3.6; chosen knowingly
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.pruners.WilcoxonPruner()


# -- running -----------------------------------------------------------------------------

def _optimize(plan: _Plan, n_trials: int, *, study: optuna.Study | None = None,
              callback: Callable[[optuna.Study, FrozenTrial], None] | None = None) -> None:
    """Run `n_trials` trials of `plan` (in this process or a spawned worker); on a database,
    trials until the study holds `plan.n_trials` (`_SharedRDB` reserves them)."""
    if study is None:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.load_study(study_name=plan.study_name, storage=_open_storage(
            plan.storage, target=plan.n_trials, heartbeat=plan.heartbeat))
    study.sampler = _make_sampler(plan.sampler, plan.seed)
    study.pruner = _make_pruner(plan.pruner)
    callbacks = [_AfterTrial(plan.n_trials, callback)]
    if not is_database(plan.storage):
        study.optimize(plan.objective, n_trials=n_trials, callbacks=callbacks)
        return
    while _counted(study) < plan.n_trials:
        try:
            study.optimize(plan.objective, callbacks=callbacks)  # until the target
        except _TargetReached:
            # The remaining trials all run: wait for them. Each try fails (and queues again)
            # those whose worker stopped beating first (Optuna's `_run_trial`).
            time.sleep(_WAIT_SECONDS)
        except optuna.exceptions.UpdateFinishedTrialError:
            # This process missed its heartbeats for the grace period (stopped, starved):
            # another worker failed its trial and queued it again. It goes on with the next.
            warnings.warn("tune: a trial of this process was failed by another worker "
                          "(no heartbeat within the grace period) and queued again; going "
                          "on", stacklevel=1)


def _worker(plan: _Plan, n_trials: int) -> None:
    """A spawned worker: `_optimize`, ending with its parent, holding the run lock."""
    _exit_with_parent()
    with _run_lock(plan.storage) as lock:
        if lock is not None:
            lock.share()
        _optimize(plan, n_trials)


def _exit_with_parent() -> None:
    """End this spawned process as soon as its parent is gone (`kill -9` too), so that no
    orphan goes on adding trials to the study. It waits on the pipe multiprocessing keeps
    open from the parent (`parent_process().join()`), which the kernel closes when the
    parent dies: no polling, and portable, unlike Linux's PR_SET_PDEATHSIG. Its trial is
    left RUNNING, and the next resume fails it (`_fail_stale`)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        with _APPENDING:  # never in the middle of a journal line
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
        if trial.number + 1 >= self.target and _counted(study) >= self.target:
            study.stop()


def _run_workers(plans: list[tuple[_Plan, int]], study: optuna.Study,
                 reporter: _Reporter) -> None:
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


class _Reporter:
    """Turns finished trials into `TrialRecord`s for `on_trial` and counts for `progress`,
    from Optuna's callback (one process) or by polling the storage (workers)."""

    def __init__(self, base: Arm, total: int, progress: Callable[[int, int], None] | None,
                 on_trial: Callable[[TrialRecord], None] | None) -> None:
        self.base, self.total = base, total
        self.progress, self.on_trial = progress, on_trial
        self.seen: set[int] = set()
        self.done = 0  # trials that count toward the target (`_counted`)

    def skip(self, study: optuna.Study) -> None:
        """Trials finished before this call are not reported again."""
        self.seen = {t.number for t in study.get_trials(deepcopy=False, states=_FINISHED)}
        self.done = _counted(study)

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._emit([trial])

    def poll(self, study: optuna.Study) -> None:
        self._emit([t for t in study.get_trials(deepcopy=False, states=_FINISHED)
                    if t.number not in self.seen])

    def _emit(self, trials: list[FrozenTrial]) -> None:
        for trial in sorted(trials, key=lambda t: t.number):
            self.seen.add(trial.number)
            self.done += trial.state in _COUNTED
            if self.on_trial is not None:
                self.on_trial(_record(trial, self.base))
            if self.progress is not None:
                self.progress(self.done, self.total)


# -- results -----------------------------------------------------------------------------

def _weights(trial: FrozenTrial, base: Arm) -> tuple[float, ...]:
    return tuple(float(trial.params.get(name, value))
                 for name, value in base.named_weights._asdict().items())


def _record(trial: FrozenTrial, base: Arm) -> TrialRecord:
    complete = trial.state == TrialState.COMPLETE
    return TrialRecord(
        number=trial.number, state=trial.state.name,
        values=tuple(float(v) for v in trial.values) if complete and trial.values else None,
        weights=_weights(trial, base),
        seconds=trial.duration.total_seconds() if trial.duration is not None else None,
        baseline=bool(trial.user_attrs.get(BASELINE_ATTR, False)),
        sampler=trial.user_attrs.get(SAMPLER_ATTR))


def _frame(records: list[TrialRecord], objectives: tuple[Objective, ...]) -> pl.DataFrame:
    labels = [o.label() for o in objectives]
    columns: dict[str, Any] = {
        "number": [r.number for r in records], "state": [r.state for r in records],
        "baseline": [r.baseline for r in records], "sampler": [r.sampler for r in records],
        **{label: [None if r.values is None else r.values[i] for r in records]
           for i, label in enumerate(labels)},
        **{name: [r.weights[i] for r in records] for i, name in enumerate(WEIGHTS)},
        "seconds": [r.seconds for r in records]}
    schema = {"number": pl.Int64, "state": pl.String, "baseline": pl.Boolean,
              "sampler": pl.String,
              **dict.fromkeys(labels, pl.Float64), **dict.fromkeys(WEIGHTS, pl.Float64),
              "seconds": pl.Float64}
    return pl.DataFrame(columns, schema=schema)


def _importance(study: optuna.Study, objectives: tuple[Objective, ...]
                ) -> tuple[dict[str, dict[str, float]], list[str]]:
    completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(completed) < MIN_IMPORTANCE_TRIALS:
        return {}, [f"parameter importance not computed: {len(completed)} completed trials, "
                    f"PED-ANOVA needs at least {MIN_IMPORTANCE_TRIALS} (5 in the top 10%)"]
    # Imported here: optuna.importance imports scikit-learn (seconds), which workers skip.
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances
    importance, notes = {}, []
    for i, o in enumerate(objectives):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # PED-ANOVA ranks low targets as good: negate the maximised objective.
            target = None if len(objectives) == 1 else (lambda t, i=i: -t.values[i])
            found = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator(),
                                          target=target)
        importance[o.label()] = {name: float(found[name]) for name in WEIGHTS if name in found}
        notes += [f"importance of {o.label()}: {w.message}" for w in caught
                  if "multiplying the output by -1" not in str(w.message)]
    return importance, notes


def _result(study: optuna.Study, spec: str, base: Arm,
            objectives: tuple[Objective, ...]) -> TuneResult:
    trials = study.get_trials(deepcopy=False)
    records = [_record(t, base) for t in trials if t.state in _FINISHED]
    notes = []
    if running := [t.number for t in trials if t.state == TrialState.RUNNING]:
        notes.append(f"trials {running} are still RUNNING: another process is running them, "
                     "or a process was killed mid-trial (they are not counted as finished; "
                     "on a database, the workers still running fail those whose heartbeat "
                     "stopped and run them again; with a journal, a resume when no other "
                     "tune process holds the study does)")
    if len(objectives) == 1:
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        front = [study.best_trial] if complete else []
    else:
        front = sorted(study.best_trials, key=lambda t: t.number)
    best = tuple(Arm(f"{study.study_name}#{t.number}", _weights(t, base), base.intent,
                     base.roles) for t in front)
    importance, more = _importance(study, objectives)
    return TuneResult(study=study, storage=spec, objectives=objectives, best=best,
                      best_values=tuple(tuple(float(v) for v in t.values) for t in front),
                      trials=_frame(records, objectives), importance=importance,
                      notes=tuple(notes + more))
