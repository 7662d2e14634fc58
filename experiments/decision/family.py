"""The confirmatory family of an experiment, built from its per-search frames.

Each candidate is compared with the reference that isolates it (EVALUATION.md,
"Aggregation and significance"):

- `tuned` against the decision's reference (`off`: the recommended weights against no
  MSPR);
- `on-zero` against `off`: MSPR with its recording blocks, new weights at 0;
- each weight's arm (`personal`, `frequency`, `success`, `intent`, `roles`, `all`)
  against `on-zero`: the weight's own effect (against `off` it would inherit the recording
  blocks' effect);
- each recording block (`record-feedback`, `record-success`, `record-frequency`):
  `on-zero` against `on-zero` with that block off.

Everything else an experiment prints is exploratory. `by_group` gives the same candidates
per group of one column (the per-intent verdicts), a family of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from .guardrails import group_guardrails, judged_guardrail
from .pairs import estimate_of, mean_of, means, paired_queries
from .rule import Candidate, decide
from .settings import DecisionSettings

__all__ = ["BLOCK_PREFIX", "WEIGHT_ARMS", "Comparison", "Judged", "by_group", "candidate_of",
           "confirmatory", "family_pairs"]

WEIGHT_ARMS = ("personal", "frequency", "success", "intent", "roles", "all")
BLOCKS = ("feedback", "success", "frequency")
BLOCK_PREFIX = "record-"


@dataclass(frozen=True)
class Comparison:
    """One candidate of the family: its name and reference's, and the arms (per-search
    frame names) whose values are compared."""

    name: str
    reference: str
    candidate_arm: str
    reference_arm: str


@dataclass(frozen=True)
class Judged:
    """Verdict labels: the judged@K metric and the fraction of the reference's judged share
    a candidate must keep."""

    metric: str
    ratio: float


# Replaces a family's candidates (one per comparison, in order) before the rule decides.
Adjust = Callable[[list["Comparison"], list[Candidate]], list[Candidate]]


def family_pairs(arms: Sequence[str], *, reference: str = "off") -> list[Comparison]:
    """The confirmatory comparisons the arms present allow, in the order printed: tuned,
    on-zero, the weight arms, the recording blocks (side-effect arms `no-BLOCK`)."""
    present = set(arms)
    out = []
    if "tuned" in present and reference in present:
        out.append(Comparison("tuned", reference, "tuned", reference))
    if {"on-zero", "off"} <= present:
        out.append(Comparison("on-zero", "off", "on-zero", "off"))
    if "on-zero" in present:
        out += [Comparison(arm, "on-zero", arm, "on-zero") for arm in WEIGHT_ARMS
                if arm in present]
        out += [Comparison(f"{BLOCK_PREFIX}{b}", f"no-{b}", "on-zero", f"no-{b}")
                for b in BLOCKS if f"no-{b}" in present]
    return out


def candidate_of(comparison: Comparison, frames: Mapping[str, pl.DataFrame],
                 settings: DecisionSettings, *, metric: str, min_support: int,
                 judged: Judged | None = None) -> Candidate:
    """One confirmatory row: the paired estimate of the comparison's arms and its
    guardrails (each group of `settings.guardrails` with >= min_support queries; the judged
    share with verdict labels)."""
    extra = [judged.metric] if judged is not None else []
    paired = paired_queries(frames[comparison.candidate_arm],
                            frames[comparison.reference_arm], metric, settings.guardrails,
                            extra)
    guards = group_guardrails(paired, settings.guardrails, unit=settings.unit,
                              min_support=min_support, margin=settings.noninferiority_margin,
                              alpha=settings.alpha)
    if judged is not None:
        guards = (*guards, judged_guardrail(
            judged.metric, mean_of(paired, f"candidate:{judged.metric}"),
            mean_of(paired, f"reference:{judged.metric}"), judged.ratio))
    mean_candidate, mean_reference = means(paired, settings.unit)
    return Candidate(comparison.name, comparison.reference, estimate_of(paired, settings.unit),
                     guards, mean_candidate=mean_candidate, mean_reference=mean_reference)


def confirmatory(frames: Mapping[str, pl.DataFrame], settings: DecisionSettings, *,
                 metric: str, min_support: int, judged: Judged | None = None,
                 adjust: Adjust | None = None, label: str | None = None) -> pl.DataFrame:
    """The confirmatory verdict table of the arms in `frames` (arm -> per-search frame on
    one window): `rule.decide` over `family_pairs`. `adjust` may replace the candidates'
    estimates and add guardrails before the rule (verdict labels: the counterfactual
    estimate, `counterfactual.decision`); `label` names the metric the rows then read."""
    pairs = family_pairs(list(frames), reference=settings.reference)
    candidates = [candidate_of(c, frames, settings, metric=metric, min_support=min_support,
                               judged=judged) for c in pairs]
    if adjust is not None:
        candidates = adjust(pairs, candidates)
    return decide(candidates, settings, metric=label or metric)


def by_group(frames: Mapping[str, pl.DataFrame], settings: DecisionSettings, *,
             metric: str, group_by: str, min_support: int) -> pl.DataFrame:
    """The same candidates per group of `group_by` with at least `min_support` queries,
    one exploratory family over all of them (no guardrails: the group is the guardrail's
    level already)."""
    rows = []
    for comparison in family_pairs(list(frames), reference=settings.reference):
        paired = paired_queries(frames[comparison.candidate_arm],
                                frames[comparison.reference_arm], metric, [group_by])
        if group_by not in paired.columns:
            continue
        labels = paired.get_column(group_by).cast(pl.String)
        for value in labels.drop_nulls().unique().sort().to_list():
            part = paired.filter(labels == value)
            if part.height < max(2, min_support):
                continue
            mean_candidate, mean_reference = means(part, settings.unit)
            rows.append(Candidate(comparison.name, comparison.reference,
                                  estimate_of(part, settings.unit), group_by=group_by,
                                  group=value, mean_candidate=mean_candidate,
                                  mean_reference=mean_reference))
    return decide(rows, settings, metric=metric, family=f"exploratory: by {group_by}")
