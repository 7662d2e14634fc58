"""The verdict rule: a family of candidates, each against its reference, to one row each.

The family is exactly the rows that can be tested (`Estimate.testable`); its size m sets
the Bonferroni level alpha / m of every row's test and interval. Bonferroni rather than
Holm: its adjusted p, min(1, m p), and the t-interval at level 1 - alpha / m pair exactly
(the interval excludes 0 exactly when the adjusted p is below alpha), where Holm's
step-down would need intervals wider for the rejected rows. With about ten rows the power
lost to Holm is small.

The rule, in order (as experimentation platforms state theirs: Spotify ships when a
success metric improves significantly and no guardrail is inferior beyond its margin;
Statsig rolls out, discusses, or does not roll out):

1. **don't ship**: a significant harm (adjusted p < alpha, delta < 0);
2. **don't ship**: a guardrail that fails, named: a group shown inferior beyond the
   non-inferiority margin (its one-sided 1 - alpha upper bound is below -margin; not
   alpha-adjusted), or, with verdict labels, a judged share below the configured fraction
   of the reference's;
3. **ship**: a significant improvement (adjusted p < alpha, delta > 0) and every guardrail
   holds (each group shown non-inferior: its one-sided 1 - alpha lower bound is above
   -margin);
4. **no effect**: equivalent within +-equivalence_margin by two one-sided tests at the
   family's level (adjusted TOST p < alpha: the 1 - 2 alpha / m interval lies inside the
   margin), and every guardrail holds;
5. **inconclusive**: none of these: no significant difference and no equivalence (the
   minimum detectable effect, two-sided at alpha / m and the configured power at this
   row's n, says how large an effect this data could see; `queries_needed`, how many
   queries would detect a true effect of the observed size: a planning figure), or a
   guardrail unresolved
   (a group neither shown non-inferior nor shown inferior: too few queries to rule out a
   loss of the margin; it is named).

A guardrail has three states, not two: "holds" (non-inferiority shown), "fails" (inferiority
beyond the margin shown) and "unresolved" (neither). Reading every unresolved group as a
failure would turn an underpowered subgroup into "don't ship" whatever it shows (on LoCoMo,
the 40 multi-hop questions would veto recording feedback, the largest gain measured, on a
group delta of +0.008); reading it as holding would ship on hope. It blocks both ship and
no effect, and the row says which group and why.

A row that cannot be tested is outside the family: "no effect" when every per-query
difference is exactly 0 (the arms rank alike on every query), "not tested" otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl

from .inference import Estimate, interval, mde, queries_needed, tost_p, two_sided_p
from .settings import DecisionSettings

__all__ = ["COLUMNS", "GUARDRAIL_STATES", "SCHEMA", "VERDICTS", "Candidate", "Guardrail", "decide"]

VERDICTS = ("ship", "don't ship", "no effect", "inconclusive", "not tested")


GUARDRAIL_STATES = ("holds", "unresolved", "fails")


@dataclass(frozen=True)
class Guardrail:
    """One guardrail of a candidate: its name (`intent=FACTUAL`, `judged@10 share`), its
    state (`GUARDRAIL_STATES`: holds, unresolved, fails) and the figures behind it."""

    name: str
    state: str
    detail: str

    def __post_init__(self) -> None:
        if self.state not in GUARDRAIL_STATES:
            raise ValueError(f"guardrail {self.name!r}: state must be one of "
                             f"{', '.join(GUARDRAIL_STATES)}, got {self.state!r}")


@dataclass(frozen=True)
class Candidate:
    """One row of a family: `name` against `reference` on the decision's metric.

    estimate: the paired difference (candidate - reference); guardrails: checked by the
    rule (empty: none apply); group_by / group: "overall" or the group the row is about;
    mean_candidate / mean_reference: the two means in the estimate's unit (shown beside the
    delta)."""

    name: str
    reference: str
    estimate: Estimate
    guardrails: tuple[Guardrail, ...] = ()
    group_by: str = "overall"
    group: str = "overall"
    mean_candidate: float = math.nan
    mean_reference: float = math.nan
    notes: tuple[str, ...] = field(default=())


SCHEMA = {
    "family": pl.String, "candidate": pl.String, "reference": pl.String,
    "group_by": pl.String, "group": pl.String, "metric": pl.String, "unit": pl.String,
    "n": pl.Int64, "n_queries": pl.Int64, "mean_reference": pl.Float64,
    "mean_candidate": pl.Float64, "delta": pl.Float64, "ci_low": pl.Float64,
    "ci_high": pl.Float64, "ci_level": pl.Float64, "p": pl.Float64, "p_adj": pl.Float64,
    "family_size": pl.Int64, "tested": pl.Boolean, "alpha": pl.Float64,
    "equivalence_margin": pl.Float64, "p_tost_adj": pl.Float64,
    "noninferiority_margin": pl.Float64, "mde": pl.Float64, "queries_needed": pl.Float64,
    "power": pl.Float64,
    "verdict": pl.String, "reason": pl.String, "failed_guardrail": pl.String,
    "unresolved_guardrail": pl.String,
    "guardrails": pl.String, "correction": pl.String, "test": pl.String,
    "interval": pl.String,
}
COLUMNS = tuple(SCHEMA)

TESTS = {"query": "paired t-test on per-query differences (scipy.stats.ttest_rel), "
                  "two-sided",
         "search": "cluster-robust t-test of the traffic-weighted mean difference (CR1, "
                   "queries as clusters, df = queries - 1), two-sided"}


def _adjusted(p: float, m: int) -> float:
    return min(1.0, m * p) if math.isfinite(p) else math.nan


def _verdict(c: Candidate, p_adj: float, tost_adj: float, min_effect: float,
             settings: DecisionSettings) -> tuple[str, str, str]:
    """(verdict, reason, failed guardrails) of one row, by the module's rule (the
    unresolved guardrails are the candidate's, `_unresolved`)."""
    e, alpha = c.estimate, settings.alpha
    failed = [g for g in c.guardrails if g.state == "fails"]
    open_ = [g for g in c.guardrails if g.state == "unresolved"]
    named = "; ".join(g.name for g in failed)

    def listed(prefix: str, guards: list[Guardrail]) -> str:
        return prefix + "; ".join(f"{g.name} ({g.detail})" for g in guards)

    if not e.testable:
        if e.identical and e.n_queries >= 1:
            return "no effect", f"{e.why_untestable} (not tested, not in the family)", named
        if failed:
            return ("don't ship", listed("guardrail failed: ", failed)
                    + f"; {e.why_untestable} (not tested)", named)
        return "not tested", e.why_untestable, named
    if p_adj < alpha and e.delta < 0:
        return "don't ship", f"significant harm (adjusted p {p_adj:.3g} < {alpha:g})", named
    if failed:
        return "don't ship", listed("guardrail failed: ", failed), named
    margin = settings.equivalence_margin
    if open_:
        what = ("a significant improvement (adjusted p " f"{p_adj:.3g})" if p_adj < alpha
                else f"equivalence within +-{margin:g}" if tost_adj < alpha
                else "no significant difference")
        return ("inconclusive", listed(f"{what}, but guardrail unresolved: ", open_)
                + "; more queries in that group would settle it", "")
    if p_adj < alpha:
        held = f", {len(c.guardrails)} guardrail(s) hold" if c.guardrails else ""
        return "ship", f"significant improvement (adjusted p {p_adj:.3g} < {alpha:g}){held}", ""
    if tost_adj < alpha:
        return ("no effect", f"equivalent within +-{margin:g} (two one-sided tests, adjusted "
                f"p {tost_adj:.3g} < {alpha:g})", "")
    return ("inconclusive", f"neither a significant difference nor equivalence within "
            f"+-{margin:g}; detectable at this n: |delta| >= {min_effect:.4f} (power "
            f"{settings.power:g})", "")


