"""`msprlab ablate`, `msprlab tune` and `msprlab run`: experiments from a TOML definition.

Each command opens one MLflow parent run (tags: dataset digest, config hash, git commit;
the dataset as a `log_input`; params: the definition and the engine config), with child
runs per ablation arm, one for the weight search (trial values as step metrics) and one
for the test-window comparison of the tuned weights against the baseline. Everything
printed is measured on the test window of the time split; the search sees the train
window only.
"""

from __future__ import annotations

import argparse
import math
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from msprlab.engine.batch import WEIGHTS
from msprlab.experiments.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    USER_ERRORS,
    print_error,
    stdout_console,
    writable_folder,
)

from ..ablation import AblationResult, switches
from ..arms import ExperimentArms, arms_frame, baseline_arm, experiment_arms
from ..bundle import (
    ABLATION,
    ABLATION_ARMS,
    ABLATION_COMPARISON,
    ABLATION_FUNNEL,
    ABLATION_FUNNEL_PART,
    ABLATION_MATCH,
    ABLATION_NOTES,
    ABLATION_SIDE_EFFECTS,
    ABLATION_SUMMARY,
    ISOLATION_AUDIT,
    PROVENANCE,
    REFERENCES,
    REFERENCES_COMPARISON,
    REFERENCES_RANKERS,
    REFERENCES_SUMMARY,
    SANITY_BM25,
    SNIPPET,
    STUDY_SUMMARY,
    STUDY_TRIALS,
    TEST,
    TEST_ARMS,
    TEST_COMPARISON,
    TEST_FUNNEL,
    TEST_SUMMARY,
    Bundle,
    per_search_file,
    provenance,
    trec_run_file,
)
from ..console_tables import (
    arms_table,
    audit_table,
    comparison_table,
    delta_matrix,
    funnel_group_table,
    funnel_table,
    judged_shares,
    ladder_table,
    reference_table,
    side_effect_table,
)
from ..errors import redact_url
from ..experiment_config import (
    ExperimentConfig,
    ExperimentError,
    judged_metric,
    load_experiment,
    shipped_experiments,
)
from ..funnel import shares, with_shares
from ..metrics import parse_metric
from ..replay import question_of
from ..scoring import Arm, Scorer, arm_of
from ..stages.ablate import ablate, arm_funnels
from ..stages.isolation import isolation_audit
from ..stages.prepare import Stage, prepare_store
from ..stages.replay_tables import VERDICT_LABELS, Prepared, replay_tables, window_table
from ..summaries import GROUPS, compare_units, summarize
from ..tracking import Tracker, engine_params, flatten, git_commit, metric_key

__all__ = ["add_experiment_commands"]



@dataclass
class Context:
    cfg: ExperimentConfig
    console: Console
    root: Path
    tracker: Tracker | None
    bar: Progress
    bundle: Bundle
    prepared: Prepared | None = None
    arms: ExperimentArms | None = None


def _stage(bar: Progress) -> Stage:
    tasks: dict[str, Any] = {}

    def update(what: str, done: int, total: int) -> None:
        key = what.split(":")[0]
        if key not in tasks:
            tasks[key] = bar.add_task(what, total=total or None)
        bar.update(tasks[key], description=what, completed=done, total=total or None)
    return update


def _tags(cfg: ExperimentConfig, prepared: Prepared | None, command: str) -> dict[str, str]:
    tags = {"msprlab.command": command, "msprlab.experiment": cfg.name,
            "msprlab.config_hash": cfg.digest(), "msprlab.git_commit": git_commit(),
            "msprlab.config_path": str(cfg.path)}
    if prepared is not None:
        tags["msprlab.dataset_digest"] = prepared.dataset.digest
        tags["msprlab.dataset_source"] = prepared.dataset.source
        tags["msprlab.label_source"] = prepared.labels.source
    return tags


