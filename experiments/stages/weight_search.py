"""The weight search stage: an Optuna study over the six weights on the train window
(`TuningPlan` what it will run, `Tuned` what it found), and the study's summary record."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from msprlab.datasets.sidecars import journal_path

from ..arms import baseline_arm
from ..errors import ExperimentError, redact_url
from ..experiment_config import ExperimentConfig
from ..measures.metrics import Metric, parse_metric
from ..measures.scoring import Arm, Scorer
from .replay_tables import Prepared, window_table

if TYPE_CHECKING:
    from ..replay import CandidateTable
    from ..tune import Objective, SearchSpace, TrialRecord, TuneResult

__all__ = ["SearchHooks", "Tuned", "TuningPlan", "objective_of", "plan_search",
           "search_weights", "study_summary"]


@dataclass(frozen=True)
class TuningPlan:
    """Everything the search is set to run with, resolved from the definition and the
    command's flags before any trial (so a bad objective or range fails first): the
    scorers of both windows, the starting arm, the space, the objectives, the study's
    target, storage and name, the sampler and the worker count."""

    metrics: list[Metric]
    train: CandidateTable
    train_scorer: Scorer
    test_scorer: Scorer
    base: Arm
    space: SearchSpace
    objectives: list[Objective]
    n_trials: int
    storage: str          # a journal path or a database URL, as given
    storage_shown: str    # the same with any password redacted
    study_name: str
    sampler: str
    workers: int
    switch_sampler: bool


def plan_search(cfg: ExperimentConfig, prepared: Prepared, *, trials: int | None,
                storage: str | None, workers: int | None, sampler: str | None,
                switch_sampler: bool = False, study: str | None = None) -> TuningPlan:
    """The weight search's settings. `trials` is the study's target total of COMPLETE
    trials (a resumed study runs only the missing ones); `switch_sampler` lets a resumed
    study continue with another sampler than the one it was created with.

    The study is `study`, else on a database (shared by hosts) the experiment's name, on a
    journal NAME-CONFIGHASH-DATADIGEST (8 characters each)."""
    from ..tune import Objective, is_database, search_space
    metrics = [parse_metric(m) for m in cfg.metrics.names]
    train = window_table(prepared, "tuned", "train")
    test = window_table(prepared, "tuned", "test")
    train_scorer, test_scorer = Scorer.of(train, metrics), Scorer.of(test, metrics)
    base = baseline_arm(cfg)
    space = search_space(dict(cfg.tune.ranges), cfg.engine)  # signals off: weights fixed at 0
    # "cost" is a configuration search's (the weights share their table's cost)
    objectives = [Objective(*objective_of(o)) for o in cfg.tune.objectives if o != "cost"]
    n_trials = cfg.tune.trials if trials is None else trials  # not `or`: 0 is not "unset"
    journal = storage or cfg.tune.storage or str(journal_path(prepared.store, cfg.name))
    study_name = study or (cfg.name if is_database(journal) else
                           f"{cfg.name}-{cfg.digest()[:8]}-{prepared.dataset.digest[:8]}")
    return TuningPlan(metrics, train, train_scorer, test_scorer, base, space, objectives,
                      n_trials, journal, redact_url(journal), study_name,
                      sampler or cfg.tune.sampler,
                      cfg.tune.workers if workers is None else workers, switch_sampler)


def objective_of(text: str) -> tuple[str, str | None]:
    parts = text.split("/")
    if len(parts) == 1:
        return parts[0], None
    if len(parts) == 3 and parts[1] == "intent":
        return parts[0], parts[2]
    raise ExperimentError(f"tune.objectives: {text!r}; use METRIC or METRIC/intent/LABEL")


@dataclass(frozen=True)
class SearchHooks:
    """The live callbacks of a running search, supplied by the reporter (`Reporter.study_run`):
    they print and log while the trials run, in the order the search calls them, so their
    output falls between the lines it belongs between. `on_recovered`: what a killed run
    left was recovered; `on_start`: (held, target) when the study opens; `progress`: (done,
    total); `on_trial`: each finished trial."""

    on_recovered: Callable[[str], None]
    on_start: Callable[[int, int], None]
    progress: Callable[[int, int], None]
    on_trial: Callable[[TrialRecord], None]


@dataclass(frozen=True)
class Tuned:
    """What the search found: the study's result, its best arm, the library snippet of
    the best weights and what that snippet cannot reproduce, the study's summary record
    (`study_summary`) and the search's wall time."""

    result: TuneResult
    best: Arm
    snippet: dict[str, Any]
    snippet_notes: list[str]
    summary: dict[str, Any]
    seconds: float


