"""Numbers and marks as the report prints them, shared by the HTML and markdown renderers.

Significance is read from the comparison frame's adjusted p-values: a test is marked when
its adjusted p is below `ALPHA`. The method text (which CI, which tests, which correction)
comes from the frame's own method columns, so the printed statement cannot drift from
what `experiments.measures.stats.compare` computed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import polars as pl

from msprlab.experiments.bundle import SNIPPET
from msprlab.experiments.decision.answer import answer
from msprlab.experiments.decision.detail import mark
from msprlab.experiments.measures.compare import families_caption

__all__ = ["ALPHA", "FUNNEL_HEADER", "LOW_SUPPORT_MARK", "ComparisonRow", "comparison_rows",
           "decision_answer", "explain", "fmt", "fmt_ci", "fmt_delta", "fmt_p", "fmt_pct",
           "funnel_explain", "funnel_rows", "group_label", "judged_line", "label_note",
           "label_source", "methods", "p_cell", "primary_metric", "side_effect_rows",
           "significance"]

ALPHA = 0.05
LOW_SUPPORT_MARK = "†"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt(value: Any, digits: int = 4) -> str:
    """A number at fixed precision; "–" for missing or NaN."""
    if _missing(value):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def fmt_delta(value: Any, digits: int = 4) -> str:
    return "–" if _missing(value) else f"{value:+.{digits}f}"


def fmt_ci(low: Any, high: Any, *, signed: bool = False) -> str:
    if _missing(low) or _missing(high):
        return "–"
    one = fmt_delta if signed else fmt
    return f"[{one(low)}, {one(high)}]"


def fmt_pct(value: Any) -> str:
    """A share as a percentage at one decimal; "–" for missing or NaN."""
    return "–" if _missing(value) else f"{value:.1%}"


def fmt_p(value: Any, bound: Any = False) -> str:
    """A p-value; `bound`: the smallest the permutation count could give (an upper bound)."""
    if _missing(value):
        return "–"
    text = "<0.001" if value < 0.001 else f"{value:.3f}"
    return f"≤{text}" if bound is True and not text.startswith("<") else text


def group_label(group_by: str, group: str | None) -> str:
    if group_by == "overall":
        return "overall"
    return "(none)" if group is None else str(group)


def significance(p_adj: Any, alpha: float = ALPHA) -> str:
    """"yes" where the row's adjusted p is below `alpha`, else "" (one test per row)."""
    return "yes" if not _missing(p_adj) and p_adj < alpha else ""


@dataclass(frozen=True)
class ComparisonRow:
    """One (arm, group) row of a comparison for one metric, formatted."""

    arm: str
    group_by: str
    group: str
    low_support: bool
    n: str
    n_no_relevant: str
    mean_base: str
    mean_arm: str
    delta: str
    ci: str
    p_t: str
    significant: str
    direction: int  # +1 / -1 where a test rejects and the delta has that sign, else 0
    confirmatory: bool = False  # a verdict table's figures (p marked C or V)

    @property
    def label(self) -> str:
        return self.group + (f" {LOW_SUPPORT_MARK}" if self.low_support else "")


def comparison_rows(comparison: pl.DataFrame, metric: str,
                    group_by: tuple[str, ...] = ("overall", "intent", "question_type"),
                    ) -> list[ComparisonRow]:
    """The rows of `metric` in the given groupings: per arm (in the frame's order), its
    rows in the order of `group_by` (overall first), then in the frame's order."""
    rows = []
    part = comparison.filter(pl.col("metric") == metric, pl.col("group_by").is_in(group_by))
    order = {g: i for i, g in enumerate(group_by)}
    arms = {a: i for i, a in enumerate(part.get_column("arm").unique(maintain_order=True))}
    indexed = sorted(enumerate(part.iter_rows(named=True)), key=lambda item: (
        arms[item[1]["arm"]], order[item[1]["group_by"]], item[0]))
    for _, r in indexed:
        marks = significance(r["p_t_adj"])
        confirmatory = bool(r.get("confirmatory"))
        direction = 0
        if marks and not _missing(r["delta"]) and r["delta"] != 0:
            direction = 1 if r["delta"] > 0 else -1
        rows.append(ComparisonRow(
            arm=r["arm"], group_by=r["group_by"], group=group_label(r["group_by"], r["group"]),
            low_support=bool(r["low_support"]), n=fmt(r["n"]),
            n_no_relevant=fmt(r["n_no_relevant"]), mean_base=fmt(r["mean_base"]),
            mean_arm=fmt(r["mean_arm"]), delta=fmt_delta(r["delta"]),
            ci=fmt_ci(r["ci_low"], r["ci_high"], signed=True),
            p_t=fmt_p(r["p_t_adj"]) + (f" {mark(r)}" if confirmatory else ""),
            significant=marks, direction=direction, confirmatory=confirmatory))
    return rows