def _prepare(ctx: Context, configs: dict[str, Any]) -> Prepared:
    stage = _stage(ctx.bar)
    store = prepare_store(ctx.cfg, ctx.root, stage)
    prepared = replay_tables(ctx.cfg, store, configs, stage)
    counts = prepared.split.value_counts().sort("split")
    windows = ", ".join(f"{w} {n:,}" for w, n in counts.iter_rows())
    cached = sum(prepared.from_cache.values())
    ctx.console.print(f"store {store} ({prepared.dataset.source}, digest "
                      f"{prepared.dataset.digest[:12]}); {len(prepared.tables)} replay(s), "
                      f"{cached} from the cache; searches: {windows}", highlight=False)
    if note := prepared.labels.note():
        ctx.console.print(note, highlight=False)
    return prepared


def _log_run_header(ctx: Context, prepared: Prepared) -> None:
    if ctx.tracker is None:
        return
    ctx.tracker.dataset(name=prepared.dataset.source, digest=prepared.dataset.digest,
                        source=str(prepared.store.resolve()), context="replay")
    ctx.tracker.params(flatten({"experiment": {k: v for k, v in ctx.cfg.raw.items()
                                               if k != "engine"}}))
    ctx.tracker.params(engine_params(ctx.cfg.engine))


def _arm_metrics(frame: pl.DataFrame, arm: str, *, stem: tuple[str, ...] = (),
                 sizes: bool = True) -> dict[str, float]:
    """An arm's means (and, with `sizes`, group sizes) for MLflow, from a long frame as
    `stats.aggregate` gives it (a summary, or a funnel under `stem` ("funnel",)); one
    convention for every arm run (ladder, references and test window): `ndcg_at_10`
    (overall), `ndcg_at_10/intent/FACTUAL`, the group's n as `n/intent/FACTUAL` (per
    query), per-search figures under `per_search/` (after the stem). A mean that is missing
    or NaN is not logged (its n is)."""
    out: dict[str, float] = {}
    for r in frame.filter(pl.col("arm") == arm).iter_rows(named=True):
        group = () if r["group_by"] == "overall" else (r["group_by"], str(r["group"]))
        prefix = stem if r["unit"] == "query" else (*stem, "per_search")
        if r["mean"] is not None and not math.isnan(r["mean"]):
            out[metric_key(*prefix, r["metric"], *group)] = r["mean"]
        if sizes:
            out[metric_key(*prefix, "n", *group)] = r["n"]
    return out


def _primary_rows(frame: pl.DataFrame, metric: str) -> pl.DataFrame:
    return frame.filter(pl.col("metric") == metric) if frame.height else frame


