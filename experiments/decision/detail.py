"""The detail tables beside the verdicts: a comparison row that asks a confirmatory
question shows the decision table's figures, marked, and leaves its exploratory family.

The ladder, the test window's comparison and the side effects hold rows that compare the
same two arms, on the same metric and unit, as a row of the confirmatory family (tuned
against off, on-zero against off, each weight's arm against on-zero, on-zero against
on-zero without a block). Shown with an exploratory family's correction they would carry a
second interval and adjusted p for one comparison. `with_confirmatory` gives such a row
the verdict row's delta, interval, level, p and adjusted p and family size (negated and
swapped where the row reads the other way round, off against on-zero), sets
`confirmatory`, and forms the exploratory families again without it
(`measures.compare.families`).

Imported by the reporter, not by `decision/__init__` (it reads `measures.compare`, which
imports `decision.inference`).
"""

from __future__ import annotations

import polars as pl

from ..measures.compare import families
from .family import BLOCK_PREFIX

__all__ = ["DELTA_TOLERANCE", "compared_arms", "with_confirmatory"]

# A detail row and its verdict row estimate one paired mean from the same values; further
# apart than this they are not the same comparison, and that is a bug.
DELTA_TOLERANCE = 1e-9


def compared_arms(candidate: str, reference: str) -> tuple[str, str]:
    """The two arms a verdict row compares, (candidate's, reference's): a recording block's
    row compares on-zero with on-zero without the block (`no-BLOCK`, its reference)."""
    return ("on-zero" if candidate.startswith(BLOCK_PREFIX) else candidate), reference


def _verdicts(verdicts: pl.DataFrame) -> dict[tuple[str, str, str, str], tuple[dict, int]]:
    """(arm, reference arm, metric, unit) -> (verdict row, sign), both ways round."""
    out: dict[tuple[str, str, str, str], tuple[dict, int]] = {}
    for v in verdicts.filter(pl.col("group_by") == "overall").iter_rows(named=True):
        a, b = compared_arms(v["candidate"], v["reference"])
        out[(a, b, v["metric"], v["unit"])] = (v, 1)
        out[(b, a, v["metric"], v["unit"])] = (v, -1)
    return out


def with_confirmatory(comparison: pl.DataFrame, verdicts: pl.DataFrame | None, *,
                      alpha: float, correction: str, min_support: int,
                      flipped: bool = False) -> pl.DataFrame:
    """`comparison` (`compare_units` rows: arm, reference, metric, unit, group_by, ...) with
    each overall row that a verdict row answers replaced by the verdict's figures and
    marked `confirmatory`, and the other rows' families formed without it.

    flipped: the rows read reference minus arm (the side effects: on-zero minus on-zero
    without the block), so the row compares (reference, arm)."""
    if verdicts is None or not verdicts.height or not comparison.height:
        return comparison
    table = _verdicts(verdicts)
    rows = comparison.to_dicts()
    for r in rows:
        if r["group_by"] != "overall":
            continue
        pair = (r["reference"], r["arm"]) if flipped else (r["arm"], r["reference"])
        hit = table.get((*pair, r["metric"], r["unit"]))
        if hit is None:
            continue
        v, sign = hit
        if abs(r["delta"] - sign * v["delta"]) > DELTA_TOLERANCE:
            raise ValueError(f"{pair[0]} against {pair[1]} ({r['metric']}, per {r['unit']}): "
                             f"the detail row's delta {r['delta']!r} is not the verdict row's "
                             f"{sign * v['delta']!r}")
        low, high = (v["ci_low"], v["ci_high"]) if sign > 0 else (-v["ci_high"], -v["ci_low"])
        way = "" if sign > 0 else ", read the other way round"
        r |= {"delta": sign * v["delta"], "ci_low": low, "ci_high": high,
              "ci_level": v["ci_level"], "p_t": v["p"], "p_t_adj": v["p_adj"],
              "family_size": v["family_size"], "tested": v["tested"], "confirmatory": True,
              "correction": f"confirmatory: the decision table's row {v['candidate']} against "
                            f"{v['reference']}{way} (Bonferroni over its {v['family_size']} "
                            f"tested row(s); CI: t-interval at {v['ci_level']:.2%}, paired "
                            "with the adjusted p)"}
    marked = pl.DataFrame(rows, schema=comparison.schema, orient="row")
    return families(marked, alpha=alpha, correction=correction, min_support=min_support)
