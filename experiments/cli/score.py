"""`msprlab score DEF --config FILE [--limit N] [--json]`: one fixed ContextKit
configuration (a snippet the bundle wrote, `best_weights.contextkit.json` or
`best_config.contextkit.json`, or the configuration production runs) scored on the
experiment's train and test windows, from the same tables as the experiment's searches
(`stages.configurations`: built, or read from the replay cache, for the settings that reach
them).

Each window's objectives are computed as a study's trial computes them (the metric's mean
over the window's searches with a relevant memory; `cost`: the engine's time per search
in the replay that built the table), so rescoring a study's best snippet gives its best
trial's train value exactly; the per-query mean of the primary metric stands beside it.
msprlab's corrections, which the library's configuration cannot hold, are the
experiment's; the search limit is `--limit`, else the experiment's `replay.limit`.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import tomllib
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import polars as pl
from rich import box
from rich.table import Table

from msprlab.experiments.cli.exits import EXIT_OK, BadInput, stdout_console

from ..errors import ExperimentError
from ..experiment_config import load_experiment, replayable_engine, shipped_experiments
from ..measures.metrics import parse_metric
from ..measures.scoring import arm_of
from ..stages.config_search import rescore
from ..stages.configurations import ConfigTables
from ..stages.prepare import prepare_store
from ..stages.replay_tables import replay_tables
from ..stages.weight_search import objective_of
from ..tune import Objective
from ..variants.settings import check_limit, reaching
from ..variants.tables import Point

__all__ = ["add_score_command", "score_configuration"]

DESCRIPTION = __doc__.split("\n\n", 1)[1] if __doc__ else ""


def read_config(path: Path) -> dict[str, Any]:
    """A ContextKit configuration dict from a .json or .toml file (exit 2 naming it)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"--config {path}: {exc.strerror}") from None
    try:
        found = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"--config {path}: not valid {'TOML' if path.suffix == '.toml' else 'JSON'}"
                       f": {exc}") from None
    if not isinstance(found, dict):
        raise BadInput(f"--config {path}: expected a ContextKit configuration (an object with "
                       f"context_graph and mspr), got {type(found).__name__}")
    return found


def score_configuration(experiment: str, config_file: Path, *, root: Path,
                        limit: int | None = None) -> dict[str, Any]:
    """The configuration of `config_file` on the experiment's windows (module docstring)."""
    cfg = load_experiment(experiment)
    try:
        config = replayable_engine(read_config(config_file), cfg.replay)
    except ExperimentError as exc:  # name the file
        raise BadInput(f"--config {config_file}: {exc}") from None
    config = replace(config, corrections=cfg.engine.corrections)
    limit = cfg.replay.limit or None if limit is None else check_limit(limit, "--limit")
    store = prepare_store(cfg, root)
    prepared = replay_tables(cfg, store, {"tuned": cfg.engine})
    metrics = [parse_metric(m) for m in cfg.metrics.names]
    tables = ConfigTables.of(cfg, prepared, metrics)
    objectives = [Objective(*objective_of(o)) for o in cfg.tune.objectives]
    point = Point(config, limit)
    arm = arm_of("config", config)
    out: dict[str, Any] = {
        "experiment": cfg.name, "config_file": str(config_file), "config_hash": cfg.digest(),
        "dataset_digest": prepared.dataset.digest, "limit": limit,
        "table": tables.key(point)[:16], "labels": prepared.labels.source,
        "weights": arm.named_weights._asdict(), "intent": arm.intent, "roles": arm.roles,
        "reaching": _reaching(config, cfg.engine), "windows": {}}
    for window in ("train", "test"):
        started = time.perf_counter()
        scorer, values = rescore(tables, point, arm, objectives, window)
        per_query = scorer.frame(arm).group_by("query_id").agg(
            pl.col(cfg.metrics.primary).drop_nans().mean())[cfg.metrics.primary].drop_nulls()
        out["windows"][window] = {
            "searches": scorer.n_searches,
            "objectives": dict(zip([o.label() for o in objectives], values, strict=True)),
            "per_query": {cfg.metrics.primary: float(per_query.mean()) if per_query.len()
                          else math.nan, "queries": per_query.len()},
            "seconds": time.perf_counter() - started}
    out["cost_ms_per_search"] = tables.tables([point])[0].meta["cost"]["ms_per_search"]
    out["walks"] = tables.stats.as_dict()
    if any(getattr(cfg.engine.corrections, f.name) for f in fields(cfg.engine.corrections)):
        out["note"] = "msprlab.corrections come from the experiment (the file cannot hold them)"
    return out


def _reaching(config: Any, base: Any) -> dict[str, Any]:
    """The ranking settings of `config` that differ from the experiment's (weights aside)."""
    from ..variants.settings import SETTINGS, value_of
    mine, theirs = reaching(config), reaching(base)
    return {k: value_of(config, k) for k, s in SETTINGS.items()
            if s.block and value_of(mine, k) != value_of(theirs, k)}


def _table(out: dict[str, Any]) -> Table:
    labels = list(next(iter(out["windows"].values()))["objectives"])
    table = Table(title=f"{out['experiment']}: {out['config_file']} (table {out['table']}; "
                        f"labels: {out['labels']})", title_justify="left",
                  box=box.SIMPLE_HEAD,
                  caption="objectives as a study's trial computes them (per search, over "
                          "the searches with a relevant memory; cost: engine ms per search "
                          "in the replay); per query: every question counts once",
                  caption_justify="left")
    for column in ("window", "searches", *labels, "per query", "queries"):
        table.add_column(column, justify="left" if column == "window" else "right",
                         no_wrap=True)
    for window, w in out["windows"].items():
        primary, = (k for k in w["per_query"] if k != "queries")
        table.add_row(window, f"{w['searches']:,}",
                      *(f"{w['objectives'][label]:.6f}" for label in labels),
                      f"{w['per_query'][primary]:.4f}", f"{w['per_query']['queries']:,}")
    return table


def cmd_score(args: argparse.Namespace) -> int:
    out = score_configuration(args.experiment, Path(args.config), root=Path(args.root),
                              limit=args.limit)
    if args.json:
        print(json.dumps(out, indent=1, default=str))
        return EXIT_OK
    console = stdout_console(120)
    console.print(_table(out))
    if out["reaching"]:
        console.print("settings other than the experiment's: " + ", ".join(
            f"{k} {v}" for k, v in out["reaching"].items()), highlight=False)
    walks = out["walks"]
    console.print(f"table: {walks['walks']} walk(s) run, {walks['tables_loaded']} read from the "
                  "replay cache", highlight=False)
    return EXIT_OK


def add_score_command(commands: Any) -> None:
    parser = commands.add_parser(
        "score", help="score one fixed ContextKit configuration on an experiment's windows",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", metavar="EXPERIMENT",
                        help=f"a TOML file or a shipped definition "
                             f"({', '.join(shipped_experiments())})")
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="a ContextKit configuration: a .json snippet (as the results "
                             "bundle writes them) or a .toml file")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="the search limit the replay asks (Memory.search's limit; "
                             "default: the experiment's replay.limit, else each logged "
                             "search's own)")
    parser.add_argument("--root", default=".", help="working folder: stores go under "
                        "ROOT/runs/ (as the definition's dataset.store says)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.set_defaults(func=cmd_score)
