"""What a study found, read back from it: the best arm or the Pareto front, one record per
finished trial, and the parameter importance (PED-ANOVA)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import optuna
import polars as pl
from optuna.trial import FrozenTrial, TrialState

from msprlab.engine.batch import WEIGHTS

from ..measures.scoring import Arm
from ..variants.space import setting_value
from .attrs import BASELINE_ATTR, COST_ATTR, FINISHED, SAMPLER_ATTR, TABLE_ATTR
from .space import Objective, weights_of

# PED-ANOVA contrasts the top 10% of completed trials with all of them; Optuna advises at
# least 5 trials in that top quantile.
MIN_IMPORTANCE_TRIALS = 50


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial: state "COMPLETE", "PRUNED" or "FAIL"; `values` in objective
    order (None unless complete); all six weights (`WEIGHTS` order); the sampler the trial
    ran under (None for a trial from before trials recorded it); in a configuration
    search, the searched settings by key (None: the trial failed before suggesting it)."""

    number: int
    state: str
    values: tuple[float, ...] | None
    weights: tuple[float, ...]
    seconds: float | None
    baseline: bool
    sampler: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # a configuration search's
    table: str | None = None      # its point's table (cache key, 16 characters)
    cost_ms: float | None = None  # that table's engine time per search (ms)


@dataclass(frozen=True)
class TuneResult:
    """What a study found.

    best : the best arm (one objective) or the Pareto-optimal arms (several), by trial
        number; `best_values[i]` holds arm i's objective values, `best_settings[i]` its
        searched settings (a configuration search; else empty dicts).
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
    best_settings: tuple[dict[str, Any], ...] = field(default=())
    settings: tuple[str, ...] = field(default=())  # the searched settings' keys

    @property
    def study_name(self) -> str:
        return self.study.study_name


def trials_message(held: int, target: int) -> str:
    """What `tune(n_trials=target)` does to a study holding `held` finished trials."""
    if held >= target:
        return (f"0 new trials: the study already holds {held} (of {target} requested); "
                f"--trials {held + 100} adds 100")
    return f"adding {target - held} trials to the study's {held} (target {target})"


def record(trial: FrozenTrial, base: Arm, settings: tuple[str, ...] = ()) -> TrialRecord:
    complete = trial.state == TrialState.COMPLETE
    return TrialRecord(
        number=trial.number, state=trial.state.name,
        values=tuple(float(v) for v in trial.values) if complete and trial.values else None,
        weights=weights_of(trial.params, base),
        seconds=trial.duration.total_seconds() if trial.duration is not None else None,
        baseline=bool(trial.user_attrs.get(BASELINE_ATTR, False)),
        sampler=trial.user_attrs.get(SAMPLER_ATTR),
        settings=settings_of(trial, settings),
        table=trial.user_attrs.get(TABLE_ATTR), cost_ms=trial.user_attrs.get(COST_ATTR))


def settings_of(trial: FrozenTrial, settings: tuple[str, ...]) -> dict[str, Any]:
    """A configuration trial's searched settings, as its point took them (None: the trial
    failed before suggesting it)."""
    return {key: setting_value(key, trial.params.get(key)) for key in settings}


def _frame(records: list[TrialRecord], objectives: tuple[Objective, ...],
           settings: tuple[str, ...] = ()) -> pl.DataFrame:
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
    frame = pl.DataFrame(columns, schema=schema)
    if settings:  # one column per setting, of its values' type
        frame = frame.with_columns(pl.DataFrame(
            {key: [r.settings.get(key) for r in records] for key in settings},
            schema={key: _dtype(key) for key in settings}))
        frame = frame.with_columns(
            pl.Series("table", [r.table for r in records], dtype=pl.String),
            pl.Series("cost_ms", [r.cost_ms for r in records], dtype=pl.Float64))
    return frame


def _dtype(key: str) -> Any:
    from ..variants.settings import SETTINGS
    return {int: pl.Int64, float: pl.Float64, bool: pl.Boolean, str: pl.String}[
        SETTINGS[key].kind]


def _importance(study: optuna.Study, objectives: tuple[Objective, ...],
                settings: tuple[str, ...] = ()) -> tuple[dict[str, dict[str, float]], list[str]]:
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
            # PED-ANOVA ranks low targets as good: negate a maximised objective.
            sign = 1.0 if o.is_cost else -1.0
            target = (None if len(objectives) == 1 and not o.is_cost
                      else (lambda t, i=i, sign=sign: sign * t.values[i]))
            found = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator(),
                                          target=target)
        importance[o.label()] = {name: float(found[name]) for name in [*WEIGHTS, *settings]
                                 if name in found}
        notes += [f"importance of {o.label()}: {w.message}" for w in caught
                  if "multiplying the output by -1" not in str(w.message)]
    return importance, notes


def study_result(study: optuna.Study, spec: str, base: Arm,
                 objectives: tuple[Objective, ...],
                 settings: tuple[str, ...] = ()) -> TuneResult:
    trials = study.get_trials(deepcopy=False)
    records = [record(t, base, settings) for t in trials if t.state in FINISHED]
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
    best = tuple(Arm(f"{study.study_name}#{t.number}", weights_of(t.params, base), base.intent,
                     base.roles) for t in front)
    importance, more = _importance(study, objectives, settings)
    return TuneResult(study=study, storage=spec, objectives=objectives, best=best,
                      best_values=tuple(tuple(float(v) for v in t.values) for t in front),
                      trials=_frame(records, objectives, settings), importance=importance,
                      notes=tuple(notes + more),
                      best_settings=tuple(settings_of(t, settings) for t in front),
                      settings=settings)