def run_ablation(ctx: Context, prepared: Prepared) -> AblationResult:
    cfg = ctx.cfg
    assert ctx.arms is not None
    configs = ctx.arms.ladder
    result = ablate(cfg, prepared, configs, effects=ctx.arms.effects)
    primary = cfg.metrics.primary
    arms = arms_frame(result.arms, result.configs)
    ctx.console.print(arms_table(arms.filter(pl.col("name").is_in(list(configs)))))
    for unit, label in (("query", "per query: every question counts once"),
                        ("search", "per search: weighted by traffic, cluster bootstrap over "
                                   "queries")):
        ctx.console.print(ladder_table(
            result.summary, result.comparison, result.match, metric=primary, unit=unit,
            judged=_judged(ctx, prepared), min_judged_ratio=cfg.metrics.min_judged_ratio,
            title=f"ablation ladder, test window: {primary}, {label}; labels: "
                  f"{prepared.labels.source}"))
    funnel_frames, funnel = _funnel(ctx, prepared, result, configs)
    if result.comparison.height:
        family = _family(result.comparison, "off", "query")
        for group_by in ("intent", "question_type"):
            part = result.comparison.filter(pl.col("reference") == "off",
                                            pl.col("unit") == "query",
                                            pl.col("group_by").is_in(["overall", group_by]))
            ctx.console.print(delta_matrix(
                part, metric=primary, title=f"ablation, test window: {primary} change against "
                f"off (MSPR disabled), per query, by {group_by.replace('_', ' ')}; labels: "
                f"{prepared.labels.source}",
                family=family))
    if result.side_effects.height:
        ctx.console.print(side_effect_table(result.side_effects, metric=primary,
                                            labels=prepared.labels.source))
    for note in result.notes:
        ctx.console.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    audit = isolation_audit(cfg, prepared, configs, progress=_stage(ctx.bar))
    ctx.console.print(audit_table(audit, policy=cfg.replay.policy))
    if note := _chat_role_note(prepared, audit):
        ctx.console.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    ctx.bundle.frame(audit, ISOLATION_AUDIT)
    if ctx.tracker is not None:
        ctx.tracker.metrics({f"isolation/{r['mode']}/{r['arm']}/leaked": r["leaked"]
                             for r in audit.iter_rows(named=True)})
        match = {r["arm"]: r for r in result.match.iter_rows(named=True)}
        for name, arm in result.arms.items():
            kind = "side-effect" if name in ctx.arms.effects else "ladder"
            with ctx.tracker.child(f"arm:{name}", tags={"msprlab.arm": name,
                                                        "msprlab.arm_kind": kind,
                                                        "msprlab.window": "test"}):
                ctx.tracker.params({**engine_params(result.configs[name]),
                                    **{f"weight.{k}": v for k, v in zip(
                                        WEIGHTS, arm.weights, strict=True)},
                                    **{f"switch.{k}": v for k, v in
                                       switches(result.configs[name]).items()}})
                ctx.tracker.metrics({**_arm_metrics(result.summary, name),
                                    **_arm_metrics(funnel, name, stem=("funnel",), sizes=False),
                                     "match/matched": match[name]["matched"],
                                     "match/logged": match[name]["logged"],
                                     "match/rate": match[name]["rate"]})
    for name, frame in result.per_search.items():
        ctx.bundle.frame(frame, per_search_file(ABLATION, name))
    ctx.bundle.frame(result.summary, ABLATION_SUMMARY)
    ctx.bundle.frame(funnel, ABLATION_FUNNEL)
    for name, frame in funnel_frames.items():
        ctx.bundle.frame(frame, per_search_file(ABLATION_FUNNEL_PART, name))
    ctx.bundle.frame(arms, ABLATION_ARMS)
    ctx.bundle.frame(result.match, ABLATION_MATCH)
    ctx.bundle.json(result.notes, ABLATION_NOTES)
    if result.comparison.height:
        ctx.bundle.frame(result.comparison, ABLATION_COMPARISON)
    if result.side_effects.height:
        ctx.bundle.frame(result.side_effects, ABLATION_SIDE_EFFECTS)
    _reference_rankers(ctx, prepared, result)
    return result


def _chat_role_note(prepared: Prepared, audit: pl.DataFrame) -> str | None:
    """Why an audit of memories added through `Memory.add` counts leaks: their payload
    `role` is the chat role, which the role policy reads as an access role (MSPR.md
    section 18, quirk 15)."""
    roles = set(prepared.dataset.memories["role"].drop_nulls().unique().to_list())
    if not roles or not roles <= {"user", "assistant", "system"} or not audit["leaked"].sum():
        return None
    return (f"the memories' payload role is a chat role ({', '.join(sorted(roles))}), which "
            "Memory.add(..., infer=False) stores and RoleScopePolicy reads as an access role "
            "(MSPR.md quirk 15): a searcher without that role is 'denied' them, so the leaks "
            "above count that clash, not memories of another tenant")


def _judged(ctx: Context, prepared: Prepared) -> str | None:
    """The judged@K metric shown beside every arm when the labels are verdicts."""
    if prepared.labels.source != VERDICT_LABELS:
        return None
    return judged_metric(ctx.cfg.metrics.names)


def _funnel(ctx: Context, prepared: Prepared, result: AblationResult,
            configs: dict[str, Any]) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
    """The ladder arms' stage funnel: printed overall and by group, returned for the
    bundle and MLflow (long, as `stats.aggregate` gives it, with `share` rows added)."""
    primary = ctx.cfg.metrics.primary
    arms = {name: result.arms[name] for name in configs}
    frames, summary = arm_funnels(ctx.cfg, prepared, arms, result.per_search)
    wide = shares(summary)
    ctx.console.print(funnel_table(
        wide, metric=primary, title=f"stage funnel, test window: where {primary} is lost "
        f"between the dense seeds and the returned list; labels: {prepared.labels.source}"))
    reference = "off" if "off" in arms else next(iter(arms))
    for group_by in ("intent", "question_type"):
        ctx.console.print(funnel_group_table(
            wide, reference=reference, arms=list(arms), group_by=group_by,
            title=f"stage funnel by {group_by.replace('_', ' ')}, test window, per query: "
                  f"{primary}; labels: {prepared.labels.source}"))
    return frames, with_shares(summary)


