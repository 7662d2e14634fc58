"""The verdict table as text: one set of cells and one caption for every place it is
shown (the console, the markdown summary, the HTML report), so all of them say the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import polars as pl
from rich import box
from rich.table import Table

__all__ = ["HEADER", "caption", "cells", "console_table", "exploratory_caption"]

HEADER = ("candidate", "reference", "n", "reference mean", "candidate mean", "Δ [CI]",
          "p (adj)", "MDE", "verdict", "why")


def _num(value: float | None, digits: int = 4, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _p(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "n.t."
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _why(row: Mapping[str, object]) -> str:
    """The failed guardrail where one decided, else the reason's first clause."""
    reason = str(row["reason"])
    if row["verdict"] == "inconclusive":
        if row.get("unresolved_guardrail"):
            return f"guardrail unresolved: {row['unresolved_guardrail']}"
        return f"detectable: |Δ| >= {_num(row['mde'])}"  # type: ignore[arg-type]
    if row["failed_guardrail"] and reason.startswith("guardrail failed"):
        return f"guardrail failed: {row['failed_guardrail']}"
    return reason.split(" (")[0]


def cells(frame: pl.DataFrame) -> list[list[str]]:
    """One list of cells per row of a verdict table (`rule.COLUMNS`), in `HEADER` order;
    a group row's candidate reads `candidate, group`."""
    out = []
    for r in frame.iter_rows(named=True):
        name = r["candidate"] if r["group_by"] == "overall" else f"{r['candidate']}, {r['group']}"
        delta = _num(r["delta"], signed=True)
        ci = (f" [{_num(r['ci_low'], signed=True)}, {_num(r['ci_high'], signed=True)}]"
              if r["ci_low"] is not None and not math.isnan(r["ci_low"]) else "")
        out.append([name, r["reference"], f"{r['n']:,}", _num(r["mean_reference"]),
                    _num(r["mean_candidate"]), delta + ci, _p(r["p_adj"]), _num(r["mde"]),
                    r["verdict"], _why(r)])
    return out


def _labelled(frame: pl.DataFrame) -> tuple[str, str, int]:
    first = frame.row(0, named=True)
    return str(first["metric"]), str(first["unit"]), int(first["family_size"])


def caption(frame: pl.DataFrame, *, min_support: int, labels: str) -> str:
    """What the confirmatory table is: its family and size, the test, the interval, the rule
    and its margins, the labels."""
    if not frame.height:
        return "no confirmatory comparison: the arms of this command hold no candidate and " \
               "its reference"
    metric, unit, m = _labelled(frame)
    r = frame.row(0, named=True)
    alpha, power = r["alpha"], r["power"]
    return (
        f"confirmatory family: {metric}, overall, per {unit}, each candidate against the "
        f"reference that isolates it; {m} tested row(s) (a row whose arms rank alike on every "
        f"query is not tested and not counted). Test: {r['test']}. p (adj): Bonferroni, "
        f"min(1, {m} p); Δ [CI]: t-interval at {r['ci_level']:.2%} (1 - {alpha:g}/{m}) from "
        "the same standard error, so it excludes 0 exactly when p (adj) < "
        f"{alpha:g}. Verdict: ship = significant improvement and every guardrail holds; "
        f"don't ship = significant harm or a failed guardrail; no effect = equivalent within "
        f"±{r['equivalence_margin']:g} (two one-sided tests at {alpha:g}/{m}) and every "
        f"guardrail holds; inconclusive = neither, or a guardrail unresolved; MDE = the |Δ| "
        f"a two-sided test at {alpha:g}/{m} detects with power {power:g} at this n. "
        f"Guardrails: each intent and question-type group with >= {min_support} queries, "
        f"one-sided at {alpha:g}, not adjusted: holds when its lower bound is above "
        f"-{r['noninferiority_margin']:g}, fails when its upper bound is below it, unresolved "
        f"otherwise. Labels: {labels}.")


def exploratory_caption(frame: pl.DataFrame, *, labels: str) -> str:
    """The per-group verdict table's caption: exploratory, corrected within itself."""
    if not frame.height:
        return "no group with enough queries"
    metric, unit, m = _labelled(frame)
    r = frame.row(0, named=True)
    return (f"EXPLORATORY ({r['family']}): the same rule per group, no guardrails, "
            f"Bonferroni over its own {m} tested row(s) (t-interval at {r['ci_level']:.2%}); "
            f"not part of the confirmatory family, read as a lead, not a decision. {metric}, "
            f"per {unit}; labels: {labels}.")


_COLOURS = {"ship": "green", "don't ship": "red", "no effect": "cyan",
            "inconclusive": "yellow", "not tested": "dim"}


def console_table(frame: pl.DataFrame, *, title: str, caption_text: str) -> Table:
    """The verdict table for the console (rich), verdicts coloured."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD,
                  caption=caption_text, caption_justify="left")
    for column in HEADER:
        table.add_column(column, justify="left" if column in (
            "candidate", "reference", "verdict", "why") else "right", no_wrap=column != "why")
    for row in cells(frame):
        colour = _COLOURS.get(row[8], "")
        row[8] = f"[{colour}]{row[8]}[/{colour}]" if colour else row[8]
        table.add_row(*row)
    return table
