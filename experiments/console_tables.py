"""Console tables for experiment results: what moved, by how much, how sure we are."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import polars as pl
from rich import box
from rich.table import Table

from .decision.detail import mark
from .measures.compare import families_caption
from .measures.metrics import parse_metric

__all__ = ["arms_table", "audit_table", "comparison_table", "delta_matrix", "family_caption", "fmt",
           "funnel_group_table", "funnel_table", "judged_shares", "ladder_table", "mean_caption",
           "reference_table", "side_effect_table", "summary_table"]


def fmt(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def _p(value: float | None) -> str:
    """An adjusted p-value."""
    if value is None or math.isnan(value):
        return "–"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _p_cell(r: Mapping[str, object]) -> str:
    """A row's adjusted p (n.t.: not tested), marked where it shows a verdict row's figures
    (C: the confirmatory family's, V: the per-intent verdicts', `decision.detail`)."""
    text = _p(r["p_t_adj"]) if r.get("tested", True) else "n.t."  # type: ignore[arg-type]
    return f"{text} {mark(r)}" if mark(r) else text


def _mean_cell(r: Mapping[str, object]) -> str:
    """A mean with its bootstrap CI."""
    return f"{fmt(r['mean'])} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"  # type: ignore[arg-type]


MC_ERROR_SHOWN = 0.0005  # a mean CI's Monte Carlo error is printed where it exceeds this


def mean_caption(rows: pl.DataFrame) -> str:
    """What the `mean [95% CI]` cells of `rows` (summary rows) are: the bootstrap, its
    resamples, and the Monte Carlo error of their bounds (`stats.mc_error`) for each cell
    where it exceeds `MC_ERROR_SHOWN` (at 10,000 resamples about 0.0006 per query and 0.002
    per search on LoCoMo), else that none does."""
    if not rows.height:
        return ""
    methods = "; ".join(rows.get_column("ci_method").unique(maintain_order=True).to_list())
    text = f"mean [95% CI]: {methods}, each arm its own resample stream"
    if "ci_mc_error" not in rows.columns:
        return text
    errors = rows.filter(pl.col("ci_mc_error").is_not_nan() & pl.col("ci_mc_error").is_not_null())
    over = errors.filter(pl.col("ci_mc_error") > MC_ERROR_SHOWN)
    if not over.height:
        return (text + f"; the bounds' Monte Carlo error is at most {MC_ERROR_SHOWN:g}"
                if errors.height else text)
    units = "unit" in rows.columns and rows.get_column("unit").n_unique() > 1
    named = ", ".join(
        (f"{r['arm']}" if "arm" in over.columns else "") + (f" per {r['unit']}" if units else "")
        + f" {r['ci_mc_error']:.4f}" for r in over.iter_rows(named=True))
    rest = errors.height - over.height
    return (text + f"; the bounds' Monte Carlo error (one standard error), where above "
            f"{MC_ERROR_SHOWN:g}: {named.strip()}"
            + (f" (the other {rest} at most {MC_ERROR_SHOWN:g})" if rest else ""))


def family_caption(comparison: pl.DataFrame,
                   name: Callable[[Mapping[str, object]], str] | None = None) -> str:
    """The families of a comparison's rows, said once (`compare.families_caption`: the
    confirmatory rows marked C, the exploratory families' method and sizes), and the
    test(s)."""
    if not comparison.height:
        return ""
    tests = comparison.get_column("t_test").unique(maintain_order=True).to_list()
    return "; ".join([families_caption(comparison, name), *(f"test: {t}" for t in tests)])


def _arm_and_group(r: Mapping[str, object], previous: object) -> tuple[str, str]:
    """A row's arm (blank under the same arm's previous row) and group label (`*`: below
    the minimum support)."""
    group = str(r["group"]) if r["group_by"] == "overall" else (
        f"{r['group_by']}={'(unlabelled)' if r['group'] is None else r['group']}")
    if r["low_support"]:
        group += " *"
    return (str(r["arm"]) if r["arm"] != previous else ""), group


def comparison_table(comparison: pl.DataFrame, *, metric: str, title: str,
                     group_by: Sequence[str] = ("overall", "intent", "question_type"),
                     base_label: str = "reference", arm_label: str | None = None,
                     caption: str = "") -> Table:
    """One row per (arm, group): n, the two means, the delta with its CI, the adjusted p.

    Groups below the minimum support are marked `*` (read them with care); rows outside
    the multiple-testing family show `n.t.`. `caption` names the families (one per
    breakdown), their sizes and the intervals' levels."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD,
                  caption=caption or None, caption_justify="left")
    for column in ("arm", "group", "n", base_label, arm_label or "arm mean", "delta",
                   "CI", "p (adj)"):
        table.add_column(column, justify="left" if column in ("arm", "group") else "right",
                         no_wrap=True)
    rows = comparison.filter(pl.col("metric") == metric, pl.col("group_by").is_in(group_by))
    previous = None
    for r in rows.iter_rows(named=True):
        arm, group = _arm_and_group(r, previous)
        previous = r["arm"]
        table.add_row(arm, group, f"{r['n']:,}", fmt(r["mean_base"]), fmt(r["mean_arm"]),
                      f"{r['delta']:+.4f}" if not math.isnan(r["delta"]) else "–",
                      _ci(r), _p_cell(r))
    return table


