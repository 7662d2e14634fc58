"""The validation's outputs (`validate`): the summary table on the console, and the rows,
summary, curves, a markdown table and the curves' plot in the output folder."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console
from rich.table import Table

from msprlab.reports.plots import examination_chart

__all__ = ["load_results", "report", "summarize", "summary_markdown"]


def summarize(rows: pl.DataFrame, by: Sequence[str] = ("labelling",)) -> pl.DataFrame:
    """Per labelling: rows, sign agreement, mean absolute error, CI coverage (against the
    truth on the same questions), and MAE against the truth over every question."""
    scored = rows.filter(pl.col("delta").is_not_nan(), pl.col("truth").is_not_nan())
    return scored.group_by(*by, maintain_order=True).agg(
        rows=pl.len(),
        sign_agreement=(pl.col("delta").sign() == pl.col("truth").sign()).mean(),
        mae=(pl.col("delta") - pl.col("truth")).abs().mean(),
        within_002=((pl.col("delta") - pl.col("truth")).abs() <= 0.02).mean(),
        coverage=((pl.col("ci_low") <= pl.col("truth"))
                  & (pl.col("truth") <= pl.col("ci_high"))).mean(),
        mae_all_questions=(pl.col("delta") - pl.col("truth_all")).abs().mean())


def _write(path: Path, data: bytes) -> None:
    """All or nothing: a temp file in the same folder, then `os.replace`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fmt(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.0%}"


def summary_markdown(summary: pl.DataFrame, title: str) -> str:
    lines = [f"{title}\n", "| labelling | rows | sign agreement | MAE | within 0.02 | CI covers "
             "the truth | MAE, truth over every question |", "|---|---|---|---|---|---|---|"]
    for r in summary.iter_rows(named=True):
        lines.append(f"| {r['labelling']} | {r['rows']} | {_pct(r['sign_agreement'])} | "
                     f"{_fmt(r['mae'])} | {_pct(r['within_002'])} | {_pct(r['coverage'])} | "
                     f"{_fmt(r['mae_all_questions'])} |")
    return "\n".join(lines) + "\n"


