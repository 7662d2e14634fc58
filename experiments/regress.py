"""`msprlab regress`: a ranking-quality gate for CI.

The frozen benchmark is a committed definition (`experiments/configs/regress/gate.toml`): a list
of experiments (the LoCoMo log and the synthetic log) and the ranker to hold to account
(the committed weights and switches). For each, the current engine replays the benchmark
and scores the ranker on every evaluated search; the per-search values are compared,
paired by search event, with the committed baseline file (`experiments/regress/NAME.parquet`)
group by group (overall, per intent, per question type).

The rule is non-inferiority (EVALUATION.md), with the decision's machinery
(`experiments.decision`: `pairs.paired_queries`, `guardrails.noninferior`): per group with
at least `min_support` queries, the searches are paired by event, averaged per query, and
the one-sided 1 − alpha lower bound of the paired t-test of (new − baseline) must stay
above −margin (a group whose values did not move passes). Anything else is a regression:
exit status 1. A benchmark whose data
changed (another dataset digest) cannot be paired; that is reported and fails too, until
the baseline is rewritten on purpose with `msprlab regress --update`.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from rich import box
from rich.console import Console
from rich.table import Table

from .decision.guardrails import noninferior
from .decision.pairs import estimate_of, means, paired_queries
from .experiment_config import ExperimentError, load_experiment, replayable_engine
from .measures.metrics import parse_metric
from .measures.scoring import Arm, Scorer, arm_of
from .stages.prepare import prepare_store
from .stages.replay_tables import replay_tables

__all__ = ["DEFAULT_DEFINITION", "add_regress_command", "run_regress"]

DEFAULT_DEFINITION = Path(__file__).parent / "configs" / "regress" / "gate.toml"
BASELINE_DIR = Path(__file__).parent / "regress"


@dataclass(frozen=True)
class Gate:
    experiments: tuple[str, ...]
    metrics: tuple[str, ...]
    margin: float
    min_support: int   # queries
    alpha: float       # one-sided, per group (not adjusted: each group guards)
    ranker: dict[str, Any]   # a ContextKit config dict: the committed weights and switches
    baseline_dir: Path
    source: Path = Path("gate.toml")


def load_gate(path: Path) -> Gate:
    raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    known = {"experiments", "metrics", "margin", "min_support", "alpha", "ranker",
             "baseline_dir"}
    for gone in ("bootstrap", "seed"):
        if gone in raw:
            raise ExperimentError(f"{path}: {gone!r} is gone: the gate is a one-sided paired "
                                  "t-test per query (no resampling); remove it")
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ExperimentError(f"{path}: unknown key {unknown[0]!r}; known keys: "
                              f"{', '.join(sorted(known))}")
    margin, alpha = raw.get("margin", 0.01), raw.get("alpha", 0.05)
    if not (isinstance(margin, int | float) and math.isfinite(margin) and 0 < margin <= 1):
        raise ExperimentError(f"{path}: margin: `0 < margin <= 1` must hold, but got "
                              f"{margin!r}")
    if not (isinstance(alpha, float) and 0 < alpha < 0.5):
        raise ExperimentError(f"{path}: alpha: `0 < alpha < 0.5` must hold, but got {alpha!r}")
    min_support = raw.get("min_support", 30)
    if not (isinstance(min_support, int) and min_support >= 2):
        raise ExperimentError(f"{path}: min_support: an integer >= 2 (queries) must be "
                              f"given, but got {min_support!r}")
    folder = Path(raw.get("baseline_dir", BASELINE_DIR))
    if not folder.is_absolute():
        folder = Path(path).parent / folder
    experiments = tuple(str((Path(path).parent / e).resolve()) if e.endswith(".toml") else e
                        for e in raw.get("experiments", ("locomo",)))
    return Gate(experiments, tuple(raw.get("metrics", ("ndcg@10",))), float(margin),
                min_support, alpha, dict(raw.get("ranker", {})), folder, Path(path))


def read_baseline(path: Path, metrics: tuple[str, ...]) -> tuple[pl.DataFrame, str]:
    """The committed per-search values and their dataset digest. A missing, corrupt,
    truncated or foreign baseline is bad input (exit 2), never read as a regression."""
    meta_path = path.with_suffix(".json")
    if not path.is_file():
        raise ExperimentError(f"{path}: no baseline; create it with `msprlab regress --update`")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ExperimentError(f"{meta_path}: not a readable baseline description ({exc}); "
                              "restore it from git or rewrite with `msprlab regress --update`"
                              ) from None
    digest = meta.get("dataset_digest") if isinstance(meta, dict) else None
    if not isinstance(digest, str) or not digest:
        raise ExperimentError(f"{meta_path}: no dataset_digest; restore it from git or "
                              "rewrite with `msprlab regress --update`")
    try:
        frame = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise ExperimentError(f"{path}: not a readable Parquet baseline "
                              f"({type(exc).__name__}); restore it from git or rewrite with "
                              "`msprlab regress --update`") from None
    wanted = {"event_id": pl.Int64, "intent": pl.String, "question_type": pl.String,
              **dict.fromkeys(metrics, pl.Float64)}
    for column, dtype in wanted.items():
        if frame.schema.get(column) != dtype:
            found = frame.schema.get(column)
            raise ExperimentError(
                f"{path}: not a baseline of this gate: column {column!r} is "
                f"{'missing' if found is None else found} (expected {dtype}); rewrite with "
                "`msprlab regress --update`")
    if frame["event_id"].is_duplicated().any():
        raise ExperimentError(f"{path}: event_id repeats; not a per-search baseline")
    return frame, digest


def _scores(gate: Gate, experiment: str, root: Path) -> tuple[pl.DataFrame, str, Arm]:
    """Per-search values of the committed ranker on one benchmark, and its data digest."""
    cfg = load_experiment(experiment)
    try:  # the same validation and refusals as a definition's own [engine] block
        ranker = replayable_engine(_merge(cfg.engine_dict, gate.ranker), cfg.replay)
    except ExperimentError as exc:
        raise ExperimentError(f"{gate.source}: [ranker] on {experiment}: {exc}") from None
    store = prepare_store(cfg, root)
    prepared = replay_tables(cfg, store, {"ranker": ranker})
    table = prepared.table("ranker")
    scorer = Scorer.of(table, [parse_metric(m) for m in gate.metrics])
    arm = arm_of("ranker", ranker)
    return scorer.frame(arm), prepared.dataset.digest, arm


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def compare_to_baseline(new: pl.DataFrame, old: pl.DataFrame, gate: Gate,
                        benchmark: str) -> pl.DataFrame:
    """One row per (group, metric): queries, searches, the two means, delta, the one-sided
    lower bound of (new − old) per query, and whether the group is gated and passes."""
    if new.height != old.height or new.join(old, on="event_id", how="semi").height != old.height:
        raise ValueError(f"{benchmark}: the searches differ from the baseline's "
                         f"({old.height} baseline, {new.height} now)")
    rows = []
    for metric in gate.metrics:
        paired = paired_queries(new, old, metric, ("intent", "question_type"))
        cells = [("overall", "overall", paired)]
        for column in ("intent", "question_type"):
            for value in paired[column].drop_nulls().unique().sort().to_list():
                cells.append((column, value, paired.filter(pl.col(column) == value)))
        for group_by, group, part in cells:
            estimate = estimate_of(part, "query")
            state, low, _ = noninferior(estimate, gate.margin, gate.alpha)
            gated = part.height >= gate.min_support
            new_mean, old_mean = means(part, "query")
            rows.append({"benchmark": benchmark, "group_by": group_by, "group": group,
                         "metric": metric, "n": part.height,
                         "searches": int(part["searches"].sum()), "baseline": old_mean,
                         "new": new_mean, "delta": estimate.delta, "ci_low": low,
                         "state": state, "gated": gated,
                         "ok": state == "holds" if gated else True})
    return pl.DataFrame(rows)


def run_regress(definition: Path, root: Path, *, update: bool, console: Console,
                as_json: bool = False) -> int:
    """Run the gate; `as_json` prints the verdict and every row as one JSON document on
    stdout (the console, then on stderr, keeps the progress lines)."""
    # Imported here: the cli package imports this module to register `regress`.
    from .cli.exits import EXIT_FINDING, EXIT_OK, print_error

    gate = load_gate(definition)
    paths = [gate.baseline_dir / f"{Path(e).stem}.parquet" for e in gate.experiments]
    # Every baseline is checked before any replay: bad input fails in a second, not later.
    baselines = {} if update else {p: read_baseline(p, gate.metrics) for p in paths}
    results = []
    failures: list[str] = []
    for experiment, path in zip(gate.experiments, paths, strict=True):
        started = time.perf_counter()
        frame, digest, arm = _scores(gate, experiment, root)
        meta_path = path.with_suffix(".json")
        console.print(f"{experiment}: {frame.height:,} searches scored in "
                      f"{time.perf_counter() - started:.0f} s (data {digest[:12]}; weights "
                      + ", ".join(f"{w}={v:g}" for w, v in arm.named_weights._asdict().items())
                      + f"; intent {'on' if arm.intent else 'off'})", highlight=False)
        if update:
            gate.baseline_dir.mkdir(parents=True, exist_ok=True)
            frame.write_parquet(path)
            meta_path.write_text(json.dumps({"dataset_digest": digest, "arm": arm.as_dict(),
                                             "searches": frame.height}, indent=2) + "\n")
            console.print(f"  baseline rewritten: {path}", highlight=False)
            continue
        baseline, baseline_digest = baselines[path]
        if baseline_digest != digest:
            failures.append(f"{experiment}: the benchmark data changed (dataset digest "
                            f"{digest[:12]}, baseline {baseline_digest[:12]}): the "
                            "searches cannot be paired; review, then `msprlab regress "
                            "--update`")
            continue
        try:
            results.append(compare_to_baseline(frame, baseline, gate, experiment))
        except ValueError as exc:
            failures.append(str(exc))
    if update:
        return EXIT_OK
    table = pl.concat(results) if results else pl.DataFrame()
    if results:
        failures += [f"{r['benchmark']} {r['metric']} {r['group_by']}={r['group']}: "
                     f"one-sided {1 - gate.alpha:.0%} lower bound {r['ci_low']:+.4f} <= "
                     f"-{gate.margin}"
                     for r in table.filter(~pl.col("ok")).iter_rows(named=True)]
    if as_json:
        rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v)
                 for k, v in r.items()} for r in table.iter_rows(named=True)]
        print(json.dumps({"verdict": "regression" if failures else "ok",
                          "margin": gate.margin, "alpha": gate.alpha, "unit": "query",
                          "failures": failures, "rows": rows}, indent=1))
        return EXIT_FINDING if failures else EXIT_OK
    if results:
        console.print(_table(table, gate))
    for failure in failures:
        print_error(failure, console, label="regression")
    if failures:
        return EXIT_FINDING
    console.print(f"no regression: every group within the margin {gate.margin} "
                  f"(non-inferiority per query: one-sided paired t-test at {gate.alpha:g}, "
                  f"groups of >= {gate.min_support} queries)")
    return EXIT_OK


def _table(frame: pl.DataFrame, gate: Gate) -> Table:
    """What moved: every overall row, and each group whose mean changed or that fails."""
    moved = frame.filter((pl.col("group_by") == "overall") | (pl.col("delta").abs() > 0)
                         | ~pl.col("ok"))
    still = frame.height - moved.height
    table = Table(title="ranking quality against the committed baseline (paired per search, "
                        "averaged per query)", title_justify="left", box=box.SIMPLE_HEAD,
                  caption=f"n: queries; a gated group (n >= {gate.min_support}) fails when the "
                          f"one-sided {1 - gate.alpha:.0%} lower bound of new - baseline (paired "
                          f"t-test per query, the decision's non-inferiority test, not adjusted) "
                          f"is <= -{gate.margin}; {still} other group x metric cells did not move",
                  caption_justify="left")
    for column in ("benchmark", "group", "metric", "n", "baseline", "new", "delta",
                   "lower bound", "verdict"):
        table.add_column(column, justify="left" if column in ("benchmark", "group", "metric",
                                                               "verdict") else "right",
                         no_wrap=True)
    for r in moved.iter_rows(named=True):
        changed = r["delta"] == r["delta"] and abs(r["delta"]) > 0
        verdict = ("ok" if r["ok"] else "[red]REGRESSION[/red]") if r["gated"] else "small n"
        group = r["group"] if r["group_by"] == "overall" else f"{r['group_by']}={r['group']}"
        table.add_row(Path(r["benchmark"]).stem, group, r["metric"], f"{r['n']:,}",
                      f"{r['baseline']:.4f}", f"{r['new']:.4f}",
                      f"{r['delta']:+.4f}" if changed else "0",
                      f"{r['ci_low']:+.4f}", verdict)
    return table


def cmd_regress(args: argparse.Namespace) -> int:
    from .cli.exits import EXIT_BAD_INPUT, print_error, stdout_console
    console = Console(stderr=True) if args.json else stdout_console(120)
    try:
        return run_regress(args.definition, Path(args.root), update=args.update,
                           console=console, as_json=args.json)
    except (ExperimentError, FileNotFoundError, ValueError) as exc:
        print_error(exc, console)
        return EXIT_BAD_INPUT


def add_regress_command(commands: Any) -> None:
    parser = commands.add_parser(
        "regress", help="the ranking-quality gate: exit 1 when a benchmark group regresses",
        description="Replay the frozen benchmark (experiments/configs/regress/gate.toml: the "
                    "LoCoMo and synthetic logs) with the current engine and the committed "
                    "ranker, and compare every group (overall, per intent, per question type) "
                    "with the committed per-search baseline (experiments/regress/): paired by "
                    "search, averaged per query, a group regresses when the one-sided "
                    "lower bound (1 - alpha) of the paired t-test of new - baseline is at or "
                    "below -margin. Exit 0 when nothing regressed, "
                    "1 on a regression, 2 on bad input (a corrupt, truncated, foreign or "
                    "missing baseline too). --update rewrites the baseline.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--definition", type=Path, default=DEFAULT_DEFINITION,
                        help="the gate's TOML definition")
    parser.add_argument("--root", default=".", help="working folder (stores under ROOT/runs)")
    parser.add_argument("--update", action="store_true",
                        help="rewrite the baseline files from this run (review the change)")
    parser.add_argument("--json", action="store_true",
                        help="print the verdict and every group's row as JSON on stdout "
                             "(NaN as null); progress and errors go to stderr")
    parser.set_defaults(func=cmd_regress)