def _family(comparison: pl.DataFrame, reference: str, unit: str) -> str:
    """The label of a comparison's multiple-testing family and permutation count."""
    rows = comparison.filter(pl.col("reference") == reference, pl.col("unit") == unit)
    if not rows.height:
        return ""
    bound = ("; ≤: no random sign flip was as extreme as the data, so the p is at most the "
             "value shown" if "p_perm_bound" in rows.columns and rows["p_perm_bound"].any()
             else "")
    return f"{rows['correction'][0]}; {rows['permutation_test'][0]}{bound}"


def _bm25_reference(ctx: Context, prepared: Prepared) -> None:
    """SciFact's sanity line: plain BM25 over the whole corpus on the test-window claims."""
    from msprlab.datasets.sources.scifact import bm25_ndcg10
    test = set(prepared.tables[next(iter(prepared.tables))].searches.filter(
        (prepared.split == "test").to_numpy())["query_id"].to_list())
    ds = prepared.dataset
    subset = replace(ds, queries=ds.queries.filter(pl.col("query_id").is_in(list(test))),
                       qrels=ds.qrels.filter(pl.col("query_id").is_in(list(test))))
    value = bm25_ndcg10(subset)
    ctx.console.print(f"sanity: plain BM25 (k1 1.2, b 0.75) over the whole corpus on the same "
                      f"{len(test)} test claims: nDCG@10 {value:.4f} (about 0.66 on all 300 is "
                      "the published figure). The engine ranks only the top-10 dense seeds "
                      "and their graph neighbours, with query-token overlap as its lexical "
                      "term, so it is not expected to match.", highlight=False)
    ctx.bundle.json({"bm25_ndcg_at_10_test_claims": value, "claims": len(test)},
                    SANITY_BM25)


def _reference_rankers(ctx: Context, prepared: Prepared, result: AblationResult) -> None:
    """BM25 and dense-only on the ladder's test-window searches (`references.py`), against
    `off`: printed, bundled under references/, one MLflow child run each; not arms, so
    never tuned and labelled "reference" wherever they appear."""
    from ..references import reference_frame, reference_runs
    cfg = ctx.cfg
    if not cfg.references.enabled:
        ctx.console.print("reference rankers: off ([references] enabled = false)",
                          highlight=False)
        return
    base = "off" if "off" in result.per_search else next(iter(result.per_search))
    table = window_table(prepared, base, "test")
    metrics = [parse_metric(m) for m in cfg.metrics.names]
    runs = reference_runs(prepared.dataset, table)
    frames = {run.name: reference_frame(table, run, metrics) for run in runs}
    summary = summarize(frames, cfg)
    comparison = compare_units(result.per_search[base], frames, cfg, reference=base)
    primary = cfg.metrics.primary
    ctx.console.print(reference_table(
        summary, comparison, metric=primary, seconds={r.name: r.seconds for r in runs},
        labels={r.name: r.label for r in runs},
        title=f"reference rankers (not tuned), test window: {primary} per query / per "
              f"search, Δ against {base}; labels: {prepared.labels.source}"))
    ctx.bundle.frame(summary, REFERENCES_SUMMARY)
    ctx.bundle.frame(comparison, REFERENCES_COMPARISON)
    ctx.bundle.json([{"name": r.name, "kind": "reference", "label": r.label,
                      "seconds": r.seconds, "visible_sets": r.visible_sets} for r in runs],
                    REFERENCES_RANKERS)
    for name, frame in frames.items():
        ctx.bundle.frame(frame, per_search_file(REFERENCES, name))
    if ctx.tracker is None:
        return
    for run in runs:
        with ctx.tracker.child(f"reference:{run.name}", tags={
                "msprlab.arm": run.name, "msprlab.arm_kind": "reference",
                "msprlab.window": "test"}):
            ctx.tracker.params({"reference.label": run.label,
                                "reference.visible_sets": run.visible_sets})
            ctx.tracker.metrics({**_arm_metrics(summary, run.name), "cost/seconds": run.seconds})