def label_source(provenance: dict[str, Any] | None) -> str:
    """Where the bundle's relevance labels come from, as the report writes it (bundles
    written before the labels were recorded were scored on the dataset's qrels)."""
    labels = (provenance or {}).get("labels") or {}
    source = labels.get("source", "dataset qrels")
    shown = {"dataset qrels": "the dataset's qrels"}.get(source, source)
    # the replay's fidelity to production, where it was measured (experiments/fidelity)
    return f"{shown} ({labels['fidelity']})" if labels.get("fidelity") else shown


def label_note(provenance: dict[str, Any] | None) -> str | None:
    """For verdict labels: what the derivation counted and the bias, one paragraph."""
    return ((provenance or {}).get("labels") or {}).get("note")


def judged_line(*comparisons: pl.DataFrame | None) -> str | None:
    """The judged share of each arm's top K, per query, from the comparisons' judged@K rows
    (`off` as their base, every arm as its own): printed beside verdict-labelled figures,
    None when no judged@K was measured."""
    shares: dict[str, float] = {}
    name = None
    for frame in comparisons:
        if frame is None or not frame.height:
            continue
        rows = frame.filter(pl.col("metric").str.starts_with("judged@"),
                            pl.col("group_by") == "overall")
        for r in rows.iter_rows(named=True):
            name = r["metric"]
            shares.setdefault("off", r["mean_base"])
            shares.setdefault(r["arm"], r["mean_arm"])
    if name is None:
        return None
    return (f"Judged share of each arm's top {name.split('@')[1]} ({name}, per query): "
            + ", ".join(f"{arm} {fmt_pct(v)}" for arm, v in shares.items()) + ".")


def explain(labels: str) -> str:
    """What every delta in the report is against, why on-zero differs, and the labels."""
    return ("Deltas are against `off` (MSPR disabled: the context graph alone, the ranking "
            "the rollout decision is about); `on-zero` (MSPR on, new weights at 0) differs "
            "from it by what recording verdicts and accesses does to relevance by itself, so "
            "a delta against `on-zero` (in the bundle) leaves that effect out. Labels: "
            f"{labels}; n counts distinct questions.")


def decision_answer(results: Any) -> list[str]:
    """The plain-language answer under the verdict table (`decision.answer`), from a
    bundle's verdicts: the same sentences the console printed."""
    if results.decision is None:
        return []
    notes = results.decision_notes or {}
    return answer(results.decision, snippet=SNIPPET if notes.get("snippet") else "")


def p_cell(r: dict[str, Any]) -> str:
    """A comparison row's adjusted p ("n.t.": not tested), marked where the row shows a
    verdict row's figures (C: confirmatory, V: the per-intent verdicts, `decision.detail`)."""
    text = fmt_p(r.get("p_t_adj")) if r.get("tested", True) else "n.t."
    return f"{text} {mark(r)}" if mark(r) else text


def side_effect_rows(effects: pl.DataFrame, metric: str) -> list[dict[str, str]]:
    """The overall side-effect rows of `metric`, formatted: one per block and unit."""
    return [{"block": r["block"], "unit": f"per {r['unit']}", "n": fmt(r["n"]),
             "without": fmt(r["mean_base"]), "with": fmt(r["mean_arm"]),
             "delta": fmt_delta(r["delta"]), "ci": fmt_ci(r["ci_low"], r["ci_high"], signed=True),
             "p": p_cell(r),
             "changed": f"{r['top10_changed'] / max(1, r['searches']):.1%}"}
            for r in effects.filter(pl.col("metric") == metric,
                                    pl.col("group_by") == "overall").iter_rows(named=True)]


