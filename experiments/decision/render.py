"""The verdict table as text: one set of cells and one caption for every place it is
shown (the console, the markdown summary, the HTML report), so all of them say the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import polars as pl
from rich import box
from rich.table import Table

__all__ = ["HEADER", "caption", "cells", "console_table", "exploratory_caption",
           "guardrail_names", "why"]

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


def guardrail_names(names: object) -> str:
    """Guardrail names ("question_type=multi-hop; question_type=single-hop") with each
    column said once ("question_type=multi-hop, single-hop")."""
    by: dict[str, list[str]] = {}
    for name in str(names).split("; "):
        column, _, value = name.partition("=")
        by.setdefault(column, []).append(value)
    return "; ".join(f"{c}={', '.join(v)}" if all(v) else c for c, v in by.items())


def why(row: Mapping[str, object]) -> str:
    """The failed or unresolved guardrail where one decided, else the reason's first
    clause, short (the MDE column says what an inconclusive row could detect)."""
    reason = str(row["reason"])
    if row["verdict"] == "inconclusive":
        if row.get("unresolved_guardrail"):
            return f"guardrail unresolved: {guardrail_names(row['unresolved_guardrail'])}"
        return "neither significant nor equivalent"
    if row["failed_guardrail"] and reason.startswith("guardrail failed"):
        return f"guardrail failed: {guardrail_names(row['failed_guardrail'])}"
    if reason.startswith("identical"):
        return "identical on every query"
    return reason.split(" (")[0].replace("+-", "±")


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
                    r["verdict"], why(r)])
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
    """The per-group verdict table's caption: exploratory, corrected within itself (the
    detail tables' rows that ask one of its questions show its figures, marked V)."""
    if not frame.height:
        return "no group with enough queries"
    metric, unit, m = _labelled(frame)
    r = frame.row(0, named=True)
    return (f"The same rule per group, no guardrails, Bonferroni over these {m} tested "
            f"row(s) (t-interval at {r['ci_level']:.2%}): a lead, not a decision. {metric}, "
            f"per {unit}; labels: {labels}. The detail tables' intent rows that compare the "
            "same arms show these figures, marked V.")


_COLOURS = {"ship": "green", "don't ship": "red", "no effect": "cyan",
            "inconclusive": "yellow", "not tested": "dim"}


# A verdict's reason when the rule's caption already says it (the console leaves it out).
_IMPLIED = {"ship": "significant improvement", "don't ship": "significant harm",
            "inconclusive": "neither significant nor equivalent"}
_NOTE_MARKS = "¹²³⁴⁵⁶⁷⁸⁹"


def _implied(row: Mapping[str, object], why: str) -> bool:
    return why == _IMPLIED.get(str(row["verdict"])) or (
        row["verdict"] == "no effect" and why.startswith("equivalent within"))


def console_table(frame: pl.DataFrame, *, title: str, caption_text: str) -> Table:
    """The verdict table for the console (rich), verdicts coloured, narrow enough for a
    terminal of 100 columns: the figures of `cells` without the two means (the ladder shows
    them), n in the title when every row has the same, a group row's group in a column of
    its own, and a verdict's reason only where the rule does not imply it (a guardrail,
    identical rankings), as a numbered note above the caption."""
    rows = list(frame.iter_rows(named=True))
    texts = cells(frame)
    same_n = len({t[2] for t in texts}) == 1
    grouped = any(r["group_by"] != "overall" for r in rows)
    if rows and same_n:
        title = f"{title}; n = {texts[0][2]} {_unit_plural(frame)} in every row"
    notes: dict[str, str] = {}
    for r, t in zip(rows, texts, strict=True):
        if not _implied(r, t[9]):
            notes.setdefault(t[9], _NOTE_MARKS[len(notes) % len(_NOTE_MARKS)])
    caption_lines = [f"{mark} {why}" for why, mark in notes.items()]
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD,
                  caption="\n".join([*caption_lines, caption_text]), caption_justify="left")
    header = ["candidate", *(["group"] if grouped else []), "against",
              *([] if same_n else ["n"]), "Δ [CI]", "p (adj)", "MDE", "verdict"]
    for column in header:
        table.add_column(column, no_wrap=True, justify="left" if column in (
            "candidate", "group", "against", "verdict") else "right")
    for r, t in zip(rows, texts, strict=True):
        colour = _COLOURS.get(t[8], "")
        verdict = f"[{colour}]{t[8]}[/{colour}]" if colour else t[8]
        table.add_row(str(r["candidate"]), *([str(r["group"])] if grouped else []), t[1],
                      *([] if same_n else [t[2]]), t[5], t[6], t[7],
                      verdict + notes.get(t[9], ""))
    return table


def _unit_plural(frame: pl.DataFrame) -> str:
    return "queries" if frame.height and frame["unit"][0] == "query" else "searches"
