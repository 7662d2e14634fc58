"""`msprlab ablate`, `msprlab tune` and `msprlab run`: experiments from a TOML definition.

Each command opens one MLflow parent run (tags: dataset digest, config hash, git commit;
the dataset as a `log_input`; params: the definition and the engine config), with child
runs per ablation arm, one for the weight search (trial values as step metrics) and one
for the test-window comparison of the tuned weights against the baseline. Everything
printed is measured on the test window of the time split; the search sees the train
window only.

This module parses the arguments, calls the stages (`experiments.stages`) in order and
hands each result to the reporter (`experiments.reporter`), which prints, logs and writes
the results bundle.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from msprlab.experiments.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    USER_ERRORS,
    print_error,
    stdout_console,
    writable_folder,
)

from ..arms import ExperimentArms, experiment_arms
from ..bundle import Bundle
from ..experiment_config import ExperimentConfig, load_experiment, shipped_experiments
from ..fidelity.stage import fidelity_stage, with_fidelity
from ..measures.scoring import Arm, arm_of
from ..recovery import planted_recovery
from ..reporter import Reporter
from ..stages.ablate import ablation_stage
from ..stages.config_search import config_held_out, plan_config_search, search_configuration
from ..stages.decide import decision_stage
from ..stages.held_out import held_out_stage
from ..stages.isolation import isolation_stage
from ..stages.prepare import prepare_store
from ..stages.reference_rankers import bm25_sanity, reference_stage
from ..stages.replay_tables import VERDICT_LABELS, Prepared, replay_tables
from ..stages.weight_search import plan_search, search_weights
from ..tracking import Tracker

__all__ = ["add_experiment_commands"]


def _at_least_one(text: str) -> int:
    """An argparse type: an integer >= 1 (a bad value exits 2 naming the flag)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"`>= 1` must hold, but got {value}")
    return value


def _reporter(args: argparse.Namespace, cfg: ExperimentConfig, console: Console,
              bar: Progress, which: str) -> Reporter:
    """The command's outputs: MLflow (unless --no-track) and a fresh bundle folder."""
    writable_folder(Path(args.root), "--root")
    tracker = None
    if not args.no_track:
        tracker = Tracker(args.tracking_uri or cfg.tracking.uri, cfg.tracking.experiment)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    bundle = Bundle(Path(args.root) / "results" / f"{cfg.name}-{which}-{stamp}")
    return Reporter(cfg, console, bar, tracker, bundle)


def _ablate(out: Reporter, cfg: ExperimentConfig, prepared: Prepared,
            arms: ExperimentArms) -> _Measured:
    """The ladder, its isolation audit and the reference rankers (SciFact: plain BM25),
    measured; returns what prints, logs and bundles them (after the verdicts)."""
    ablation = ablation_stage(cfg, prepared, arms)
    audit = isolation_stage(cfg, prepared, arms.ladder, progress=out.progress())
    refs = reference_stage(cfg, prepared, ablation.result)
    sanity = bm25_sanity(prepared) if cfg.dataset.source == "scifact" else None

    def report() -> None:
        out.ablation(prepared, ablation)
        out.isolation(ablation, audit)
        out.references(prepared, refs)
        if sanity is not None:
            out.bm25_sanity(sanity)
    return _Measured(report, dict(ablation.result.per_search))


def _tune(out: Reporter, cfg: ExperimentConfig, prepared: Prepared, arms: ExperimentArms,
          args: argparse.Namespace) -> _Measured:
    """The weight search on the train window, its best weights once on the test window,
    and (a world with planted weights) their recovery, measured; the report after the
    verdicts, with the recommended snippet in place of the tuned one."""
    plan = plan_search(cfg, prepared, trials=args.trials, storage=args.storage,
                       workers=args.workers, sampler=args.sampler,
                       switch_sampler=args.switch_sampler, study=args.study)
    with out.study_run(plan) as hooks:
        tuned = search_weights(cfg, prepared, plan, hooks)
        out.study(plan, tuned)
    held = held_out_stage(cfg, prepared, arms, plan.test_scorer, tuned.best, tuned.snippet,
                          plan.metrics)
    recovery = planted_recovery(prepared.store, prepared.dataset.digest, plan.test_scorer,
                                tuned.best, cfg.metrics.primary)
    config = plan_config_search(cfg, prepared, plan, trials=args.config_trials,
                                progress=out.progress(), on_walk=out.walk, start=tuned.best)
    configured = None
    if config is not None:  # [tune.settings]: the settings searched beside the weights
        with out.study_run(plan, config) as hooks:
            searched = search_configuration(cfg, prepared, config, hooks)
            out.config_study(config, searched)
        configured = (config_held_out(cfg, prepared, config, searched, held), searched)

    def report(snippet: dict[str, Any] | None = None) -> None:
        out.tuned(plan, tuned)
        out.held_out(prepared, held if snippet is None else replace(held, snippet=snippet))
        if configured is not None:
            out.configuration(prepared, *configured)
        out.recovery(recovery)
    return _Measured(report, dict(held.frames), tuned.snippet, tuned.best)


