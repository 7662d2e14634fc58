"""The configuration search stage (issue 38): the ranking settings of `[tune.settings]`
searched with the weights on the train window, in a study of its own beside the
weights-only one (`tune.configuration`); the chosen configuration scored once on the test
window against off, on-zero and the weights-only tuned weights (the decision's
confirmatory rule over these three rows), with its stage funnel beside the shipped
configuration's and each configuration's engine cost.

Selection is honest: the settings and the weights are chosen on the train window only;
with several objectives (a Pareto front), the front's member best on the primary metric
is the chosen one. The test window is scored once, here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import polars as pl

from ..decision import decide
from ..decision.family import Comparison, Judged, candidate_of
from ..experiment_config import ExperimentConfig, judged_metric
from ..measures.funnel import FUNNEL_COLUMNS, funnel_frame, shares, with_shares
from ..measures.metrics import parse_metric
from ..measures.scoring import Arm, Scorer
from ..measures.summaries import summarize
from ..replay import CandidateTable
from ..tune import Objective, TuneResult, best_config_snippet, snippet_notes, tune, tuned_config
from ..tune.configuration import ConfigSearch
from ..variants.settings import LIMIT, SETTINGS
from ..variants.space import parse_settings
from ..variants.tables import Point
from .configurations import ConfigTables
from .held_out import HeldOutResult, trec_run
from .prepare import Stage, quiet
from .replay_tables import VERDICT_LABELS, Prepared, window_table
from .weight_search import SearchHooks, TuningPlan, objective_of, study_summary

__all__ = ["CHOSEN", "ConfigHeldOut", "ConfigPlan", "ConfigSearched", "config_held_out",
           "plan_config_search", "rescore", "search_configuration"]

CHOSEN = "chosen"   # the arm of the chosen configuration in the test window's tables
SHIPPED = "tuned"   # the weights-only tuned weights on the experiment's own settings


@dataclass(frozen=True)
class ConfigPlan:
    """What the configuration search runs with: the search (settings, grouping, the table
    source), its objectives, its study's target and name (the weights-only study's storage,
    `NAME-config`)."""

    search: ConfigSearch
    tables: ConfigTables
    objectives: list[Objective]
    n_trials: int
    study_name: str
    weights: TuningPlan

    @property
    def notes(self) -> list[str]:
        return self.search.settings.notes(self.search.base, self.search.limit)


def plan_config_search(cfg: ExperimentConfig, prepared: Prepared, weights: TuningPlan, *,
                       trials: int | None = None, progress: Stage = quiet,
                       on_walk: Any = None, start: Arm | None = None) -> ConfigPlan | None:
    """The configuration search of the definition, None without `[tune.settings]`; `start`:
    the weights-only study's best arm, where the search starts (`tune.configuration`)."""
    if not cfg.tune.settings:
        return None
    limit = cfg.replay.limit or None
    settings = parse_settings(cfg.tune.settings, cfg.engine, limit=limit)
    tables = ConfigTables.of(cfg, prepared, weights.metrics, progress=progress,
                             on_walk=on_walk)
    search = ConfigSearch(settings, cfg.engine, limit, tables, cfg.tune.points_per_state,
                          cfg.tune.trials_per_point,
                          None if start is None else weights.space.baseline(start))
    objectives = [Objective(*objective_of(o)) for o in cfg.tune.objectives]
    return ConfigPlan(search, tables, objectives,
                      cfg.tune.config_trials if trials is None else trials,
                      f"{weights.study_name}-config", weights)


@dataclass(frozen=True)
class ConfigSearched:
    """What the configuration search found: the study's result, the chosen trial's arm
    and settings, its point and full configuration, the library snippet and what it
    cannot carry, the study summary, the walks the search ran and its wall time."""

    result: TuneResult
    best: Arm
    settings: dict[str, Any]
    point: Point
    config: Any
    train_value: float
    snippet: dict[str, Any]
    snippet_notes: list[str]
    summary: dict[str, Any]
    seconds: float


def search_configuration(cfg: ExperimentConfig, prepared: Prepared, plan: ConfigPlan,
                         hooks: SearchHooks) -> ConfigSearched:
    """Run the configuration study on the train window (the weights-only study's storage,
    sampler, workers and identity checks)."""
    weights = plan.weights
    started = time.perf_counter()
    result = tune(weights.train_scorer, weights.base, weights.space, plan.objectives,
                  n_trials=plan.n_trials, seed=cfg.seed,
                  sampler=weights.sampler,  # type: ignore[arg-type]
                  storage=weights.storage, study_name=plan.study_name,
                  workers=weights.workers, switch_sampler=weights.switch_sampler,
                  identity={"dataset_digest": prepared.dataset.digest,
                            "config_hash": cfg.digest()},
                  heartbeat=(cfg.tune.heartbeat, cfg.tune.heartbeat_grace),
                  on_recovered=hooks.on_recovered, on_start=hooks.on_start,
                  progress=hooks.progress, on_trial=hooks.on_trial,
                  configuration=plan.search)
    primary = next(i for i, o in enumerate(plan.objectives) if not o.is_cost)
    chosen = max(range(len(result.best)), key=lambda i: result.best_values[i][primary])
    best, settings = result.best[chosen], result.best_settings[chosen]
    point = plan.search.point(settings)
    config = tuned_config(point.config, best)
    notes = list(snippet_notes(point.config))
    if point.limit is not None and LIMIT in settings:
        notes.append(f"search.limit {point.limit} is an argument of Memory.search, not a "
                     f"configuration key: call search(..., limit={point.limit}); rescore "
                     f"with msprlab score --limit {point.limit}")
    summary = study_summary(result, plan.n_trials, sampler=weights.sampler, seed=cfg.seed,
                            snippet_notes=notes)
    summary.update(
        settings_space=plan.search.settings.as_dict(),
        points_per_state=plan.search.points_per_state,
        trials_per_point=plan.search.trials_per_point,
        chosen={"trial": int(best.name.rsplit("#", 1)[-1]), "settings": settings,
                "weights": best.named_weights._asdict(),
                "values": dict(zip([o.label() for o in plan.objectives],
                                   result.best_values[chosen], strict=True))},
        best_settings=[dict(s) for s in result.best_settings],
        walks=plan.tables.stats.as_dict(), space_notes=plan.notes)
    return ConfigSearched(result, best, settings, point, config,
                          result.best_values[chosen][primary],
                          best_config_snippet(point.config, best), notes, summary,
                          time.perf_counter() - started)


