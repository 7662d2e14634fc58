"""The decision: a verdict per candidate from a small confirmatory family and guardrails.

The API, for any caller with per-query values of a candidate and its reference (or an
estimate of its own with a standard error):

    paired_estimate(candidate, reference, searches=None, unit="query") -> Estimate
    Estimate(delta, se, df, n, n_queries) / Estimate.of_contributions(values)
    Candidate(name, reference, estimate, guardrails=(Guardrail(name, state, detail), ...))
    decide(candidates, DecisionSettings(...), metric=...) -> one row per candidate:
        delta, ci_low, ci_high (Bonferroni-paired), p, p_adj, family_size, margins, mde,
        verdict, reason, failed_guardrail (`rule.COLUMNS`)

and for an experiment's per-search frames (arm -> frame on one window):

    confirmatory(frames, settings, metric=..., min_support=...) -> the verdict table
    by_group(frames, settings, metric=..., group_by="intent", min_support=...)
        -> the exploratory per-group verdicts

`inference` holds the tests (t, TOST, non-inferiority, MDE), `rule` the verdict rule,
`guardrails` the guardrails, `family` the confirmatory family, `settings` the
`[decision]` table, `render` the tables and captions every output shares.
"""

from . import inference
from .family import Comparison, Judged, by_group, confirmatory, family_pairs
from .guardrails import group_guardrails, judged_guardrail, noninferior
from .inference import (
    Estimate,
    interval,
    lower_bound,
    mde,
    noninferiority_p,
    paired_estimate,
    queries_needed,
    tost_p,
    two_sided_p,
)
from .pairs import estimate_of, paired_queries
from .rule import COLUMNS, VERDICTS, Candidate, Guardrail, decide
from .settings import DecisionSettings

__all__ = [
    "COLUMNS",
    "VERDICTS",
    "Candidate",
    "Comparison",
    "DecisionSettings",
    "Estimate",
    "Guardrail",
    "Judged",
    "by_group",
    "confirmatory",
    "decide",
    "estimate_of",
    "family_pairs",
    "group_guardrails",
    "inference",
    "interval",
    "judged_guardrail",
    "lower_bound",
    "mde",
    "noninferior",
    "noninferiority_p",
    "paired_estimate",
    "paired_queries",
    "queries_needed",
    "tost_p",
    "two_sided_p",
]
