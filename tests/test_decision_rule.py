"""The verdict rule, the guardrails and the confirmatory family, on estimates and frames
whose verdicts are known by construction."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from msprlab.experiments.decision import (
    COLUMNS,
    Candidate,
    DecisionSettings,
    Estimate,
    Guardrail,
    Judged,
    by_group,
    confirmatory,
    decide,
    family_pairs,
)

SETTINGS = DecisionSettings()  # alpha 0.05, power 0.8, margins 0.01


def verdict(*candidates: Candidate, settings: DecisionSettings = SETTINGS) -> list[tuple]:
    table = decide(list(candidates), settings, metric="ndcg@10")
    assert table.columns == list(COLUMNS)
    return table.select("candidate", "verdict", "failed_guardrail").rows()


def test_each_verdict_of_the_rule() -> None:
    fails = Guardrail("intent=FACTUAL", "fails", "upper bound -0.02 < -0.01")
    holds = Guardrail("intent=UNKNOWN", "holds", "lower bound +0.01 > -0.01")
    unsure = Guardrail("question_type=multi-hop", "unresolved", "lower bound -0.011 <= -0.01")
    rows = verdict(
        Candidate("better", "off", Estimate(0.09, 0.015, 297, 298, 298), (holds,)),
        Candidate("worse", "off", Estimate(-0.014, 0.004, 297, 298, 298)),
        Candidate("better-but", "off", Estimate(0.09, 0.015, 297, 298, 298), (holds, fails)),
        Candidate("same", "on-zero", Estimate(0.0008, 0.0011, 297, 298, 298)),
        Candidate("unsure", "on-zero", Estimate(0.01, 0.02, 297, 298, 298)),
        Candidate("identical", "no-success", Estimate(0.0, 0.0, 297, 298, 298,
                                                      identical=True)),
        Candidate("alone", "off", Estimate(0.3, math.nan, 0, 1, 1)),
        Candidate("better-open", "off", Estimate(0.09, 0.015, 297, 298, 298), (holds, unsure)),
        Candidate("same-open", "off", Estimate(0.0008, 0.0011, 297, 298, 298), (unsure,)))
    assert rows == [("better", "ship", None), ("worse", "don't ship", None),
                    ("better-but", "don't ship", "intent=FACTUAL"),
                    ("same", "no effect", None), ("unsure", "inconclusive", None),
                    ("identical", "no effect", None), ("alone", "not tested", None),
                    ("better-open", "inconclusive", None), ("same-open", "inconclusive", None)]


def test_family_counts_only_tested_rows_and_sets_the_level() -> None:
    table = decide([Candidate("a", "off", Estimate(0.05, 0.01, 99, 100, 100)),
                    Candidate("b", "off", Estimate(0.0, 0.0, 99, 100, 100, identical=True)),
                    Candidate("c", "off", Estimate(0.01, 0.01, 99, 100, 100))],
                   SETTINGS, metric="m")
    assert table["family_size"].to_list() == [2, 2, 2]
    assert table["tested"].to_list() == [True, False, True]
    assert table["ci_level"][0] == pytest.approx(0.975)
    assert table["p_adj"][0] == pytest.approx(min(1, 2 * table["p"][0]))
    assert math.isnan(table["p_adj"][1])
    assert "Bonferroni over the 2 tested row(s)" in table["correction"][0]
    inconclusive = table.filter(pl.col("candidate") == "c").row(0, named=True)
    assert inconclusive["verdict"] == "inconclusive"
    assert f"{inconclusive['mde']:.4f}" in inconclusive["reason"]


def test_the_reason_of_an_unresolved_guardrail_names_it() -> None:
    table = decide([Candidate("x", "off", Estimate(0.05, 0.01, 99, 100, 100),
                              (Guardrail("question_type=multi-hop", "unresolved",
                                         "n 40, lower bound -0.011 <= -0.01"),))],
                   SETTINGS, metric="m")
    assert table["verdict"][0] == "inconclusive"
    assert table["reason"][0].startswith("a significant improvement")
    assert "guardrail unresolved: question_type=multi-hop (n 40" in table["reason"][0]
    with pytest.raises(ValueError, match="state must be one of"):
        Guardrail("g", "maybe", "")


def test_group_guardrail_states() -> None:
    from msprlab.experiments.decision import noninferior
    holds = noninferior(Estimate(0.01, 0.005, 99, 100, 100), 0.01, 0.05)
    fails = noninferior(Estimate(-0.05, 0.01, 99, 100, 100), 0.01, 0.05)
    open_ = noninferior(Estimate(0.0, 0.01, 99, 100, 100), 0.01, 0.05)
    assert [holds[0], fails[0], open_[0]] == ["holds", "fails", "unresolved"]
    assert fails[2] < -0.01 < holds[1]


def test_the_reason_names_the_harm_and_the_guardrail() -> None:
    table = decide([Candidate("x", "off", Estimate(-0.05, 0.01, 99, 100, 100),
                              (Guardrail("g", "fails", "why"),))], SETTINGS, metric="m")
    assert table["reason"][0].startswith("significant harm")
    assert table["failed_guardrail"][0] == "g"  # named even where the harm decides


def per_search(values: dict[str, np.ndarray], *, intents: list[str],
               repeats: int = 2) -> dict[str, pl.DataFrame]:
    """Per-search frames of arms with `repeats` searches per query."""
    n = len(intents)
    query = np.repeat(np.arange(n), repeats)
    return {arm: pl.DataFrame({
        "event_id": np.arange(n * repeats), "query_id": [f"q{q:03d}" for q in query],
        "intent": [intents[q] for q in query], "question_type": ["single-hop"] * (n * repeats),
        "ndcg@10": v[query], "judged@10": np.full(n * repeats, 0.5)})
        for arm, v in values.items()}


def test_confirmatory_family_from_frames() -> None:
    rng = np.random.default_rng(1)
    n = 120
    off = rng.uniform(0, 1, n)
    on_zero = off + 0.05 + rng.normal(0, 0.05, n)
    frames = per_search({
        "off": off, "on-zero": on_zero, "personal": on_zero + rng.normal(0, 0.001, n),
        "tuned": off + 0.09 + rng.normal(0, 0.05, n), "no-success": on_zero,
        "no-frequency": on_zero + 0.02 + rng.normal(0, 0.01, n)},
        intents=["FACTUAL"] * 40 + ["UNKNOWN"] * 80)
    table = confirmatory(frames, SETTINGS, metric="ndcg@10", min_support=30)
    got = {r["candidate"]: (r["reference"], r["verdict"]) for r in table.iter_rows(named=True)}
    assert got == {"tuned": ("off", "ship"), "on-zero": ("off", "ship"),
                   "personal": ("on-zero", "no effect"),
                   "record-success": ("no-success", "no effect"),
                   "record-frequency": ("no-frequency", "don't ship")}
    assert table["family_size"].unique().to_list() == [4]  # record-success is identical
    assert table.filter(pl.col("candidate") == "tuned")["guardrails"][0].count(": holds") == 3
    # per search with two searches per query: the same deltas, n counts searches
    search = confirmatory(frames, DecisionSettings(unit="search"), metric="ndcg@10",
                          min_support=30)
    assert search["delta"].to_list() == pytest.approx(table["delta"].to_list())
    assert search["n"][0] == 2 * table["n"][0]


def test_judged_share_guardrail() -> None:
    rng = np.random.default_rng(2)
    off = rng.uniform(0, 1, 60)
    frames = per_search({"off": off, "tuned": off + rng.normal(0.2, 0.05, 60)},
                        intents=["UNKNOWN"] * 60)
    frames["tuned"] = frames["tuned"].with_columns(pl.lit(0.1).alias("judged@10"))
    table = confirmatory(frames, SETTINGS, metric="ndcg@10", min_support=30,
                         judged=Judged("judged@10", 0.5))
    row = table.row(0, named=True)
    assert (row["verdict"], row["failed_guardrail"]) == ("don't ship", "judged@10 share")
    assert "10.0% against 0.5 x the reference's 50.0%" in row["reason"]


def test_by_group_is_its_own_exploratory_family() -> None:
    rng = np.random.default_rng(3)
    off = rng.uniform(0, 1, 100)
    frames = per_search({"off": off, "on-zero": off + rng.normal(0.03, 0.05, 100)},
                        intents=["A"] * 50 + ["B"] * 35 + ["C"] * 15)
    table = by_group(frames, SETTINGS, metric="ndcg@10", group_by="intent", min_support=30)
    assert table["group"].to_list() == ["A", "B"]  # C is under the minimum support
    assert table["family"].unique().to_list() == ["exploratory: by intent"]
    assert table["family_size"].unique().to_list() == [2]


def test_family_pairs_isolate_each_candidate() -> None:
    pairs = family_pairs(["off", "on-zero", "personal", "all", "tuned", "no-feedback"],
                         reference="off")
    assert [(c.name, c.reference, c.candidate_arm, c.reference_arm) for c in pairs] == [
        ("tuned", "off", "tuned", "off"), ("on-zero", "off", "on-zero", "off"),
        ("personal", "on-zero", "personal", "on-zero"), ("all", "on-zero", "all", "on-zero"),
        ("record-feedback", "no-feedback", "on-zero", "no-feedback")]
    assert [c.name for c in family_pairs(["off", "tuned"], reference="on-zero")] == []


def test_unpaired_searches_are_refused() -> None:
    frames = per_search({"off": np.zeros(40), "tuned": np.ones(40)}, intents=["A"] * 40)
    frames["tuned"] = frames["tuned"].head(70)
    with pytest.raises(ValueError, match="searches differ"):
        confirmatory(frames, SETTINGS, metric="ndcg@10", min_support=30)