def _ci(r: Mapping[str, object]) -> str:
    """A delta's interval, signed like the delta."""
    low, high = r["ci_low"], r["ci_high"]
    if not isinstance(low, float) or not isinstance(high, float) or math.isnan(low):
        return "[–, –]"
    return f"[{low:+.4f}, {high:+.4f}]"


def summary_table(summary: pl.DataFrame, *, metric: str, title: str) -> Table:
    """Per arm and group: n, mean and its bootstrap CI, and the queries left out."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("arm", "group", "n", "mean", "95% CI", "no relevant"):
        table.add_column(column, justify="left" if column in ("arm", "group") else "right",
                         no_wrap=True)
    previous = None
    for r in summary.filter(pl.col("metric") == metric).iter_rows(named=True):
        arm, group = _arm_and_group(r, previous)
        previous = r["arm"]
        table.add_row(arm, group, f"{r['n']:,}", fmt(r["mean"]),
                      f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]", f"{r['n_no_relevant']:,}")
    return table


def _group_label(group_by: str, group: str | None) -> str:
    if group_by == "overall":
        return "overall"
    if group is None:
        return "(unlabelled)"
    short = {"question_type": "", "intent": ""}[group_by]
    return f"{short}{group}"


def delta_matrix(comparison: pl.DataFrame, *, metric: str, title: str,
                 alpha: float = 0.05, family: str = "") -> Table:
    """Arms down, groups across: the mean paired delta against the baseline, marked `+`/`-`
    where its CI excludes 0 and `*` where its adjusted p < alpha (with Bonferroni the two
    agree). The header gives each group's n (queries with a relevant memory)."""
    rows = comparison.filter(pl.col("metric") == metric)
    groups = rows.select("group_by", "group", "n").unique(["group_by", "group"],
                                                             maintain_order=True)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD,
                  caption=f"+/-: CI excludes 0; *: adjusted p < {alpha}; n: queries with a "
                          "relevant memory; groups under the minimum support in italics (not "
                          "tested)" + (f"; {family}" if family else ""),
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
                              pl.col("group").eq_missing(g["group"]))  # a null group too
            if hit.height == 0 or hit["delta"].is_nan().all():
                cells.append("–")
                continue
            r = hit.row(0, named=True)
            signs = ""
            if r["ci_low"] > 0:
                signs += "+"
            elif r["ci_high"] < 0:
                signs += "-"
            if r["p_t_adj"] == r["p_t_adj"] and r["p_t_adj"] < alpha:
                signs += "*"
            if shown := mark(r):
                signs += f" {shown}"
            text = f"{r['delta']:+.4f}{signs}"
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


def _delta_cell(r: dict | None) -> tuple[str, str]:
    """(delta with its CI, adjusted t-test p) of one comparison row."""
    if r is None or r["delta"] is None or math.isnan(r["delta"]):
        return "–", "–"
    return f"{r['delta']:+.4f} [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]", _p_cell(r)


