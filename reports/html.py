"""The HTML report: one self-contained file (inline stylesheet, PNG figures as data URIs).

`render_html(results)` gathers what the bundle holds into plain values (formatted table
rows from `_format`, PNG bytes from `plots`, provenance lines) and fills
`templates/report.html.j2` (Jinja2, autoescaped, strict about undefined names). Nothing
depends on the clock, the machine or the folder the bundle sits in, beyond what the
bundle itself records, so the same bundle renders to the same bytes.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import polars as pl

from msprlab.experiments import bundle as layout
from msprlab.experiments.console_tables import mean_caption
from msprlab.experiments.decision.answer import HEADING as ANSWER_HEADING
from msprlab.experiments.decision.detail import mark
from msprlab.experiments.decision.render import HEADER as DECISION_HEADER
from msprlab.experiments.decision.render import caption as decision_caption
from msprlab.experiments.decision.render import cells as decision_cells
from msprlab.experiments.decision.render import exploratory_caption

from . import plots
from ._format import (
    ALPHA,
    FUNNEL_HEADER,
    LOW_SUPPORT_MARK,
    comparison_rows,
    decision_answer,
    explain,
    fmt,
    fmt_ci,
    fmt_delta,
    fmt_p,
    fmt_pct,
    funnel_explain,
    funnel_rows,
    group_label,
    judged_line,
    label_note,
    label_source,
    methods,
    primary_metric,
    side_effect_rows,
    significance,
)
from .configuration import config_html
from .explore_page import ExplorePage, explore_page
from .load import Results
from .provenance import config_text, provenance_items
from .study import StudyView, study_view

__all__ = ["TEMPLATE", "render_html"]

TEMPLATE = Path(__file__).parent / "templates" / "report.html.j2"
_GROUPINGS = (("intent", "by intent label"), ("question_type", "by question type"))
_NO_PAGE = ExplorePage({}, {})


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _metrics(*frames: pl.DataFrame | None) -> list[str]:
    names: list[str] = []
    for frame in frames:
        if frame is not None and "metric" in frame.columns:
            names += [m for m in frame.get_column("metric").unique(maintain_order=True)
                      if m not in names]
    return names


def _comparison(comparison: pl.DataFrame, metrics: list[str], primary: str) -> dict[str, Any]:
    """Tables of one comparison frame: per metric, per grouping (overall first)."""
    tables = {metric: [{"title": title, "rows": comparison_rows(
        comparison, metric, ("overall", group_by))} for group_by, title in _GROUPINGS]
        for metric in metrics}
    return {"primary": primary, "tables": tables,
            "others": [m for m in metrics if m != primary], "methods": methods(comparison)}


def _matrix(comparison: pl.DataFrame, metric: str, group_by: str) -> dict[str, Any]:
    """Arms down, groups across: delta and its marks, for one metric and grouping."""
    rows = comparison.filter(pl.col("metric") == metric,
                             pl.col("group_by").is_in(["overall", group_by]))
    groups = rows.select("group_by", "group", "n", "low_support").unique(
        ["group_by", "group"], maintain_order=True).rows(named=True)
    cells = {(r["arm"], r["group_by"], r["group"]): r for r in rows.iter_rows(named=True)}
    body = []
    for arm in rows.get_column("arm").unique(maintain_order=True).to_list():
        line = []
        for g in groups:
            r = cells.get((arm, g["group_by"], g["group"]))
            if r is None:
                line.append({"text": "–", "title": "", "ci": "", "css": ""})
                continue
            marks = significance(r["p_t_adj"])
            css = [] if not marks or not r["delta"] else ["up" if r["delta"] > 0 else "down"]
            if r["low_support"]:
                css.append("low")
            suffix = (" *" if marks else "") + (f" {mark(r)}" if mark(r) else "")
            line.append({"text": fmt_delta(r["delta"]) + suffix,
                         "title": f"CI {fmt_ci(r['ci_low'], r['ci_high'], signed=True)}; "
                                  f"p (adj) {fmt_p(r['p_t_adj'])}",
                         "ci": fmt_ci(r["ci_low"], r["ci_high"], signed=True),
                         "css": " ".join(css)})
        body.append({"arm": arm, "cells": line})
    return {"groups": [{"label": group_label(g["group_by"], g["group"])
                        + (f" {LOW_SUPPORT_MARK}" if g["low_support"] else ""),
                        "n": fmt(g["n"])} for g in groups], "rows": body}


def _means(summary: pl.DataFrame, metrics: list[str]) -> dict[str, Any]:
    """Per arm, overall: mean and bootstrap CI of each metric."""
    overall = summary.filter(pl.col("group_by") == "overall")
    rows = []
    for arm in overall.get_column("arm").unique(maintain_order=True).to_list():
        mine = {r["metric"]: r for r in overall.filter(pl.col("arm") == arm)
                .iter_rows(named=True)}
        cells = [f"{fmt(r['mean'])} {fmt_ci(r['ci_low'], r['ci_high'])}"
                 if (r := mine.get(m)) is not None else "–" for m in metrics]
        rows.append({"arm": arm, "n": fmt(next(iter(mine.values()))["n"]) if mine else "–",
                     "cells": cells})
    return {"metrics": metrics, "rows": rows,
            "method": mean_caption(overall).removeprefix("mean [95% CI]: ")}


def _frame_rows(frame: pl.DataFrame) -> dict[str, Any]:
    return {"columns": frame.columns,
            "rows": [[fmt(v) for v in row] for row in frame.iter_rows()]}


def _ablation(results: Results, primary: str | None) -> dict[str, Any] | None:
    if results.ablation_summary is None and results.ablation_comparison is None:
        return None
    comparison = results.ablation_comparison
    out: dict[str, Any] = {"notes": list(results.ablation_notes), "chart": None,
                           "matrices": [], "comparison": None, "means": None, "arms": None,
                           "per_query": results.ablation_per_query,
                           "side_effects": _side_effects(results, primary),
                           "side_effect_methods": methods(results.side_effects.filter(
                               pl.col("metric") == primary, pl.col("group_by") == "overall"))
                           if results.side_effects is not None and primary is not None
                           else []}
    metrics = _metrics(comparison, results.ablation_summary)
    if comparison is not None and comparison.height and primary is not None:
        out["chart"] = _data_uri(plots.ablation_chart(comparison, primary))
        out["matrices"] = [{"title": title, **_matrix(comparison, primary, group_by)}
                           for group_by, title in _GROUPINGS]
        out["comparison"] = _comparison(comparison, metrics, primary)
    if results.ablation_summary is not None:
        out["means"] = _means(results.ablation_summary, metrics)
    if results.ablation_arms is not None:
        out["arms"] = _frame_rows(results.ablation_arms)
    return out


def _funnel_groups(funnel: pl.DataFrame, group_by: str, reference: str) -> dict[str, Any]:
    """Groups down: the `reference` arm's seed recall, pool recall and ceiling, then every
    arm's achieved value (a `plain_table`)."""
    part = funnel.filter(pl.col("group_by").is_in(["overall", group_by]))
    arms = part.get_column("arm").unique(maintain_order=True).to_list()
    achieved = {(r["arm"], r["group_by"], r["group"]): fmt(r["achieved"])
                for r in part.iter_rows(named=True)}
    rows = [[group_label(r["group_by"], r["group"]) + (f" {LOW_SUPPORT_MARK}"
                                                      if r["low_support"] else ""),
             fmt(r["n"]), fmt_pct(r["seed_recall"]), fmt_pct(r["pool_recall"]),
             fmt(r["ceiling"]),
             *(achieved.get((arm, r["group_by"], r["group"]), "–") for arm in arms)]
            for r in part.filter(pl.col("arm") == reference).iter_rows(named=True)]
    return {"columns": ["group", "n", "seed recall", "pool recall", "ceiling", *arms],
            "rows": rows}


