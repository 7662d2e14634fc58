"""The verdict table as text: one set of cells and one caption for every place it is
shown (the console, the markdown summary, the HTML report), so all of them say the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import polars as pl
from rich import box
from rich.table import Table

__all__ = ["ANSWERS", "BLOCK_NOTE", "HEADER", "SCORED_NOTE", "answer", "caption", "cells",
           "console_table", "exploratory_caption"]

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


def _groups(names: object) -> str:
    """Guardrail names ("question_type=multi-hop; question_type=single-hop") with each
    column said once ("question_type=multi-hop, single-hop")."""
    by: dict[str, list[str]] = {}
    for name in str(names).split("; "):
        column, _, value = name.partition("=")
        by.setdefault(column, []).append(value)
    return "; ".join(f"{c}={', '.join(v)}" if all(v) else c for c, v in by.items())


def _why(row: Mapping[str, object]) -> str:
    """The failed or unresolved guardrail where one decided, else the reason's first
    clause, short (the MDE column says what an inconclusive row could detect)."""
    reason = str(row["reason"])
    if row["verdict"] == "inconclusive":
        if row.get("unresolved_guardrail"):
            return f"guardrail unresolved: {_groups(row['unresolved_guardrail'])}"
        return "neither significant nor equivalent"
    if row["failed_guardrail"] and reason.startswith("guardrail failed"):
        return f"guardrail failed: {_groups(row['failed_guardrail'])}"
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
    """The per-group verdict table's caption: exploratory, corrected within itself; where
    its rows compare the same arms as a detail table's group rows (tuned and on-zero
    against off), why their intervals differ."""
    if not frame.height:
        return "no group with enough queries"
    metric, unit, m = _labelled(frame)
    r = frame.row(0, named=True)
    shared = [c for c in ("tuned", "on-zero") if c in frame["candidate"].to_list()]
    return (f"EXPLORATORY ({r['family']}): the same rule per group, no guardrails, "
            f"Bonferroni over its own {m} tested row(s) (t-interval at {r['ci_level']:.2%}); "
            f"not part of the confirmatory family, read as a lead, not a decision. {metric}, "
            f"per {unit}; labels: {labels}." + (
                f" The {' and '.join(shared)} rows compare the same arms as the detail "
                "tables' rows by intent (the test window's, the ladder's against off), whose "
                "families are smaller: their intervals are narrower there." if shared else ""))


_COLOURS = {"ship": "green", "don't ship": "red", "no effect": "cyan",
            "inconclusive": "yellow", "not tested": "dim"}


WHY_WIDTH = 30  # the console's "why" column wraps here: the table fits about 140 columns


def console_table(frame: pl.DataFrame, *, title: str, caption_text: str) -> Table:
    """The verdict table for the console (rich), verdicts coloured: the cells of `cells`,
    the two means in one column (reference → candidate), n in the title when every row has
    the same, and the "why" column wrapped at `WHY_WIDTH`, so that it fits a terminal of
    about 140 columns."""
    rows = cells(frame)
    same_n = len({row[2] for row in rows}) == 1
    if rows and same_n:
        title = f"{title}; n = {rows[0][2]} {_unit_plural(frame)} in every row"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD,
                  caption=caption_text, caption_justify="left")
    header = ["candidate", "reference", *([] if same_n else ["n"]), "ref. → cand.",
              "Δ [CI]", "p (adj)", "MDE", "verdict", "why"]
    for column in header:
        table.add_column(column, justify="left" if column in (
            "candidate", "reference", "verdict", "why") else "right", no_wrap=column != "why",
                         max_width=WHY_WIDTH if column == "why" else None)
    for row in rows:
        colour = _COLOURS.get(row[8], "")
        verdict = f"[{colour}]{row[8]}[/{colour}]" if colour else row[8]
        table.add_row(row[0], row[1], *([] if same_n else [row[2]]), f"{row[3]} → {row[4]}",
                      row[5], row[6], row[7], verdict, row[9])
    return table


def _unit_plural(frame: pl.DataFrame) -> str:
    return "queries" if frame.height and frame["unit"][0] == "query" else "searches"


# ---- the answer under the verdict table ------------------------------------------------

# The rule the answer reads the verdicts by (stated where it is printed).
ANSWERS = {"ship": "yes", "don't ship": "no", "no effect": "either way",
           "inconclusive": "not settled", "not tested": "not tested"}
# The recommended configuration's notes (`stages.decide`) the answer says itself: a block
# switched off by its verdict, and whether the snippet was scored.
BLOCK_NOTE = "mspr."
SCORED_NOTE = "the weights were searched with every block on"
_WEIGHT_ARMS = ("personal", "frequency", "success", "intent", "roles", "all")


def _grouped(rows: list[Mapping[str, object]], name: Callable[[Mapping[str, object]], str],
             detail: bool) -> str:
    """Rows grouped by their answer (yes, no, either way, not settled), each named, with its
    verdict's why where `detail`."""
    out = []
    for verdict, said in ANSWERS.items():
        mine = [r for r in rows if r["verdict"] == verdict]
        if mine:
            out.append(f"{said}: " + ", ".join(
                name(r) + (f" ({_why(r)})" if detail else "") for r in mine))
    return "; ".join(out)