@dataclass(frozen=True)
class ConfigHeldOut:
    """The test window: the chosen configuration beside off, on-zero and the weights-only
    tuned weights.

    frames: arm -> per-search frame (`chosen`, and the held-out stage's `tuned`, `off`,
    `on-zero`). decision: the confirmatory family (`decision.decide`: chosen against each
    of off, on-zero and tuned; Bonferroni over these rows, the interval paired with the
    adjusted test). summary: each arm's aggregates per unit and group. funnel_wide /
    funnel: the stage funnel of each arm, the chosen one on its own pool. costs: each
    arm's configuration's engine time per search (ms, from its table's replay). settings:
    the searched settings, shipped and chosen. trec_run: the chosen arm's rankings."""

    frames: dict[str, pl.DataFrame]
    decision: pl.DataFrame
    summary: pl.DataFrame
    funnel_wide: pl.DataFrame
    funnel: pl.DataFrame
    costs: dict[str, float]
    settings: pl.DataFrame
    trec_run: str


def config_held_out(cfg: ExperimentConfig, prepared: Prepared, plan: ConfigPlan,
                    searched: ConfigSearched, held: HeldOutResult) -> ConfigHeldOut:
    """The chosen configuration once on the test window (module docstring)."""
    tables = plan.tables
    table = tables.tables([searched.point])[0]
    test = tables.scorer(searched.point, table, "test")
    frames = {CHOSEN: test.frame(searched.best).join(
        held.frames[SHIPPED].select("event_id", "seen"), on="event_id", how="left")}
    frames.update({name: held.frames[name] for name in (SHIPPED, *held.references)})
    settings = cfg.decision  # the [decision] table: its metric, unit, alpha and margins
    metric = settings.metric or cfg.metrics.primary
    judged = None
    if prepared.labels.source == VERDICT_LABELS:
        judged = Judged(str(judged_metric(cfg.metrics.names)), cfg.metrics.min_judged_ratio)
    rows = [candidate_of(Comparison(CHOSEN, ref, CHOSEN, ref), frames, settings,
                         metric=metric, min_support=cfg.metrics.min_support, judged=judged)
            for ref in (*held.references, SHIPPED)]
    decision = decide(rows, settings, metric=metric,
                      family="confirmatory: the chosen configuration")
    summary = summarize(frames, cfg)
    funnels = _funnels(cfg, prepared, frames, test.table, searched.best, held)
    costs = {CHOSEN: float(table.meta["cost"]["ms_per_search"])}
    for name in (SHIPPED, *held.references):
        costs[name] = float(prepared.table(name).meta.get("cost", {}).get(
            "ms_per_search", float("nan")))
    shipped = plan.search.baseline()
    settings_frame = pl.DataFrame({
        "setting": list(shipped), "touches": [SETTINGS[k].touches for k in shipped],
        "shipped": [str(v) for v in shipped.values()],
        "chosen": [str(searched.settings[k]) for k in shipped]})
    return ConfigHeldOut(frames, decision, summary, shares(funnels), with_shares(funnels),
                         costs, settings_frame, trec_run(test, searched.best))


def _funnels(cfg: ExperimentConfig, prepared: Prepared, frames: dict[str, pl.DataFrame],
             chosen_table: CandidateTable, chosen: Arm, held: HeldOutResult) -> pl.DataFrame:
    """Each arm's stage funnel on the test window: the chosen configuration's on its own
    pool, the others' on the experiment's tables."""
    metric = parse_metric(cfg.metrics.primary)
    parts = {CHOSEN: funnel_frame(chosen_table, frames[CHOSEN], metric=metric,
                                  roles=chosen.roles)}
    roles = {name: bool(r["roles"]) for name, r in zip(
        (SHIPPED, *held.references), held.arms.iter_rows(named=True), strict=True)}
    for name in (SHIPPED, *held.references):
        parts[name] = funnel_frame(window_table(prepared, name, "test"), frames[name],
                                   metric=metric, roles=roles[name])
    return summarize(parts, cfg, metric_cols=FUNNEL_COLUMNS)


def rescore(tables: ConfigTables, point: Point, arm: Arm, objectives: list[Objective],
            window: str) -> tuple[Scorer, tuple[float, ...]]:
    """A fixed configuration's objective values on a window, as a trial computes them."""
    from ..tune.configuration import objective_values
    table = tables.tables([point])[0]
    scorer = tables.scorer(point, table, window)
    return scorer, objective_values(scorer, arm, objectives,
                                    cost=float(table.meta["cost"]["ms_per_search"]))

