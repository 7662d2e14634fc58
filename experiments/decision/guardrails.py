"""Guardrails: what must not get worse for a candidate to ship.

- Every group of the guardrail columns (intent label, question type) with at least
  `min_support` queries: it holds when shown non-inferior (the one-sided test of H0
  delta <= -margin rejects at alpha: its one-sided 1 - alpha lower bound is above
  -margin), fails when shown inferior beyond the margin (its one-sided 1 - alpha upper
  bound is below -margin), and is unresolved otherwise (`rule` says what each state does).
  Not alpha-adjusted: a guardrail guards, so adjusting would make it easier to pass as
  groups are added.
- With verdict labels, the candidate's judged share (judged@K, mean over queries) is at
  least `ratio` times the reference's: a candidate that moves the judged memories out of
  its top K is scored on fewer labels than its reference, and its metric cannot be read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl

from .inference import Estimate, lower_bound
from .pairs import estimate_of
from .rule import Guardrail

__all__ = ["group_guardrails", "judged_guardrail", "noninferior"]


def noninferior(estimate: Estimate, margin: float, alpha: float
                ) -> tuple[str, float, float]:
    """(state, one-sided 1 - alpha lower bound, upper bound) of a group against -margin:
    "holds" when the lower bound is above -margin, "fails" when the upper bound is below it,
    "unresolved" otherwise. Identical values hold; differences that do not vary compare
    their delta with -margin."""
    low = lower_bound(estimate, alpha)
    high = 2 * estimate.delta - low if math.isfinite(low) else math.nan
    if estimate.identical:
        return "holds", 0.0, 0.0
    if not math.isfinite(low):
        return "unresolved", low, high
    if low > -margin:
        return "holds", low, high
    if high < -margin:
        return "fails", low, high
    return "unresolved", low, high


def group_guardrails(paired: pl.DataFrame, groups: Sequence[str], *, unit: str,
                     min_support: int, margin: float, alpha: float) -> tuple[Guardrail, ...]:
    """One non-inferiority guardrail per group with at least `min_support` queries.

    paired : one row per query (`family.paired_queries`), with the group columns."""
    out = []
    for column in groups:
        if column not in paired.columns:
            continue
        labels = paired.get_column(column).cast(pl.String)
        for value in labels.drop_nulls().unique().sort().to_list():
            part = paired.filter(labels == value)
            if part.height < max(2, min_support):
                continue
            estimate = estimate_of(part, unit)
            state, low, high = noninferior(estimate, margin, alpha)
            bound = (f"upper bound {high:+.4f} < -{margin:g}" if state == "fails" else
                     f"lower bound {low:+.4f} {'>' if state == 'holds' else '<='} -{margin:g}")
            out.append(Guardrail(f"{column}={value}", state,
                                 f"n {part.height}, delta {estimate.delta:+.4f}, one-sided "
                                 f"{1 - alpha:.0%} {bound}"))
    return tuple(out)


def judged_guardrail(metric: str, candidate: float, reference: float,
                     ratio: float) -> Guardrail:
    """The candidate's judged share against `ratio` times the reference's."""
    holds = bool(candidate >= ratio * reference) if math.isfinite(candidate) else False
    return Guardrail(f"{metric} share", "holds" if holds else "fails",
                     f"{candidate:.1%} against {ratio:g} x the reference's {reference:.1%}")
