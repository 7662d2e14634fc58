"""The markdown summary: headline tables and provenance, for a PR comment or a notebook.

It holds the test-window comparison of the tuned weights against off (MSPR disabled) per intent
label and per dataset question type, the ablation deltas overall, the stage funnel overall,
the recommended weights and the provenance, all for the experiment's primary metric unless
stated. It is a pure function of the bundle (no clock, no absolute paths but those recorded
in the bundle), so the same bundle always gives the same text.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from msprlab.experiments.bundle import (
    ABLATION_FUNNEL,
    ISOLATION_AUDIT,
    PROVENANCE,
    SNIPPET,
    TEST_COMPARISON,
    TEST_FUNNEL,
)
from msprlab.experiments.decision.answer import HEADING as ANSWER_HEADING
from msprlab.experiments.decision.detail import MARKS, mark
from msprlab.experiments.decision.render import HEADER as DECISION_HEADER
from msprlab.experiments.decision.render import caption as decision_caption
from msprlab.experiments.decision.render import cells as decision_cells
from msprlab.experiments.decision.render import exploratory_caption
from msprlab.experiments.explore.overlap import P
from msprlab.experiments.explore.questions import question_table, tally

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
    funnel_explain,
    funnel_rows,
    judged_line,
    label_note,
    label_source,
    methods,
    primary_metric,
    side_effect_rows,
    significance,
)
from .configuration import config_markdown
from .load import Results
from .provenance import provenance_items
from .study import study_view

__all__ = ["render_markdown"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]],
           right: Sequence[bool] | None = None) -> list[str]:
    right = right or [i > 0 for i in range(len(header))]
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |",
             "|" + "|".join("---:" if r else ":---" for r in right) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _legend(comparison: pl.DataFrame, min_support: object) -> list[str]:
    floor = f"{min_support} " if min_support is not None else "the minimum support of "
    return [f"{LOW_SUPPORT_MARK}: fewer than {floor}queries with a relevant memory in the "
            f"group: read with care. {MARKS['confirmatory']} (beside p): a confirmatory row, "
            f"with the decision table's figures; {MARKS['exploratory']}: a row of the "
            "per-intent verdicts, with their figures; the other rows are exploratory, each "
            "in its own family. Significant = the "
            f"row's adjusted p (one test per row, corrected within its family) is below "
            f"{ALPHA}.", "", *(f"- {line}" for line in methods(comparison))]


def _explored(results: Results, a: str = "off", b: str = "tuned") -> list[str]:
    """The explorer's counts for `b` against `a` (the report's question-by-question view):
    improved, degraded and unchanged questions, and the mean overlap of the two top 10s."""
    data = results.explore
    if data is None or a not in data.values or b not in data.values:
        return []
    count = tally(question_table(data, a, b))
    return [f"Question by question ({b} against {a}, {data.metric} per question): "
            f"{count['improved']:,} improved, {count['degraded']:,} degraded, "
            f"{count['unchanged']:,} unchanged ({count['no_relevant']:,} without a relevant "
            f"memory, not counted); the two arms' top 10s overlap by a mean Jaccard@10 of "
            f"{fmt(count['jaccard'], 3)} and a mean RBO (p = {P}) of {fmt(count['rbo'], 3)} "
            "over the questions (the HTML report opens each one; `msprlab explain`).", ""]


def _decision_section(results: Results, min_support: object) -> list[str]:
    """The verdict table first: the confirmatory verdicts, the exploratory per-intent ones,
    and what the recommended configuration changes (the same cells and captions as the
    console's)."""
    out = ["## Decision: a verdict per candidate (confirmatory)", ""]
    table = results.decision
    if table is None:
        return [*out, "Not in this bundle: it was written before the decision table.", ""]
    labels = label_source(results.provenance)
    support = int(min_support) if isinstance(min_support, int) else 30
    out += _table(DECISION_HEADER, decision_cells(table),
                  right=[False, False, True, True, True, True, True, True, False, False])
    out += ["", decision_caption(table, min_support=support, labels=labels), ""]
    lines = decision_answer(results)
    if lines:
        out += [f"**{ANSWER_HEADING[0].upper()}{ANSWER_HEADING[1:]}**", "",
                *(f"- {line}" for line in lines), ""]
    notes = (results.decision_notes or {}).get("notes") or []
    out += [f"- recommended configuration ({SNIPPET}): {n}" for n in notes]
    for r in (results.decision_notes or {}).get("recommended") or []:
        out.append(f"- recommended against {r['reference']}: Δ {fmt_delta(r['delta'])} "
                   f"{fmt_ci(r['ci_low'], r['ci_high'], signed=True)} ({r['note']})")
    if notes:
        out.append("")
    by_intent = results.decision_by_intent
    if by_intent is not None and by_intent.height:
        out += ["### Exploratory: the same verdicts per intent group", ""]
        out += _table(DECISION_HEADER, decision_cells(by_intent),
                      right=[False, False, True, True, True, True, True, True, False, False])
        out += ["", exploratory_caption(by_intent, labels=labels), ""]
    return out


def _test_section(results: Results, metric: str, min_support: object) -> list[str]:
    out = [f"## Test window: tuned weights against off ({metric}, per query)", "",
           explain(label_source(results.provenance)), ""]
    comparison = results.test_comparison
    if comparison is None:
        return [*out, f"Not in this bundle (no {TEST_COMPARISON}): the weight search "
                "was not run (`msprlab ablate` writes no test window comparison).", ""]
    out += _explored(results)
    header = ["group", "n", "off", "tuned", "Δ", "CI of Δ", "p (adj)", "significant"]
    for group_by, title in (("intent", "By intent label"),
                            ("question_type", "By question type")):
        rows = comparison_rows(comparison.filter(pl.col("arm") == "tuned")
                               if "tuned" in comparison.get_column("arm").to_list()
                               else comparison, metric, ("overall", group_by))
        out += [f"### {title}", ""]
        out += _table(header, [[r.label, r.n, r.mean_base, r.mean_arm, r.delta, r.ci, r.p_t,
                                r.significant] for r in rows],
                      right=[False, *([True] * 6), False])
        out.append("")
    return [*out, *_legend(comparison, min_support), ""]


def _ablation_section(results: Results, metrics: list[str]) -> list[str]:
    out = ["## Ablation: change against off, overall (per query)", "",
           explain(label_source(results.provenance)), ""]
    comparison = results.ablation_comparison
    if comparison is None:
        reason = ("the bundle has no ablation/ (a `tune` run)" if results.ablation_summary
                  is None else "no comparison was made (see the notes)")
        return [*out, f"Not in this bundle: {reason}.",
                *(f"- note: {n}" for n in results.ablation_notes), ""]
    overall = comparison.filter(pl.col("group_by") == "overall")
    arms = overall.get_column("arm").unique(maintain_order=True).to_list()
    rows = []
    for arm in arms:
        cells = [arm]
        for metric in metrics:
            hit = overall.filter(pl.col("arm") == arm, pl.col("metric") == metric)
            if not hit.height:
                cells.append("–")
                continue
            r = hit.row(0, named=True)
            marks = ", ".join(m for m in (significance(r["p_t_adj"]), mark(r)) if m)
            cells.append(f"{fmt_delta(r['delta'])} "
                         f"{fmt_ci(r['ci_low'], r['ci_high'], signed=True)}"
                         + (f" ({marks})" if marks else ""))
        rows.append(cells)
    n = overall.get_column("n").max() if overall.height else None
    out += [f"Mean paired delta (arm − off) with its CI (at its family's level, paired with "
            f"the adjusted p), over {fmt(n)} test queries with a relevant memory; (yes): "
            f"adjusted p below {ALPHA}; {MARKS['confirmatory']}: a confirmatory row, with the "
            "decision table's figures.", ""]
    out += _table(["arm", *metrics], rows, right=[False, *([True] * len(metrics))])
    out += ["", *(f"- {line}" for line in methods(comparison))]
    return [*out, *(f"- note: {n}" for n in results.ablation_notes), ""]


def _funnel_section(results: Results, metric: str | None) -> list[str]:
    out = ["## Stage funnel (per query, test window)", ""]
    if results.funnel is None:
        return [*out, f"Not in this bundle: {ABLATION_FUNNEL} and {TEST_FUNNEL} "
                "are absent (bundles written before the stage funnel have none).", ""]
    metric = metric or "the primary metric"
    out += [f"Where {metric} is lost between the dense seeds and the returned list, per arm.",
            ""]
    out += _table(FUNNEL_HEADER, funnel_rows(results.funnel))
    return [*out, "", funnel_explain(metric, label_source(results.provenance)), ""]


def _side_effects_section(results: Results, metric: str) -> list[str]:
    effects = results.side_effects
    if effects is None or not effects.height:
        return []
    out = [f"## Side effects at zero weight ({metric})", "",
           "`on-zero` minus `on-zero` with one recording block off: what recording that "
           "block does to the ranking when every new weight is 0.", ""]
    rows = [list(r.values()) for r in side_effect_rows(effects, metric)]
    out += _table(["block", "unit", "n", "without it", "on-zero", "effect", "CI", "p (adj)",
                   "searches whose top 10 changed"], rows, right=[False, False, *([True] * 7)])
    return [*out, "", *(f"- {line}" for line in methods(
        effects.filter(pl.col("metric") == metric, pl.col("group_by") == "overall"))), ""]


def _weights_section(results: Results) -> list[str]:
    out = ["## Recommended weights", ""]
    view = study_view(results.trials, results.study)
    weights = view.best_weights
    if not weights and results.snippet is not None:
        retrieval = (results.snippet.get("context_graph") or {}).get("retrieval") or {}
        weights = {k: float(v) for k, v in retrieval.items() if isinstance(v, int | float)}
    if not weights:
        return [*out, "Not in this bundle: no weight search (study/ and "
                f"{SNIPPET} are absent).", ""]
    if view.counts:
        out += [f"Weight search: {sum(view.counts.values()):,} trials ("
                + ", ".join(f"{n:,} {s.lower()}" for s, n in view.counts.items()) + ").", ""]
    if view.best_number is not None:
        values = ", ".join(f"{k} {fmt(v)}" for k, v in view.best_values.items())
        base = ", ".join(f"{k} {fmt(v)}" for k, v in view.baseline_values.items())
        out += [f"Best trial {view.best_number} (train window): {values}"
                + (f"; baseline trial: {base}" if base else "") + ".", ""]
    out += _table(["weight", "value"], [[k, fmt(v)] for k, v in weights.items()])
    where = (f"{SNIPPET} (pastes into `Memory.from_config`)"
             if results.snippet is not None else "no ContextKit snippet in this bundle")
    return [*out, "", f"Config snippet: {where}.", ""]


def _audit_section(results: Results) -> list[str]:
    out = ["## Isolation audit", ""]
    audit = results.audit
    if audit is None:
        return [*out, f"Not in this bundle: {ISOLATION_AUDIT} is absent.", ""]
    rows = []
    cells = {(r["arm"], r["mode"]): r for r in audit.iter_rows(named=True)}
    for arm in audit.get_column("arm").unique(maintain_order=True).to_list():
        row = [arm]
        for mode in ("compat", "strict"):
            r = cells.get((arm, mode))
            row.append("–" if r is None else
                       f"{fmt(r['leaked'])} of {fmt(r['returned'])} ({fmt(r['leaked_searches'])} "
                       "searches)")
        rows.append(row)
    out += ["Returned results from a tenant or role the searcher may not see (test window); "
            "compat = the library, strict = graph neighbours judged too.", ""]
    return [*out, *_table(["arm", "leaked, compat", "leaked, strict"], rows), ""]


def _provenance_section(results: Results) -> list[str]:
    items = provenance_items(results.provenance)
    if not items:
        return ["## Provenance", "", f"Not in this bundle: {PROVENANCE} is absent.", ""]
    return ["## Provenance", "", *(f"- **{label}**: {_cell(value)}" for label, value in items),
            ""]


def render_markdown(results: Results) -> str:
    """The summary of `results` as markdown text (ends with one newline)."""
    record = results.provenance or {}
    metric = primary_metric(results.provenance, results.test_comparison,
                            results.ablation_comparison, results.ablation_summary)
    config = record.get("config") or {}
    min_support = (config.get("metrics") or {}).get("min_support")
    metrics = []
    for frame in (results.ablation_comparison, results.test_comparison):
        if frame is not None:
            metrics += [m for m in frame.get_column("metric").unique(maintain_order=True)
                        if m not in metrics]
    title = record.get("experiment") or results.folder.name
    out = [f"# msprlab report: {title}", "",
           f"Bundle `{results.folder.name}`, command `{record.get('command', 'unknown')}`."
           f" Primary metric: {metric or 'none'}. All numbers are measured on the test window "
           "of the time split unless marked train.", ""]
    if note := label_note(results.provenance):
        out += [note + ".", ""]
        if line := judged_line(results.ablation_comparison, results.test_comparison):
            out += [line, ""]
    if results.missing:
        out += ["Not in this bundle: " + ", ".join(f"`{m}`" for m in results.missing) + ".",
                ""]
    out += _decision_section(results, min_support)
    if metric is not None:
        out += _test_section(results, metric, min_support)
    out += _ablation_section(results, metrics)
    out += _funnel_section(results, metric)
    if metric is not None:
        out += _side_effects_section(results, metric)
    out += _weights_section(results)
    out += config_markdown(results.config)
    out += _audit_section(results)
    out += _provenance_section(results)
    return "\n".join(out).rstrip("\n") + "\n"
