"""The configuration search's test-window output: the chosen configuration's settings and
costs, its confirmatory rows against off, on-zero and the weights-only tuned weights, and
its stage funnel, printed, bundled under config/ and logged to MLflow (the reporter's
`configuration` hands it here)."""

from __future__ import annotations

import math

import polars as pl
from rich.console import Console

from ..bundle import (
    CONFIG,
    CONFIG_DECISION,
    CONFIG_FUNNEL,
    CONFIG_RUN,
    CONFIG_SETTINGS,
    CONFIG_SNIPPET,
    CONFIG_TEST_SUMMARY,
    Bundle,
    per_search_file,
)
from ..console_tables import funnel_table
from ..stages.config_search import ConfigHeldOut, ConfigSearched
from ..tracking import Tracker, arm_metrics, metric_key
from .console import decision_table, settings_table

__all__ = ["publish"]


def publish(console: Console, bundle: Bundle, tracker: Tracker | None, primary: str,
            labels: str, held: ConfigHeldOut, searched: ConfigSearched) -> None:
    """The chosen configuration on the test window: the settings and costs, the
    confirmatory rows against off, on-zero and the weights-only tuned weights, the
    stage funnel beside the shipped arms; bundled under config/, logged as the child
    run `test:chosen` and the `headline/chosen` metrics."""
    console.print(settings_table(
        held.settings, held.costs, title="configuration search: the searched settings, "
        "shipped and chosen (on the train window)"))
    console.print(decision_table(
        held.decision, title=f"test window: the chosen configuration against off, "
        f"on-zero and the weights-only tuned weights, {primary}, per "
        f"{held.decision['unit'][0] if held.decision.height else 'query'}; labels: "
        f"{labels}"))
    console.print(funnel_table(
        held.funnel_wide, metric=primary, title=f"stage funnel, test window: the chosen "
        f"configuration (its own pool) beside the shipped settings' arms; labels: {labels}"))
    bundle.frame(held.decision, CONFIG_DECISION)
    bundle.frame(held.summary, CONFIG_TEST_SUMMARY)
    bundle.frame(held.funnel, CONFIG_FUNNEL)
    bundle.frame(held.settings.join(pl.DataFrame(
        {"arm": list(held.costs), "ms_per_search": list(held.costs.values())}),
        how="cross"), CONFIG_SETTINGS)
    for name, frame in held.frames.items():
        bundle.frame(frame, per_search_file(CONFIG, name))
    bundle.text(held.trec_run, CONFIG_RUN)
    bundle.json(searched.snippet, CONFIG_SNIPPET)
    if tracker is None:
        return
    values = {metric_key("headline", "chosen", primary): r["mean"]
              for r in held.summary.filter(
                  pl.col("arm") == "chosen", pl.col("metric") == primary,
                  pl.col("group_by") == "overall", pl.col("unit") == "query"
              ).iter_rows(named=True)}
    for r in held.decision.iter_rows(named=True):
        stem = f"chosen_minus_{r['reference']}"
        values |= {metric_key("headline", stem, primary): r["delta"],
                   metric_key("headline", stem, primary, "ci_low"): r["ci_low"],
                   metric_key("headline", stem, primary, "ci_high"): r["ci_high"]}
    tracker.metrics({k: v for k, v in values.items() if v is not None and not math.isnan(v)})
    with tracker.child("test:chosen", tags={"msprlab.arm": "chosen", "msprlab.window": "test"}):
        tracker.params({f"setting.{k}": v for k, v in searched.settings.items()})
        tracker.metrics({**arm_metrics(held.summary, "chosen"),
                         **arm_metrics(held.funnel, "chosen", stem=("funnel",), sizes=False),
                         "cost/ms_per_search": held.costs["chosen"]})