def _pool_text(row: dict[str, Any]) -> tuple[str, str]:
    return fmt_pct(row["pool_recall"]), fmt(row["ceiling"])


def _own_pools(funnel: pl.DataFrame, reference: str) -> list[str]:
    """The arms whose pool reads differently from the reference's in some group (another
    replay or role filter): their achieved value is against a ceiling not shown."""
    shown = {(r["group_by"], r["group"]): _pool_text(r)
             for r in funnel.filter(pl.col("arm") == reference).iter_rows(named=True)}
    own: list[str] = []
    for r in funnel.filter(pl.col("arm") != reference).iter_rows(named=True):
        if r["arm"] not in own and shown.get((r["group_by"], r["group"])) != _pool_text(r):
            own.append(r["arm"])
    return own


def _funnel(results: Results, primary: str | None) -> dict[str, Any] | None:
    """The stage funnel: the chart, the overall table and the by-group tables."""
    funnel = results.funnel
    if funnel is None or not funnel.height:
        return None
    metric = primary or "the primary metric"
    arms = funnel.get_column("arm").unique(maintain_order=True).to_list()
    reference = "off" if "off" in arms else arms[0]
    return {"chart": _data_uri(plots.funnel_chart(funnel, metric)), "metric": metric,
            "overall": {"columns": list(FUNNEL_HEADER), "rows": funnel_rows(funnel)},
            "explain": funnel_explain(metric, label_source(results.provenance)),
            "reference": reference,
            "own": _own_pools(funnel, reference),
            "groups": [{"title": title, **_funnel_groups(funnel, group_by, reference)}
                       for group_by, title in _GROUPINGS]}


