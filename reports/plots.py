"""The report's figures as PNG bytes, identical for identical input.

Figures are built on `matplotlib.figure.Figure` with the Agg canvas, never through pyplot,
so rendering a report touches no global backend or figure registry. Determinism: every
figure is drawn under matplotlib's default style plus `STYLE` (fixed font, sizes and SVG
hash salt, whatever the user's matplotlibrc says), at a fixed size and `DPI`, and saved
without the "Software" PNG text chunk (which would carry the matplotlib version); Agg PNGs
carry no timestamp. Same input and same matplotlib give the same bytes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager

import matplotlib as mpl
import matplotlib.style
import numpy as np
import polars as pl
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

__all__ = ["DPI", "STYLE", "ablation_chart", "examination_chart", "funnel_chart",
           "history_chart", "importance_chart", "parallel_chart"]

DPI = 100
STYLE: dict[str, object] = {
    "font.family": "DejaVu Sans",     # bundled with matplotlib: same glyphs everywhere
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "svg.hashsalt": "msprlab",
    "svg.fonttype": "none",
    "path.simplify": False,           # every point drawn, nothing depends on the view
}
_ARM_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf")
_GROUPINGS = (("overall", "overall"), ("intent", "by intent label"),
              ("question_type", "by question type"))


def _png(figure: Figure) -> bytes:
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _styled() -> AbstractContextManager[None]:
    return matplotlib.style.context(["default", STYLE])


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def ablation_chart(comparison: pl.DataFrame, metric: str, alpha: float = 0.05) -> bytes:
    """Horizontal bars of each arm's mean paired delta against off, with its CI as
    whiskers, one panel per grouping (overall, intent, question type).

    Groups below the minimum support are drawn faded and their label ends in "†"; a bar
    with an adjusted p (`p_t_adj`) below `alpha` gets a "*" past its
    whisker.
    """
    rows = comparison.filter(pl.col("metric") == metric)
    arms = rows.get_column("arm").unique(maintain_order=True).to_list()
    panels = []
    for group_by, title in _GROUPINGS:
        part = rows.filter(pl.col("group_by") == group_by)
        if part.height:
            groups = part.select("group", "n", "low_support").unique(
                "group", maintain_order=True).rows()
            panels.append((title, part, groups))
    if not panels:
        raise ValueError(f"ablation_chart: no comparison rows for metric {metric!r}")
    row = max(0.3, 0.16 * len(arms))  # inches per group
    heights = [row * len(groups) + 0.55 for _, _, groups in panels]
    with _styled():
        figure = _figure(8.0, sum(heights) + 0.9)
        axes = figure.subplots(len(panels), 1, squeeze=False,
                               gridspec_kw={"height_ratios": heights})[:, 0]
        bar = 0.8 / max(1, len(arms))
        labelled: set[str] = set()
        for ax, (title, part, groups) in zip(axes, panels, strict=True):
            for a, arm in enumerate(arms):
                mine = {r["group"]: r for r in part.filter(pl.col("arm") == arm)
                        .iter_rows(named=True)}
                for g, (group, _, _) in enumerate(groups):
                    r = mine.get(group)
                    if r is None or not _finite(r["delta"]):
                        continue
                    y = g + (a - (len(arms) - 1) / 2) * bar
                    err = None
                    if _finite(r["ci_low"]) and _finite(r["ci_high"]):
                        err = [[r["delta"] - r["ci_low"]], [r["ci_high"] - r["delta"]]]
                    ax.barh(y, r["delta"], height=bar * 0.9, xerr=err,
                            color=_ARM_COLOURS[a % len(_ARM_COLOURS)],
                            alpha=0.35 if r["low_support"] else 0.9,
                            error_kw={"elinewidth": 0.8, "capsize": 1.5, "ecolor": "#333333"},
                            label=None if arm in labelled else arm)
                    labelled.add(arm)
                    if _finite(r["p_t_adj"]) and r["p_t_adj"] < alpha:
                        end = r["ci_high"] if _finite(r["ci_high"]) else r["delta"]
                        ax.text(max(end, r["delta"]), y, " *", va="center", fontsize=8)
            ax.set_yticks(range(len(groups)), [
                f"{'overall' if group is None else group}  (n={n:,}){' †' if low else ''}"
                for group, n, low in groups])
            ax.set_ylim(len(groups) - 0.5, -0.5)
            ax.axvline(0.0, color="#333333", linewidth=0.8)
            ax.set_title(title, loc="left")
            ax.grid(axis="y", visible=False)
        axes[-1].set_xlabel(f"{metric}: arm − off (mean paired delta per query, CI at its "
                            "family's level)")
        unique: dict[str, Artist] = {}
        for ax in axes:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                unique.setdefault(label, handle)
        figure.legend(list(unique.values()), list(unique.keys()), loc="outside upper center",
                      ncols=min(len(unique), 6), frameon=False)
        return _png(figure)


# The funnel's bars, top to bottom: (column, label, colour, ink of a label inside the bar);
# darker = later stage.
_STAGES = (("seed_recall", "seed recall", "#9ecae1", "#1d2125"),
           ("pool_recall", "pool recall", "#6baed6", "#1d2125"),
           ("ceiling", "ceiling", "#3182bd", "white"),
           ("achieved", "achieved", "#08519c", "white"))
_FUNNEL_COLUMNS = 4  # panels per row


def _stage_text(column: str, value: float) -> str:
    """A bar's label: recalls as percentages, the metric's values at 3 decimals."""
    return f"{value:.1%}" if column.endswith("recall") else f"{value:.3f}"


def _funnel_panel(ax: Axes, row: dict[str, object]) -> None:
    """One arm's funnel: centred bars of `_STAGES` over a faint full-width bar (the scale:
    1), each labelled inside (or beside, when too narrow to hold its label)."""
    ax.barh(range(len(_STAGES)), 1.0, left=-0.5, height=0.8, color="#f0f2f5")
    for y, (column, _, colour, ink) in enumerate(_STAGES):
        value = row[column]
        if not isinstance(value, float) or not math.isfinite(value):
            ax.text(0.0, y, "–", ha="center", va="center", fontsize=8)
            continue
        ax.barh(y, value, left=-value / 2, height=0.8, color=colour)
        text = _stage_text(column, value)
        if value >= 0.3:
            ax.text(0.0, y, text, ha="center", va="center", fontsize=8, color=ink)
        else:
            ax.text(value / 2 + 0.02, y, text, ha="left", va="center", fontsize=8)
    share = row["share"]
    shown = f"{share:.1%}" if isinstance(share, float) and math.isfinite(share) else "–"
    ax.set_title(f"{row['arm']}: {shown} of ceiling", loc="center", fontsize=9)
    ax.set_xlim(-0.5, 0.5)
    ax.set_ylim(len(_STAGES) - 0.5, -0.5)
    ax.set_xticks([])
    ax.grid(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)


def funnel_chart(funnel: pl.DataFrame, metric: str) -> bytes:
    """The stage funnel, per query, overall: one small panel per arm (in the frame's order)
    with centred bars, top to bottom, of seed recall, pool recall, the pool's ceiling and
    the achieved value of `metric`, each labelled; the title gives the share of the ceiling
    reached. `funnel`: `Results.funnel` rows (a column per stage and `share`)."""
    rows = funnel.filter(pl.col("group_by") == "overall").rows(named=True)
    if not rows:
        raise ValueError("funnel_chart: no overall funnel rows")
    columns = min(_FUNNEL_COLUMNS, len(rows))
    lines = math.ceil(len(rows) / columns)
    with _styled():
        figure = _figure(2.25 * columns + 0.9, 1.45 * lines + 0.5)
        axes = figure.subplots(lines, columns, squeeze=False)
        for k, ax in enumerate(axes.flat):
            if k >= len(rows):
                ax.set_axis_off()
                continue
            _funnel_panel(ax, rows[k])
            first = k % columns == 0  # stage names on the first panel of each row only
            ax.set_yticks(range(len(_STAGES)), [stage[1] for stage in _STAGES]
                          if first else [""] * len(_STAGES))
            ax.tick_params(axis="y", length=0)
        figure.suptitle(f"stage funnel, per query: recall of the relevant memories among the "
                        f"dense seeds and the pool;\n{metric} of the pool in ideal order "
                        "(ceiling) and of the arm (achieved)", fontsize=9, x=0.01, ha="left")
        return _png(figure)


def history_chart(trials: pl.DataFrame, objective: str, *, maximize: bool = True) -> bytes:
    """Objective value per trial (complete trials) and the best value so far; the baseline
    trial (column `baseline`, when present) is marked and drawn as a reference line."""
    done = trials.filter(pl.col("state") == "COMPLETE", pl.col(objective).is_not_null(),
                         pl.col(objective).is_not_nan()).sort("number")
    x = done.get_column("number").to_numpy()
    y = done.get_column(objective).to_numpy().astype(np.float64)
    with _styled():
        figure = _figure(8.0, 3.2)
        ax = figure.subplots()
        ax.scatter(x, y, s=10, color="#1f77b4", alpha=0.6, label="trial", linewidths=0)
        if y.size:
            best = np.maximum.accumulate(y) if maximize else np.minimum.accumulate(y)
            ax.step(x, best, where="post", color="#d62728", linewidth=1.5, label="best so far")
        if "baseline" in done.columns:
            base = done.filter(pl.col("baseline"))
            if base.height:
                value = float(base.get_column(objective)[0])
                ax.axhline(value, color="#555555", linestyle="--", linewidth=0.8)
                ax.scatter(base.get_column("number").to_numpy(), [value], marker="D", s=30,
                           color="#ff7f0e", zorder=3, label=f"baseline ({value:.4f})")
        ax.set_xlabel("trial number")
        ax.set_ylabel(objective)
        ax.set_title(f"optimisation history: {objective} "
                     f"({'maximised' if maximize else 'minimised'})", loc="left")
        ax.legend(loc="best", frameon=False)
        return _png(figure)


def importance_chart(importance: Mapping[str, Mapping[str, float]]) -> bytes:
    """PED-ANOVA importance of each searched weight, one bar group per objective; weights
    sorted by their importance for the first objective (ties by name)."""
    objectives = list(importance)
    if not objectives:
        raise ValueError("importance_chart: no importance values")
    first = importance[objectives[0]]
    params = sorted({p for values in importance.values() for p in values},
                    key=lambda p: (-first.get(p, 0.0), p))
    with _styled():
        figure = _figure(8.0, 0.35 * len(params) * max(1, len(objectives)) + 1.0)
        ax = figure.subplots()
        bar = 0.8 / len(objectives)
        for k, objective in enumerate(objectives):
            values = [float(importance[objective].get(p, 0.0)) for p in params]
            ys = np.arange(len(params)) + (k - (len(objectives) - 1) / 2) * bar
            ax.barh(ys, values, height=bar * 0.9, color=_ARM_COLOURS[k % len(_ARM_COLOURS)],
                    label=objective)
            for y, v in zip(ys, values, strict=True):
                ax.text(v, y, f" {v:.3f}", va="center", fontsize=8)
        ax.set_yticks(range(len(params)), params)
        ax.set_ylim(len(params) - 0.5, -0.5)
        ax.set_xlim(0, max(1.0, ax.get_xlim()[1]) * 1.05)
        ax.set_xlabel("PED-ANOVA importance (sums to 1 per objective)")
        ax.set_title("parameter importance", loc="left")
        ax.grid(axis="y", visible=False)
        if len(objectives) > 1:
            ax.legend(frameon=False, loc="lower right")
        return _png(figure)


def parallel_chart(trials: pl.DataFrame, params: Sequence[str], objective: str, *,
                   ranges: Mapping[str, tuple[float, float]] | None = None,
                   best_number: int | None = None) -> bytes:
    """Parallel coordinates: one line per complete trial across the weight axes and the
    objective, coloured by the objective; the best trial is drawn in red on top.

    Each axis is scaled to [0, 1] by its searched range (`ranges`) when given, else by the
    values seen; the ends of each axis are labelled with the values they stand for.
    """
    done = trials.filter(pl.col("state") == "COMPLETE", pl.col(objective).is_not_null(),
                         pl.col(objective).is_not_nan()).sort(objective, "number")
    columns = [*params, objective]
    values = done.select(columns).to_numpy().astype(np.float64)
    bounds = []
    for j, name in enumerate(columns):
        if ranges is not None and name in ranges:
            low, high = ranges[name]
        else:
            low = float(values[:, j].min()) if values.size else 0.0
            high = float(values[:, j].max()) if values.size else 1.0
        bounds.append((low, high))
    scaled = np.column_stack([
        (values[:, j] - low) / (high - low) if high > low else np.full(len(values), 0.5)
        for j, (low, high) in enumerate(bounds)]) if values.size else values
    xs = np.arange(len(columns), dtype=np.float64)
    with _styled():
        figure = _figure(9.0, 3.8)
        ax = figure.subplots()
        norm = Normalize(*(bounds[-1] if bounds[-1][1] > bounds[-1][0]
                           else (bounds[-1][0] - 1, bounds[-1][1] + 1)))
        colours = mpl.colormaps["viridis"](norm(values[:, -1])) if values.size else None
        lines = [np.column_stack([xs, row]) for row in scaled]
        ax.add_collection(LineCollection(lines, colors=colours, linewidths=0.8, alpha=0.6))
        if best_number is not None:
            best = done.with_row_index("row").filter(pl.col("number") == best_number)
            if best.height:
                row = scaled[int(best.get_column("row")[0])]
                ax.plot(xs, row, color="#d62728", linewidth=2.0, label=f"best (trial "
                        f"{best_number})", zorder=3)
                ax.legend(loc="upper left", bbox_to_anchor=(0, -0.12), frameon=False)
        for x, (low, high) in zip(xs, bounds, strict=True):
            ax.axvline(x, color="#333333", linewidth=0.8)
            for y, value, va in ((-0.04, low, "top"), (1.04, high, "bottom")):
                ax.text(x, y, f"{value:.3g}", ha="center", va=va, fontsize=7,
                        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white",
                              "edgecolor": "none"})
        ax.set_xlim(-0.2, len(columns) - 0.8)
        ax.set_ylim(-0.12, 1.12)
        ax.set_xticks(xs, columns, rotation=0)
        ax.tick_params(axis="x", pad=14)
        ax.set_yticks([])
        ax.grid(False)
        for side in ("left", "bottom"):
            ax.spines[side].set_visible(False)
        figure.colorbar(ScalarMappable(norm=norm, cmap="viridis"), ax=ax, label=objective,
                        pad=0.01)
        scale = "their searched range" if ranges else "the values tried"
        ax.set_title(f"weights of {len(done):,} complete trials, coloured by {objective} "
                     f"(axes scaled to {scale})", loc="left")
        return _png(figure)


def examination_chart(curves: pl.DataFrame, title: str) -> bytes:
    """The examination probability per rank estimated from verdicts, one panel per
    `label`: the estimate with its CI as a band and, where the frame has a non-null
    `truth`, the true curve dashed. Columns: label, rank, examination, ci_low, ci_high
    and optionally truth."""
    labels = curves.get_column("label").unique(maintain_order=True).to_list()
    if not labels:
        raise ValueError("examination_chart: no curve to draw")
    columns = min(3, len(labels))
    rows = -(-len(labels) // columns)
    with _styled():
        figure = _figure(max(5.0, 3.0 * columns + 0.4), 2.4 * rows + 0.8)
        axes = figure.subplots(rows, columns, squeeze=False, sharex=True, sharey=True)
        for ax, label in zip(axes.ravel(), labels, strict=False):
            part = curves.filter(pl.col("label") == label).sort("rank")
            rank = part.get_column("rank").to_numpy()
            ax.fill_between(rank, part.get_column("ci_low").to_numpy(),
                            part.get_column("ci_high").to_numpy(), color=_ARM_COLOURS[0],
                            alpha=0.25, linewidth=0, label="95% CI")
            ax.plot(rank, part.get_column("examination").to_numpy(), marker="o",
                    markersize=3, color=_ARM_COLOURS[0], label="estimated")
            if "truth" in part.columns and part.get_column("truth").null_count() == 0:
                ax.plot(rank, part.get_column("truth").to_numpy(), linestyle="--",
                        color=_ARM_COLOURS[3], label="generator's")
            ax.set_title(str(label), loc="left")
            ax.set_ylim(0.0, 1.05)
            ax.set_xticks(rank)
        for ax in axes.ravel()[len(labels):]:
            ax.set_visible(False)
        for ax in axes[-1]:
            ax.set_xlabel("rank")
        for ax in axes[:, 0]:
            ax.set_ylabel("P(examined) / P(rank 1)")
        axes.ravel()[0].legend(loc="upper right", frameon=False, fontsize=8)
        figure.suptitle(title, fontsize=9, wrap=True)
        return _png(figure)
