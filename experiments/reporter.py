"""The experiment commands' outputs: every stage result printed (rich console), logged
(MLflow, `tracking.Tracker`) and written into the results bundle (`bundle.Bundle`), here
only.

A stage (`experiments.stages`) computes and returns a result object; `Reporter` turns it
into output, so a new table, metric or bundle file is added in one place. The cli calls the
stages in order and hands each result to the matching method, which keeps the printed text,
the MLflow runs and the bundle's files in their order. Output made while a stage runs
(progress bars, the weight search's recovery and start messages, per-trial MLflow step
metrics) goes through callbacks the reporter supplies: `progress` and `study_run`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress

from msprlab.engine.batch import WEIGHTS

from .ablation import switches
from .bundle import (
    ABLATION,
    ABLATION_ARMS,
    ABLATION_COMPARISON,
    ABLATION_FUNNEL,
    ABLATION_FUNNEL_PART,
    ABLATION_MATCH,
    ABLATION_NOTES,
    ABLATION_SIDE_EFFECTS,
    ABLATION_SUMMARY,
    CONFIG_SNIPPET,
    CONFIG_SUMMARY,
    CONFIG_TRIALS,
    DECISION,
    DECISION_BY_INTENT,
    DECISION_BY_INTENT_CSV,
    DECISION_CSV,
    DECISION_NOTES,
    EXPLORE_LISTS,
    EXPLORE_LOST,
    EXPLORE_MEMORIES,
    EXPLORE_SEARCHES,
    EXPLORE_WEIGHTS,
    FIDELITY,
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
    TEST_RECOVERY,
    TEST_SUMMARY,
    Bundle,
    per_search_file,
    provenance,
    trec_run_file,
)
from .console_tables import (
    arms_table,
    audit_table,
    comparison_table,
    delta_matrix,
    family_caption,
    funnel_group_table,
    funnel_table,
    judged_shares,
    ladder_table,
    reference_table,
    side_effect_table,
)
from .decision.answer import console_lines
from .decision.detail import with_confirmatory
from .decision.render import caption, console_table, exploratory_caption
from .errors import redact_url
from .experiment_config import ExperimentConfig, judged_metric
from .measures.metrics import parse_metric
from .recovery import SWEEP
from .stages.ablate import Ablation
from .stages.config_search import ConfigHeldOut, ConfigPlan, ConfigSearched
from .stages.decide import Decision
from .stages.held_out import HeldOutResult
from .stages.isolation import IsolationAudit
from .stages.prepare import Stage
from .stages.reference_rankers import Bm25Sanity, ReferenceRankers
from .stages.replay_tables import VERDICT_LABELS, Prepared
from .stages.weight_search import SearchHooks, Tuned, TuningPlan
from .tracking import Tracker, arm_metrics, engine_params, flatten, git_commit, metric_key
from .variants.console import walks_line
from .variants.report import publish

__all__ = ["Reporter"]


@dataclass(frozen=True)
class Reporter:
    """Where one command's outputs go: the console, its progress bar, the MLflow tracker
    (None: `--no-track`) and the results bundle; `cfg` names what the titles print."""

    cfg: ExperimentConfig
    console: Console
    bar: Progress
    tracker: Tracker | None
    bundle: Bundle
    # The weight search's messages (recovery, trials to add), printed with its results:
    # they happen while it runs, before the verdict table, which prints first.
    held: list[str] = field(default_factory=list)
    # The verdicts (`decision`), printed first: the detail tables show their figures on the
    # rows that ask a confirmatory question (`_confirmed`).
    decided: list[Decision] = field(default_factory=list)

    def _print(self, text: str) -> None:
        self.console.print(text, highlight=False)

    def _note(self, note: str) -> None:
        self._print(f"[yellow]note:[/yellow] {note}")

    def _confirmed(self, comparison: pl.DataFrame, *, flipped: bool = False) -> pl.DataFrame:
        """A comparison whose rows that a verdict row answers carry its figures, marked (C:
        confirmatory, V: the per-intent verdicts), and whose exploratory families leave them
        out (`decision.detail`)."""
        cfg, decided = self.cfg, self.decided[-1] if self.decided else None
        return with_confirmatory(comparison, decided.confirmatory if decided else None,
                                 by_intent=decided.by_intent if decided else None,
                                 alpha=cfg.decision.alpha, correction=cfg.metrics.correction,
                                 min_support=cfg.metrics.min_support, flipped=flipped)

    # ---- live progress ------------------------------------------------------------------
    def progress(self) -> Stage:
        """A stage's progress callback: one bar task per `what` (up to its first `:`)."""
        tasks: dict[str, Any] = {}

        def update(what: str, done: int, total: int) -> None:
            key = what.split(":")[0]
            if key not in tasks:
                tasks[key] = self.bar.add_task(what, total=total or None)
            self.bar.update(tasks[key], description=what, completed=done, total=total or None)
        return update

    # ---- prepare and replay -------------------------------------------------------------
    def prepared(self, prepared: Prepared) -> None:
        """The store, its replays and the split's sizes; the label note (verdict labels)."""
        counts = prepared.split.value_counts().sort("split")
        windows = ", ".join(f"{w} {n:,}" for w, n in counts.iter_rows())
        cached = sum(prepared.from_cache.values())
        derived = (f", {len(prepared.derived)} table(s) derived (success off: its success-on "
                   "twin's with success 0)" if prepared.derived else "")
        self._print(f"store {prepared.store} ({prepared.dataset.source}, digest "
                    f"{prepared.dataset.digest[:12]}); {prepared.replayed} replay(s), "
                    f"{cached} from the cache{derived}; searches: {windows}")
        if note := prepared.labels.note():
            self._print(note)

    def fidelity(self, prepared: Prepared) -> None:
        """The replay's fidelity to production (`experiments.fidelity`), before any table:
        printed; a failure stops the command here (exit 2, nothing written) unless
        [fidelity] on_fail = "warn"; else bundled (MLflow: in the parent run's header)."""
        fid = prepared.fidelity
        if fid is None:
            return
        from .fidelity.stage import FidelityStop, stop_message
        from .fidelity.table import fidelity_table
        self.console.print(fidelity_table(fid, self.cfg.fidelity.tolerance))
        self._print(escape(fid.summary()))
        for note in fid.notes:
            self._note(escape(note))
        if not fid.passed:
            if fid.on_fail == "stop":
                raise FidelityStop(stop_message(fid, self.cfg.path))
            self._note("\\[fidelity] on_fail = \"warn\": the run goes on, and every "
                       "verdict-labelled figure below names the failed fidelity")
        self.bundle.json(fid.as_dict(), FIDELITY)

    @contextmanager
    def parent_run(self, command: str, prepared: Prepared) -> Iterator[None]:
        """The command's MLflow parent run (tags, the dataset as an input, the definition and
        the engine config as params) and the bundle's provenance record, around the
        stages."""
        run = self.tracker.run(f"{command}:{self.cfg.name}", tags=self._tags(prepared, command)) \
            if self.tracker is not None else nullcontext()
        with run as run_id:
            self._run_header(prepared)
            tracked = None if self.tracker is None or run_id is None else {
                "tracking_uri": redact_url(self.tracker.uri),
                "experiment": self.tracker.experiment, "run_id": run_id}
            self.bundle.json(provenance(self.cfg, prepared, command, tracked), PROVENANCE)
            yield

    def _tags(self, prepared: Prepared | None, command: str) -> dict[str, str]:
        cfg = self.cfg
        tags = {"msprlab.command": command, "msprlab.experiment": cfg.name,
                "msprlab.config_hash": cfg.digest(), "msprlab.git_commit": git_commit(),
                "msprlab.config_path": str(cfg.path)}
        if prepared is not None:
            tags["msprlab.dataset_digest"] = prepared.dataset.digest
            tags["msprlab.dataset_source"] = prepared.dataset.source
            tags["msprlab.label_source"] = prepared.labels.source
            if prepared.fidelity is not None:
                tags["msprlab.fidelity"] = "passed" if prepared.fidelity.passed else "failed"
        return tags

    def _run_header(self, prepared: Prepared) -> None:
        if self.tracker is None:
            return
        self.tracker.dataset(name=prepared.dataset.source, digest=prepared.dataset.digest,
                             source=str(prepared.store.resolve()), context="replay")
        if prepared.fidelity is not None:
            from .fidelity.stage import fidelity_metrics
            self.tracker.metrics(fidelity_metrics(prepared.fidelity))
        self.tracker.params(flatten({"experiment": {k: v for k, v in self.cfg.raw.items()
                                                    if k != "engine"}}))
        self.tracker.params(engine_params(self.cfg.engine))

    def finish(self, started: float) -> None:
        """Stamp the provenance with the duration; the bundle as the parent run's artifacts."""
        self.bundle.finish(started)
        if self.tracker is not None:
            self.tracker.mlflow.log_artifacts(str(self.bundle.folder))

    def done(self, seconds: float) -> None:
        """Where the results are, and how long the command took."""
        folder = self.bundle.folder
        self._print(f"results: {folder} (render them: msprlab report {folder})")
        if self.tracker is not None:
            self._print(self.tracker.where())
        self._print(f"done in {seconds:.0f} s")

    # ---- decision -----------------------------------------------------------------------
    def decision(self, prepared: Prepared, decision: Decision) -> None:
        """The verdict table, first of every table; then the exploratory per-intent
        verdicts and what the recommended configuration changes. Bundled under decision/
        (Parquet and CSV), and each verdict a `msprlab.decision.CANDIDATE` tag of the
        parent run with its figures as `decision/CANDIDATE/...` metrics."""
        s, labels = decision.settings, prepared.labels.source
        table = decision.confirmatory
        metric = table["metric"][0] if table.height else s.metric  # ips ndcg@10 on verdicts
        self.decided.append(decision)
        self.console.print(console_table(
            table, title=f"decision, test window: a verdict per candidate ({metric}, per "
                         f"{s.unit}, confirmatory); labels: {labels}",
            caption_text=caption(table, min_support=self.cfg.metrics.min_support,
                                 labels=labels)))
        for line in console_lines(table, notes=decision.notes, snippet=SNIPPET if
                                  decision.snippet else "",
                                  recommended=decision.recommended.to_dicts()):
            self._print(line)
        if decision.by_intent.height:
            self.console.print(console_table(
                decision.by_intent, title=f"EXPLORATORY: the same verdicts per intent group "
                                          f"({s.metric}, per {s.unit}); labels: {labels}",
                caption_text=exploratory_caption(decision.by_intent, labels=labels)))
        self.bundle.frame(table, DECISION)
        self.bundle.csv(table, DECISION_CSV)
        self.bundle.frame(decision.by_intent, DECISION_BY_INTENT)
        self.bundle.csv(decision.by_intent, DECISION_BY_INTENT_CSV)
        self.bundle.json({"notes": decision.notes,
                          "recommended": decision.recommended.to_dicts(),
                          "snippet": decision.snippet}, DECISION_NOTES)
        if self.tracker is None:
            return
        self.tracker.tags({f"msprlab.decision.{r['candidate']}": r["verdict"]
                           for r in table.iter_rows(named=True)})
        self.tracker.metrics({
            metric_key("decision", r["candidate"], key): r[key]
            for r in table.iter_rows(named=True)
            for key in ("delta", "ci_low", "ci_high", "p_adj", "mde", "family_size")
            if r[key] is not None and not (isinstance(r[key], float) and math.isnan(r[key]))})

    # ---- ablation -----------------------------------------------------------------------
    def ablation(self, prepared: Prepared, ablation: Ablation) -> None:
        """The ladder's tables: arms, the ladder per query and per search, the stage
        funnel, the change against off by group, the side effects, the notes. Printed
        before the isolation audit runs (`isolation`), which replays again."""
        cfg, result, labels = self.cfg, ablation.result, prepared.labels.shown
        primary = cfg.metrics.primary
        comparison = self._confirmed(result.comparison)
        self.console.print(arms_table(ablation.arms.filter(
            pl.col("name").is_in(list(ablation.ladder)))))
        for unit, label in (("query", "per query: every question counts once"),
                            ("search", "per search: weighted by traffic, means with a cluster "
                                       "bootstrap, Δ with a cluster-robust t over queries")):
            self.console.print(ladder_table(
                result.summary, comparison, result.match, metric=primary, unit=unit,
                judged=self._judged(prepared), min_judged_ratio=cfg.metrics.min_judged_ratio,
                title=f"ablation ladder, test window: {primary}, {label}; labels: {labels}"))
        self.console.print(funnel_table(
            ablation.funnel_wide, metric=primary, title=f"stage funnel, test window: where "
            f"{primary} is lost between the dense seeds and the returned list; labels: "
            f"{labels}"))
        for group_by in ("intent", "question_type"):
            self.console.print(funnel_group_table(
                ablation.funnel_wide, reference=ablation.funnel_reference,
                arms=list(ablation.ladder), group_by=group_by,
                title=f"stage funnel by {group_by.replace('_', ' ')}, test window, per query: "
                      f"{primary}; labels: {labels}"))
        if comparison.height:
            for group_by in ("intent", "question_type"):
                part = comparison.filter(pl.col("reference") == "off",
                                                pl.col("unit") == "query",
                                                pl.col("group_by").is_in(["overall", group_by]))
                self.console.print(delta_matrix(
                    part, metric=primary, title=f"ablation, test window: {primary} change "
                    f"against off (MSPR disabled), per query, by {group_by.replace('_', ' ')}; "
                    f"labels: {labels}",
                    family=family_caption(part.filter(pl.col("metric") == primary))))
        if result.side_effects.height:
            self.console.print(side_effect_table(
                self._confirmed(result.side_effects, flipped=True), metric=primary,
                labels=labels))
        for note in result.notes:
            self._note(note)

    def isolation(self, ablation: Ablation, audit: IsolationAudit) -> None:
        """The isolation audit (printed, bundled, its leaks logged), then the ladder's
        records: one MLflow child run per arm and the ablation part of the bundle."""
        self.console.print(audit_table(audit.frame, policy=self.cfg.replay.policy))
        if audit.note:
            self._note(audit.note)
        self.bundle.frame(audit.frame, ISOLATION_AUDIT)
        result = ablation.result
        if self.tracker is not None:
            self.tracker.metrics({f"isolation/{r['mode']}/{r['arm']}/leaked": r["leaked"]
                                  for r in audit.frame.iter_rows(named=True)})
            match = {r["arm"]: r for r in result.match.iter_rows(named=True)}
            for name, arm in result.arms.items():
                effect = name in ablation.effects
                kind = "side-effect" if effect else "ladder"
                with self.tracker.child(f"arm:{name}", tags={"msprlab.arm": name,
                                                             "msprlab.arm_kind": kind,
                                                             "msprlab.window": "test"}):
                    self.tracker.params({**engine_params(result.configs[name]),
                                         **{f"weight.{k}": v for k, v in zip(
                                             WEIGHTS, arm.weights, strict=True)},
                                         **{f"switch.{k}": v for k, v in
                                            switches(result.configs[name]).items()}})
                    self.tracker.metrics({
                        **arm_metrics(result.effects_summary if effect else result.summary,
                                       name),
                        **arm_metrics(ablation.effects_funnel if effect else ablation.funnel,
                                       name, stem=("funnel",), sizes=False),
                        "match/matched": match[name]["matched"],
                        "match/logged": match[name]["logged"],
                        "match/rate": match[name]["rate"]})
        for name, frame in result.per_search.items():
            self.bundle.frame(frame, per_search_file(ABLATION, name))
        self.bundle.frame(result.summary, ABLATION_SUMMARY)
        self.bundle.frame(ablation.funnel, ABLATION_FUNNEL)
        for name, frame in ablation.funnel_parts.items():
            self.bundle.frame(frame, per_search_file(ABLATION_FUNNEL_PART, name))
        self.bundle.frame(ablation.arms, ABLATION_ARMS)
        self.bundle.frame(result.match, ABLATION_MATCH)
        self.bundle.json(result.notes, ABLATION_NOTES)
        if result.comparison.height:
            self.bundle.frame(self._confirmed(result.comparison), ABLATION_COMPARISON)
        if result.side_effects.height:
            self.bundle.frame(self._confirmed(result.side_effects, flipped=True),
                              ABLATION_SIDE_EFFECTS)

    def references(self, prepared: Prepared, refs: ReferenceRankers | None) -> None:
        """The reference rankers: printed, bundled under references/, one MLflow child run
        each, labelled "reference" (never tuned); None: switched off."""
        if refs is None:
            self._print("reference rankers: off ([references] enabled = false)")
            return
        primary = self.cfg.metrics.primary
        self.console.print(reference_table(
            refs.summary, refs.comparison, metric=primary,
            seconds={r.name: r.seconds for r in refs.runs},
            labels={r.name: r.label for r in refs.runs},
            title=f"reference rankers (not tuned), test window: {primary} per query / per "
                  f"search, Δ against {refs.base}; labels: {prepared.labels.shown}"))
        self.bundle.frame(refs.summary, REFERENCES_SUMMARY)
        self.bundle.frame(refs.comparison, REFERENCES_COMPARISON)
        self.bundle.json([{"name": r.name, "kind": "reference", "label": r.label,
                           "seconds": r.seconds, "visible_sets": r.visible_sets}
                          for r in refs.runs], REFERENCES_RANKERS)
        for name, frame in refs.frames.items():
            self.bundle.frame(frame, per_search_file(REFERENCES, name))
        if self.tracker is None:
            return
        for run in refs.runs:
            with self.tracker.child(f"reference:{run.name}", tags={
                    "msprlab.arm": run.name, "msprlab.arm_kind": "reference",
                    "msprlab.window": "test"}):
                self.tracker.params({"reference.label": run.label,
                                     "reference.visible_sets": run.visible_sets})
                self.tracker.metrics({**arm_metrics(refs.summary, run.name),
                                      "cost/seconds": run.seconds})

    def bm25_sanity(self, sanity: Bm25Sanity) -> None:
        """SciFact's sanity line, printed and bundled."""
        self._print(f"sanity: plain BM25 (k1 1.2, b 0.75) over the whole corpus on the same "
                    f"{sanity.claims} test claims: nDCG@10 {sanity.value:.4f} (about 0.66 on "
                    "all 300 is the published figure). The engine ranks only the top-10 dense "
                    "seeds and their graph neighbours, with query-token overlap as its "
                    "lexical term, so it is not expected to match.")
        self.bundle.json({"bm25_ndcg_at_10_test_claims": sanity.value,
                          "claims": sanity.claims}, SANITY_BM25)

    # ---- weight search ------------------------------------------------------------------
    @contextmanager
    def study_run(self, plan: TuningPlan, config: ConfigPlan | None = None
                  ) -> Iterator[SearchHooks]:
        """Around the search (with `config`, the configuration search): its progress bar
        task and its MLflow child run `study` (`config-study`; the settings as params);
        yields the live callbacks the search calls (recovery and start messages printed,
        each trial's values as step metrics, the bar moved)."""
        n_trials = plan.n_trials if config is None else config.n_trials
        study = plan.study_name if config is None else config.study_name
        objectives = plan.objectives if config is None else config.objectives
        what = "tuning" if config is None else "configuration search"
        task = self.bar.add_task(f"{what} ({plan.sampler}, target {n_trials} trials)",
                                 total=n_trials)
        tracker, cfg = self.tracker, self.cfg
        with ExitStack() as stack:
            if tracker is not None:
                stack.enter_context(tracker.child("study" if config is None else
                                                  "config-study",
                                                  tags={"msprlab.study": study}))
                tracker.params({"study": study, "storage": plan.storage_shown,
                                "sampler": plan.sampler, "trials": n_trials,
                                "objectives": [o.label() for o in objectives], "seed": cfg.seed,
                                **{f"range.{k}": list(v) for k, v in plan.space.ranges.items()},
                                **{f"fixed.{k}": why for k, why in plan.space.fixed.items()},
                                **({} if config is None else {
                                    f"setting.{k}": v for k, v in
                                    config.search.settings.as_dict().items()})})

            def on_trial(record: Any) -> None:
                if tracker is not None and record.values is not None:
                    tracker.metrics({f"trial/{o.key()}": v for o, v in zip(
                        objectives, record.values, strict=True)}, step=record.number,
                        synchronous=False)

            def on_start(held: int, target: int) -> None:
                from .tune import trials_message
                self.held.append(trials_message(held, target))

            yield SearchHooks(
                on_recovered=lambda message: self.held.append(
                    f"[yellow]recovered:[/yellow] {message}"),
                on_start=on_start,
                progress=lambda done, total: self.bar.update(task, completed=done,
                                                             total=total),
                on_trial=on_trial)

    def study(self, plan: TuningPlan, tuned: Tuned) -> None:
        """The study's records, inside its child run: the trials and the summary bundled,
        importance, best values and best weights logged."""
        result = tuned.result
        self._study_records(result, tuned.summary, STUDY_TRIALS, STUDY_SUMMARY)
        if self.tracker is not None:
            self.tracker.metrics({f"best/{o.key()}": v for o, v in zip(
                plan.objectives, result.best_values[0], strict=True)})
            self.tracker.params({f"best.{w}": v for w, v in zip(
                WEIGHTS, tuned.best.weights, strict=True)})

    def _study_records(self, result: Any, summary: dict[str, Any], trials_file: str,
                       summary_file: str) -> None:
        """A study's trials and summary bundled, its parameter importance logged."""
        self.bundle.frame(result.trials, trials_file)
        self.bundle.json(summary, summary_file)
        if self.tracker is not None:
            self.tracker.metrics({f"importance/{metric_key(label)}/{name}": value
                                  for label, values in result.importance.items()
                                  for name, value in values.items()})

    def tuned(self, plan: TuningPlan, tuned: Tuned) -> None:
        """What the search did and found, and what its snippet cannot reproduce."""
        result = tuned.result
        for message in self.held:
            self._print(message)
        self.held.clear()
        self._print(f"weight search: {result.added:,} new trials in {tuned.seconds:.1f} s on "
                    f"the train window ({plan.train.searches.height:,} searches); the study "
                    f"holds {result.held + result.added:,}: {plan.study_name} in "
                    f"{plan.storage_shown}")
        self._print("best weights: " + ", ".join(
            f"{k} {v:.3f}" for k, v in tuned.best.named_weights._asdict().items()))
        for note in result.notes:
            self._note(note)
        for note in tuned.snippet_notes:
            self._print(f"[yellow]note ({SNIPPET}):[/yellow] {note}")

    # ---- configuration search -----------------------------------------------------------
    def walk(self, number: int, tables: int) -> None:
        """A trial needs tables no cache holds: a walk over the timeline builds them."""
        self._print(f"configuration search: walk {number} over the timeline builds "
                    f"{tables} table(s) of one recorded state")

    def config_study(self, plan: ConfigPlan, searched: ConfigSearched) -> None:
        """The configuration study's records, inside its child run, and what it did: the
        trials and summary bundled; the walks, the chosen settings and weights printed."""
        result = searched.result
        self._study_records(result, searched.summary, CONFIG_TRIALS, CONFIG_SUMMARY)
        if self.tracker is not None:
            self.tracker.params({f"chosen.{k}": v for k, v in searched.settings.items()})
        self._print(walks_line(searched.summary["walks"], result.added, searched.seconds))
        self._print(f"the study holds {result.held + result.added:,} trials: "
                    f"{plan.study_name} in {plan.weights.storage_shown}; chosen (train "
                    f"window, {plan.objectives[0].label()} {searched.train_value:.4f}): "
                    + ", ".join(f"{k} {v}" for k, v in searched.settings.items()) + "; "
                    + ", ".join(f"{k} {v:.3f}"
                                for k, v in searched.best.named_weights._asdict().items()))
        for note in [*plan.notes, *result.notes]:
            self._note(note)
        for note in searched.snippet_notes:
            self._print(f"[yellow]note ({CONFIG_SNIPPET}):[/yellow] {note}")

    def configuration(self, prepared: Prepared, held: ConfigHeldOut,
                      searched: ConfigSearched) -> None:
        """The chosen configuration on the test window (`variants.report.publish`)."""
        publish(self.console, self.bundle, self.tracker, self.cfg.metrics.primary,
                prepared.labels.source, held, searched)

    # ---- test window --------------------------------------------------------------------
    def held_out(self, prepared: Prepared, held: HeldOutResult) -> None:
        """The tuned weights against each reference on the test window (per query, then per
        search), the judged share, the stage funnel; the headline metrics and one child run
        per arm; the test part of the bundle, the TREC runs and the snippet."""
        cfg, labels = self.cfg, prepared.labels.shown
        primary = cfg.metrics.primary
        comparison, summary = self._confirmed(held.comparison), held.summary
        for ref in held.references:
            what = ("off (MSPR disabled: the context graph alone)" if ref == "off"
                    else "on-zero (MSPR on, new weights at 0)")
            groups = (("overall", "intent", "question_type", "seen") if ref == "off"
                      else ("overall", "seen"))
            part = comparison.filter(pl.col("reference") == ref, pl.col("unit") == "query")
            shown = part.filter(pl.col("group_by").is_in(groups), pl.col("metric") == primary)
            marked = bool(shown["confirmatory"].any()) if shown.height else False
            self.console.print(comparison_table(
                part, metric=primary, base_label=ref, arm_label="tuned", group_by=groups,
                title=f"test window{'' if marked else ', exploratory'}: tuned weights against "
                      f"{what}, {primary}, per query (n = distinct questions; seen = asked in "
                      f"the train window too; * = below min support); labels: {labels}",
                caption=family_caption(shown)))
        per_search = comparison.filter(pl.col("unit") == "search",
                                       pl.col("group_by").is_in(["overall", "seen"]))
        self.console.print(comparison_table(
            per_search.with_columns(arm=pl.format("tuned vs {}", pl.col("reference"))),
            metric=primary, base_label="reference", arm_label="tuned",
            group_by=("overall", "seen"),
            title=f"test window, exploratory, per search (weighted by traffic; n = searches; "
                  f"cluster-robust over queries): {primary}, against off and on-zero; labels: "
                  f"{labels}", caption=family_caption(per_search.filter(
                      pl.col("metric") == primary))))
        if judged := self._judged(prepared):
            shares_ = judged_shares(summary, judged, "query",
                                    ratio=cfg.metrics.min_judged_ratio)
            self._print(f"test window, {judged} (judged share of the top "
                        f"{parse_metric(judged).k}, per query; labels: {labels}): " + ", ".join(
                            f"{arm} {share:.1%}" + ("" if ok else " (not assessable)")
                            for arm, (share, ok) in shares_.items()))
        self.console.print(funnel_table(
            held.funnel_wide, metric=primary,
            title=f"stage funnel, test window: the tuned weights beside the references; "
                  f"labels: {labels}"))
        self.bundle.frame(held.funnel, TEST_FUNNEL)
        if self.tracker is not None:
            headline = summary.filter(pl.col("metric") == primary,
                                      pl.col("group_by") == "overall", pl.col("unit") == "query")
            values = {metric_key("headline", r["arm"], primary): r["mean"]
                      for r in headline.iter_rows(named=True)}
            for r in comparison.filter(pl.col("metric") == primary,
                                       pl.col("group_by") == "overall",
                                       pl.col("unit") == "query").iter_rows(named=True):
                stem = f"tuned_minus_{r['reference']}"
                values |= {metric_key("headline", stem, primary): r["delta"],
                           metric_key("headline", stem, primary, "ci_low"): r["ci_low"],
                           metric_key("headline", stem, primary, "ci_high"): r["ci_high"]}
            self.tracker.metrics(values)
            for name in held.frames:
                with self.tracker.child(f"test:{name}", tags={"msprlab.arm": name,
                                                              "msprlab.window": "test"}):
                    self.tracker.metrics({
                        **arm_metrics(summary, name),
                        **arm_metrics(held.funnel, name, stem=("funnel",), sizes=False)})
        self.bundle.frame(comparison, TEST_COMPARISON)
        self.bundle.frame(summary, TEST_SUMMARY)
        for name, frame in held.frames.items():
            self.bundle.frame(frame, per_search_file(TEST, name))
            self.bundle.text(held.trec_runs[name], trec_run_file(name))
        self.bundle.json(held.snippet, SNIPPET)
        self.bundle.frame(held.arms, TEST_ARMS)
        explored = held.explored
        for frame, part in ((explored.lists, EXPLORE_LISTS), (explored.lost, EXPLORE_LOST),
                            (explored.searches, EXPLORE_SEARCHES),
                            (explored.weights, EXPLORE_WEIGHTS),
                            (explored.memories, EXPLORE_MEMORIES)):
            self.bundle.frame(frame, part)

    def recovery(self, result: dict[str, Any] | None) -> None:
        """The recovery of the planted weights (`recovery.planted_recovery`): printed,
        bundled (`bundle.TEST_RECOVERY`), `recovery/cosine` and both values logged; None
        (no truth sidecar): nothing."""
        if result is None:
            return
        metric = result["metric"]
        flat = [name for name, s in result["sensitivity"].items() if s["range"] < 1e-3]
        self._print(
            f"recovery of the planted weights (test window, {result['searches']:,} searches): "
            f"cosine {result['cosine']:.3f} between normalised tuned and planted weights; "
            f"{metric} planted {result['planted_value']:.4f}, tuned {result['tuned_value']:.4f}"
            + (f"; flat in {', '.join(flat)} (range < 0.001 over {list(SWEEP)})" if flat
               else ""))
        self._print("  sensitivity (test-window range of " + metric + " as one tuned weight "
                    "sweeps 0..1): " + ", ".join(
                        f"{k} {s['range']:.4f}" for k, s in result["sensitivity"].items()))
        self.bundle.json(result, TEST_RECOVERY)
        if self.tracker is not None:
            self.tracker.metrics({"recovery/cosine": result["cosine"],
                                  f"recovery/planted/{metric_key(metric)}":
                                      result["planted_value"],
                                  f"recovery/tuned/{metric_key(metric)}": result["tuned_value"]})

    # ---- counterfactual (verdict labels) -------------------------------------------------
    def counterfactual(self, prepared: Prepared, result: Any) -> None:
        """The position bias of the verdict log and each arm's IPS and SNIPS nDCG@k
        (`experiments.counterfactual`): printed, bundled, logged to MLflow."""
        from .counterfactual.report import publish
        publish(self.console, self.bundle, self.tracker, prepared.labels.shown, result)

    def _judged(self, prepared: Prepared) -> str | None:
        """The judged@K metric shown beside every arm when the labels are verdicts."""
        if prepared.labels.source != VERDICT_LABELS:
            return None
        return judged_metric(self.cfg.metrics.names)
