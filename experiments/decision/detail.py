"""The detail tables beside the verdicts: a comparison row that asks a verdict row's
question shows that row's figures, marked, and leaves its exploratory family.

The ladder, the test window's comparison and the side effects hold rows that compare the
same two arms, on the same metric and unit, as a row of the confirmatory family (tuned
against off, on-zero against off, each weight's arm against on-zero, on-zero against
on-zero without a block). Shown with an exploratory family's correction they would carry a
second interval and adjusted p for one comparison. `with_confirmatory` gives such a row
the verdict row's delta, interval, level, p and adjusted p and family size (negated and
swapped where the row reads the other way round, off against on-zero), sets
`confirmatory` (the row's figures are a verdict table's) and its `mark` (C), and forms the
exploratory families again without it (`measures.compare.families`). The exploratory
per-intent verdicts (tuned and on-zero against off, by intent) ask the same question as
the test window's and the ladder's intent rows: those rows show the per-intent verdict's
figures, marked V, for the same reason.

Imported by the reporter, not by `decision/__init__` (it reads `measures.compare`, which
imports `decision.inference`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from ..measures.compare import families
from .family import BLOCK_PREFIX

__all__ = ["DELTA_TOLERANCE", "MARKS", "compared_arms", "mark", "with_confirmatory"]

# A detail row and its verdict row estimate one paired mean from the same values; further
# apart than this they are not the same comparison, and that is a bug.
DELTA_TOLERANCE = 1e-9
# The mark beside a detail row's p that shows a verdict row's figures: C for the
# confirmatory family's, V for the exploratory per-intent verdicts'.
MARKS = {"confirmatory": "C", "exploratory": "V"}


def mark(row: Mapping[str, object]) -> str:
    """The mark of a comparison row ("" for a row of its own exploratory family)."""
    if not row.get("confirmatory"):
        return ""
    return str(row.get("mark") or MARKS["confirmatory"])


def compared_arms(candidate: str, reference: str) -> tuple[str, str]:
    """The two arms a verdict row compares, (candidate's, reference's): a recording block's
    row compares on-zero with on-zero without the block (`no-BLOCK`, its reference)."""
    return ("on-zero" if candidate.startswith(BLOCK_PREFIX) else candidate), reference


_Key = tuple[str, str, str, str, str, str]


def _verdicts(frames: Sequence[pl.DataFrame | None]) -> dict[_Key, tuple[dict, int]]:
    """(arm, reference arm, metric, unit, group_by, group) -> (verdict row, sign), both ways
    round, over the verdict tables given (the confirmatory's overall rows, the per-intent
    verdicts' group rows)."""
    out: dict[_Key, tuple[dict, int]] = {}
    for frame in frames:
        if frame is None or not frame.height:
            continue
        for v in frame.iter_rows(named=True):
            a, b = compared_arms(v["candidate"], v["reference"])
            where = (v["metric"], v["unit"], v["group_by"], v["group"])
            out[(a, b, *where)] = (v, 1)
            out[(b, a, *where)] = (v, -1)
    return out


def _figures(r: dict, v: dict, sign: int) -> dict:
    """A verdict row's figures for the detail row `r` that reads it with `sign`."""
    low, high = (v["ci_low"], v["ci_high"]) if sign > 0 else (-v["ci_high"], -v["ci_low"])
    way = "" if sign > 0 else ", read the other way round"
    confirmatory = v["family"] == "confirmatory"
    table = ("the decision table's row" if confirmatory
             else f"the per-intent verdicts' ({v['family']}) row")
    group = "" if v["group_by"] == "overall" else f", {v['group_by']}={v['group']}"
    return {"delta": sign * v["delta"], "ci_low": low, "ci_high": high,
            "ci_level": v["ci_level"], "p_t": v["p"], "p_t_adj": v["p_adj"],
            "family_size": v["family_size"], "tested": v["tested"], "confirmatory": True,
            "mark": MARKS["confirmatory" if confirmatory else "exploratory"],
            "correction": f"{'confirmatory' if confirmatory else 'exploratory verdict'}: "
                          f"{table} {v['candidate']} against {v['reference']}{group}{way} "
                          f"(Bonferroni over its {v['family_size']} tested row(s); CI: "
                          f"t-interval at {v['ci_level']:.2%}, paired with the adjusted p)"}


def with_confirmatory(comparison: pl.DataFrame, verdicts: pl.DataFrame | None, *,
                      alpha: float, correction: str, min_support: int,
                      by_intent: pl.DataFrame | None = None,
                      flipped: bool = False) -> pl.DataFrame:
    """`comparison` (`compare_units` rows: arm, reference, metric, unit, group_by, group,
    ...) with each row that a verdict row answers given the verdict's figures and marked
    (`mark`: C for the confirmatory `verdicts`, V for the exploratory `by_intent` ones), and
    the other rows' families formed without it.

    flipped: the rows read reference minus arm (the side effects: on-zero minus on-zero
    without the block), so the row compares (reference, arm)."""
    if not comparison.height or not any(f is not None and f.height
                                        for f in (verdicts, by_intent)):
        return comparison
    table = _verdicts([verdicts.filter(pl.col("group_by") == "overall")
                       if verdicts is not None and verdicts.height else None, by_intent])
    rows = comparison.to_dicts()
    for r in rows:
        pair = (r["reference"], r["arm"]) if flipped else (r["arm"], r["reference"])
        hit = table.get((*pair, r["metric"], r["unit"], r["group_by"], r["group"]))
        if hit is None:
            continue
        v, sign = hit
        if abs(r["delta"] - sign * v["delta"]) > DELTA_TOLERANCE:
            raise ValueError(f"{pair[0]} against {pair[1]} ({r['metric']}, per {r['unit']}, "
                             f"{r['group_by']}={r['group']}): the detail row's delta "
                             f"{r['delta']!r} is not the verdict row's {sign * v['delta']!r}")
        r |= _figures(r, v, sign)
    schema = {**comparison.schema, "mark": pl.String}
    marked = pl.DataFrame([{**r, "mark": r.get("mark") or ""} for r in rows], schema=schema,
                          orient="row")
    return families(marked, alpha=alpha, correction=correction, min_support=min_support)
