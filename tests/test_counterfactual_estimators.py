"""IPS and SNIPS nDCG@k from verdicts (experiments/counterfactual/estimators.py) against
the truth of simulated logs: the relevance users reveal, beta = P(helpful | examined), is
known there, so each arm's nDCG under it is too."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from msprlab.experiments.counterfactual.click_model import ClickLog, fit_pbm
from msprlab.experiments.counterfactual.estimators import (
    ArmRankings,
    counterfactual,
    labels,
    per_question,
)
from msprlab.experiments.counterfactual.position_bias import examination_curve

from click_logs import SimulatedLog, simulate


def _arms(log: SimulatedLog) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
    """The logging ranker's own lists, the ideal order of what it showed, the reverse."""
    shown = log.impressions.with_columns(grade=pl.Series([
        log.grades[pair] for pair in log.impressions.select("question", "memory_id").rows()]))
    logging = shown.select("search", "memory_id", "rank")
    ideal = shown.sort(["search", "grade", "rank"], descending=[False, True, False]
                       ).with_columns(rank=pl.int_range(1, pl.len() + 1).over("search"))
    reverse = shown.with_columns(rank=shown["rank"].max() + 1 - pl.col("rank"))
    return ({"logging": logging, "ideal": ideal.select("search", "memory_id", "rank"),
             "reverse": reverse.select("search", "memory_id", "rank")},
            shown.select("search", "question").unique(maintain_order=True))


def _truth(log: SimulatedLog, arms: dict[str, pl.DataFrame], searches: pl.DataFrame
           ) -> dict[str, pl.DataFrame]:
    """Per question, each arm's nDCG@10 with gains beta over the logged support."""
    support = log.impressions.select("question", "memory_id").unique(maintain_order=True)
    support = support.with_columns(gain=pl.Series([log.beta(log.grades[pair])
                                                   for pair in support.rows()]))
    discount = 1.0 / (pl.int_range(1, pl.len() + 1) + 1).cast(pl.Float64).log(2)
    ideal = support.sort("gain", descending=True).group_by("question").agg(
        ideal=(pl.col("gain").head(10) * discount.head(10)).sum())
    out = {}
    for name, frame in arms.items():
        gains = (frame.join(searches, on="search")
                 .join(support, on=["question", "memory_id"], how="left")
                 .with_columns(dcg=pl.col("gain").fill_null(0.0)
                               / (pl.col("rank") + 1).cast(pl.Float64).log(2)))
        out[name] = (gains.group_by("search", "question").agg(pl.col("dcg").sum())
                     .group_by("question").agg(pl.col("dcg").mean()).join(ideal, on="question")
                     .select("question", value=pl.col("dcg") / pl.col("ideal")))
    return out


@pytest.fixture(scope="module")
def estimated() -> tuple[SimulatedLog, dict[str, pl.DataFrame], object]:
    log = simulate(seed=11, searches=4000, eta=0.7, truncated=True)
    arms, searches = _arms(log)
    clicks = ClickLog.of(log.impressions)
    curve = examination_curve(clicks, truncated=True, n_resamples=60, seed=1)
    result = counterfactual(clicks, curve, ArmRankings(searches, arms),
                            references=("logging",), clip=0.05)
    return log, _truth(log, arms, searches), result


def test_snips_recovers_each_arms_ndcg_under_the_revealed_relevance(estimated) -> None:
    _, truth, result = estimated
    for arm, frame in truth.items():
        row = result.estimates.filter(pl.col("arm") == arm, pl.col("estimator") == "snips"
                                      ).row(0, named=True)
        assert row["mean"] == pytest.approx(frame["value"].mean(), abs=0.03), arm
        assert row["scored"] and row["unshown"] == 0.0