def _counterfactual(cfg: ExperimentConfig, prepared: Prepared, arms: ExperimentArms,
                    best: Arm | None, progress: Any) -> Any:
    """Verdict labels: the position bias of the log and each arm's IPS and SNIPS nDCG@10
    on the test window (`experiments.counterfactual`); None otherwise."""
    if prepared.labels.source != VERDICT_LABELS or not cfg.counterfactual.enabled:
        return None
    from ..counterfactual.stage import PRODUCTION, counterfactual_stage, settings_of
    scored = {name: arm_of(name, config) for name, config in
              {**arms.ladder, **arms.effects}.items()}
    if best is not None:
        scored[PRODUCTION] = replace(best, name=PRODUCTION)
    return counterfactual_stage(prepared, cfg.engine, scored,
                                settings_of(cfg.counterfactual, cfg.seed),
                                raw_metric=cfg.metrics.primary, progress=progress)


@dataclass(frozen=True)
class _Measured:
    """A part of the experiment, measured: what reports it, and its per-search frames on
    the test window (arm -> frame) for the verdicts; the tuned snippet and arm."""

    report: Callable[..., None]
    frames: dict[str, pl.DataFrame]
    snippet: dict[str, Any] | None = None
    best: Arm | None = None


def _command(args: argparse.Namespace, which: str) -> int:
    console = stdout_console(120)
    started = time.perf_counter()
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=console, transient=True)
    out: Reporter | None = None
    try:
        with bar:
            cfg = load_experiment(args.experiment)
            out = _reporter(args, cfg, console, bar, which)
            arms = experiment_arms(cfg, ablation=which in ("ablate", "run"))
            progress = out.progress()
            store = prepare_store(cfg, Path(args.root), progress)
            prepared = replay_tables(cfg, store, arms.every(), progress)
            prepared = with_fidelity(prepared, fidelity_stage(cfg, prepared, progress))
            out.prepared(prepared)
            out.fidelity(prepared)
            with out.parent_run(which, prepared):
                # Everything is measured first, so that the verdicts print before the detail.
                ablated = _ablate(out, cfg, prepared, arms) if which in ("ablate", "run") \
                    else None
                tuned = _tune(out, cfg, prepared, arms, args) if which in ("tune", "run") \
                    else None
                frames = {**(tuned.frames if tuned else {}),
                          **(ablated.frames if ablated else {})}
                estimates = _counterfactual(cfg, prepared, arms,
                                            tuned.best if tuned else None, progress) \
                    if ablated is not None else None
                decision = decision_stage(cfg, prepared, frames,
                                          snippet=tuned.snippet if tuned else None,
                                          best=tuned.best if tuned else None,
                                          counterfactual=estimates)
                out.decision(prepared, decision)
                if ablated is not None:
                    ablated.report()
                if tuned is not None:
                    tuned.report(decision.snippet)
                if estimates is not None:
                    out.counterfactual(prepared, estimates)
                out.finish(started)
    except (*USER_ERRORS, FileNotFoundError) as exc:
        if out is not None:
            out.bundle.discard_if_empty()
        print_error(exc, console)
        return EXIT_BAD_INPUT
    except BaseException:  # a bug or an interrupt: still no empty bundle left behind
        if out is not None:
            out.bundle.discard_if_empty()
        raise
    out.done(time.perf_counter() - started)
    return EXIT_OK


