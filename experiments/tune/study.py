"""`tune`: search the ranking weights with Optuna on a prepared `Scorer` (EVALUATION.md,
"Optuna 5"), in a study that is created, or resumed and checked, here.

- The base arm is enqueued as trial 0 (once per study, resumes included), so every study
  starts from the baseline.
- A study is about one search: a resumed study must agree on the objectives, the space,
  the base arm, the pruner and the train data (`_settings`), and on the `identity` (the
  dataset digest and config hash) when one is given.
- The sampler and its seed belong to the study (stored when it is created): resuming with
  another is refused unless `switch_sampler`, and each trial records the sampler it ran
  under.
- `n_trials` is the number of COMPLETE (or PRUNED) trials the study should hold when
  `tune` returns (`load_if_exists`): a resume runs the missing ones; what a killed run
  left is recovered first (`storages`), and `tune` reports it (`on_recovered`,
  `TuneResult.recovered`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from ..errors import ExperimentError, redact_url
from ..measures.scoring import Arm, Scorer
from .attrs import (
    BASELINE_ATTR,
    FIXED_ATTR,
    IDENTITY_PREFIX,
    JOINS_ATTR,
    SAMPLER_ATTR,
    SETTINGS_ATTR,
    SWITCHES_ATTR,
    WARM_ATTR,
    counted_trials,
)
from .configuration import ConfigSearch, ConfigTrialFunction, config_trial_function
from .database import HEARTBEAT, SharedRDB, setup_lock
from .result import TrialRecord, TuneResult, study_result
from .space import (
    PRUNERS,
    SAMPLERS,
    Objective,
    PrunerName,
    SamplerName,
    SearchSpace,
    TrialFunction,
    is_int,
    trial_function,
    with_fixed,
)
from .storages import (
    MEMORY,
    open_storage,
    recover_journal,
    recover_trials,
    run_lock,
    storage_spec,
)
from .workers import Plan, Reporter, run_trials

# Settings added after studies were first stored, with the value an older study had.
_LATER_SETTINGS: dict[str, Any] = {"fixed": {}}


def tune(train: Scorer, base: Arm, space: SearchSpace, objectives: Sequence[Objective], *,
         n_trials: int, study_name: str, seed: int = 0, sampler: SamplerName = "tpe",
         pruner: PrunerName = "none", storage: str | Path | None = None, workers: int = 1,
         switch_sampler: bool = False, identity: Mapping[str, str] | None = None,
         heartbeat: tuple[int, int] = HEARTBEAT,
         on_start: Callable[[int, int], None] | None = None,
         on_recovered: Callable[[str], None] | None = None,
         progress: Callable[[int, int], None] | None = None,
         on_trial: Callable[[TrialRecord], None] | None = None,
         configuration: ConfigSearch | None = None) -> TuneResult:
    """Search the weights of `space` to maximise `objectives` on `train` (and with
    `configuration`, the ranking settings beside them: `configuration`).

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
        process left RUNNING are failed and run again (`storages`). On a database,
        every process and worker on the study stops at exactly `n_trials`.
    seed : seeds the sampler (with the study's trial count and the worker index).
    sampler : "tpe", "cmaes" (one objective; needs `pip install cmaes`) or "random". The
        sampler and `seed` are stored in the study when it is created; resuming it with
        another one raises ValueError unless `switch_sampler` (the switch is then stored
        and noted). Each trial records the sampler it ran under (the `sampler` column).
    pruner : "none" or "wilcoxon" (one objective; `space`'s docstring).
    storage : None (journal file `DEFAULT_STUDY_DIR/<study_name>.journal`), a journal file
        path, ":memory:" (a throwaway study: nothing to resume, one worker), or an RDB URL
        such as "postgresql://user@host/db" or "sqlite:///tune.db" (SQLite is not
        recommended for parallel workers). A resumed study must have been created with
        the same objectives, space, base arm, pruner and train data.
    workers : processes sharing the study (spawned); results are then not deterministic.
        Independent `tune` calls on one study also work: on a database from several
        hosts at once (`database`); on a journal once the study exists.
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
    configuration : the settings searched beside the weights and where their tables come
        from (`configuration.ConfigSearch`); the trials then run in rounds (`rounds`),
        `train` is the configured point's train table (the baseline's), and an objective
        may be `cost` (the engine's time per search, minimised).
    """
    objectives = tuple(objectives)
    if str(storage) == MEMORY and workers != 1:
        raise ExperimentError("tune: an in-memory study (storage=':memory:') cannot be shared by "
                              f"{workers} worker processes; use a journal file or an RDB URL")
    base = with_fixed(base, space)
    _check_arguments(base, space, objectives, n_trials=n_trials, study_name=study_name,
                     seed=seed, sampler=sampler, pruner=pruner, workers=workers)
    _check_heartbeat(heartbeat)
    objective: TrialFunction | ConfigTrialFunction = (
        trial_function(train, base, space, objectives, pruner=pruner, sampler=sampler)
        if configuration is None else config_trial_function(
            train, base, space, objectives, configuration, pruner=pruner, sampler=sampler))
    keys = () if configuration is None else tuple(configuration.settings.keys)
    spec = storage_spec(storage, study_name)
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # progress comes from callbacks
    try:
        with run_lock(spec) as lock:
            alone = lock is not None and lock.alone()
            recovered = recover_journal(spec)  # before Optuna appends to it
            opened = open_storage(spec, target=n_trials, heartbeat=heartbeat)
            with setup_lock(opened, study_name):  # one process at a time sets a study up
                study = optuna.create_study(
                    study_name=study_name, storage=opened, load_if_exists=True,
                    directions=[o.direction for o in objectives])
                _check_identity(study, identity, spec)
                _check_settings(study, _settings(train, base, space, objectives, pruner,
                                                 configuration), spec)
                recovered += recover_trials(study, opened, lock, alone)
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
                plan = Plan(objective, study_name, spec, sampler, pruner, n_trials,
                            (seed, len(study.get_trials(deepcopy=False)), 0)
                            + ((join,) if join else ()), heartbeat)
                _enqueue_baseline(study, base, space, configuration)
                held = counted_trials(study)
            if on_start is not None:
                on_start(held, n_trials)
            run_trials(study, plan, n_trials - held, workers,
                       Reporter(base, n_trials, progress, on_trial, keys))
            result = study_result(study, spec, base, objectives, keys)
            return replace(result, notes=tuple(filter(None, [space.note(), *notes]))
                           + result.notes, recovered=tuple(recovered), held=held,
                           added=counted_trials(study) - held)
    finally:
        optuna.logging.set_verbosity(verbosity)


def _enqueue_baseline(study: optuna.Study, base: Arm, space: SearchSpace,
                      configuration: ConfigSearch | None = None) -> None:
    """The base arm as the next trial (with the configured settings, in a configuration
    search), unless the study has one, finished, running or queued (a failed one does not
    count: the baseline is run again; a database queues a baseline whose worker died again
    itself)."""
    trials = study.get_trials(deepcopy=False)
    if not any(t.user_attrs.get(BASELINE_ATTR) and t.state != TrialState.FAIL for t in trials):
        settings = {} if configuration is None else configuration.baseline()
        study.enqueue_trial({**space.baseline(base), **settings},
                            user_attrs={BASELINE_ATTR: True})
    if configuration is not None and configuration.start is not None and not any(
            t.user_attrs.get(WARM_ATTR) == "weights-only" and t.state != TrialState.FAIL
            for t in trials):  # trial 1: the weights-only study's best weights
        study.enqueue_trial({**configuration.start, **configuration.baseline()},
                            user_attrs={WARM_ATTR: "weights-only"})


def _check_arguments(base: Arm, space: SearchSpace, objectives: tuple[Objective, ...], *,
                     n_trials: int, study_name: str, seed: int, sampler: str, pruner: str,
                     workers: int) -> None:
    if not objectives:
        raise ExperimentError("tune: give at least one Objective, e.g. [Objective('ndcg@10')]")
    labels = [o.label() for o in objectives]
    if len(set(labels)) != len(labels):
        raise ExperimentError(f"tune: objectives must differ, got {labels}")
    if not (is_int(n_trials) and n_trials >= 1):
        raise ExperimentError(f"tune: `n_trials >= 1` must hold, but got {n_trials!r}")
    if not (is_int(workers) and workers >= 1):
        raise ExperimentError(f"tune: `workers >= 1` must hold, but got {workers!r}")
    if not is_int(seed):
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
    space.check_base(base)


def _settings(train: Scorer, base: Arm, space: SearchSpace, objectives: tuple[Objective, ...],
              pruner: str, configuration: ConfigSearch | None = None) -> dict[str, Any]:
    """What a study is about: a resumed study must agree on all of it (the pruner too: a
    Wilcoxon trial pairs its steps with the best trial's; a configuration search's
    settings, how it groups trials and its starting point)."""
    about = {"objectives": [o.label() for o in objectives], "space": space.as_dict(),
             "fixed": dict(space.fixed), "pruner": pruner,
             "base": [float(w) for w in base.weights], "intent": base.intent,
             "roles": base.roles, "data": train.table.meta["dataset"]["digest"],
             "train_searches": train.n_searches}
    if configuration is not None:
        about["configuration"] = {**configuration.as_dict(),
                                  "start": configuration.baseline()}
    return about


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
    finished = counted_trials(study)
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


def _check_heartbeat(heartbeat: tuple[int, int]) -> None:
    if not (isinstance(heartbeat, tuple) and len(heartbeat) == 2
            and all(is_int(x) for x in heartbeat) and 1 <= heartbeat[0] < heartbeat[1]):
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
    if not isinstance(storage, SharedRDB):
        return 0
    join = int(study.user_attrs.get(JOINS_ATTR, 0))
    study.set_user_attr(JOINS_ATTR, join + 1)
    return join
