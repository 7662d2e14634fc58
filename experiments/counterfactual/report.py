"""The counterfactual stage's console tables and figure (the reporter prints and bundles
them): the examination curve, and each arm's IPS and SNIPS nDCG@k beside its raw verdict
figure, with the changes against off."""

from __future__ import annotations

import math
from typing import Any

import polars as pl
from rich.console import Console
from rich.table import Table

from msprlab.reports.plots import examination_chart

from ..bundle import (
    COUNTERFACTUAL_CHANGES,
    COUNTERFACTUAL_CURVE,
    COUNTERFACTUAL_ESTIMATES,
    COUNTERFACTUAL_LOGGED,
    COUNTERFACTUAL_PER_QUERY,
    COUNTERFACTUAL_PLOT,
    Bundle,
)
from ..tracking import metric_key
from .stage import CounterfactualResult

__all__ = ["curve_png", "curve_table", "estimates_table", "logged_record", "publish"]


def _fmt(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _ci(low: float, high: float) -> str:
    return f"[{_fmt(low)}, {_fmt(high)}]"


def curve_table(result: CounterfactualResult) -> Table:
    curve = result.curve
    table = Table(title="position bias from verdicts: P(examined at rank r) / P(rank 1)",
                  title_justify="left", caption=curve.caption(), caption_justify="left")
    for column in ("rank", "examination", f"{curve.confidence:.0%} CI", "shown", "verdicts"):
        table.add_column(column, justify="right")
    for r in curve.frame.iter_rows(named=True):
        table.add_row(str(r["rank"]), _fmt(r["examination"], 3),
                      f"[{_fmt(r['ci_low'], 3)}, {_fmt(r['ci_high'], 3)}]", f"{r['shown']:,}",
                      f"{int(r['clicks']):,}")
    return table


def curve_png(result: CounterfactualResult) -> bytes:
    frame = result.curve.frame.with_columns(label=pl.lit("this log"))
    return examination_chart(frame, f"position bias from verdicts ({result.curve.n_searches:,} "
                                    f"searches of {result.curve.n_questions:,} questions)")


def estimates_table(result: CounterfactualResult, raw: dict[str, float], metric: str,
                    labels: str) -> Table:
    """Per arm: the raw verdict figure, SNIPS and IPS with CIs, the change of each against
    off, the share of never-shown memories and whether the arm is scored."""
    est = result.estimates
    settings = result.settings
    k = settings.k
    table = Table(
        title=f"counterfactual nDCG@{k} from verdicts, test window, per query; labels: "
              f"{labels}", title_justify="left", caption_justify="left",
        caption=(f"snips: nDCG@{k} under the verdicts weighted by the inverse of their "
                 f"examination propensity (clip {settings.clip:g}), the ideal under the same "
                 f"labels; ips: the same DCG over the ideal of the question's helpful "
                 f"memories (reads in units of P(helpful | examined)); "
                 f"{est.confidence:.0%} percentile CIs over {est.n_resamples} question "
                 f"resamples, the click model refitted in each. never shown: share of the "
                 f"arm's top {k} the logging ranker never showed for the question (no "
                 f"propensity: counted as not relevant); above {settings.max_unshown:.0%} "
                 f"the arm is bounded (the most they could add is shown), not scored. "
                 f"{result.test_logged.note()}"))
    for column in ("arm", f"verdicts {metric}", "snips", "snips CI", "ips", "ips CI",
                   "Δ verdicts vs off", "Δ snips vs off", "Δ snips CI", "Δ ips vs off",
                   "never shown", "scored"):
        table.add_column(column, justify="left" if column == "arm" else "right")
    rows = {(r["arm"], r["estimator"]): r for r in est.estimates.iter_rows(named=True)}
    changes = {(r["arm"], r["estimator"]): r for r in est.changes.filter(
        pl.col("reference") == "off").iter_rows(named=True)}
    arms = est.estimates["arm"].unique(maintain_order=True).to_list()
    for arm in arms:
        snips, ips = rows[(arm, "snips")], rows[(arm, "ips")]
        d_snips, d_ips = changes.get((arm, "snips")), changes.get((arm, "ips"))
        raw_delta = raw.get(arm, math.nan) - raw.get("off", math.nan)
        scored = "yes" if snips["scored"] else f"bounded (+{_fmt(snips['bound'], 3)})"
        table.add_row(
            arm, _fmt(raw.get(arm)), _fmt(snips["mean"]), _ci(snips["ci_low"], snips["ci_high"]),
            _fmt(ips["mean"]), _ci(ips["ci_low"], ips["ci_high"]),
            _fmt(raw_delta) if arm != "off" else "",
            _fmt(d_snips["delta"]) if d_snips else "",
            _ci(d_snips["ci_low"], d_snips["ci_high"]) if d_snips else "",
            _fmt(d_ips["delta"]) if d_ips else "", f"{snips['unshown']:.1%}", scored)
    return table


def logged_record(result: CounterfactualResult) -> dict[str, object]:
    """What the estimates rest on, for the bundle."""
    settings = result.settings
    return {"settings": {"k": settings.k, "clip": settings.clip,
                         "resamples": settings.resamples, "max_unshown": settings.max_unshown,
                         "truncated": settings.truncated, "seed": settings.seed},
            "curve": result.curve.caption(),
            "fits_converged": sum(f.converged for f in result.curve.bootstrap.fits),
            "logged": {name: {"note": logged.note(), "searches": logged.searches,
                              "verdicts": logged.verdicts, "outside": logged.outside,
                              "helpful": logged.helpful,
                              "helpful_outside": logged.helpful_outside,
                              "empty": logged.empty}
                       for name, logged in (("all windows", result.logged),
                                            ("test window", result.test_logged))}}


def publish(console: Console, bundle: Bundle, tracker: Any, labels: str,
            result: CounterfactualResult) -> None:
    """Print the curve and the estimates, bundle them (counterfactual/ in the results
    folder) and log each arm's estimate to MLflow (`tracker` None: not tracked)."""
    console.print(curve_table(result))
    console.print(estimates_table(result, result.raw, result.raw_metric, labels))
    est = result.estimates
    bundle.frame(result.curve.frame, COUNTERFACTUAL_CURVE)
    bundle.bytes(curve_png(result), COUNTERFACTUAL_PLOT)
    bundle.frame(est.estimates, COUNTERFACTUAL_ESTIMATES)
    bundle.frame(est.changes, COUNTERFACTUAL_CHANGES)
    bundle.frame(est.questions, COUNTERFACTUAL_PER_QUERY)
    bundle.json(logged_record(result), COUNTERFACTUAL_LOGGED)
    console.print(f"position bias plot: {bundle.folder / COUNTERFACTUAL_PLOT}", highlight=False)
    if tracker is not None:
        tracker.metrics({
            f"counterfactual/{r['estimator']}/{metric_key(r['arm'])}": r["mean"]
            for r in est.estimates.iter_rows(named=True) if math.isfinite(r["mean"])})