def run_tuning(ctx: Context, prepared: Prepared, *, trials: int | None, storage: str | None,
               workers: int | None, sampler: str | None,
               switch_sampler: bool = False, study: str | None = None) -> dict[str, Any]:
    """The weight search on the train window. `trials` is the study's target total of
    COMPLETE trials (a resumed study runs only the missing ones); `switch_sampler` lets a
    resumed study continue with another sampler than the one it was created with.

    The study is `study`, else on a database (shared by hosts) the experiment's name, on a
    journal NAME-CONFIGHASH-DATADIGEST (8 characters each). It records the dataset digest
    and the config hash: a process whose differ is refused (exit 2) before any trial."""
    from ..tune import (
        Objective,
        best_config_snippet,
        is_database,
        search_space,
        snippet_notes,
        trials_message,
        tune,
    )
    cfg = ctx.cfg
    metrics = [parse_metric(m) for m in cfg.metrics.names]
    train = window_table(prepared, "tuned", "train")
    test = window_table(prepared, "tuned", "test")
    train_scorer, test_scorer = Scorer.of(train, metrics), Scorer.of(test, metrics)
    base = baseline_arm(cfg)
    space = search_space(dict(cfg.tune.ranges), cfg.engine)  # signals off: weights fixed at 0
    objectives = [Objective(*_objective(o)) for o in cfg.tune.objectives]
    n_trials = cfg.tune.trials if trials is None else trials  # not `or`: 0 is not "unset"
    journal = storage or cfg.tune.storage or str(
        prepared.store.with_name(prepared.store.stem + f".{cfg.name}.optuna.journal"))
    study_name = study or (cfg.name if is_database(journal) else
                           f"{cfg.name}-{cfg.digest()[:8]}-{prepared.dataset.digest[:8]}")
    shown = redact_url(journal)
    chosen = sampler or cfg.tune.sampler
    task = ctx.bar.add_task(f"tuning ({chosen}, target {n_trials} trials)", total=n_trials)
    started = time.perf_counter()
    with ExitStack() as stack:
        if ctx.tracker is not None:
            stack.enter_context(ctx.tracker.child("study", tags={"msprlab.study": study_name}))
            ctx.tracker.params({"study": study_name, "storage": shown,
                                "sampler": chosen, "trials": n_trials,
                                "objectives": list(cfg.tune.objectives), "seed": cfg.seed,
                                **{f"range.{k}": list(v) for k, v in space.ranges.items()},
                                **{f"fixed.{k}": why for k, why in space.fixed.items()}})

        def on_trial(record: Any) -> None:
            if ctx.tracker is not None and record.values is not None:
                ctx.tracker.metrics({f"trial/{o.key()}": v for o, v in zip(
                    objectives, record.values, strict=True)}, step=record.number,
                    synchronous=False)

        result = tune(train_scorer, base, space, objectives, n_trials=n_trials, seed=cfg.seed,
                      sampler=chosen,  # type: ignore[arg-type]
                      pruner=cfg.tune.pruner,  # type: ignore[arg-type]
                      storage=journal, study_name=study_name,
                      workers=cfg.tune.workers if workers is None else workers,
                      switch_sampler=switch_sampler,
                      identity={"dataset_digest": prepared.dataset.digest,
                                "config_hash": cfg.digest()},
                      heartbeat=(cfg.tune.heartbeat, cfg.tune.heartbeat_grace),
                      on_recovered=lambda message: ctx.console.print(
                          f"[yellow]recovered:[/yellow] {message}", highlight=False),
                      on_start=lambda held, target: ctx.console.print(
                          trials_message(held, target), highlight=False),
                      progress=lambda done, total: ctx.bar.update(task, completed=done,
                                                                  total=total),
                      on_trial=on_trial)
        best = result.best[0]
        snippet = best_config_snippet(cfg.engine, best)
        cannot = list(snippet_notes(cfg.engine))
        if best.roles and cfg.replay.policy != "none":
            cannot.append(f"the role policy (replay.policy = {cfg.replay.policy!r}) is not a "
                          "config setting: install it with Memory.set_role_policy")
        ctx.bundle.frame(result.trials, STUDY_TRIALS)
        ctx.bundle.json(study_summary(result, n_trials, sampler=chosen, seed=cfg.seed,
                                      snippet_notes=cannot), STUDY_SUMMARY)
        if ctx.tracker is not None:
            ctx.tracker.metrics({f"importance/{metric_key(label)}/{weight}": value
                                 for label, values in result.importance.items()
                                 for weight, value in values.items()})
            ctx.tracker.metrics({f"best/{o.key()}": v for o, v in zip(
                objectives, result.best_values[0], strict=True)})
            ctx.tracker.params({f"best.{w}": v for w, v in zip(
                WEIGHTS, best.weights, strict=True)})
    seconds = time.perf_counter() - started
    ctx.console.print(f"weight search: {result.added:,} new trials in {seconds:.1f} s on the "
                      f"train window ({train.searches.height:,} searches); the study holds "
                      f"{result.held + result.added:,}: {study_name} in {shown}",
                      highlight=False)
    ctx.console.print("best weights: " + ", ".join(
        f"{k} {v:.3f}" for k, v in best.named_weights._asdict().items()), highlight=False)
    for note in result.notes:
        ctx.console.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    for note in cannot:
        ctx.console.print(f"[yellow]note ({SNIPPET}):[/yellow] {note}",
                          highlight=False)
    out = _test_window(ctx, test_scorer, base, best, snippet, metrics)
    from ..recovery import report_recovery
    report_recovery(ctx.console, ctx.bundle, ctx.tracker, prepared.store, prepared.dataset.digest,
                    test_scorer, best, cfg.metrics.primary)
    return out


