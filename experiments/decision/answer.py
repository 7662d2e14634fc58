"""The plain-language answer under the verdict table: three to six sentences a researcher
can act on, read off the confirmatory verdict rows and nothing else.

Every figure in it is one of a verdict row's (delta, interval and its level, adjusted p,
minimum detectable effect, margins), printed as the table prints it, so the answer cannot
say what the table does not (tests check that each number appears in the rows). The
questions, in order: turn MSPR on (tuned against off; its recording alone, on-zero against
off), which recording blocks to record (record-BLOCK against no-BLOCK), which weights
matter (each weight's arm against on-zero), and what the recommended configuration is.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence

import polars as pl
from rich.markup import escape

from .family import BLOCK_PREFIX
from .render import guardrail_names, why

__all__ = ["HEADING", "answer", "console_lines"]

HEADING = "answer, read off the verdict rows above (every figure is one of theirs):"
WIDTH = 100  # the console wraps the answer for a terminal this wide

Row = Mapping[str, object]


def _f(value: object, signed: bool = False) -> str:
    """A figure as the verdict table prints it (4 decimals)."""
    return f"{value:+.4f}" if signed else f"{value:.4f}"  # type: ignore[str-format]


def _p(value: object) -> str:
    return "p (adj) < 0.001" if value < 0.001 else f"p (adj) {value:.3f}"  # type: ignore[operator]


def _ci(r: Row) -> str:
    return (f"{r['ci_level']:.2%} CI {_f(r['ci_low'], True)} to {_f(r['ci_high'], True)}, "
            f"{_p(r['p_adj'])}")


def _groups(r: Row, state: str) -> str:
    """The guardrail(s) of a row in that state, each column said once ("guardrails
    intent=FACTUAL, UNKNOWN and question_type=single-hop")."""
    names = str(r["failed_guardrail" if state == "failed" else "unresolved_guardrail"])
    plural = "s" if len(names.split("; ")) > 1 else ""
    return f"guardrail{plural} " + guardrail_names(names).replace("; ", " and ")


def _needed(r: Row) -> str:
    """How many queries a true effect of the observed size would need (the row's
    `queries_needed`, a planning figure), where the row has it."""
    needed = r.get("queries_needed")
    if not isinstance(needed, float) or not math.isfinite(needed):
        return ""
    return f", a true effect of this size about {math.ceil(needed):,} queries"


def _state(r: Row) -> str:
    """A row's figures and verdict, short: what the answer says in parentheses."""
    verdict, delta = r["verdict"], _f(r["delta"], True)
    if verdict == "ship":
        return f"{delta}, {_ci(r)}"
    if verdict == "don't ship":
        if r["tested"] and r["p_adj"] < r["alpha"] and r["delta"] < 0:  # type: ignore[operator]
            return f"harm {delta}, {_ci(r)}"
        return f"{delta}, {_groups(r, 'failed')} failed"
    if verdict == "no effect":
        return why(r)
    if verdict == "inconclusive":
        if r.get("unresolved_guardrail"):
            significant = r["tested"] and r["p_adj"] < r["alpha"]  # type: ignore[operator]
            return (f"{delta}{', significant' if significant else ''}, but "
                    f"{_groups(r, 'unresolved')} unresolved")
        return f"{delta}; this n detects only |Δ| >= {_f(r['mde'])}" + _needed(r)
    return f"not tested: {why(r)}"


def _mspr(rows: Mapping[str, Row], metric: str, unit: str) -> list[str]:
    out = []
    t = rows.get("tuned")
    if t is not None:
        against = f"{metric} per {unit} over {t['reference']}"
        out.append({
            "ship": f"Turn MSPR on with the tuned weights: {_f(t['delta'], True)} {against} "
                    f"({_ci(t)}).",
            "don't ship": f"Keep MSPR off: the tuned weights against {t['reference']}: "
                          f"{_state(t)}.",
            "no effect": f"MSPR with the tuned weights makes no difference {against} "
                         f"({_state(t)}).",
            "inconclusive": f"Turning MSPR on is not settled: the tuned weights {against}: "
                            f"{_state(t)}.",
        }.get(str(t["verdict"]), f"The tuned weights against {t['reference']}: "
                                 f"{_state(t)}."))
    z = rows.get("on-zero")
    if z is not None:
        out.append(f"Its recording alone (weights at zero, on-zero against {z['reference']}): "
                   f"{z['verdict']} ({_state(z)}).")
    return out


_BLOCK_VERBS = {"ship": "record {}", "don't ship": "do not record {}",
                "no effect": "recording {} changes nothing",
                "inconclusive": "recording {}: not settled"}


def _blocks(rows: Mapping[str, Row]) -> str:
    said = [_BLOCK_VERBS.get(str(r["verdict"]), "recording {}").format(
        name.removeprefix(BLOCK_PREFIX)) + f" ({_state(r)})"
        for name, r in rows.items() if name.startswith(BLOCK_PREFIX)]
    return ("Recording blocks: " + "; ".join(said) + ".") if said else ""


_WEIGHT_VERBS = {"ship": "improve", "don't ship": "hurt", "no effect": "no effect",
                 "inconclusive": "not settled", "not tested": "not tested"}


def _weights(rows: Mapping[str, Row]) -> str:
    weights = [r for name, r in rows.items()
               if r["reference"] == "on-zero" and name not in ("tuned", "on-zero")
               and not name.startswith(BLOCK_PREFIX)]
    if not weights:
        return ""
    said = []
    for verdict, verb in _WEIGHT_VERBS.items():
        mine = [r for r in weights if r["verdict"] == verdict]
        if not mine:
            continue
        if verdict == "no effect" and all(why(r).startswith("equivalent") for r in mine):
            said.append(f"{', '.join(str(r['candidate']) for r in mine)}: no effect "
                        f"({why(mine[0])})")
        else:
            said.append(f"{verb}: " + ", ".join(f"{r['candidate']} ({_state(r)})"
                                               for r in mine))
    return "Weights, each alone against on-zero: " + "; ".join(said) + "."


def answer(frame: pl.DataFrame, *, snippet: str = "") -> list[str]:
    """The answer's sentences, one per question, read off the confirmatory verdict rows
    (`frame`, `rule.COLUMNS`); `snippet`: the recommended configuration's file, named in the
    last sentence with the blocks the verdicts switch off. Empty without verdicts."""
    overall = frame.filter(pl.col("group_by") == "overall") if frame.height else frame
    if not overall.height:
        return []
    rows = {str(r["candidate"]): r for r in overall.iter_rows(named=True)}
    first = overall.row(0, named=True)
    out = _mspr(rows, str(first["metric"]), str(first["unit"]))
    out += [line for line in (_blocks(rows), _weights(rows)) if line]
    if snippet and "tuned" in rows:
        off = [name.removeprefix(BLOCK_PREFIX) for name, r in rows.items()
               if name.startswith(BLOCK_PREFIX) and r["verdict"] == "don't ship"]
        out.append(f"Recommended configuration: {snippet}, the tuned weights"
                   + (f" with {', '.join(off)} not recorded (its verdict; the weights were "
                      "searched with it recorded: see the notes below)" if off else "") + ".")
    return out


def console_lines(frame: pl.DataFrame, *, notes: Sequence[str] = (), snippet: str = "",
                  recommended: Sequence[Mapping[str, object]] = ()) -> list[str]:
    """The answer as the console prints it (rich markup, wrapped at `WIDTH`), then the
    recommended configuration's notes and its scored rows (`stages.decide.Decision`: not
    verdict rows, so not part of the answer, each labelled with what it is)."""
    lines = answer(frame, snippet=snippet)
    out = [f"[bold]{escape(HEADING)}[/bold]"] if lines else []
    out += [escape(textwrap.fill(line, WIDTH, initial_indent="  ", subsequent_indent="    ",
                                 break_on_hyphens=False))
            for line in lines]
    out += [f"[yellow]note ({snippet or 'recommended configuration'}):[/yellow] {escape(n)}"
            for n in notes]
    out += [f"recommended against {r['reference']}: {r['metric']} {_f(r['mean_candidate'])} vs "
            f"{_f(r['mean_reference'])}, Δ {_f(r['delta'], True)} [{_f(r['ci_low'], True)}, "
            f"{_f(r['ci_high'], True)}] ({escape(str(r['note']))})" for r in recommended]
    return out
