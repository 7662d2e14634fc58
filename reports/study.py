"""The weight search as the report shows it, from `bundle.STUDY_TRIALS` and `STUDY_SUMMARY`.

`msprlab run|tune` write the trials frame (number, state, baseline, one column per
objective label, the six weights, seconds) and a summary document
(`experiments.stages.weight_search.study_summary`: study, storage, trials per state,
objectives, the best arm or the Pareto front with weights and values, PED-ANOVA
importance per objective, notes). This module reads both defensively, because they are
the boundary with another command's output: objective columns are the trial columns that
are neither bookkeeping nor weights; the best arm comes from the summary (its trial
number found by matching its weights in the trials), else from the trials (the maximum
of the first objective). Every objective is maximised unless the summary says
"direction": "minimize".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from msprlab.engine.batch import WEIGHTS

__all__ = ["StudyView", "study_view"]

_BOOKKEEPING = ("number", "state", "baseline", "seconds", "duration", "datetime_start",
                "datetime_complete", "system_attrs", "user_attrs")


@dataclass(frozen=True)
class StudyView:
    """What the report prints about a study."""

    objectives: tuple[str, ...]
    maximize: bool
    params: tuple[str, ...]                     # weights that were searched (axes to plot)
    ranges: dict[str, tuple[float, float]]
    counts: dict[str, int]                      # trial state -> trials
    best_number: int | None
    best_values: dict[str, float]
    best_weights: dict[str, float]
    baseline_values: dict[str, float]
    importance: dict[str, dict[str, float]]
    importance_method: str = "PED-ANOVA"
    pareto_size: int = 0                        # arms on the Pareto front (several objectives)
    settings: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def _objective_names(summary: Mapping[str, Any], trials: pl.DataFrame) -> list[str]:
    given = summary.get("objectives")
    names = []
    if isinstance(given, list):
        for item in given:
            if isinstance(item, str):
                names.append(item)
            elif isinstance(item, Mapping):
                label = item.get("label") or item.get("name") or item.get("metric")
                if isinstance(label, str):
                    names.append(label)
    names = [n for n in names if n in trials.columns]
    if names:
        return names
    return [c for c, t in trials.schema.items()
            if c not in _BOOKKEEPING and c not in WEIGHTS and t.is_numeric()
            and not c.startswith("params_")]


def _ranges(summary: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    for key in ("space", "ranges", "search_space"):
        value = summary.get(key)
        if isinstance(value, Mapping) and isinstance(value.get("ranges"), Mapping):
            value = value["ranges"]
        if isinstance(value, Mapping):
            out = {}
            for name, pair in value.items():
                if isinstance(pair, list | tuple) and len(pair) == 2 and all(
                        isinstance(x, int | float) for x in pair):
                    out[str(name)] = (float(pair[0]), float(pair[1]))
            if out:
                return out
    return {}


def _importance(summary: Mapping[str, Any], objectives: list[str]) -> dict[str, dict[str, float]]:
    raw = summary.get("importance")
    if not isinstance(raw, Mapping) or not raw:
        return {}
    if all(isinstance(v, int | float) for v in raw.values()):  # flat: one objective
        return {objectives[0] if objectives else "objective":
                {str(k): float(v) for k, v in raw.items()}}
    return {str(label): {str(k): float(v) for k, v in values.items()
                         if isinstance(v, int | float)}
            for label, values in raw.items() if isinstance(values, Mapping) and values}


def _bests(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    for key in ("best", "best_trials", "pareto_front", "best_trial"):
        value = summary.get(key)
        if isinstance(value, list) and value and isinstance(value[0], Mapping):
            return [v for v in value if isinstance(v, Mapping)]
        if isinstance(value, Mapping) and value:
            return [value]
    return []


def _number_of(frame: pl.DataFrame, weights: Mapping[str, float]) -> int | None:
    """The first complete trial with exactly these weights."""
    if not weights or not all(w in frame.columns for w in weights):
        return None
    hit = frame.filter(pl.col("state") == "COMPLETE",
                       *(pl.col(w) == v for w, v in weights.items())).sort("number")
    return int(hit.get_column("number")[0]) if hit.height else None


def _named(values: Any, names: tuple[str, ...] | list[str]) -> dict[str, float]:
    if isinstance(values, Mapping):
        return {str(k): float(v) for k, v in values.items() if isinstance(v, int | float)}
    if isinstance(values, list | tuple) and len(values) == len(names):
        return {n: float(v) for n, v in zip(names, values, strict=True)
                if isinstance(v, int | float)}
    return {}


def _row_values(row: Mapping[str, Any], names: tuple[str, ...] | list[str]) -> dict[str, float]:
    return {n: float(row[n]) for n in names
            if isinstance(row.get(n), int | float) and not math.isnan(row[n])}


def study_view(trials: pl.DataFrame | None, summary: Mapping[str, Any] | None) -> StudyView:
    """Objectives, best trial, importance and settings of a study, from whichever of its
    two files the bundle holds (both None gives an empty view)."""
    summary = summary or {}
    frame = trials if trials is not None else pl.DataFrame({"number": [], "state": []},
                                                             schema={"number": pl.Int64,
                                                                     "state": pl.String})
    objectives = _objective_names(summary, frame)
    direction = str(summary.get("direction") or (summary.get("directions") or ["maximize"])[0])
    maximize = not direction.lower().startswith("min")
    ranges = _ranges(summary)
    weights = [w for w in WEIGHTS if w in frame.columns]
    if ranges:
        params = [w for w in WEIGHTS if w in ranges and w in frame.columns]
    else:  # the searched weights are those that vary
        params = [w for w in weights if frame.get_column(w).n_unique() > 1]
    counts = dict(sorted(frame.group_by("state").len().iter_rows())) if frame.height else {}
    best_number: int | None = None
    best_values: dict[str, float] = {}
    best_weights: dict[str, float] = {}
    bests = _bests(summary)
    if bests:
        best = bests[0]
        number = best.get("number", best.get("trial"))
        best_values = _named(best.get("values", best.get("value")), objectives)
        best_weights = _named(best.get("weights", best.get("params")), WEIGHTS)
        best_number = int(number) if isinstance(number, int) else _number_of(frame,
                                                                              best_weights)
    if best_number is not None and not (best_values and best_weights):
        row = frame.filter(pl.col("number") == best_number)
        if row.height:
            named = row.row(0, named=True)
            best_values = best_values or _row_values(named, objectives)
            best_weights = best_weights or _row_values(named, weights)
    if not bests and objectives and frame.height:
        done = frame.filter(pl.col("state") == "COMPLETE", pl.col(objectives[0]).is_not_null(),
                            pl.col(objectives[0]).is_not_nan())
        if done.height:
            named = done.sort([objectives[0], "number"], descending=[maximize, False]).row(
                0, named=True)
            best_number = int(named["number"])
            best_values, best_weights = _row_values(named, objectives), _row_values(named,
                                                                                    weights)
    baseline_values: dict[str, float] = {}
    if "baseline" in frame.columns:
        base = frame.filter(pl.col("baseline"))
        if base.height:
            baseline_values = _row_values(base.row(0, named=True), objectives)
    settings = {str(k): str(v) for k, v in summary.items()
                if k in ("study_name", "study", "storage", "sampler", "pruner", "seed",
                         "trials_requested", "workers") and not isinstance(v, Mapping | list)}
    if not counts and isinstance(summary.get("trials"), Mapping):
        counts = {str(k): int(v) for k, v in sorted(summary["trials"].items())
                  if isinstance(v, int)}
    method = summary.get("importance_method")
    notes = summary.get("notes")
    return StudyView(
        objectives=tuple(objectives), maximize=maximize, params=tuple(params), ranges=ranges,
        counts=counts, best_number=best_number, best_values=best_values,
        best_weights=best_weights, baseline_values=baseline_values,
        importance=_importance(summary, objectives),
        importance_method=method if isinstance(method, str) else "PED-ANOVA",
        pareto_size=len(bests) if len(objectives) > 1 else 0, settings=settings,
        notes=tuple(str(n) for n in notes) if isinstance(notes, list) else ())
