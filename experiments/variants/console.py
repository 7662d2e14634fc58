"""Console tables of a configuration search: the settings shipped and chosen, the
confirmatory rows of the chosen configuration, each configuration's engine cost, and the
walks the search ran."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import polars as pl
from rich import box
from rich.table import Table

__all__ = ["decision_table", "settings_table", "walks_line"]


def _f(value: Any, digits: int = 4, sign: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _p(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def walks_line(stats: Mapping[str, Any], trials: int, seconds: float) -> str:
    """What the search replayed: walks, the tables built in them, the shared walks."""
    sizes = stats["variants_per_walk"]
    shared = stats["shared_walks"]
    return (f"configuration search: {trials:,} new trials in {seconds:.1f} s; "
            f"{stats['walks']} walk(s) over the timeline built {stats['tables_built']} "
            f"table(s) in {stats['walk_seconds']:.1f} s ({stats['variants_in_shared_walks']} "
            f"of them in {shared} shared walk(s), largest {max(sizes, default=0)}); "
            f"{stats['tables_loaded']} table(s) read from the replay cache, "
            f"{stats['tables_in_memory']} trial(s) found theirs in memory")


def settings_table(settings: pl.DataFrame, costs: Mapping[str, float], *, title: str) -> Table:
    """Each searched setting: what it touches, its shipped and chosen values; and the
    engine time per search of the shipped and the chosen configurations."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD,
                  caption=f"engine time per search (replay, ms): shipped "
                          f"{_f(costs.get('tuned'), 3)}, chosen {_f(costs.get('chosen'), 3)}; "
                          "touches: search (one walk scores several) or state (a replay of "
                          "its own)", caption_justify="left")
    for column in ("setting", "touches", "shipped", "chosen"):
        table.add_column(column, justify="left", no_wrap=True)
    for r in settings.iter_rows(named=True):
        changed = r["shipped"] != r["chosen"]
        table.add_row(r["setting"], r["touches"], r["shipped"],
                      f"[bold]{r['chosen']}[/bold]" if changed else r["chosen"])
    return table


def decision_table(decision: pl.DataFrame, *, title: str) -> Table:
    """The confirmatory rows: the chosen configuration against each reference, with the
    interval paired with the adjusted test, and the verdict."""
    caption = None
    if decision.height:
        first = decision.row(0, named=True)
        caption = (f"{first['correction']}; test: {first['test']}; no effect needs the "
                   f"interval within +-{first['equivalence_margin']:g}; a guardrail (a group "
                   f"of intent or question type) fails where a loss of "
                   f"{first['noninferiority_margin']:g} cannot be ruled out; the bundle's "
                   "config/decision.parquet holds each guardrail's figures")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, caption=caption,
                  caption_justify="left")
    for column in ("chosen vs", "n", "reference", "chosen", "delta", "CI", "p (adj)",
                   "verdict", "why"):
        table.add_column(column, justify="left" if column in ("chosen vs", "verdict", "why")
                         else "right", no_wrap=column != "why")
    for r in decision.iter_rows(named=True):
        why = (f"guardrail failed: {r['failed_guardrail']}" if r["failed_guardrail"]
               else r["reason"] or "")
        table.add_row(r["reference"], f"{r['n']:,}", _f(r["mean_reference"]),
                      _f(r["mean_candidate"]), _f(r["delta"], sign=True),
                      f"[{_f(r['ci_low'], sign=True)}, {_f(r['ci_high'], sign=True)}]",
                      _p(r["p_adj"]), r["verdict"], why)
    return table