def answer(frame: pl.DataFrame, *, notes: Sequence[str] = (),
           recommended: Sequence[Mapping[str, object]] = (), snippet: str = "") -> list[str]:
    """A plain-language answer read off the confirmatory verdicts (`frame`) by the rule
    `ANSWERS` (no statistics of its own): turn MSPR on (tuned, on-zero), which recording
    blocks to record (record-*), which weights matter (the weight arms), and the
    recommended configuration `snippet` with its `notes` and scored `recommended` rows
    (`stages.decide.Decision`). The first line states the rule; empty without verdicts."""
    rows = {str(r["candidate"]): r for r in frame.filter(pl.col("group_by") == "overall")
            .iter_rows(named=True)} if frame.height else {}
    if not rows:
        return []
    rule = ", ".join(f"{v} → {a}" for v, a in ANSWERS.items() if v != "not tested")
    out = [f"answer, read off the verdicts above ({rule}):"]
    on = []
    if (t := rows.get("tuned")) is not None:
        on.append(f"{ANSWERS[str(t['verdict'])]} (tuned against {t['reference']}: "
                  f"{t['verdict']}, Δ {_num(t['delta'], signed=True)})")
    if (z := rows.get("on-zero")) is not None:
        on.append(f"its recording alone, weights at 0 (on-zero against off): "
                  f"{ANSWERS[str(z['verdict'])]} ({_why(z)})")
    if on:
        out.append("turn MSPR on? " + "; ".join(on))
    blocks = [r for name, r in rows.items() if name.startswith("record-")]
    if blocks:
        out.append("record which blocks? " + _grouped(
            blocks, lambda r: str(r["candidate"]).removeprefix("record-"), detail=True))
    weights = [r for name, r in rows.items() if name in _WEIGHT_ARMS]
    if weights:
        shipped = any(r["verdict"] == "ship" for r in weights)
        out.append("which weights (each at its ladder value, against on-zero)? "
                   + ("" if shipped else "none ships; ")
                   + _grouped(weights, lambda r: str(r["candidate"]), detail=False))
    if snippet:
        out.append(_configuration(rows, notes, recommended, snippet))
    return out


def _configuration(rows: Mapping[str, Mapping[str, object]], notes: Sequence[str],
                   recommended: Sequence[Mapping[str, object]], snippet: str) -> str:
    """The recommended configuration: the tuned weights, the blocks its verdicts switch
    off, and how it scored (exploratory) or that it was not scored."""
    off = [str(r["candidate"]).removeprefix("record-") for name, r in rows.items()
           if name.startswith("record-") and r["verdict"] == "don't ship"]
    text = f"configuration: {snippet}, the tuned weights" + (
        f", {', '.join(off)} not recorded (its verdict is don't ship; the weights were searched "
        "with every "
        "block on)" if off else "")
    scored = [r for r in recommended if r.get("reference") != "tuned"]
    if scored and off:
        r = scored[0]
        others = [x for x in recommended if x is not r]
        text += (f"; scored after these verdicts (exploratory, optimistic: confirm on new "
                 f"data; 95% t-intervals, unadjusted): {r['metric']} "
                 f"{_num(r['mean_candidate'])}, Δ "
                 f"{_num(r['delta'], signed=True)} [{_num(r['ci_low'], signed=True)}, "
                 f"{_num(r['ci_high'], signed=True)}] against {r['reference']}" + "".join(
                     f", {_num(x['delta'], signed=True)} [{_num(x['ci_low'], signed=True)}, "
                     f"{_num(x['ci_high'], signed=True)}] against {x['reference']}"
                     for x in others))
    elif off:
        text += "; not itself scored (no replay holds that state): score it before shipping"
    rest = [n for n in notes if not n.startswith((BLOCK_NOTE, SCORED_NOTE))]
    return text + "".join(f"; {n}" for n in rest)
