"""The configuration search's part of a results bundle (issue 38, `bundle.CONFIG`), read
for the reports: the searched settings, shipped and chosen, with each configuration's
engine time per search; the chosen configuration's confirmatory rows against off, on-zero
and the weights-only tuned weights; its stage funnel beside the shipped arms; the walks
the search ran."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from msprlab.experiments.bundle import (
    CONFIG_DECISION,
    CONFIG_FUNNEL,
    CONFIG_SETTINGS,
    CONFIG_SNIPPET,
    CONFIG_SUMMARY,
)

from ._format import FUNNEL_HEADER, fmt, funnel_rows

__all__ = ["ConfigPart", "config_html", "config_markdown", "load_config"]


@dataclass(frozen=True)
class ConfigPart:
    settings: pl.DataFrame          # setting, touches, shipped, chosen
    costs: dict[str, float]         # arm -> engine ms per search
    decision: pl.DataFrame          # `decision.decide` rows
    funnel: pl.DataFrame | None     # wide, per query (`load.funnel_wide`)
    summary: dict[str, Any]


def load_config(folder: Path, read_frame: Any, read_json: Any, wide: Any) -> ConfigPart | None:
    """The part in `folder`, None when the bundle has none (no configuration search);
    `read_frame`, `read_json` and `wide` are the loader's readers (they name a bad file)."""
    if not (folder / CONFIG_SUMMARY).is_file():
        return None
    settings = read_frame(folder / CONFIG_SETTINGS, ("setting", "shipped", "chosen", "arm",
                                                     "ms_per_search"))
    costs = dict(settings.select("arm", "ms_per_search").unique("arm", maintain_order=True)
                 .iter_rows())
    funnel = None
    if (folder / CONFIG_FUNNEL).is_file():
        funnel = wide(read_frame(folder / CONFIG_FUNNEL, ("arm", "unit", "metric", "mean")),
                      folder / CONFIG_FUNNEL)
    return ConfigPart(settings.select("setting", "touches", "shipped", "chosen").unique(
        "setting", maintain_order=True), costs,
        read_frame(folder / CONFIG_DECISION, ("reference", "delta", "ci_low", "ci_high",
                                              "p_adj", "verdict")),
        funnel, read_json(folder / CONFIG_SUMMARY))


def _walks(part: ConfigPart) -> str:
    walks = part.summary.get("walks", {})
    chosen = part.summary.get("chosen", {})
    return (f"this run: {walks.get('walks', 0)} walk(s) over the timeline built "
            f"{walks.get('tables_built', 0)} table(s) ({walks.get('variants_in_shared_walks', 0)}"
            f" of them in {walks.get('shared_walks', 0)} shared walk(s)); chosen: trial "
            f"{chosen.get('trial')}, train values {chosen.get('values')}")


def _decision_rows(part: ConfigPart) -> list[list[str]]:
    return [[f"chosen vs {r['reference']}", fmt(r["n"]), fmt(r["mean_reference"]),
             fmt(r["mean_candidate"]), fmt(r["delta"]),
             f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]", fmt(r["p_adj"]), r["verdict"]]
            for r in part.decision.iter_rows(named=True)]


_DECISION_HEADER = ["comparison", "n", "reference", "chosen", "delta", "CI (Bonferroni)",
                    "p (adj)", "verdict"]


def _costs(part: ConfigPart) -> str:
    return ", ".join(f"{arm} {fmt(ms)}" for arm, ms in part.costs.items())


def config_markdown(part: ConfigPart | None) -> list[str]:
    """The section's markdown lines (none without a configuration search)."""
    if part is None:
        return []
    out = ["## Configuration search (settings chosen on the train window)", "",
           _walks(part) + ".", "",
           "| setting | touches | shipped | chosen |", "|---|---|---|---|"]
    out += [f"| {r['setting']} | {r['touches']} | {r['shipped']} | {r['chosen']} |"
            for r in part.settings.iter_rows(named=True)]
    out += ["", f"Engine time per search (ms, replay): {_costs(part)}.", "",
            "Test window, the chosen configuration against each reference (confirmatory, "
            "Bonferroni over these rows):", "",
            "| " + " | ".join(_DECISION_HEADER) + " |",
            "|" + "---|" * len(_DECISION_HEADER)]
    out += ["| " + " | ".join(row) + " |" for row in _decision_rows(part)]
    if part.funnel is not None:
        out += ["", "Stage funnel (per query, test window): the chosen configuration on its "
                "own pool beside the shipped settings' arms.", "",
                "| " + " | ".join(FUNNEL_HEADER) + " |", "|" + "---|" * len(FUNNEL_HEADER)]
        out += ["| " + " | ".join(row) + " |" for row in funnel_rows(part.funnel)]
    return [*out, "", f"Snippet: `{CONFIG_SNIPPET}`.", ""]


def config_html(part: ConfigPart | None) -> dict[str, Any] | None:
    """What the report's configuration section shows (None without a search)."""
    if part is None:
        return None
    return {"walks": _walks(part), "costs": _costs(part), "snippet": CONFIG_SNIPPET,
            "settings": {"columns": ["setting", "touches", "shipped", "chosen"],
                         "rows": [list(r) for r in part.settings.iter_rows()]},
            "decision": {"columns": _DECISION_HEADER, "rows": _decision_rows(part)},
            "funnel": None if part.funnel is None else {
                "columns": list(FUNNEL_HEADER), "rows": funnel_rows(part.funnel)}}
