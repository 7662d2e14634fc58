"""Console tables for experiment results: what moved, by how much, how sure we are."""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl
from rich import box
from rich.table import Table

__all__ = ["audit_table", "comparison_table", "delta_matrix", "fmt", "summary_table"]


def fmt(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def _p(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "–"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def comparison_table(comparison: pl.DataFrame, *, metric: str, title: str,
                     group_by: Sequence[str] = ("overall", "intent", "question_type"),
                     base_label: str = "baseline", arm_label: str | None = None) -> Table:
    """One row per (arm, group): n, the two means, the delta with its CI, adjusted p-values.

    Groups below the minimum support are marked `*` (read them with care)."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("arm", "group", "n", base_label, arm_label or "arm mean", "delta",
                   "95% CI", "p (t, adj)", "p (perm, adj)"):
        table.add_column(column, justify="left" if column in ("arm", "group") else "right",
                         no_wrap=True)
    rows = comparison.filter(pl.col("metric") == metric, pl.col("group_by").is_in(group_by))
    previous = None
    for r in rows.iter_rows(named=True):
        group = r["group"] if r["group_by"] == "overall" else f"{r['group_by']}={r['group']}"
        if r["low_support"]:
            group += " *"
        arm = r["arm"] if r["arm"] != previous else ""
        previous = r["arm"]
        table.add_row(arm, group, f"{r['n']:,}", fmt(r["mean_base"]), fmt(r["mean_arm"]),
                      f"{r['delta']:+.4f}" if not math.isnan(r["delta"]) else "–",
                      f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]", _p(r["p_t_adj"]),
                      _p(r["p_perm_adj"]))
    return table


def summary_table(summary: pl.DataFrame, *, metric: str, title: str) -> Table:
    """Per arm and group: n, mean and its bootstrap CI, and the queries left out."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("arm", "group", "n", "mean", "95% CI", "no relevant"):
        table.add_column(column, justify="left" if column in ("arm", "group") else "right",
                         no_wrap=True)
    previous = None
    for r in summary.filter(pl.col("metric") == metric).iter_rows(named=True):
        group = r["group"] if r["group_by"] == "overall" else f"{r['group_by']}={r['group']}"
        if r["low_support"]:
            group += " *"
        arm = r["arm"] if r["arm"] != previous else ""
        previous = r["arm"]
        table.add_row(arm, group, f"{r['n']:,}", fmt(r["mean"]),
                      f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]", f"{r['n_no_relevant']:,}")
    return table


def _group_label(group_by: str, group: str | None) -> str:
    if group_by == "overall":
        return "overall"
    short = {"question_type": "", "intent": ""}[group_by]
    return f"{short}{group}"


def delta_matrix(comparison: pl.DataFrame, *, metric: str, title: str,
                 alpha: float = 0.05) -> Table:
    """Arms down, groups across: the mean paired delta against the baseline, marked `+`/`-`
    where its bootstrap CI excludes 0 and `*` where the Holm-adjusted t-test p < alpha.
    The header gives each group's n (queries with a relevant memory)."""
    rows = comparison.filter(pl.col("metric") == metric)
    groups = rows.select("group_by", "group", "n").unique(["group_by", "group"],
                                                             maintain_order=True)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD,
                  caption=f"+/- : 95% CI excludes 0;  * : Holm-adjusted p < {alpha} "
                          "(paired t-test);  n: queries with a relevant memory; "
                          "groups under the minimum support in italics",
                  caption_justify="left")
    table.add_column("arm", no_wrap=True)
    for r in groups.iter_rows(named=True):
        table.add_column(f"{_group_label(r['group_by'], r['group'])}\nn={r['n']:,}",
                         justify="right", no_wrap=True)
    for arm in rows["arm"].unique(maintain_order=True).to_list():
        cells = []
        mine = rows.filter(pl.col("arm") == arm)
        for g in groups.iter_rows(named=True):
            hit = mine.filter(pl.col("group_by") == g["group_by"],
                              pl.col("group") == g["group"])
            if hit.height == 0 or hit["delta"].is_nan().all():
                cells.append("–")
                continue
            r = hit.row(0, named=True)
            mark = ""
            if r["ci_low"] > 0:
                mark += "+"
            elif r["ci_high"] < 0:
                mark += "-"
            if r["p_t_adj"] == r["p_t_adj"] and r["p_t_adj"] < alpha:
                mark += "*"
            text = f"{r['delta']:+.4f}{mark}"
            cells.append(f"[italic]{text}[/italic]" if r["low_support"] else text)
        table.add_row(arm, *cells)
    return table


def audit_table(audit: pl.DataFrame, *, policy: str) -> Table:
    """Returned results the searcher may not see, per arm, compat against strict mode."""
    table = Table(title="isolation audit, test window: returned results from a tenant or role "
                        "the searcher may not see", title_justify="left", box=box.SIMPLE_HEAD,
                  caption=f"installed role policy: {policy}; compat = the library (policies "
                          "judge seeds only), strict = graph neighbours judged too; judged by "
                          "tenant isolation + role scope on each memory's stored payload",
                  caption_justify="left")
    for column in ("arm", "roles", "returned", "leaked (compat)", "in searches",
                   "leaked (strict)", "in searches "):
        table.add_column(column, justify="left" if column == "arm" else "right", no_wrap=True)
    compat = audit.filter(pl.col("mode") == "compat")
    strict = {r["arm"]: r for r in audit.filter(pl.col("mode") == "strict").iter_rows(named=True)}
    for r in compat.iter_rows(named=True):
        s = strict.get(r["arm"], {})
        table.add_row(r["arm"], "on" if r["roles"] else "off", f"{r['returned']:,}",
                      f"{r['leaked']:,}", f"{r['leaked_searches']:,}",
                      f"{s.get('leaked', 0):,}", f"{s.get('leaked_searches', 0):,}")
    return table