def study_summary(result: Any, n_trials: int, *, sampler: str | None = None,
                  seed: int | None = None, snippet_notes: list[str] | None = None
                  ) -> dict[str, Any]:
    """What the study found, as JSON: the searched space and the weights fixed at 0, best
    (or Pareto) weights and values, importance, the sampler, and what the library snippet
    (`bundle.SNIPPET`) cannot reproduce."""
    from ..tune import SETTINGS_ATTR
    states = result.trials["state"].value_counts()
    space = result.study.user_attrs.get(SETTINGS_ATTR, {})  # as the study stores it
    return {
        "study": result.study_name, "storage": redact_url(result.storage),
        "trials_requested": n_trials,
        "trials_held_before": result.held, "trials_added": result.added,
        "sampler": sampler, "seed": seed,
        "space": space.get("space", {}), "fixed": space.get("fixed", {}),
        "trials": {state: int(n) for state, n in states.iter_rows()},
        "objectives": [o.label() for o in result.objectives],
        "best": [{"weights": arm.named_weights._asdict(),
                  "intent": arm.intent, "roles": arm.roles,
                  "values": dict(zip([o.label() for o in result.objectives], values,
                                     strict=True))}
                 for arm, values in zip(result.best, result.best_values, strict=True)],
        "pareto": len(result.objectives) > 1,
        "importance": result.importance, "importance_method": "PED-ANOVA (optuna.importance)",
        "notes": list(result.notes), "recovered": list(result.recovered),
        "snippet_notes": list(snippet_notes or []),
    }


def _objective(text: str) -> tuple[str, str | None]:
    parts = text.split("/")
    if len(parts) == 1:
        return parts[0], None
    if len(parts) == 3 and parts[1] == "intent":
        return parts[0], parts[2]
    raise ExperimentError(f"tune.objectives: {text!r}; use METRIC or METRIC/intent/LABEL")


