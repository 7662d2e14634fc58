"""Which verdict labelling tells the truth? Each labelling's changes against `off`, checked
on generated worlds whose truth is known (issue 40, item 5).

    python -m msprlab.experiments.counterfactual.validate WORLDS [--only NAME ...]
        [--variants matched mismatched] [--trials N] [--resamples B] [--work DIR]
        [--out DIR]
    python -m msprlab.experiments.counterfactual.validate --from OUT [OUT ...] --out DIR

WORLDS holds worlds made by `python -m msprlab.experiments.parity.worlds` (each a folder
with world.json, truth/, store.duckdb and the definitions matched.toml, production's
[engine], and mismatched.toml). For each world and definition the experiment's arms are
replayed (`store.duckdb` copied into `--work`, so the caches go there), the weights are
searched on the train window (`--trials`, the definition's objective on verdicts: the
`tuned` arm), and on the test window each arm's change against `off` is measured by:

- `verdict ndcg@10`, `verdict ndcg'@10`, `verdict bpref`: the raw verdict labels (each
  search labelled by its own verdicts), per query, CI a percentile bootstrap over queries;
- `snips`, `ips`: the counterfactual estimates on the replay's reconstructed lists
  (`estimators`; the curve fitted on every window, CIs with the click model refitted);
- `snips (true lists)`, `ips (true lists)`: the same on the lists the world's users were
  really shown (`truth/searches.parquet`): what a perfect reconstruction would give.

The truth of a change is nDCG@10 under the world's qrels on the same searches
(`label_check.with_truth`), per query, over the questions the labelling scores (`truth`)
and over every question with a truth (`truth, all questions`). Per labelling the table
gives sign agreement, mean absolute error and the share of 95% CIs covering the truth, and
the recovered examination curve against the generator's (`world.json`'s
`truth.examination`). Files in `--out`: rows.parquet (every arm, world and labelling),
summary.parquet, curves.parquet, worlds.json (fidelity, notes, seconds), summary.md and
position_bias.png; `--from` builds them again from earlier outputs, without a replay.

Exit status 0 (the figures are findings), 2 when WORLDS holds no world or a definition is
bad.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from msprlab.datasets.trec import read_qrels

from ..arms import experiment_arms
from ..cli.exits import EXIT_BAD_INPUT, EXIT_OK, print_error, stdout_console
from ..experiment_config import ExperimentConfig, load_experiment
from ..fidelity.stage import fidelity_stage
from ..label_check import with_truth
from ..measures.scoring import Arm, arm_of
from ..stages.prepare import prepare_store
from ..stages.replay_tables import Prepared, replay_tables, window_table
from .stage import PRODUCTION, CounterfactualSettings, counterfactual_stage, per_query
from .validation_report import load_results, report
from .world_lists import true_lists

__all__ = ["RAW", "main", "true_examination", "validate_world"]

RAW = ("ndcg@10", "ndcg'@10", "bpref")   # the raw verdict labellings compared
VARIANTS = ("matched", "mismatched")
_BOOTSTRAP = 2000


def _tuned(cfg: ExperimentConfig, prepared: Prepared, trials: int, journal: Path) -> Arm:
    """The weight search on the train window, as `msprlab tune` runs it, without output."""
    from ..stages.weight_search import SearchHooks, plan_search, search_weights
    plan = plan_search(cfg, prepared, trials=trials, storage=str(journal), workers=1,
                       sampler=None)
    hooks = SearchHooks(lambda _: None, lambda *_: None, lambda *_: None, lambda _: None)
    return search_weights(cfg, prepared, plan, hooks).best


def _change(arm: pl.DataFrame, off: pl.DataFrame, seed: int) -> tuple[float, float, float,
                                                                       list[str]]:
    """Mean paired difference per question and its percentile bootstrap interval."""
    paired = arm.join(off, on="question", suffix="_off").with_columns(
        d=pl.col("value") - pl.col("value_off")).sort("question")
    d = paired["d"].to_numpy()
    if d.size == 0:
        return np.nan, np.nan, np.nan, []
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(_BOOTSTRAP, d.size))].mean(axis=1)
    return (float(d.mean()), float(np.quantile(means, 0.025)),
            float(np.quantile(means, 0.975)), paired["question"].to_list())


def _copy_store(cfg: ExperimentConfig, work: Path) -> ExperimentConfig:
    """`cfg` on a copy of its store in `work` (the replay caches go beside the copy)."""
    source = Path(cfg.dataset.store)
    work.mkdir(parents=True, exist_ok=True)
    target = work / source.name
    if not target.exists() or target.stat().st_mtime < source.stat().st_mtime:
        shutil.copy2(source, target)
    return replace(cfg, dataset=replace(cfg.dataset, store=str(target)),
                   fidelity=replace(cfg.fidelity, search=False, on_fail="warn"))


def validate_world(folder: Path, variant: str, work: Path, *, trials: int, resamples: int,
                   seed: int = 0) -> dict[str, Any]:
    """Every labelling's change against off for each arm of `folder`'s `variant`
    definition: {"rows": frame, "curve": frame, "fidelity": summary, "seconds": ...}."""
    started = time.perf_counter()
    cfg = _copy_store(load_experiment(folder / f"{variant}.toml"), work / folder.name / variant)
    arms = experiment_arms(cfg, ablation=True)
    store = prepare_store(cfg, Path("."))
    prepared = replay_tables(cfg, store, {**arms.ladder, PRODUCTION: arms.tuned})
    fidelity = fidelity_stage(cfg, prepared)
    tuned = _tuned(cfg, prepared, trials, work / folder.name / variant / "study.journal")
    scored = {name: arm_of(name, config) for name, config in arms.ladder.items()}
    scored["tuned"] = replace(tuned, name="tuned")
    truth = read_qrels(folder / "truth" / "qrels.tsv")
    tests = {name: window_table(prepared, name, "test") for name in scored}
    truth_q = {name: per_query(with_truth(tests[name], truth), arm, "ndcg@10")
               for name, arm in scored.items()}
    settings = CounterfactualSettings(resamples=resamples, seed=seed)
    lists, matched = true_lists(folder, prepared.table(PRODUCTION).searches)
    estimates = {
        "": counterfactual_stage(prepared, cfg.engine, scored, settings),
        " (true lists)": counterfactual_stage(
            prepared, cfg.engine, scored, settings, lists=lists,
            source=f"the world's true lists ({matched:.1%} of the searches matched)")}
    rows = []
    for name in scored:
        if name == "off":
            continue
        for metric in RAW:
            delta, low, high, questions = _change(
                per_query(tests[name], scored[name], metric),
                per_query(tests["off"], scored["off"], metric), seed)
            rows.append(_row(name, f"verdict {metric}", delta, low, high, questions,
                             truth_q))
        for suffix, result in estimates.items():
            per_question = result.estimates.questions
            shares = result.estimates.estimates.filter(pl.col("estimator") == "snips")
            unshown = shares.filter(pl.col("arm") == name)["unshown"].item()
            off_unshown = shares.filter(pl.col("arm") == "off")["unshown"].item()
            for estimator in ("snips", "ips"):
                change = result.estimates.changes.filter(
                    pl.col("arm") == name, pl.col("reference") == "off",
                    pl.col("estimator") == estimator).row(0, named=True)
                both = per_question.filter(pl.col("arm").is_in([name, "off"]),
                                           pl.col(estimator).is_not_nan())
                covered = (both.group_by("question").len().filter(pl.col("len") == 2)
                           ["question"].to_list())
                rows.append(_row(name, f"{estimator}{suffix}", change["delta"],
                                 change["ci_low"], change["ci_high"], covered, truth_q,
                                 unshown=(unshown, off_unshown)))
    reconstructed = estimates[""]
    frame = pl.DataFrame(rows).with_columns(world=pl.lit(folder.name),
                                            variant=pl.lit(variant))
    truth_curve = true_examination(folder, reconstructed.curve.frame.height)
    curve = reconstructed.curve.frame.with_columns(
        truth=pl.Series(truth_curve, dtype=pl.Float64),
        world=pl.lit(folder.name), variant=pl.lit(variant))
    return {"rows": frame, "curve": curve,
            "fidelity": None if fidelity is None else fidelity.summary(),
            "passed": None if fidelity is None else fidelity.passed,
            "notes": [result.logged.note() for result in estimates.values()],
            "seconds": time.perf_counter() - started}


def true_examination(folder: Path, k: int) -> list[float]:
    """The generator's P(examined at rank r), r = 1..k: world.json's `truth.examination`,
    or, in a world made before it was recorded, r^-eta from its click model's settings."""
    info = json.loads((folder / "world.json").read_text(encoding="utf-8"))
    known = info.get("truth", {}).get("examination")
    if known is None:
        eta = float(info["settings"]["click_model"]["eta"])
        known = [r ** -eta for r in range(1, k + 1)]
    return [float(x) for x in known[:k]] + [math.nan] * max(0, k - len(known))


