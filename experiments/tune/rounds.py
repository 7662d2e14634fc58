"""A configuration search's trials, run in rounds (`configuration`'s docstring), through
Optuna's ask-and-tell interface: a round's trials are all asked before any is scored, so
the tables their points need are built together (one walk over the timeline per state).

A round is one of:
- a state group: a trial whose settings the sampler chose (a "fresh" trial), and the
  `points_per_state - 1` trials queued right after it with its state settings fixed
  (`GROUP_ATTR`), whose search settings and weights the sampler chooses; the first
  `startup_groups` groups draw their settings at random from the searched values instead
  (the state once for the group, the search settings for each point, no point twice), as
  a sampler starts from random trials: a group's many trials would otherwise leave the
  sampler one state to learn from, and it would stay there;
- queued trials: the trials waiting in the study when the round starts (the baseline,
  the trials queued to search a new point's weights, `POINT_ATTR`, retries of killed
  trials), asked together, their points known.
After a state group is scored, each of its new points (no earlier trial's table is its
table) gets `trials_per_point - 1` trials queued with all its settings fixed, so later
rounds search its weights on its table.

The study's rules hold as with `study.optimize`: on a journal this call runs `n_trials`
trials; on a database every trial is reserved (`database.SharedRDB`: a process finding
every remaining trial running waits), every running trial beats (Optuna's heartbeat
thread, one per trial of the round, from its ask to its tell), stale trials are failed and
queued again before each round, and a trial another worker failed meanwhile is skipped.
With one worker the rounds, like the trials, are the same for a given seed.
"""

from __future__ import annotations

import os
import socket
import time
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import numpy as np
import optuna
from optuna.storages._heartbeat import get_heartbeat_thread, is_heartbeat_enabled
from optuna.trial import FrozenTrial, TrialState

from .attrs import (
    COUNTED,
    GROUP_ATTR,
    LEAD_ATTR,
    POINT_ATTR,
    SAMPLER_ATTR,
    TABLE_ATTR,
    WARM_ATTR,
    WORKER_ATTR,
    counted_trials,
)
from .configuration import ConfigTrialFunction
from .database import TargetReached

__all__ = ["run_rounds"]

_WAIT_SECONDS = 0.5
Callback = Callable[[optuna.Study, FrozenTrial], None]


def run_rounds(study: optuna.Study, objective: ConfigTrialFunction, *, n_trials: int | None,
               target: int, callback: Callback | None = None) -> None:
    """Run rounds until this call ran `n_trials` trials (a journal) or, with `n_trials`
    None (a database), until the study holds `target` counted trials."""
    done = 0
    while True:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
            if is_heartbeat_enabled(study._storage):  # as `study.optimize` does each trial
                optuna.storages.fail_stale_trials(study)
        if n_trials is not None:
            budget = n_trials - done
            if budget <= 0:
                return
        elif counted_trials(study) >= target:
            return
        else:  # what the study needs beyond its running and queued trials (a queued one)
            waiting = _waiting(study)
            budget = max(1 if waiting else 0, target - _taken(study) - waiting)
            if budget <= 0:  # every remaining trial runs: wait for them
                time.sleep(_WAIT_SECONDS)
                continue
        with ExitStack() as beats, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Heartbeat of storage")
            try:
                batch, group = _ask_round(study, objective, budget, beats)
            except TargetReached:
                if n_trials is not None:
                    raise
                time.sleep(_WAIT_SECONDS)
                continue
            scored = _run_round(study, objective, batch, callback)
        done += len(batch)
        if group:
            room = (n_trials - done) if n_trials is not None else target - _taken(study)
            _queue_points(study, objective, scored, room - _waiting(study))


def _ask(study: optuna.Study, beats: ExitStack, sampler: str) -> optuna.Trial:
    """A trial of the round, beating from now on, saying which process and sampler run it."""
    trial = study.ask()
    beats.enter_context(get_heartbeat_thread(trial._trial_id, study._storage))
    trial.set_user_attr(SAMPLER_ATTR, sampler)
    trial.set_user_attr(WORKER_ATTR, f"{socket.gethostname()}:{os.getpid()}")
    return trial


def _ask_round(study: optuna.Study, objective: ConfigTrialFunction, budget: int,
               beats: ExitStack) -> tuple[list[optuna.Trial], bool]:
    """The round's trials (at most `budget`), and whether they are a state group."""
    search = objective.search
    groups = _groups(study)
    random_lead = groups < search.startup_groups and not _waiting(study)
    if random_lead:  # a startup group: its settings drawn at random from their values
        rng = _rng(study, groups)
        study.enqueue_trial(search.settings.draw(rng), user_attrs={LEAD_ATTR: "random"})
    first = _ask(study, beats, objective.sampler)
    batch = [first]
    lead = first.user_attrs.get(LEAD_ATTR)
    if lead is None and not _fresh(study, first):  # queued trials: their points known
        cap = search.points_per_state * search.trials_per_point
        while len(batch) < min(budget, cap) and _waiting(study):
            try:
                batch.append(_ask(study, beats, objective.sampler))
            except TargetReached:
                break
        return batch, False
    if lead is None:
        first.set_user_attr(LEAD_ATTR, "sampler")
    values = objective.settings(first)
    state = search.state_params(values)
    siblings = max(0, min(search.points_per_state - 1, budget - 1))
    drawn = [values]
    for _ in range(siblings):
        params = state
        if lead == "random":  # the siblings' search settings drawn too, each a new point
            params = search.settings.draw(_rng(study, groups), fixed=state, avoid=drawn)
            drawn.append(params)
        study.enqueue_trial(params, user_attrs={GROUP_ATTR: first.number})
    for _ in range(siblings):
        try:
            batch.append(_ask(study, beats, objective.sampler))
        except TargetReached:
            break
    return batch, True