def judged_shares(summary: pl.DataFrame, judged: str, unit: str, *, ratio: float
                  ) -> dict[str, tuple[float, bool]]:
    """Per arm, overall: its mean judged share (`judged`, e.g. judged@10) and whether it is
    assessable: at least `ratio` times the best-judged arm's share."""
    rows = summary.filter(pl.col("metric") == judged, pl.col("group_by") == "overall",
                          pl.col("unit") == unit)
    shares = {r["arm"]: r["mean"] for r in rows.iter_rows(named=True)
              if r["mean"] is not None and not math.isnan(r["mean"])}
    best = max(shares.values(), default=0.0)
    return {arm: (share, best > 0 and share >= ratio * best) for arm, share in shares.items()}


def ladder_table(summary: pl.DataFrame, comparison: pl.DataFrame, match: pl.DataFrame, *,
                 metric: str, unit: str, title: str, judged: str | None = None,
                 min_judged_ratio: float = 0.5) -> Table:
    """One row per arm, overall: its mean with a CI, its delta against `off` and against
    `on-zero` with CIs and adjusted p (exploratory: the decision table holds the
    confirmatory rows), and its match rate to the logged rankings. `unit` is query (every
    question once) or search (traffic-weighted).
    `judged` (verdict labels): a judged-share column, and arms below `min_judged_ratio` of
    the best-judged arm's share marked "not assessable"."""
    n_label = "queries" if unit == "query" else "searches"
    cmp = comparison.filter(pl.col("metric") == metric, pl.col("group_by") == "overall",
                            pl.col("unit") == unit) if comparison.height else comparison
    shares = {} if judged is None else judged_shares(summary, judged, unit,
                                                     ratio=min_judged_ratio)
    rows = summary.filter(pl.col("metric") == metric, pl.col("group_by") == "overall",
                          pl.col("unit") == unit)
    judged_caption = "" if judged is None else (
        f"; {judged}: judged share of the top {parse_metric(judged).k} (verdicts exist only for "
        f"memories the logging ranker showed, so the labels favour it); not assessable: a "
        f"judged share below {min_judged_ratio:g} x the best-judged arm's, too few of its "
        "results are labelled to score it")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, caption=(
        f"n: {n_label} with a relevant memory; Δ off: against MSPR off (the context graph "
        "alone, the rollout's reference); Δ on-zero: against MSPR on at zero new weights "
        "(what recording verdicts and accesses does by itself is the difference between the "
        "two); " + (family_caption(cmp, lambda r: f"Δ {r['reference']}")
                    if cmp.height else "no comparison") +
        " (n.t.: not tested); " + mean_caption(rows) + "; match: "
        "share of evaluated rankings equal to the logged one (the rest see frozen feedback "
        "that is counterfactual for them)" + judged_caption), caption_justify="left")
    columns = ["arm", "n", "mean [95% CI]", "Δ off [CI]", "p (adj)", "Δ on-zero [CI]",
               "p (adj) ", "match"] + ([judged] if judged else [])
    for column in columns:
        table.add_column(column, justify="left" if column == "arm" else "right", no_wrap=True)
    rates = {r["arm"]: r for r in match.iter_rows(named=True)}

    def delta(reference: str, arm: str) -> dict | None:
        if not cmp.height:
            return None
        hit = cmp.filter(pl.col("reference") == reference, pl.col("arm") == arm)
        return hit.row(0, named=True) if hit.height else None

    for r in rows.iter_rows(named=True):
        m = rates.get(r["arm"])
        share = shares.get(r["arm"])
        name = r["arm"] if share is None or share[1] else f"{r['arm']} (not assessable)"
        table.add_row(name, f"{r['n']:,}", _mean_cell(r),
                      *_delta_cell(delta("off", r["arm"])),
                      *_delta_cell(delta("on-zero", r["arm"])),
                      f"{m['rate']:.1%}" if m and m["logged"] else "–",
                      *([] if judged is None else [_pct(None if share is None else share[0])]))
    return table


