"""The plain-language answer under the verdict table: every figure in it is one of the
verdict rows' (as the table prints it), and each verdict reads as its rule says."""

from __future__ import annotations

import math
import re

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from msprlab.experiments.decision import Candidate, DecisionSettings, Estimate, Guardrail, decide
from msprlab.experiments.decision.answer import answer

SETTINGS = DecisionSettings()  # alpha 0.05, power 0.8, margins 0.01
HOLDS = Guardrail("intent=UNKNOWN", "holds", "lower bound +0.01 > -0.01")
OPEN = (Guardrail("question_type=multi-hop", "unresolved", "lower bound -0.02 <= -0.01"),
        Guardrail("question_type=single-hop", "unresolved", "lower bound -0.02 <= -0.01"))
FAILS = Guardrail("intent=FACTUAL", "fails", "upper bound -0.02 < -0.01")


def _e(delta: float, se: float) -> Estimate:
    return Estimate(delta, se, 297, 298, 298)


def table(*candidates: Candidate) -> pl.DataFrame:
    return decide(list(candidates), SETTINGS, metric="ndcg@10")


def figures(frame: pl.DataFrame) -> set[str]:
    """Every number a verdict row prints, in the forms the answer may use."""
    out: set[str] = set()
    for r in frame.iter_rows(named=True):
        for name in ("delta", "ci_low", "ci_high", "mde"):
            if r[name] == r[name]:
                out |= {f"{r[name]:+.4f}", f"{r[name]:.4f}"}
        if math.isfinite(r["queries_needed"]):
            out.add(f"{math.ceil(r['queries_needed']):,}")
        out |= {f"{r['ci_level']:.2%}", f"{r['p_adj']:.3f}", "0.001",
                f"{r['equivalence_margin']:g}", f"{r['noninferiority_margin']:g}"}
    return out


def numbers(line: str) -> list[str]:
    line = line.replace("ndcg@10", "").replace("best_weights.contextkit.json", "")
    return [n.rstrip(",") for n in re.findall(r"[+-]?\d[\d,]*(?:\.\d+)?%?", line)]


def test_every_figure_of_the_answer_is_a_verdict_rows() -> None:
    frame = table(
        Candidate("tuned", "off", _e(0.0893, 0.0144), (HOLDS,)),
        Candidate("on-zero", "off", _e(0.0484, 0.0133), OPEN),
        Candidate("personal", "on-zero", _e(0.0008, 0.0010)),
        Candidate("frequency", "on-zero", _e(-0.0044, 0.0018), OPEN[1:]),
        Candidate("all", "on-zero", _e(0.0046, 0.0024)),
        Candidate("record-feedback", "no-feedback", _e(0.0891, 0.0119), OPEN[:1]),
        Candidate("record-success", "no-success", Estimate(0.0, 0.0, 297, 298, 298,
                                                             identical=True)),
        Candidate("record-frequency", "no-frequency", _e(-0.0140, 0.0039)),
        Candidate("success", "on-zero", _e(0.03, 0.005), (HOLDS, FAILS)))
    lines = answer(frame, snippet="best_weights.contextkit.json")
    assert 3 <= len(lines) <= 6
    allowed = figures(frame)
    for line in lines:
        assert set(numbers(line)) <= allowed, (line, set(numbers(line)) - allowed)
    text = "\n".join(lines)
    assert text.startswith("Turn MSPR on with the tuned weights: +0.0893 ndcg@10 per query "
                           "over off (99.38% CI ")
    assert "do not record frequency (harm -0.0140, 99.38% CI " in text
    assert "recording success changes nothing (identical on every query)" in text
    assert "recording feedback: not settled (+0.0891, significant, but guardrail " \
           "question_type=multi-hop unresolved)" in text
    assert "personal: no effect (equivalent within ±0.01)" in text
    assert "hurt: success (+0.0300, guardrail intent=FACTUAL failed)" in text
    assert "all (+0.0046; this n detects only |Δ| >= " in text
    assert re.search(r"a true effect of this size about [\d,]+ queries\)", text)
    assert "guardrails question_type=multi-hop, single-hop unresolved" in text  # on-zero
    assert text.endswith("with frequency not recorded (its verdict; the weights were "
                         "searched with it recorded: see the notes below).")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["tuned", "on-zero", "personal", "intent",
                                           "record-feedback", "record-frequency"]),
                          st.floats(-0.2, 0.2), st.floats(0.0005, 0.05),
                          st.sampled_from(["none", "open", "fails"])),
                min_size=1, max_size=6, unique_by=lambda c: c[0]))
def test_any_verdicts_answer_with_their_own_figures(rows: list) -> None:
    references = {"tuned": "off", "on-zero": "off", "personal": "on-zero",
                  "intent": "on-zero", "record-feedback": "no-feedback",
                  "record-frequency": "no-frequency"}
    guards = {"none": (), "open": OPEN, "fails": (FAILS,)}
    frame = table(*(Candidate(name, references[name], _e(delta, se), guards[g])
                    for name, delta, se, g in rows))
    allowed = figures(frame)
    for line in answer(frame, snippet="best_weights.contextkit.json"):
        assert set(numbers(line)) <= allowed, line


def test_no_verdicts_no_answer() -> None:
    assert answer(table()) == []