def _side_effects(results: Results, primary: str | None) -> list[dict[str, str]]:
    """One row per block and unit: the block's effect on the ranking at zero weight."""
    effects = results.side_effects
    if effects is None or primary is None:
        return []
    return side_effect_rows(effects, primary)


def _test(results: Results, primary: str | None) -> dict[str, Any] | None:
    comparison = results.test_comparison
    if comparison is None or primary is None:
        return None
    metrics = _metrics(comparison)
    return {"chart": _data_uri(plots.ablation_chart(comparison, primary)),
            "arms": None if results.test_arms is None else _frame_rows(results.test_arms),
            "per_query": results.test_per_query, "runs": results.test_runs,
            **_comparison(comparison, metrics, primary)}


def _study(results: Results, view: StudyView) -> dict[str, Any] | None:
    trials = results.trials
    if trials is None and results.study is None:
        return None
    out: dict[str, Any] = {"view": view, "history": [], "importance": None, "parallel": None,
                           "best": None, "notes": list(view.notes)}
    if trials is not None and trials.height:
        for objective in view.objectives:
            out["history"].append(_data_uri(plots.history_chart(
                trials, objective, maximize=view.maximize)))
        if view.objectives and view.params:
            out["parallel"] = _data_uri(plots.parallel_chart(
                trials, view.params, view.objectives[0], ranges=view.ranges or None,
                best_number=view.best_number))
    if view.importance:
        out["importance"] = _data_uri(plots.importance_chart(view.importance))
    out["best"] = [{"name": k, "best": fmt(v), "baseline": fmt(view.baseline_values.get(k))}
                   for k, v in view.best_values.items()]
    return out


def _weights(results: Results, view: StudyView) -> dict[str, Any] | None:
    if results.snippet is None and not view.best_weights:
        return None
    return {"weights": [{"name": k, "value": fmt(v)} for k, v in view.best_weights.items()],
            "snippet": None if results.snippet is None else json.dumps(
                results.snippet, indent=2, sort_keys=False)}


def _audit(results: Results) -> dict[str, Any] | None:
    """One row per arm (in the frame's order), compat and strict modes side by side."""
    audit = results.audit
    if audit is None:
        return None
    modes = sorted(audit.get_column("mode").unique().to_list(),
                   key=lambda m: ({"compat": 0, "strict": 1}.get(m, 2), m))
    cells = {(r["arm"], r["mode"]): r for r in audit.iter_rows(named=True)}
    rows = []
    for arm in audit.get_column("arm").unique(maintain_order=True).to_list():
        first = next(cells[(arm, m)] for m in modes if (arm, m) in cells)
        line = []
        for mode in modes:
            r = cells.get((arm, mode))
            if r is None:
                line.append({"returned": "–", "leaked": "–", "share": "–",
                             "leaked_searches": "–", "css": ""})
                continue
            share = f"{r['leaked'] / r['returned']:.2%}" if r["returned"] else "–"
            line.append({"returned": fmt(r["returned"]), "leaked": fmt(r["leaked"]),
                         "share": share, "leaked_searches": fmt(r["leaked_searches"]),
                         "css": "down" if r["leaked"] else ""})
        rows.append({"arm": arm, "roles": fmt(first.get("roles")),
                     "searches": fmt(first["searches"]), "cells": line})
    policy = ((results.provenance or {}).get("replay") or {}).get("policy")
    return {"modes": modes, "rows": rows, "total": int(audit.get_column("leaked").sum()),
            "policy": policy if policy is not None else "not recorded"}


def _decision(results: Results, min_support: object) -> dict[str, Any] | None:
    """The verdict tables (the console's cells and captions) and the recommendation."""
    if results.decision is None:
        return None
    labels = label_source(results.provenance)
    support = int(min_support) if isinstance(min_support, int) else 30
    by_intent = results.decision_by_intent
    notes = results.decision_notes or {}
    return {"header": list(DECISION_HEADER), "rows": decision_cells(results.decision),
            "caption": decision_caption(results.decision, min_support=support, labels=labels),
            "intent_rows": decision_cells(by_intent) if by_intent is not None else [],
            "intent_caption": exploratory_caption(by_intent, labels=labels)
            if by_intent is not None and by_intent.height else "",
            "answer": decision_answer(results), "answer_heading": ANSWER_HEADING,
            "notes": list(notes.get("notes") or []),
            "recommended": [f"against {r['reference']}: Δ {fmt_delta(r['delta'])} "
                            f"{fmt_ci(r['ci_low'], r['ci_high'], signed=True)} ({r['note']})"
                            for r in notes.get("recommended") or []]}


