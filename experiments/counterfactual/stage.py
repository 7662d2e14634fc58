"""The counterfactual stage of a verdict-labelled experiment: the examination curve of the
log and each arm's IPS and SNIPS nDCG@k on the test window.

The logged lists are the production arm's (the definition's `[engine]`) top k at each
verdict search, as the replay reconstructs them (`fidelity.figures.reconstructed_lists`:
trust them as far as the fidelity figures say), or lists given by the caller (a generated
world's truth). The curve is fitted on every logged search (all windows: the position bias
is the users', not a window's); the estimates use the test window's verdicts only, so the
weights tuned on the train window are never scored with the labels they were tuned on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from msprlab.engine import EngineConfig

from ..fidelity.figures import reconstructed_lists
from ..measures.metrics import parse_metric
from ..measures.scoring import Arm, Scorer
from ..replay import CandidateTable, question_of
from ..stages.prepare import Stage, quiet
from ..stages.replay_tables import Prepared, window_table
from .click_model import ClickLog
from .estimators import ArmRankings, Counterfactual, counterfactual
from .logged import LoggedSearches, logged_searches
from .position_bias import ExaminationCurve, examination_curve

__all__ = ["CounterfactualResult", "CounterfactualSettings", "arm_rankings",
           "counterfactual_stage", "per_query", "raw_mean", "settings_of"]

PRODUCTION = "tuned"  # the key of the definition's [engine] among the prepared tables


@dataclass(frozen=True)
class CounterfactualSettings:
    """k: the cut; clip: the propensity clip; resamples: bootstrap resamples over
    questions (the click model refitted in each); max_unshown: the share of never-shown
    memories in an arm's top k above which it is bounded, not scored; truncated: the log
    holds only searches with a verdict (a ContextKit log: True)."""

    k: int = 10
    clip: float = 0.05
    resamples: int = 200
    max_unshown: float = 0.1
    truncated: bool = True
    seed: int = 0


@dataclass(frozen=True, eq=False)
class CounterfactualResult:
    """The curve (every window), the logged searches behind it and behind the test
    window's estimates, the estimates, and each arm's raw verdict figure (`raw_metric`,
    per query) on the same searches."""

    curve: ExaminationCurve
    logged: LoggedSearches
    test_logged: LoggedSearches
    estimates: Counterfactual
    settings: CounterfactualSettings
    raw: dict[str, float]
    raw_metric: str


def per_query(table: CandidateTable, arm: Arm, metric: str) -> pl.DataFrame:
    """question, value: `metric` under the table's own labels, a question's value the mean
    over its searches that have one."""
    name = parse_metric(metric).name
    values = Scorer.of(table, [parse_metric(metric)]).values(arm)[name]
    return (table.searches.select(question_of(table.searches).alias("question"))
            .with_columns(value=pl.Series(values)).filter(pl.col("value").is_not_nan())
            .group_by("question").agg(pl.col("value").mean()))


def raw_mean(table: CandidateTable, arm: Arm, metric: str) -> float:
    """The per-query mean of `metric` under the table's own labels."""
    values = per_query(table, arm, metric)
    return float(values["value"].mean()) if values.height else math.nan


def settings_of(section: object, seed: int) -> CounterfactualSettings:
    """The stage's settings from a definition's `[counterfactual]` table."""
    return CounterfactualSettings(clip=section.clip, resamples=section.resamples,  # type: ignore[attr-defined]
                                  max_unshown=section.max_unshown, seed=seed)  # type: ignore[attr-defined]


def arm_rankings(table_of: Mapping[str, object], arms: Mapping[str, Arm], *, k: int,
                 searches: pl.DataFrame) -> ArmRankings:
    """Each arm's top k on its table (`table_of[name]`, a window's CandidateTable) as
    `estimators.RANKINGS` frames over `searches` (search, question)."""
    frames = {}
    for name, arm in arms.items():
        table = table_of[name]
        lists = Scorer.of(table, [parse_metric("judged@10")]).rankings(arm)  # type: ignore[arg-type]
        frames[name] = _long(table.searches["search"], lists, k)  # type: ignore[attr-defined]
    return ArmRankings(searches, frames)


def _long(search: pl.Series, lists: Sequence[Sequence[str]], k: int) -> pl.DataFrame:
    return (pl.DataFrame({"search": search.cast(pl.Int64),
                          "memory_id": pl.Series([list(ids[:k]) for ids in lists],
                                                 dtype=pl.List(pl.String))})
            .explode("memory_id").filter(pl.col("memory_id").is_not_null())
            .with_columns(rank=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("search")))


def _clicked(logged: LoggedSearches, truncated: bool) -> ClickLog:
    """The click log of `logged`: in a truncated log only the searches with a verdict on
    their list (a search whose verdicts all missed the list has no click to be logged by)."""
    frame = logged.impressions
    if truncated:
        frame = frame.filter(pl.col("clicked").any().over("search"))
    if frame.height == 0:
        raise ValueError("counterfactual: no logged search has a verdict on its list, so "
                         "there is no click to fit the position bias to")
    return ClickLog.of(frame)


def counterfactual_stage(prepared: Prepared, production: EngineConfig, arms: Mapping[str, Arm],
                         settings: CounterfactualSettings, *,
                         lists: Sequence[Sequence[str]] | None = None,
                         source: str = "the replayed production arm (the definition's engine)",
                         raw_metric: str = "ndcg@10",
                         progress: Stage = quiet) -> CounterfactualResult:
    """The curve and the estimates of `arms` (name -> the arm scored on the table named
    so in `prepared`) on the test window. `lists`: what each search of the whole log
    showed (the production table's order); by default the replay's reconstruction."""
    whole = prepared.table(PRODUCTION)
    if lists is None:
        lists = reconstructed_lists(whole, production)
    logged = logged_searches(whole.searches, whole.qrels, lists, k=settings.k, source=source)
    test = (prepared.split == "test").to_numpy()
    test_table = whole.subset(test)
    test_logged = logged_searches(test_table.searches, test_table.qrels,
                                  [ids for ids, keep in zip(lists, test, strict=True) if keep],
                                  k=settings.k, source=source)
    curve = examination_curve(_clicked(logged, settings.truncated),
                              truncated=settings.truncated, n_resamples=settings.resamples,
                              seed=settings.seed,
                              progress=lambda done, total: progress("position bias", done,
                                                                    total))
    tables = {name: window_table(prepared, name, "test") for name in arms}
    rankings = arm_rankings(tables, arms, k=settings.k,
                            searches=test_table.searches.select("search", "question"))
    estimates = counterfactual(_clicked(test_logged, settings.truncated), curve, rankings,
                               k=settings.k, clip=settings.clip,
                               references=("off", "on-zero", *(
                                   name for name in arms if name.startswith("no-"))),
                               max_unshown=settings.max_unshown)
    raw = {name: raw_mean(tables[name], arm, raw_metric) for name, arm in arms.items()}
    return CounterfactualResult(curve, logged, test_logged, estimates, settings, raw,
                                parse_metric(raw_metric).name)