def add_experiment_commands(commands: Any) -> None:
    shipped = ", ".join(shipped_experiments())
    for name, help_text, description in (
        ("run", "the whole experiment: data, replay, ablation ladder, weight search, test",
         "Build the dataset (unless its store exists), replay it, run the ablation ladder and "
         "the weight search on the train window, evaluate the best weights once on the test "
         "window against off (MSPR disabled: the context graph alone) and on-zero (MSPR on, new "
         "weights at 0), and log it all to MLflow. The ladder is printed with its stage "
         "funnel and the reference rankers (see `msprlab ablate --help`)."),
        ("ablate", "the ablation ladder: off, on-zero, each signal on alone, all",
         "Score off (MSPR disabled: the context graph alone), on-zero (MSPR on, new weights "
         "at 0), each of personal, frequency, success, intent and roles switched on alone "
         "on top of on-zero, and all together, on the test window; on-zero with each "
         "recording block off (side effects at zero weight); paired per query against off "
         "and on-zero, per intent and question type, with bootstrap CIs and Holm-corrected "
         "p-values over the tested rows; per-search figures beside them. Under the ladder, "
         "the stage funnel per arm (seed recall, pool recall, the pool's ceiling, achieved, "
         "share of the ceiling, lost before the rerank) and the reference rankers (BM25, "
         "dense-only, the pool in ideal order; not tuned)."),
        ("tune", "an Optuna search over the six weights on the train window",
         "Search the weights (ranges and sampler from the definition) on the train window, "
         "starting from the configured switches at zero new weights; a killed study resumes "
         "from its journal. The best weights are evaluated once on the test window against "
         "off and on-zero."),
    ):
        parser = commands.add_parser(
            name, help=help_text, description=f"{description} EXPERIMENT is a TOML file or a "
            f"shipped definition ({shipped}); see experiments/configs/.",
            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        parser.add_argument("experiment", nargs="?", default="locomo", metavar="EXPERIMENT")
        parser.add_argument("--root", default=".", help="working folder: stores go under "
                            "ROOT/runs/ (as the definition's dataset.store says)")
        parser.add_argument("--tracking-uri", default=None,
                            help="MLflow tracking URI (default: the definition's, "
                                 "sqlite:///mlflow.db)")
        parser.add_argument("--no-track", action="store_true", help="do not log to MLflow")
        parser.add_argument("--trials", type=_at_least_one, default=None,
                            help="the study's target total of COMPLETE trials, not a number "
                                 "to add: a resumed study runs only the missing ones (none "
                                 "once it holds N; --trials 400 on a study of 300 adds 100; "
                                 "trials a killed run left RUNNING are run again, not "
                                 "counted; on a database every process on the study stops "
                                 "at exactly N); default: the definition's tune.trials")
        parser.add_argument("--config-trials", type=_at_least_one, default=None,
                            metavar="N",
                            help="the configuration search's target total of trials (a "
                                 "definition with [tune.settings] only); default: the "
                                 "definition's tune.config_trials")
        parser.add_argument("--sampler", choices=("tpe", "cmaes", "random"), default=None,
                            help="Optuna sampler (default: the definition's, tpe); a study "
                                 "keeps the sampler it was created with")
        parser.add_argument("--switch-sampler", action="store_true",
                            help="let a resumed study continue with --sampler although it "
                                 "was created with another (refused otherwise, exit 2); the "
                                 "switch is stored and each trial records its sampler")
        parser.add_argument("--storage", default=None,
                            help="Optuna storage: a journal file path or a database URL such "
                                 "as postgresql://USER@HOST:PORT/DB (needs the postgres extra; "
                                 "shared by tune processes on several hosts: README, "
                                 "'Scaling out'); default: a journal beside the store")
        parser.add_argument("--study", default=None, metavar="NAME",
                            help="the study to create or join (default: on a database the "
                                 "experiment's name, on a journal NAME-CONFIGHASH-DATADIGEST); "
                                 "it records the dataset digest and config hash, and refuses "
                                 "a process whose differ")
        parser.add_argument("--workers", type=_at_least_one, default=None,
                            help="processes sharing the study, >= 1 (default: the "
                                 "definition's); they end when this process does")
        parser.set_defaults(func=lambda args, which=name: _command(args, which))
