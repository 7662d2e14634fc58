"""The `[decision]` table of an experiment definition: how a verdict is reached, fixed
before the data are seen.

Defaults (each documented in `experiments/configs/*.toml`):

- metric: the primary metric ("" = `metrics.primary`); unit: "query" (every question
  counts once; "search" weighs questions by traffic, with a cluster-robust test);
- reference: the arm the tuned configuration is judged against, "off" (MSPR disabled);
- alpha 0.05 (family-wise, Bonferroni over the confirmatory family), power 0.8 (for the
  minimum detectable effect);
- noninferiority_margin 0.01 and equivalence_margin 0.01, in metric units: a guardrail
  group fails when a loss of the margin cannot be ruled out; "no effect" needs the whole
  difference within +-equivalence_margin;
- guardrails: the group columns whose groups (with at least `metrics.min_support`
  queries) are each a non-inferiority guardrail ("intent", "question_type").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["GUARDRAIL_GROUPS", "REFERENCES", "UNITS", "DecisionSettings"]

UNITS = ("query", "search")
REFERENCES = ("off", "on-zero")
GUARDRAIL_GROUPS = ("intent", "question_type")


@dataclass(frozen=True)
class DecisionSettings:
    metric: str = ""
    unit: str = "query"
    reference: str = "off"
    alpha: float = 0.05
    power: float = 0.8
    noninferiority_margin: float = 0.01
    equivalence_margin: float = 0.01
    guardrails: tuple[str, ...] = GUARDRAIL_GROUPS

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError(problems[0])

    def problems(self) -> list[str]:
        """Every out-of-range value, as `decision.KEY: ...` messages (empty when valid)."""
        out = []
        if self.unit not in UNITS:
            out.append(f"decision.unit: {self.unit!r} is not one of {', '.join(UNITS)}")
        if self.reference not in REFERENCES:
            out.append(f"decision.reference: {self.reference!r} is not one of "
                       f"{', '.join(REFERENCES)}")
        if not (isinstance(self.alpha, float) and 0 < self.alpha < 0.5):
            out.append(f"decision.alpha: `0 < alpha < 0.5` must hold, but got {self.alpha!r}")
        elif not (isinstance(self.power, float) and self.alpha < self.power < 1):
            out.append(f"decision.power: `alpha < power < 1` must hold, but got "
                       f"{self.power!r} (alpha {self.alpha})")
        for key in ("noninferiority_margin", "equivalence_margin"):
            value = getattr(self, key)
            if not (isinstance(value, float) and math.isfinite(value) and 0 < value <= 1):
                out.append(f"decision.{key}: `0 < {key} <= 1` (metric units) must hold, but "
                           f"got {value!r}")
        for group in self.guardrails:
            if group not in GUARDRAIL_GROUPS:
                out.append(f"decision.guardrails: {group!r} is not one of "
                           f"{', '.join(GUARDRAIL_GROUPS)}")
        return out