def _console_table(summary: pl.DataFrame, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("labelling", "rows", "sign agreement", "MAE", "within 0.02",
                   "CI covers truth", "MAE (all questions)"):
        table.add_column(column, justify="left" if column == "labelling" else "right")
    for r in summary.iter_rows(named=True):
        table.add_row(r["labelling"], str(r["rows"]), _pct(r["sign_agreement"]),
                      _fmt(r["mae"]), _pct(r["within_002"]), _pct(r["coverage"]),
                      _fmt(r["mae_all_questions"]))
    return table


def load_results(folder: Path) -> list[dict[str, Any]]:
    """The results an earlier `report` wrote into `folder` (rows, curves, worlds.json)."""
    rows = pl.read_parquet(folder / "rows.parquet")
    curves = pl.read_parquet(folder / "curves.parquet")
    worlds = json.loads((folder / "worlds.json").read_text(encoding="utf-8"))
    return [{**w, "rows": rows.filter(pl.col("world") == w["world"],
                                      pl.col("variant") == w["variant"]),
             "curve": curves.filter(pl.col("world") == w["world"],
                                    pl.col("variant") == w["variant"])} for w in worlds]


def _criterion(rows: pl.DataFrame, estimator: str, proven: pl.DataFrame) -> pl.DataFrame:
    """Issue 40's bar, per world: on-zero and tuned against off on a matched definition,
    within 0.02 of the truth or the 95% CI covering it; `proven` (world, variant, passed)
    says whether the replay was proven there (the fidelity check passed)."""
    return (rows.filter(pl.col("variant") == "matched", pl.col("arm").is_in(["on-zero", "tuned"]),
                        pl.col("labelling") == estimator)
            .join(proven, on=["world", "variant"], how="left")
            .select("world", "arm", "delta", "ci_low", "ci_high", "truth",
                    error=(pl.col("delta") - pl.col("truth")).abs(),
                    replay_proven=pl.col("passed"))
            .with_columns(met=(pl.col("error") <= 0.02) | (
                (pl.col("ci_low") <= pl.col("truth")) & (pl.col("truth") <= pl.col("ci_high"))))
            .sort("world", "arm"))


def report(results: list[dict[str, Any]], out: Path, console: Console) -> None:
    if not results:
        console.print("no world was validated", highlight=False)
        return
    out.mkdir(parents=True, exist_ok=True)
    rows = pl.concat([r["rows"] for r in results], how="diagonal_relaxed")
    curves = pl.concat([r["curve"] for r in results], how="diagonal_relaxed")
    rows.write_parquet(out / "rows.parquet")
    curves.write_parquet(out / "curves.parquet")
    _write(out / "worlds.json", json.dumps(
        [{"world": r["rows"]["world"][0], "variant": r["rows"]["variant"][0],
          **{k: r[k] for k in ("fidelity", "passed", "notes", "seconds")}}
         for r in results], indent=1).encode())
    worlds = rows.select("world", "variant").unique().height
    text = []
    for variant in rows["variant"].unique(maintain_order=True).to_list():
        part = rows.filter(pl.col("variant") == variant)
        summary = summarize(part)
        title = (f"{variant} definitions: each arm's change against off on the test window, "
                 f"{part.select('world').unique().height} worlds, {part.height} rows")
        console.print(_console_table(summary, title))
        text.append(summary_markdown(summary, f"**{title}**"))
    summarize(rows, by=("variant", "labelling")).write_parquet(out / "summary.parquet")
    proven = pl.DataFrame([{"world": r["rows"]["world"][0], "variant": r["rows"]["variant"][0],
                            "passed": r["passed"]} for r in results],
                          schema={"world": pl.String, "variant": pl.String,
                                  "passed": pl.Boolean})
    for estimator in ("snips", "ips", "verdict ndcg@10"):
        bar = _criterion(rows, estimator, proven)
        if bar.height:
            worlds_met = bar.group_by("world").agg(pl.col("met").all())
            line = (f"issue 40's bar with {estimator} (matched definitions; on-zero and tuned "
                    f"against off within 0.02 of the truth or covered by the 95% CI): "
                    f"{int(bar['met'].sum())} of {bar.height} rows, "
                    f"{int(worlds_met['met'].sum())} of {worlds_met.height} worlds (replay "
                    f"proven in {int(bar['replay_proven'].fill_null(False).sum())} rows)")
            console.print(line, highlight=False)
            text.append(f"{line}\n\n" + bar.write_csv())
    for r in results:
        console.print(f"{r['rows']['world'][0]} / {r['rows']['variant'][0]}: "
                      f"{r['fidelity'] or 'no fidelity figures'}; {r['seconds']:.0f} s",
                      highlight=False)
        for note in r["notes"]:
            console.print(f"  {note}", highlight=False)
    error = (curves.filter(pl.col("truth").is_not_null())
             .group_by("world", "variant", maintain_order=True).agg(
                 max_error=(pl.col("examination") - pl.col("truth")).abs().max(),
                 covered=((pl.col("ci_low") <= pl.col("truth"))
                          & (pl.col("truth") <= pl.col("ci_high"))).mean()))
    for r in error.iter_rows(named=True):
        console.print(f"position bias, {r['world']} / {r['variant']}: largest error "
                      f"{r['max_error']:.3f} against the generator's curve; its CI covers "
                      f"{r['covered']:.0%} of the ranks", highlight=False)
    text.append("\n" + error.write_csv())
    _write(out / "summary.md", "\n".join(text).encode())
    chart = curves.filter(pl.col("variant") == curves["variant"][0]).with_columns(
        label=pl.col("world"))
    _write(out / "position_bias.png", examination_chart(
        chart, f"examination per rank from verdicts ({worlds} world-definitions; dashed: "
               "the generator's)"))
    console.print(f"written: {out}/ (rows.parquet, summary.parquet, curves.parquet, "
                  "summary.md, position_bias.png)", highlight=False)
