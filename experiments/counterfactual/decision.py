"""The verdicts on verdict labels read the counterfactual estimate (issue 40, item 6).

With verdict labels the decision's confirmatory family (`decision.family`) is built as
always, then each candidate's estimate is replaced by the counterfactual estimate of the
same comparison (the configured `[counterfactual] estimator`, IPS by default): its
per-query paired change, its standard error the bootstrap's (questions resampled, the click
model refitted in each), df the questions less one, so the rule's tests and intervals
(`decision.inference`) read it as any paired estimate. Two guardrails join the candidate's:

- `replay proven`: the fidelity check passed (`experiments.fidelity`); without it the
  reconstructed lists, hence the propensities, are not production's;
- `logged support`: neither arm has more than `max_unshown` of its top k on memories the
  logging ranker never showed for the question (there the estimate is a bound).

Where one does not hold it is unresolved (not failed: nothing shows the candidate worse),
so "ship" needs the replay proven, both arms on the logged support, and the estimate's
interval above 0; otherwise the row is inconclusive and names the guardrail.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import polars as pl

from ..decision.family import Comparison
from ..decision.inference import Estimate
from ..decision.rule import Candidate, Guardrail
from .stage import PRODUCTION, CounterfactualResult

__all__ = ["with_counterfactual"]


def _state(holds: bool) -> str:
    """A guardrail that does not hold here is unresolved, not failed: nothing shows the
    candidate worse, the estimate just cannot be trusted to say (the rule then gives
    inconclusive, naming it, never ship)."""
    return "holds" if holds else "unresolved"


def _estimate(row: dict[str, Any]) -> Estimate:
    n = int(row["n_questions"])
    se = row["se"] if row["se"] is not None else math.nan
    return Estimate(float(row["delta"]), float(se), max(n - 1, 0), n, n, "query",
                    identical=bool(row["identical"]))


def with_counterfactual(comparisons: Sequence[Comparison], candidates: Sequence[Candidate],
                        result: CounterfactualResult, *, estimator: str,
                        fidelity: Any) -> list[Candidate]:
    """`candidates` (one per comparison, in order) with the counterfactual estimate and the
    two guardrails (module docstring); a comparison the estimates do not hold keeps its
    raw estimate, with a note."""
    est = result.estimates
    changes = {(r["arm"], r["reference"]): r
               for r in est.changes.filter(pl.col("estimator") == estimator)
               .iter_rows(named=True)}
    arms = {r["arm"]: r for r in est.estimates.filter(pl.col("estimator") == estimator)
            .iter_rows(named=True)}
    proven = Guardrail(
        "replay proven", _state(fidelity is not None and fidelity.passed),
        fidelity.summary() if fidelity is not None else
        "no fidelity figures: the store records no production end state to compare with")
    out = []
    for comparison, candidate in zip(comparisons, candidates, strict=True):
        arm = PRODUCTION if comparison.candidate_arm == "tuned" else comparison.candidate_arm
        row = changes.get((arm, comparison.reference_arm))
        if row is None:
            out.append(replace(candidate, notes=(*candidate.notes, (
                f"no {estimator} estimate for {comparison.name} against "
                f"{comparison.reference}: the raw verdict estimate is shown"))))
            continue
        shares = {name: arms[name]["unshown"] for name in (arm, comparison.reference_arm)}
        support = Guardrail(
            "logged support", _state(all(s <= est.max_unshown for s in shares.values())),
            "never-shown share of the top k: " + ", ".join(
                f"{name} {share:.1%}" for name, share in shares.items())
            + f" (at most {est.max_unshown:.0%})")
        out.append(replace(
            candidate, estimate=_estimate(row), guardrails=(*candidate.guardrails, proven,
                                                            support),
            mean_candidate=arms[arm]["mean"], mean_reference=arms[comparison.reference_arm][
                "mean"], notes=(*candidate.notes, f"{estimator} nDCG@{est.k} (counterfactual: "
                                f"verdicts weighted by their examination propensity)")))
    return out
