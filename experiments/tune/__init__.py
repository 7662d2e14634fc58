"""Tune the ranking weights with Optuna on a prepared `Scorer` (EVALUATION.md, "Optuna 5").

One concern a module:
- `space`: what a study searches and maximises (`SearchSpace`, `Objective`), the trial
  function, and the samplers and pruners that search it;
- `study`: `tune`, which creates or resumes a study, checks it, and runs the missing trials;
- `storages`: which storage a spec names and opening it, with the journal file
  (`journal`: its locks and torn-tail recovery) and the database shared by hosts
  (`database`: heartbeats, reserved slots and retries);
- `workers`: the trials run in this process or in spawned worker processes;
- `snippet`: the ContextKit configuration that ranks as the tuned arm;
- `result`: what a study found (`TuneResult`, one `TrialRecord` a trial);
- `attrs`: what msprlab records in a study, and which trial states count.

This package re-exports what callers use:

>>> result = tune(train, arm_of("base", config), SearchSpace.unit(WEIGHTS),   # doctest: +SKIP
...               [Objective("ndcg@10")], n_trials=200, study_name="locomo-ndcg")
>>> best_config_snippet(config, result.best[0])                               # doctest: +SKIP
"""

from .attrs import (
    DROPPED_ATTR,
    FIXED_ATTR,
    SAMPLER_ATTR,
    SETTINGS_ATTR,
    STALE_ATTR,
    SWITCHES_ATTR,
    WORKER_ATTR,
)
from .database import HEARTBEAT
from .journal import ProcessSafeJournal
from .result import MIN_IMPORTANCE_TRIALS, TrialRecord, TuneResult, trials_message
from .snippet import best_config_snippet, snippet_notes, tuned_config
from .space import PRUNERS, SAMPLERS, Objective, SearchSpace, fixed_weights, search_space
from .storages import DEFAULT_STUDY_DIR, is_database
from .study import tune

__all__ = ["DEFAULT_STUDY_DIR", "DROPPED_ATTR", "FIXED_ATTR", "HEARTBEAT",
           "MIN_IMPORTANCE_TRIALS", "PRUNERS", "SAMPLERS", "SAMPLER_ATTR", "SETTINGS_ATTR",
           "STALE_ATTR", "SWITCHES_ATTR", "WORKER_ATTR", "Objective", "ProcessSafeJournal",
           "SearchSpace", "TrialRecord", "TuneResult", "best_config_snippet", "fixed_weights",
           "is_database", "search_space", "snippet_notes", "trials_message", "tune",
           "tuned_config"]