def _glance(results: Results, primary: str | None, view: StudyView) -> list[str]:
    """A few sentences for the top of the page: the verdicts first (a bundle written
    before them: the tuned row's figures, labelled exploratory)."""
    lines = []
    if results.decision is not None:
        for r in results.decision.iter_rows(named=True):
            lines.append(f"{r['candidate']} against {r['reference']}: {r['verdict']} "
                         f"({r['metric']} Δ {fmt_delta(r['delta'])}, "
                         f"{fmt_ci(r['ci_low'], r['ci_high'], signed=True)} at "
                         f"{r['ci_level']:.2%}; {r['reason']}).")
    test = results.test_comparison
    if results.decision is None and test is not None and primary is not None:
        hit = test.filter(pl.col("group_by") == "overall", pl.col("metric") == primary)
        if hit.height:
            r = hit.row(0, named=True)
            marks = significance(r["p_t_adj"])
            lines.append(f"Tuned weights on the test window: {primary} {fmt(r['mean_arm'])} "
                         f"against {fmt(r['mean_base'])} for off (MSPR disabled), delta "
                         f"{fmt_delta(r['delta'])} (CI "
                         f"{fmt_ci(r['ci_low'], r['ci_high'], signed=True)}; "
                         + ("significant (adjusted p)" if marks else
                            f"no adjusted test below {ALPHA}") + f"; n = {fmt(r['n'])}).")
    comparison = results.ablation_comparison
    if comparison is not None and primary is not None:
        overall = comparison.filter(pl.col("group_by") == "overall", pl.col("metric") == primary,
                                    pl.col("delta").is_not_nan())
        if overall.height:
            r = overall.sort(["delta", "arm"], descending=[True, False]).row(0, named=True)
            lines.append(f"Largest ablation gain overall: {r['arm']}, {primary} "
                         f"{fmt_delta(r['delta'])} (CI "
                         f"{fmt_ci(r['ci_low'], r['ci_high'], signed=True)}"
                         + (f" at {r['ci_level']:.2%}" if r.get("ci_level") else "")
                         + (", confirmatory" if mark(r) == "C" else ", exploratory")
                         + ").")
    if view.counts:
        total = sum(view.counts.values())
        lines.append(f"Weight search: {total:,} trials ("
                     + ", ".join(f"{n:,} {s.lower()}" for s, n in view.counts.items()) + ")"
                     + (f"; best trial {view.best_number}" if view.best_number is not None
                        else "") + ".")
    if results.audit is not None:
        leaked = int(results.audit.get_column("leaked").sum())
        lines.append(f"Isolation audit: {leaked:,} leaked result(s) over all arms and modes.")
    return lines


def render_html(results: Results, *, explore: ExplorePage | None = None) -> str:
    """The report of `results` as one HTML document; `explore`: its per-query explorer
    (`explore_page`), when the caller has made it already (it also writes its chunks)."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

    primary = primary_metric(results.provenance, results.test_comparison,
                             results.ablation_comparison, results.ablation_summary)
    view = study_view(results.trials, results.study)
    record = results.provenance or {}
    min_support = ((record.get("config") or {}).get("metrics") or {}).get("min_support")
    environment = Environment(loader=FileSystemLoader(TEMPLATE.parent),
                              autoescape=select_autoescape(["html", "j2"]),
                              undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True)
    return environment.get_template(TEMPLATE.name).render(
        title=record.get("experiment") or results.folder.name, bundle=results.folder.name,
        command=record.get("command"), primary=primary, alpha=ALPHA,
        low_mark=LOW_SUPPORT_MARK, min_support=min_support,
        explain=explain(label_source(results.provenance)),
        label_note=label_note(results.provenance),
        judged=judged_line(results.ablation_comparison, results.test_comparison)
        if label_note(results.provenance) else None,
        missing=results.missing, parts=layout,  # the bundle's file names
        glance=_glance(results, primary, view), test=_test(results, primary),
        decision=_decision(results, min_support),
        ablation=_ablation(results, primary), funnel=_funnel(results, primary),
        study=_study(results, view), configuration=config_html(results.config),
        weights=_weights(results, view), audit=_audit(results),
        explore=(explore or explore_page(results.explore) or _NO_PAGE).section or None,
        provenance=provenance_items(results.provenance),
        config=config_text(results.provenance))