def test_the_changes_against_the_logging_ranker_match_the_truth(estimated) -> None:
    _, truth, result = estimated
    base = truth["logging"].rename({"value": "base"})
    for arm in ("ideal", "reverse"):
        true_delta = truth[arm].join(base, on="question").select(
            (pl.col("value") - pl.col("base")).mean()).item()
        row = result.changes.filter(pl.col("arm") == arm, pl.col("estimator") == "snips"
                                    ).row(0, named=True)
        assert abs(row["delta"] - true_delta) < 0.02, (arm, row, true_delta)
        assert row["ci_low"] < row["delta"] < row["ci_high"]
        assert math.copysign(1, row["ci_low"]) == math.copysign(1, true_delta)


def test_ips_reads_in_units_of_the_helpful_rate(estimated) -> None:
    """IPS keeps the ideal of the question's helpful memories: a change reads smaller by
    about beta, the share of examined relevant memories users call helpful."""
    result = estimated[2]
    ips = result.changes.filter(pl.col("arm") == "ideal", pl.col("estimator") == "ips"
                                )["delta"].item()
    snips = result.changes.filter(pl.col("arm") == "ideal", pl.col("estimator") == "snips"
                                  )["delta"].item()
    assert 0 < ips < snips


@pytest.mark.parametrize("truncated", [False, True])
def test_the_labels_are_unbiased_for_the_helpful_rate(truncated: bool) -> None:
    """Averaged over seeds, a relevant memory's label is beta(1) = 0.95 x 0.95 and a
    non-relevant one's beta(0) = 0.05 x 0.1, with the true curve held; in a log of the
    searches with a verdict only when the propensity divides by P(the search drew one)."""
    found: dict[int, list[float]] = {0: [], 1: []}
    for seed in range(4):
        log = simulate(seed=20 + seed, searches=2000, eta=0.7, truncated=truncated,
                       spread=2.0)
        clicks = ClickLog.of(log.impressions)
        fit = fit_pbm(clicks, truncated=truncated, examination=log.model.examination(10))
        frame = labels(clicks, fit, clip=0.01)
        for grade in (0, 1):
            chosen = frame.filter(pl.Series([log.grades[p] == grade for p in frame.select(
                "question", "memory_id").rows()]))
            found[grade].append(float(chosen["label"].mean()))
    assert np.mean(found[1]) == pytest.approx(log.beta(1), abs=0.04)
    assert np.mean(found[0]) == pytest.approx(log.beta(0), abs=0.01)


def test_memories_the_logging_ranker_never_showed_are_bounded_not_scored() -> None:
    log = simulate(seed=12, searches=800, truncated=True)
    arms, searches = _arms(log)
    fresh = arms["logging"].with_columns(
        memory_id=pl.when(pl.col("rank") <= 5).then(pl.lit("never-shown-") + pl.col(
            "memory_id")).otherwise(pl.col("memory_id")))
    clicks = ClickLog.of(log.impressions)
    fit = fit_pbm(clicks, truncated=True)
    frame = per_question(clicks, fit, ArmRankings(searches, {"logging": arms["logging"],
                                                             "fresh": fresh}))
    fresh_rows = frame.filter(pl.col("arm") == "fresh")
    assert fresh_rows["unshown"].mean() == pytest.approx(0.5)
    assert (fresh_rows["bound"] > 0).all()
    assert (frame.filter(pl.col("arm") == "logging")["unshown"] == 0).all()
    curve = examination_curve(clicks, truncated=True, n_resamples=5)
    result = counterfactual(clicks, curve, ArmRankings(searches, {"logging": arms["logging"],
                                                                  "fresh": fresh}),
                            references=("logging",), max_unshown=0.1)
    scored = dict(result.estimates.filter(pl.col("estimator") == "snips")
                  .select("arm", "scored").rows())
    assert scored == {"logging": True, "fresh": False}


@pytest.mark.parametrize("clip", [0.0, -0.1, 1.5])
def test_the_clip_must_be_a_propensity(clip: float) -> None:
    log = simulate(seed=13, questions=5, searches=100, truncated=False)
    clicks = ClickLog.of(log.impressions)
    fit = fit_pbm(clicks, truncated=False)
    with pytest.raises(ValueError, match="clip"):
        labels(clicks, fit, clip=clip)