def _row(arm: str, labelling: str, delta: float, low: float, high: float,
         questions: list[str], truth_q: dict[str, pl.DataFrame], *,
         unshown: tuple[float, float] = (np.nan, np.nan)) -> dict[str, Any]:
    diff = truth_q[arm].join(truth_q["off"], on="question", suffix="_off").with_columns(
        d=pl.col("value") - pl.col("value_off"))
    same = diff.filter(pl.col("question").is_in(questions))["d"]
    return {"arm": arm, "labelling": labelling, "n_questions": len(questions),
            "delta": delta, "ci_low": low, "ci_high": high,
            "truth": float(same.mean()) if same.len() else np.nan,
            "truth_all": float(diff["d"].mean()), "n_truth": diff.height,
            "unshown": unshown[0], "off_unshown": unshown[1]}


def _worlds(root: Path, only: Sequence[str]) -> list[Path]:
    found = sorted(p for p in root.iterdir()
                   if p.is_dir() and (p / "world.json").is_file() and (p / "truth").is_dir())
    if only:
        missing = sorted(set(only) - {p.name for p in found})
        if missing:
            raise ValueError(f"--only {missing[0]}: no such world in {root} (worlds: "
                             f"{', '.join(p.name for p in found)})")
        found = [p for p in found if p.name in only]
    if not found:
        raise ValueError(f"{root}: holds no world (a folder with world.json and truth/); make "
                         "them with python -m msprlab.experiments.parity.worlds")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m msprlab.experiments.counterfactual.validate",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("worlds", type=Path, nargs="?", default=None,
                        help="a folder of generated worlds")
    parser.add_argument("--from", dest="earlier", nargs="+", type=Path, default=(),
                        metavar="OUT", help="no replay: the table of the results earlier "
                        "runs wrote into these --out folders, together")
    parser.add_argument("--only", nargs="*", default=(), metavar="NAME",
                        help="these worlds only (folder names)")
    parser.add_argument("--variants", nargs="*", default=VARIANTS, choices=VARIANTS,
                        help="which definitions of each world (default both)")
    parser.add_argument("--trials", type=int, default=60,
                        help="weight-search trials for the tuned arm (default 60)")
    parser.add_argument("--resamples", type=int, default=200,
                        help="bootstrap resamples of the counterfactual CIs (default 200)")
    parser.add_argument("--work", type=Path, default=Path("build/validate-work"),
                        help="where the stores are copied and replayed (caches)")
    parser.add_argument("--out", type=Path, default=Path("build/validate"),
                        help="where the table, rows and plot are written")
    args = parser.parse_args(argv)
    console = stdout_console(140)
    if args.earlier:
        try:
            report([r for folder in args.earlier for r in load_results(folder)], args.out,
                   console)
        except (OSError, ValueError, KeyError) as exc:
            print_error(exc, console)
            return EXIT_BAD_INPUT
        return EXIT_OK
    try:
        if args.worlds is None:
            raise ValueError("name a folder of worlds (or --from earlier outputs)")
        worlds = _worlds(args.worlds, args.only)
        if args.trials < 1 or args.resamples < 1:
            raise ValueError("--trials and --resamples must be >= 1")
    except (ValueError, OSError) as exc:
        print_error(exc, console)
        return EXIT_BAD_INPUT
    results = []
    for folder in worlds:
        for variant in args.variants:
            if not (folder / f"{variant}.toml").is_file():
                console.print(f"{folder.name}: no {variant}.toml, left out", highlight=False)
                continue
            console.print(f"{folder.name} / {variant} ...", highlight=False)
            results.append(validate_world(folder, variant, args.work, trials=args.trials,
                                          resamples=args.resamples))
    report(results, args.out, console)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