FUNNEL_HEADER = ("arm", "n", "seed recall", "pool recall", "ceiling", "achieved", "share",
                 "lost")


def funnel_rows(funnel: pl.DataFrame) -> list[list[str]]:
    """The overall rows of `Results.funnel`, one per arm, as `FUNNEL_HEADER` cells: the
    recalls, share and lost as percentages, ceiling and achieved (metric values) at 4
    decimals."""
    return [[r["arm"], fmt(r["n"]), fmt_pct(r["seed_recall"]), fmt_pct(r["pool_recall"]),
             fmt(r["ceiling"]), fmt(r["achieved"]), fmt_pct(r["share"]), fmt_pct(r["lost"])]
            for r in funnel.filter(pl.col("group_by") == "overall").iter_rows(named=True)]


def funnel_explain(metric: str, labels: str = "the dataset's qrels") -> str:
    """What each funnel column means, in one sentence."""
    return ("Seed recall: the relevant memories among the dense seeds / all relevant "
            "memories of the query; pool recall: among the seeds and their graph expansion "
            f"(the candidates the rerank orders); ceiling: {metric} of that pool in ideal "
            f"order, the best any weights could do; achieved: the arm's {metric}; share: "
            "achieved / ceiling (ratio of the means); lost: the mean over questions of the share "
            "of each question's searches whose pool "
            f"holds no relevant memory (lost before the rerank); labels: {labels}; "
            "the unit is the query (a query's value is the mean over its searches, n counts "
            "distinct questions with a relevant memory).")


def methods(comparison: pl.DataFrame) -> list[str]:
    """The method statements of a comparison frame, one line each (distinct values). The
    tests' lines come from the rows inside the correction's family only (a row below the
    minimum support is not tested), and the exact sign-flip variants, which differ only in
    n, are merged into one line; the families (confirmatory rows, each exploratory
    family's method and size) in one line, as the console says them."""
    lines = []
    tested = comparison.filter(pl.col("tested")) if "tested" in comparison.columns \
        else comparison
    for column, what in (("ci_method", "CI of the delta"), ("t_test", "t-test")):
        frame = comparison if column == "ci_method" else tested
        if column in frame.columns:
            values = frame.get_column(column).unique(maintain_order=True).to_list()
            lines += [f"{what}: {v}" for v in _merge_exact([v for v in values if v])]
    if "correction" in comparison.columns and comparison.height:
        lines.append(f"multiple-testing correction: {families_caption(comparison)}")
    return lines


_EXACT = re.compile(r"^(.*exact, all 2\^n sign flips) \(n = (\d+)\)(.*)$")


def _merge_exact(values: list[str]) -> list[str]:
    merged: dict[tuple[str, str], list[int]] = {}
    out: list[str] = []
    for value in values:
        match = _EXACT.match(value)
        if match is None:
            out.append(value)
            continue
        key = (match.group(1), match.group(3))
        if key not in merged:
            merged[key] = []
            out.append(key)  # type: ignore[arg-type]  # replaced below, keeps the order
        merged[key].append(int(match.group(2)))
    return [f"{v[0]} (n = {', '.join(map(str, sorted(merged[v])))}){v[1]}"
            if isinstance(v, tuple) else v for v in out]


def primary_metric(provenance: dict[str, Any] | None, *frames: pl.DataFrame | None) -> str | None:
    """The experiment's primary metric (its config's `metrics.primary`), else the first
    metric of the first frame that has one."""
    config = (provenance or {}).get("config") or {}
    primary = (config.get("metrics") or {}).get("primary")
    names = [m for f in frames if f is not None and "metric" in f.columns
             for m in f.get_column("metric").unique(maintain_order=True).to_list()]
    if isinstance(primary, str) and (primary in names or not names):
        return primary
    return names[0] if names else None