def _groups(study: optuna.Study) -> int:
    """How many state groups the study has started (a lead not failed)."""
    return sum(1 for t in study.get_trials(deepcopy=False)
               if LEAD_ATTR in t.user_attrs and t.state != TrialState.FAIL)


def _rng(study: optuna.Study, group: int) -> np.random.Generator:
    """The random draws of startup group `group`: seeded by the study's sampler seed."""
    seed = int((study.user_attrs.get(SAMPLER_ATTR) or {}).get("seed", 0))
    return np.random.default_rng([seed, group, len(study.get_trials(deepcopy=False))])


def _run_round(study: optuna.Study, objective: ConfigTrialFunction,
               batch: list[optuna.Trial], callback: Callback | None,
               ) -> list[tuple[optuna.Trial, dict[str, Any]]]:
    """Build the round's tables together, then score and tell each trial; returns each
    trial with its settings."""
    settings = [objective.settings(t) for t in batch]
    points = [objective.search.point(values) for values in settings]
    told = 0
    try:
        tables = objective.search.source.tables(points)
        for trial, point, table in zip(batch, points, tables, strict=True):
            values = objective.score(trial, point, table)
            finished = _tell(study, trial, values)
            told += 1
            if finished is not None and callback is not None:
                callback(study, finished)
    except BaseException:
        for trial in batch[told:]:
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        raise
    return list(zip(batch, settings, strict=True))


def _tell(study: optuna.Study, trial: optuna.Trial, values: Any) -> FrozenTrial | None:
    try:
        return study.tell(trial, values)
    except optuna.exceptions.UpdateFinishedTrialError:
        # Its heartbeat lapsed (this process stopped or starved): another worker failed it
        # and queued it again. The round goes on with the next.
        warnings.warn(f"tune: trial {trial.number} of this process was failed by another "
                      "worker (no heartbeat within the grace period) and queued again; "
                      "going on", stacklevel=2)
        return None


def _queue_points(study: optuna.Study, objective: ConfigTrialFunction,
                  scored: list[tuple[optuna.Trial, dict[str, Any]]], room: int) -> None:
    """Queue `trials_per_point - 1` trials for each new point of a state group (in its
    order), within `room` trials; with a weights-only study's start and one objective, the
    first takes the weights of the study's best trial so far (`configuration`'s docstring).
    A point is new when no earlier trial's table is its table: a point the sampler comes
    back to already had its queued trials, and the sampler's own trial there searches its
    weights further (queuing again would spend the study's trials on points it knows)."""
    best = _best_weights(study, objective)
    numbers = {trial.number for trial, _ in scored}
    seen = {t.user_attrs.get(TABLE_ATTR) for t in study.get_trials(deepcopy=False)
            if t.number not in numbers and t.state != TrialState.FAIL}
    source = objective.search.source
    for trial, values in scored:
        key = source.key(objective.search.point(values))[:16]
        if key in seen:
            continue
        seen.add(key)
        for k in range(objective.search.trials_per_point - 1):
            if room <= 0:
                return
            attrs: dict[str, Any] = {POINT_ATTR: trial.number}
            params = dict(values)
            if k == 0 and best is not None:
                params.update(best[1])
                attrs[WARM_ATTR] = best[0]
            study.enqueue_trial(params, user_attrs=attrs)
            room -= 1


def _best_weights(study: optuna.Study, objective: ConfigTrialFunction
                  ) -> tuple[int, dict[str, float]] | None:
    """The study's best trial's number and searched weights (one objective, a start)."""
    if objective.search.start is None or len(objective.objectives) != 1:
        return None
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return None
    best = study.best_trial
    return best.number, {k: best.params[k] for k in objective.space.ranges}


def _fresh(study: optuna.Study, trial: optuna.Trial) -> bool:
    """Whether the sampler chooses the trial's settings: it was not queued with any of them
    (nor as a member of a state group)."""
    if GROUP_ATTR in trial.user_attrs:
        return False
    frozen = study.get_trials(deepcopy=False)[trial.number]
    return not frozen.system_attrs.get("fixed_params")


def _waiting(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def _taken(study: optuna.Study) -> int:
    """The trials counted or running (on a database, the target bounds them)."""
    return len(study.get_trials(deepcopy=False, states=(*COUNTED, TrialState.RUNNING)))