def search_weights(cfg: ExperimentConfig, prepared: Prepared, plan: TuningPlan,
                   hooks: SearchHooks) -> Tuned:
    """Run the study on the train window. It records the dataset digest and the config
    hash: a process whose differ is refused (exit 2) before any trial."""
    from ..tune import best_config_snippet, snippet_notes, tune
    started = time.perf_counter()
    result = tune(plan.train_scorer, plan.base, plan.space, plan.objectives,
                  n_trials=plan.n_trials, seed=cfg.seed,
                  sampler=plan.sampler,  # type: ignore[arg-type]
                  pruner=cfg.tune.pruner,  # type: ignore[arg-type]
                  storage=plan.storage, study_name=plan.study_name, workers=plan.workers,
                  switch_sampler=plan.switch_sampler,
                  identity={"dataset_digest": prepared.dataset.digest,
                            "config_hash": cfg.digest()},
                  heartbeat=(cfg.tune.heartbeat, cfg.tune.heartbeat_grace),
                  on_recovered=hooks.on_recovered, on_start=hooks.on_start,
                  progress=hooks.progress, on_trial=hooks.on_trial)
    best = result.best[0]
    snippet = best_config_snippet(cfg.engine, best)
    cannot = list(snippet_notes(cfg.engine))
    if best.roles and cfg.replay.policy != "none":
        cannot.append(f"the role policy (replay.policy = {cfg.replay.policy!r}) is not a "
                      "config setting: install it with Memory.set_role_policy")
    summary = study_summary(result, plan.n_trials, sampler=plan.sampler, seed=cfg.seed,
                            snippet_notes=cannot)
    return Tuned(result, best, snippet, cannot, summary, time.perf_counter() - started)


def study_summary(result: Any, n_trials: int, *, sampler: str | None = None,
                  seed: int | None = None, snippet_notes: list[str] | None = None
                  ) -> dict[str, Any]:
    """What the study found, as JSON: the searched space and the weights fixed at 0, best
    (or Pareto) weights and values, importance, the sampler, and what the library snippet
    (`bundle.SNIPPET`) cannot reproduce."""
    from ..tune import SETTINGS_ATTR
    states = result.trials["state"].value_counts()
    space = result.study.user_attrs.get(SETTINGS_ATTR, {})  # as the study stores it
    return {
        "study": result.study_name, "storage": redact_url(result.storage),
        "trials_requested": n_trials,
        "trials_held_before": result.held, "trials_added": result.added,
        "sampler": sampler, "seed": seed,
        "space": space.get("space", {}), "fixed": space.get("fixed", {}),
        "trials": {state: int(n) for state, n in states.iter_rows()},
        "objectives": [o.label() for o in result.objectives],
        "best": [{"weights": arm.named_weights._asdict(),
                  "intent": arm.intent, "roles": arm.roles,
                  "values": dict(zip([o.label() for o in result.objectives], values,
                                     strict=True))}
                 for arm, values in zip(result.best, result.best_values, strict=True)],
        "pareto": len(result.objectives) > 1,
        "importance": result.importance, "importance_method": "PED-ANOVA (optuna.importance)",
        "notes": list(result.notes), "recovered": list(result.recovered),
        "snippet_notes": list(snippet_notes or []),
    }