def reference_table(summary: pl.DataFrame, comparison: pl.DataFrame, *, metric: str,
                    title: str, seconds: Mapping[str, float],
                    labels: Mapping[str, str]) -> Table:
    """One row per reference ranker and unit, overall: its mean with a CI, n, its delta
    against `off` with a CI and Holm-adjusted t-test p, and what ranking every search cost;
    `labels` (name -> how it ranks) make the caption."""
    overall = (pl.col("metric") == metric) & (pl.col("group_by") == "overall")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, caption=(
        "references, not arms: not tuned, same searches, qrels and visibility (the query "
        "owner's memories that exist at search time) as the ladder; n: queries or searches "
        "with a relevant memory; Δ off: reference minus off (MSPR disabled), paired; "
        + family_caption(comparison.filter(overall)) + "; "
        + mean_caption(summary.filter(overall)) +
        "; seconds: ranking every search, indexing included. "
        + "; ".join(f"{name}: {label}" for name, label in labels.items())),
        caption_justify="left")
    for column in ("reference", "unit", "n", "mean [95% CI]", "Δ off [CI]", "p (adj)",
                   "seconds"):
        table.add_column(column, justify="left" if column in ("reference", "unit") else "right",
                         no_wrap=True)
    deltas = {(r["arm"], r["unit"]): r for r in comparison.filter(overall).iter_rows(named=True)}
    for r in summary.filter(overall).iter_rows(named=True):
        table.add_row(r["arm"], f"per {r['unit']}", f"{r['n']:,}", _mean_cell(r),
                      *_delta_cell(deltas.get((r["arm"], r["unit"]))),
                      f"{seconds[r['arm']]:.2f}")
    return table


_SYMBOL = {"alpha_dense": "α dense", "beta_bm25": "β lexical", "gamma_graph": "γ graph",
           "delta_personal": "δ personal", "epsilon_frequency": "ε freq",
           "zeta_success": "ζ success", "frequency": "freq."}


def arms_table(arms: pl.DataFrame) -> Table:
    """Every arm's full definition: the switches it runs with and the six weights."""
    table = Table(title="ablation arms: switches and weights", title_justify="left",
                  box=box.SIMPLE_HEAD)
    flags = ("mspr", "feedback", "success", "frequency", "intent", "roles")
    weights = [c for c in arms.columns if c not in ("name", *flags)]
    for column in ("arm", *flags, *weights):
        table.add_column(_SYMBOL.get(column, column),
                         justify="left" if column == "arm" else "right", no_wrap=True)
    for r in arms.iter_rows(named=True):
        table.add_row(r["name"], *("on" if r[f] else "off" for f in flags),
                      *(f"{r[w]:g}" for w in weights))
    return table


def side_effect_table(effects: pl.DataFrame, *, metric: str, labels: str) -> Table:
    """Per recording block: `on-zero` against `on-zero` without that block, i.e. what the
    block does to the ranking at zero weight, per query and per search (each row names its
    unit); `labels` names the label source."""
    table = Table(title=f"side effects at zero weight, test window: {metric} of on-zero minus "
                        f"on-zero with one recording block off (reference: the block off), "
                        f"per query and per search; labels: {labels}", title_justify="left",
                  box=box.SIMPLE_HEAD, caption=(
                      "a block records state even at weight 0: feedback bumps relevance and "
                      "ratchets floors, frequency moves decay recency through accesses, "
                      "success rows only feed ζ; top-10 changed: searches whose top 10 "
                      "differs from on-zero's; the detail of the decision's record-BLOCK "
                      "rows, " + family_caption(effects.filter(
                          (pl.col("metric") == metric) & (pl.col("group_by") == "overall")))),
                  caption_justify="left")
    for column in ("block", "unit", "n", "without it", "on-zero", "effect [CI]", "p (adj)",
                   "top-10 changed"):
        table.add_column(column, justify="left" if column in ("block", "unit") else "right",
                         no_wrap=True)
    rows = effects.filter(pl.col("metric") == metric, pl.col("group_by") == "overall")
    for r in rows.iter_rows(named=True):
        d, p = _delta_cell(r)
        table.add_row(r["block"], f"per {r['unit']}", f"{r['n']:,}", fmt(r["mean_base"]),
                      fmt(r["mean_arm"]), d, p,
                      f"{r['top10_changed']:,} / {r['searches']:,} "
                      f"({r['top10_changed'] / max(1, r['searches']):.1%})")
    return table


