"""The fidelity check on a set of generated worlds (`experiments/parity/worlds.py`): for
each world, its matched definition (production's [engine]) and its mismatched one, each on
the store with production's query vectors and on the one without (projected from the
text): the figures, whether the run would stop, the settings it names, and how they
compare with the true differences (the mismatched [engine] against the matched one).

    python -m msprlab.experiments.fidelity.on_worlds DIR [--only NAME ...] [--json FILE]
        [--truth]

Exit status 0 (the figures are findings, not failures), 2 when DIR holds no world.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
from rich.markup import escape
from rich.table import Table

from ..arms import experiment_arms
from ..cli.exits import EXIT_BAD_INPUT, EXIT_OK, print_error, stdout_console
from ..experiment_config import load_experiment
from ..stages.replay_tables import replay_tables
from .candidates import setting_changes
from .figures import below
from .stage import Fidelity, fidelity_stage

__all__ = ["check_world", "main", "named_against_true", "true_differences"]

# "projected": the matched definition on the store without query vectors
VARIANTS = ("matched", "mismatched", "projected", "mismatched-projected")


def _source(variant: str) -> str:
    """The definition a variant reads: matched.toml or mismatched.toml."""
    return "matched" if variant == "projected" else variant.removesuffix("-projected")


def true_differences(folder: Path, variant: str) -> dict[str, tuple[Any, Any]]:
    """What the variant's [engine] truly changes from production's (matched.toml), as the
    settings a candidate may change (`candidates.setting_changes`)."""
    matched = load_experiment(folder / "matched.toml").engine
    return setting_changes(load_experiment(folder / f"{_source(variant)}.toml").engine,
                           matched)


def check_world(folder: Path, variant: str) -> tuple[Fidelity | None, float]:
    """The fidelity of one world under one of its definitions (on the store the variant
    names), and the seconds it took."""
    started = time.perf_counter()
    cfg = load_experiment(folder / f"{_source(variant)}.toml")
    ladder = experiment_arms(cfg, ablation=True).ladder
    store = folder / ("store-projected.duckdb" if variant.endswith("projected")
                      else "store.duckdb")
    prepared = replay_tables(cfg, store, {"off": ladder["off"]})
    return fidelity_stage(cfg, prepared), time.perf_counter() - started


def _same(a: Any, b: Any) -> bool:
    """Equal, or numbers within 5% (a half-life is estimated from the decayed edges)."""
    if isinstance(a, bool) or isinstance(b, bool) or not (
            isinstance(a, int | float) and isinstance(b, int | float)):
        return bool(a == b)
    return abs(a - b) <= 0.05 * max(abs(a), abs(b))


def named_against_true(named: dict[str, Any], true: dict[str, Any]) -> str:
    """How the settings the stop named (key -> [definition's, named]) compare with the
    true differences (key -> [definition's, production's])."""
    right = [k for k in named if k in true and _same(named[k][1], true[k][1])]
    wrong = [k for k in named if k not in right]
    missed = [k for k in true if k not in named]
    if not true:
        return "none to name" if not named else "named without a difference"
    parts = [f"{len(right)} of {len(true)} true"]
    if missed:
        parts.append("missed " + ", ".join(k.rsplit(".", 1)[1] for k in missed))
    if wrong:
        parts.append("wrong " + ", ".join(k.rsplit(".", 1)[1] for k in wrong))
    return "; ".join(parts)


def truth_effect(folder: Path) -> dict[str, Any]:
    """What the world's truth says of off, on-zero and all under production's [engine]
    (matched.toml) on the test window, per query: each arm's mean nDCG@10 by the truth and
    by the verdicts, and how many questions; written to FOLDER/truth_effect.json, which
    the set's README shows."""
    from msprlab.datasets.trec import read_qrels

    from ..label_check import truth_prepared
    from ..stages.ablate import ablate
    cfg = load_experiment(folder / "matched.toml")
    ladder = experiment_arms(cfg, ablation=True).ladder
    arms: dict[str, Any] = {name: ladder[name] for name in ("off", "on-zero", "all")
                            if name in ladder}
    prepared = replay_tables(cfg, folder / "store.duckdb", arms)
    out: dict[str, Any] = {"metric": cfg.metrics.primary, "window": "test", "unit": "query"}
    for labels, frame in (("truth", truth_prepared(prepared, read_qrels(
            folder / "truth" / "qrels.tsv"))), ("verdicts", prepared)):
        summary = ablate(cfg, frame, arms).summary.filter(
            pl.col("metric") == cfg.metrics.primary, pl.col("group_by") == "overall",
            pl.col("unit") == "query")
        out[labels] = dict(zip(summary["arm"], summary["mean"], strict=True))
        out["n"] = int(summary["n"].cast(pl.Int64).to_numpy().max())
    (folder / "truth_effect.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _closest(figures: dict[str, Any] | None) -> str:
    if figures is None:
        return ""
    return (f"{_pct(figures['in_top'])}, {_pct(figures['ranks'])}, "
            + (", ".join(figures["failing"]) or "none"))


def _record(world: str, variant: str, fid: Fidelity, seconds: float,
            true: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    f = fid.figures
    named = {k: list(v) for k, v in fid.differing.items()}
    true_ = {k: list(v) for k, v in true.items()}
    closest = next((c.figures for c in fid.candidates if c.changes == fid.differing), None) \
        if fid.differing else None
    return {"world": world, "definition": variant, "passed": fid.passed,
            "failing": list(fid.failing), "nodes": f.nodes, "edges": f.edges,
            "deltas": f.deltas, "in_top": f.in_top, "in_top_helpful": f.in_top_helpful,
            "ranks": f.ranks, "ranks_n": f.ranks_n, "access": f.access,
            "named": named, "true": true_,
            "named_against_true": named_against_true(named, true_) if not fid.passed else "",
            "tried": len(fid.candidates), "seconds": seconds,
            # the named settings' own figures: would the check pass once they are copied?
            "closest": None if closest is None else {
                "in_top": closest.in_top, "ranks": closest.ranks, "nodes": closest.nodes,
                "edges": closest.edges, "failing": below(closest, fid.thresholds)}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m msprlab.experiments.fidelity.on_worlds",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("folder", type=Path, metavar="DIR")
    parser.add_argument("--only", nargs="+", metavar="NAME")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the records")
    parser.add_argument("--truth", action="store_true",
                        help="also measure what each world's truth says of off, on-zero and "
                             "all (NAME/truth_effect.json)")
    args = parser.parse_args(argv)
    console = stdout_console()
    worlds = sorted(p.parent for p in args.folder.glob("*/matched.toml")
                    if args.only is None or p.parent.name in args.only)
    if not worlds:
        print_error(f"{args.folder}: no world folder with a matched.toml (make them with "
                    "python -m msprlab.experiments.parity.worlds --out DIR)")
        return EXIT_BAD_INPUT
    records = []
    for folder in worlds:
        if args.truth:
            effect = truth_effect(folder)
            console.print(f"{folder.name}: nDCG@10 per query on the test window (n = "
                          f"{effect['n']}), truth: " + ", ".join(
                              f"{arm} {value:.4f}" for arm, value in effect["truth"].items())
                          + "; verdicts: " + ", ".join(
                              f"{arm} {value:.4f}" for arm, value in effect["verdicts"].items()),
                          highlight=False)
        for variant in args.variants:
            fid, seconds = check_world(folder, variant)
            if fid is None:
                continue
            records.append(_record(folder.name, variant, fid, seconds,
                                   true_differences(folder, variant)))
            console.print(escape(f"{folder.name} / {variant}: {fid.summary()}"),
                          highlight=False)
    table = Table(title=escape("replay fidelity on the generated worlds (matched: "
                               "production's [engine]; mismatched: the world's other one; "
                               "projected: matched, queries projected from their text; "
                               "mismatched-projected: both)"),
                  title_justify="left")
    for column in ("world", "definition", "nodes", "edges", "deltas", "in top 10 (helpful)",
                   "ranks (n)", "access", "run", "settings named", "against the truth",
                   "named ones: in top, ranks, failing", "s"):
        table.add_column(column)
    for r in records:
        named = "; ".join(f"{k.split('.', 1)[1]} {v[0]}→{v[1]}" for k, v in r["named"].items())
        table.add_row(r["world"], r["definition"], _pct(r["nodes"]), _pct(r["edges"]),
                      _pct(r["deltas"]), f"{_pct(r['in_top'])} ({_pct(r['in_top_helpful'])})",
                      f"{_pct(r['ranks'])} ({r['ranks_n']})", _pct(r["access"]),
                      "goes on" if r["passed"] else "stops (exit 2)", escape(named),
                      escape(r["named_against_true"]), _closest(r["closest"]),
                      f"{r['seconds']:.0f}")
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