def decide(candidates: Sequence[Candidate], settings: DecisionSettings, *, metric: str,
           family: str = "confirmatory") -> pl.DataFrame:
    """One row per candidate (columns `COLUMNS`): its delta with the Bonferroni-paired CI,
    raw and adjusted p, the family size, the equivalence test, the minimum detectable
    effect and the queries that would detect the observed |delta| (both at alpha / m and
    the configured power), and the verdict with its reason and any failed guardrail.

    >>> from msprlab.experiments.decision import Estimate, DecisionSettings
    >>> rows = decide([Candidate("tuned", "off", Estimate(0.09, 0.015, 297, 298, 298))],
    ...               DecisionSettings(), metric="ndcg@10")
    >>> rows.select("candidate", "family_size", "verdict").row(0)
    ('tuned', 1, 'ship')
    """
    m = sum(c.estimate.testable for c in candidates)
    alpha = settings.alpha
    level = 1 - alpha / m if m else 1 - alpha
    correction = (f"Bonferroni over the {m} tested row(s) of the {family} family; "
                  f"interval: t at {level:.2%} (1 - alpha/{m}), paired with the adjusted p"
                  if m else f"nothing testable in the {family} family")
    rows = []
    for c in candidates:
        e = c.estimate
        p = two_sided_p(e)
        p_adj = _adjusted(p, m)
        low, high = interval(e, level)
        tost_adj = _adjusted(tost_p(e, settings.equivalence_margin), m)
        min_effect = mde(e, alpha / m if m else alpha, settings.power)
        verdict, reason, failed = _verdict(c, p_adj, tost_adj, min_effect, settings)
        rows.append((family, c.name, c.reference, c.group_by, c.group, metric, e.unit, e.n,
                     e.n_queries, c.mean_reference, c.mean_candidate, e.delta, low, high,
                     level, p, p_adj, m, e.testable, alpha, settings.equivalence_margin,
                     tost_adj, settings.noninferiority_margin, min_effect,
                     queries_needed(e, e.delta, alpha / m if m else alpha, settings.power),
                     settings.power,
                     verdict, reason, failed or None,
                     "; ".join(g.name for g in c.guardrails if g.state == "unresolved")
                     or None,
                     "; ".join(f"{g.name}: {g.state} ({g.detail})"
                               for g in c.guardrails) or None,
                     correction, TESTS.get(e.unit, e.unit),
                     f"t-interval at {level:.2%}, from the test's standard error and df"))
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")