def _pct(value: float | None) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.1%}"


def funnel_table(wide: pl.DataFrame, *, metric: str, title: str) -> Table:
    """One row per arm and unit, overall: seed recall, pool recall, the pool's ceiling,
    the achieved value, the share of the ceiling reached and the share lost before the
    rerank (`funnel.shares` rows)."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, caption=(
        f"n: queries or searches with a relevant memory; seed recall: relevant memories "
        f"among the dense seeds / all relevant; pool recall: among the seeds and their "
        f"graph expansion; ceiling: {metric} of the pool in ideal order (the best any "
        f"weights can do); achieved: the arm's {metric}; share: achieved / ceiling (ratio "
        "of the means); lost: per query, the mean over questions of the share of each "
        "question's searches whose pool holds no relevant memory; per search, the share of "
        "searches (lost before the "
        "rerank)"), caption_justify="left")
    for column in ("arm", "unit", "n", "seed recall", "pool recall", "ceiling", "achieved",
                   "share", "lost"):
        table.add_column(column, justify="left" if column in ("arm", "unit") else "right",
                         no_wrap=True)
    for unit in ("query", "search"):
        for r in wide.filter(pl.col("group_by") == "overall",
                             pl.col("unit") == unit).iter_rows(named=True):
            table.add_row(r["arm"], f"per {unit}", f"{r['n']:,}", _pct(r["seed_recall"]),
                          _pct(r["pool_recall"]), fmt(r["ceiling"]), fmt(r["achieved"]),
                          _pct(r["share"]), _pct(r["lost"]))
    return table


def _same(a: float | None, b: float | None) -> bool:
    nan_a, nan_b = a is None or math.isnan(a), b is None or math.isnan(b)
    return (nan_a and nan_b) or (not nan_a and not nan_b and abs(a - b) < 1e-12)  # type: ignore[operator]


def funnel_group_table(wide: pl.DataFrame, *, reference: str, arms: Sequence[str],
                       group_by: str, title: str) -> Table:
    """Per group, per query: the `reference` arm's funnel (seed and pool recall, ceiling,
    lost) and every arm's achieved value with its share of its own ceiling."""
    part = wide.filter(pl.col("unit") == "query",
                       pl.col("group_by").is_in(["overall", group_by]))
    ref = part.filter(pl.col("arm") == reference)
    cells = {(r["arm"], r["group_by"], r["group"]): r for r in part.iter_rows(named=True)}
    # Arms whose pool differs from the reference's: their share is of their own ceiling.
    own = sorted({arm for (arm, by, group), c in cells.items() if arm in arms and not
                  _same(c["pool_recall"], cells[(reference, by, group)]["pool_recall"])})
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, caption=(
        f"n: queries with a relevant memory; seed/pool recall, ceiling and lost: the pool "
        f"of {reference}" + (f" (the pools of {', '.join(own)} differ)" if own else
                             ", shared by every arm shown") +
        "; per arm: achieved (share of its own ceiling)"), caption_justify="left")
    for column in ("group", "n", "seed", "pool", "ceiling", "lost", *arms):
        table.add_column(column, justify="left" if column == "group" else "right",
                         no_wrap=True)
    for r in ref.iter_rows(named=True):
        values = []
        for arm in arms:
            c = cells.get((arm, r["group_by"], r["group"]))
            values.append("–" if c is None else f"{fmt(c['achieved'])} ({_pct(c['share'])})")
        table.add_row(_group_label(r["group_by"], r["group"]), f"{r['n']:,}",
                      _pct(r["seed_recall"]), _pct(r["pool_recall"]), fmt(r["ceiling"]),
                      _pct(r["lost"]), *values)
    return table