def _test_window(ctx: Context, test: Scorer, base: Arm, best: Arm, snippet: dict[str, Any],
                 metrics: list[Any]) -> dict[str, Any]:
    """The tuned weights once on the test window, against `off` and `on-zero`, per group,
    per unit, and split by whether the query was asked in the train window."""
    cfg, prepared, arms = ctx.cfg, ctx.prepared, ctx.arms
    assert prepared is not None and arms is not None
    scorers = {"tuned": test}
    chosen = {"tuned": best}
    for name, config in arms.references.items():
        same = prepared.key_of[name] == prepared.key_of["tuned"]
        scorers[name] = test if same else Scorer.of(window_table(prepared, name, "test"),
                                                    metrics)
        chosen[name] = arm_of(name, config)
    searches = prepared.table("tuned").searches
    asked = searches.filter((prepared.split == "train").to_numpy()).select(
        question_of(searches))["query_id"].unique()
    asked = asked.implode()
    frames = {name: scorers[name].frame(arm).with_columns(
        seen=pl.when(pl.col("query_id").is_in(asked)).then(pl.lit("seen"))
        .otherwise(pl.lit("unseen")))
        for name, arm in chosen.items()}
    groups = (*GROUPS, "seen")
    comparison = pl.concat([compare_units(frames[ref], {"tuned": frames["tuned"]}, cfg,
                                            reference=ref, group_cols=groups)
                            for ref in arms.references], how="diagonal_relaxed")
    summary = summarize(frames, cfg, group_cols=groups)
    primary = cfg.metrics.primary
    for ref in arms.references:
        what = ("off (MSPR disabled: the context graph alone)" if ref == "off"
                else "on-zero (MSPR on, new weights at 0)")
        part = comparison.filter(pl.col("reference") == ref, pl.col("unit") == "query")
        ctx.console.print(comparison_table(
            part, metric=primary, base_label=ref, arm_label="tuned",
            group_by=("overall", "intent", "question_type", "seen") if ref == "off"
            else ("overall", "seen"),
            title=f"test window: tuned weights against {what}, {primary}, per query "
                  "(n = distinct questions; seen = asked in the train window too; "
                  f"* = below min support); labels: {prepared.labels.source}",
            caption=_family(comparison, ref, "query")))
    per_search = comparison.filter(pl.col("unit") == "search",
                                   pl.col("group_by").is_in(["overall", "seen"]))
    ctx.console.print(comparison_table(
        per_search.with_columns(arm=pl.format("tuned vs {}", pl.col("reference"))),
        metric=primary, base_label="reference", arm_label="tuned",
        group_by=("overall", "seen"),
        title=f"test window, per search (weighted by traffic; n = searches; CI: cluster "
              f"bootstrap over queries): {primary}, against off and on-zero; labels: "
              f"{prepared.labels.source}", caption=_family(comparison, "off", "search")))
    if judged := _judged(ctx, prepared):
        shares_ = judged_shares(summary, judged, "query", ratio=cfg.metrics.min_judged_ratio)
        ctx.console.print(f"test window, {judged} (judged share of the top "
                          f"{parse_metric(judged).k}, per query; labels: "
                          f"{prepared.labels.source}): " + ", ".join(
                              f"{arm} {share:.1%}" + ("" if ok else " (not assessable)")
                              for arm, (share, ok) in shares_.items()), highlight=False)
    _, stages = arm_funnels(cfg, prepared, chosen, frames)
    funnel = with_shares(stages)
    ctx.console.print(funnel_table(
        shares(stages), metric=primary,
        title=f"stage funnel, test window: the tuned weights beside the references; labels: "
              f"{prepared.labels.source}"))
    ctx.bundle.frame(funnel, TEST_FUNNEL)
    if ctx.tracker is not None:
        headline = summary.filter(pl.col("metric") == primary, pl.col("group_by") == "overall",
                                  pl.col("unit") == "query")
        values = {metric_key("headline", r["arm"], primary): r["mean"]
                  for r in headline.iter_rows(named=True)}
        for r in comparison.filter(pl.col("metric") == primary, pl.col("group_by") == "overall",
                                   pl.col("unit") == "query").iter_rows(named=True):
            stem = f"tuned_minus_{r['reference']}"
            values |= {metric_key("headline", stem, primary): r["delta"],
                       metric_key("headline", stem, primary, "ci_low"): r["ci_low"],
                       metric_key("headline", stem, primary, "ci_high"): r["ci_high"]}
        ctx.tracker.metrics(values)
        for name in frames:
            with ctx.tracker.child(f"test:{name}", tags={"msprlab.arm": name,
                                                         "msprlab.window": "test"}):
                ctx.tracker.metrics({**_arm_metrics(summary, name),
                                     **_arm_metrics(funnel, name, stem=("funnel",), sizes=False)})
    ctx.bundle.frame(comparison, TEST_COMPARISON)
    ctx.bundle.frame(summary, TEST_SUMMARY)
    for name, frame in frames.items():
        ctx.bundle.frame(frame, per_search_file(TEST, name))
        ctx.bundle.text(_trec_run(scorers[name], chosen[name]), trec_run_file(name))
    ctx.bundle.json(snippet, SNIPPET)
    configs = {**arms.references, "tuned": replace(arms.tuned, retrieval=replace(
        arms.tuned.retrieval, **best.named_weights._asdict()))}
    ctx.bundle.frame(arms_frame(chosen, configs), TEST_ARMS)
    return {"comparison": comparison, "frames": frames, "best": best, "snippet": snippet}


def _trec_run(scorer: Scorer, arm: Arm) -> str:
    """The arm's rankings on the scorer's searches as a TREC run (query id = search event
    id; scores strictly decreasing with rank, so external tools keep the engine's order)."""
    lines = []
    events = scorer.table.searches["event_id"].to_list()
    for event, ids in zip(events, scorer.rankings(arm), strict=True):
        n = len(ids)
        lines += [f"e{event} Q0 {m} {r + 1} {n - r} msprlab:{arm.name}"
                  for r, m in enumerate(ids)]
    return "\n".join(lines) + "\n"


# ---- commands -----------------------------------------------------------------------------
def _at_least_one(text: str) -> int:
    """An argparse type: an integer >= 1 (a bad value exits 2 naming the flag)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"`>= 1` must hold, but got {value}")
    return value


def _context(args: argparse.Namespace, console: Console, bar: Progress, which: str) -> Context:
    cfg = load_experiment(args.experiment)
    writable_folder(Path(args.root), "--root")
    tracker = None
    if not args.no_track:
        tracker = Tracker(args.tracking_uri or cfg.tracking.uri, cfg.tracking.experiment)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    bundle = Bundle(Path(args.root) / "results" / f"{cfg.name}-{which}-{stamp}")
    return Context(cfg, console, Path(args.root), tracker, bar, bundle)


def _command(args: argparse.Namespace, which: str) -> int:
    console = stdout_console(120)
    started = time.perf_counter()
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=console, transient=True)
    ctx: Context | None = None
    try:
        with bar:
            ctx = _context(args, console, bar, which)
            ctx.arms = experiment_arms(ctx.cfg, ablation=which in ("ablate", "run"))
            prepared = ctx.prepared = _prepare(ctx, ctx.arms.every())
            run = ctx.tracker.run(f"{which}:{ctx.cfg.name}", tags=_tags(ctx.cfg, prepared, which)) \
                if ctx.tracker is not None else nullcontext()
            with run as run_id:
                _log_run_header(ctx, prepared)
                tracked = None if ctx.tracker is None or run_id is None else {
                    "tracking_uri": redact_url(ctx.tracker.uri),
                    "experiment": ctx.tracker.experiment, "run_id": run_id}
                ctx.bundle.json(provenance(ctx.cfg, prepared, which, tracked),
                                PROVENANCE)
                if which in ("ablate", "run"):
                    run_ablation(ctx, prepared)
                    if ctx.cfg.dataset.source == "scifact":
                        _bm25_reference(ctx, prepared)
                if which in ("tune", "run"):
                    run_tuning(ctx, prepared, trials=args.trials, storage=args.storage,
                               workers=args.workers, sampler=args.sampler,
                               switch_sampler=args.switch_sampler, study=args.study)
                ctx.bundle.finish(started)
                if ctx.tracker is not None:
                    ctx.tracker.mlflow.log_artifacts(str(ctx.bundle.folder))
    except (*USER_ERRORS, FileNotFoundError) as exc:
        if ctx is not None:
            ctx.bundle.discard_if_empty()
        print_error(exc, console)
        return EXIT_BAD_INPUT
    except BaseException:  # a bug or an interrupt: still no empty bundle left behind
        if ctx is not None:
            ctx.bundle.discard_if_empty()
        raise
    console.print(f"results: {ctx.bundle.folder} (render them: msprlab report "
                  f"{ctx.bundle.folder})", highlight=False)
    if ctx.tracker is not None:
        console.print(ctx.tracker.where(), highlight=False)
    console.print(f"done in {time.perf_counter() - started:.0f} s", highlight=False)
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
