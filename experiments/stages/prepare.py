"""An experiment end to end: data, replay, split, ablation, weight search, test, tracking.

`prepare_store` builds the experiment's dataset (LoCoMo with a simulated feedback log, the
synthetic world, SciFact searched once per query, or an existing store) and ingests it;
the store's file name carries a hash of the dataset settings, so a changed setting builds
a new store and an unchanged one is reused. `tables` replays the store once per table key
(cached beside the store). Everything reported is measured on the test window of the
time split; tuning sees only the train window.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from msprlab.datasets.schema import Dataset
from msprlab.engine import EngineConfig
from msprlab.engine.config import as_dict
from msprlab.engine.roles import RolePolicy, policy_from_name

from ..ablation import REFERENCES, AblationResult, ladder, ladder_arms, side_effects, switches
from ..errors import ExperimentError
from ..experiment_config import ExperimentConfig
from ..funnel import FUNNEL_COLUMNS, funnel_frame
from ..metrics import parse_metric
from ..replay import CandidateTable, cached_replay, table_key
from ..scoring import Arm, Scorer, arm_of
from ..splits import split_searches
from ..stats import aggregate, compare

__all__ = ["Prepared", "Stage", "ablate", "funnel", "prepare_store", "split_tables", "summarize",
           "tables", "window_table"]

Stage = Callable[[str, int, int], None]  # (what, done, total)
GROUPS = ("intent", "question_type")


def _quiet(what: str, done: int, total: int) -> None:
    return None


def builder_digest() -> str:
    """sha256 of the code that builds datasets (sources, simulator, edge synthesis): a store
    built by other code is not reused."""
    from msprlab import datasets, engine
    digest = hashlib.sha256()
    folder = Path(datasets.__path__[0])
    for path in sorted([*folder.glob("*.py"), *(folder / "sources").glob("*.py"),
                        Path(engine.__path__[0]) / "edges.py"]):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def store_path(cfg: ExperimentConfig, root: Path) -> Path:
    """ROOT/runs/NAME-HASH.duckdb: the hash covers every dataset setting and the code that
    builds the dataset, so a changed setting or builder makes a new store. An ingested
    store (`source = "store"`) is the path as given, a relative one under ROOT (`--root`,
    the working folder by default), as the built stores are."""
    if cfg.dataset.source == "store":
        return root / cfg.dataset.store  # an absolute path stays itself
    spec = json.dumps({**asdict(cfg.dataset), "code": builder_digest()}, sort_keys=True)
    stem = Path(cfg.dataset.store).stem
    digest = hashlib.sha256(spec.encode()).hexdigest()[:10]
    return root / Path(cfg.dataset.store).parent / f"{stem}-{digest}.duckdb"


def _build(cfg: ExperimentConfig, progress: Stage) -> tuple[Dataset, dict[str, Any] | None]:
    from msprlab.datasets import build
    from msprlab.datasets.embed import make_embedder
    d = cfg.dataset
    embedder = make_embedder(d.embedder)
    log = build.LogSpec(n_searches=d.searches, click_model=build.make_click_model(
        d.click_model, max_grade=3 if d.source == "synthetic" else 1),
        verdict_model=_verdicts(3 if d.source == "synthetic" else 1))
    report: Any = lambda stage, done, total: progress(stage, done, total)  # noqa: E731
    if d.source == "locomo-log":
        return build.build_locomo_log(embedder, log, seed=d.seed, progress=report).dataset, None
    if d.source == "synthetic":
        from msprlab.datasets.sidecars import truth_record
        from msprlab.datasets.synthetic import SyntheticSpec
        spec = SyntheticSpec(n_users=d.users, memories_per_user=d.memories_per_user,
                             queries_per_user=d.queries_per_user)
        dataset, truth = build.build_synthetic(spec, log, seed=d.seed, progress=report)
        return dataset, truth_record(truth, spec, seed=d.seed, digest=dataset.digest)
    if d.source == "scifact":
        progress("reading SciFact", 0, 2)
        corpus = build.build_scifact(d.split)
        progress("embedding abstracts and claims", 1, 2)
        return build.static_log(corpus, embedder), None
    raise ExperimentError(f"dataset.source {d.source!r} cannot be built")


def _verdicts(max_grade: int) -> Any:
    from msprlab.datasets.build import default_p_helpful
    from msprlab.datasets.clicks import VerdictModel
    return VerdictModel(p_helpful=default_p_helpful(max_grade))


def prepare_store(cfg: ExperimentConfig, root: Path, progress: Stage = _quiet) -> Path:
    """The experiment's event store, built and ingested unless it exists already."""
    from msprlab.datasets.store import ingest
    path = store_path(cfg, root)
    if path.is_file():
        return path
    if cfg.dataset.source == "store":
        how = ("msprlab ingest contextkit ... --store " + str(path) if cfg.dataset.labels ==
               "verdicts" else "msprlab ingest SOURCE ... --store " + str(path))
        raise FileNotFoundError(f"dataset.store {path} does not exist (a relative path is "
                                f"under --root, the working folder by default); ingest it "
                                f"first: {how}")
    dataset, truth = _build(cfg, progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    ingest(dataset, path, progress=lambda stage, done, total: progress(
        f"writing the store: {stage}", done, total))
    if truth is not None:
        from msprlab.datasets.sidecars import truth_path, write_truth
        write_truth(truth_path(path), truth)
    return path


# Where the relevance judgments every table is scored against come from: the store's qrels,
# or its feedback verdicts ([dataset] labels = "verdicts").
LABEL_SOURCE = "dataset qrels"
VERDICT_LABELS = "feedback verdicts"


@dataclass(frozen=True)
class Labels:
    """Where the relevance judgments come from, named wherever a number is printed, and,
    for verdict labels, what the derivation counted (`verdict_labels.Relabelled`)."""

    source: str
    occurrences: int = 0      # searches made from verdict occurrences
    verdicts: int = 0         # verdicts labelling them (the last per memory and search)
    without_query: int = 0    # verdicts given without a query: they label no search
    without_owner: int = 0    # verdicts with a query but no owner id: neither
    window_minutes: float | None = None

    def note(self) -> str | None:
        if self.source != VERDICT_LABELS:
            return None
        return (f"labels: {self.verdicts:,} feedback verdicts (helpful = relevant, unhelpful "
                f"= judged not relevant, the rest unjudged) on {self.occurrences:,} searches "
                f"(one per user and query within {self.window_minutes:g} minutes, replayed "
                f"just before its first verdict); {self.without_query:,} verdicts without a "
                f"query text and {self.without_owner:,} without a user, agent or run id label "
                "no search. Verdicts exist only for memories the logging "
                "ranker showed, so these labels favour rankers like it: read the judged "
                "share beside every figure")


def _labelled(cfg: ExperimentConfig, dataset: Dataset) -> tuple[Dataset, Labels,
                                                                 dict[str, str]]:
    """The dataset to replay, its label source, and occurrence -> question (verdicts)."""
    d = cfg.dataset
    if d.labels != "verdicts":
        return dataset, Labels(LABEL_SOURCE), {}
    from datetime import timedelta

    from msprlab.datasets.verdict_labels import relabel
    try:
        rel = relabel(dataset, window=timedelta(minutes=d.verdict_window_minutes),
                      limit=d.verdict_limit)
    except ValueError as exc:
        raise ExperimentError(f"dataset.labels = \"verdicts\": {exc}") from None
    if not rel.questions:
        raise ExperimentError("dataset.labels = \"verdicts\": the store holds no verdict "
                              f"with a query ({rel.without_query:,} without one), so no search "
                              "can be labelled; ingest ContextKit's feedback_events.db")
    return rel.dataset, Labels(VERDICT_LABELS, len(rel.questions), rel.verdicts,
                               rel.without_query, rel.without_owner,
                               d.verdict_window_minutes), rel.questions


def _with_questions(table: CandidateTable, questions: dict[str, str]) -> CandidateTable:
    """Each search's question (the query hash its occurrence belongs to): the per-query
    unit counts a question once, whatever its occurrences."""
    if not questions:
        return table
    searches = table.searches.with_columns(
        question=pl.col("query_id").replace_strict(questions, return_dtype=pl.String))
    return CandidateTable(searches, table.candidates, table.qrels, table.meta)


@dataclass
class Prepared:
    """The replayed tables of an experiment, keyed by table key, and the split labels."""

    dataset: Dataset
    store: Path
    tables: dict[str, CandidateTable]          # key hash -> table
    key_of: dict[str, str]                     # config name -> key hash
    split: pl.Series                           # per search: train / gap / test
    from_cache: dict[str, bool] = field(default_factory=dict)
    labels: Labels = field(default_factory=lambda: Labels(LABEL_SOURCE))

    def table(self, name: str) -> CandidateTable:
        return self.tables[self.key_of[name]]


def _policy(cfg: ExperimentConfig) -> RolePolicy | None:
    return policy_from_name(cfg.replay.policy)


def tables(cfg: ExperimentConfig, store: Path, configs: Mapping[str, EngineConfig],
           progress: Stage = _quiet) -> Prepared:
    """Replay the store once per distinct table key of `configs` (cached beside the store)."""
    from msprlab.datasets.store import load_dataset
    dataset, labels, questions = _labelled(cfg, load_dataset(store))
    frequency: Any = cfg.replay.frequency
    limit = cfg.replay.limit or None
    keys: dict[str, str] = {}
    representative: dict[str, EngineConfig] = {}
    for name, config in configs.items():
        spec = table_key(config, frequency, has_policy=_policy(cfg) is not None)
        key = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()
                             ).hexdigest()[:16]
        keys[name] = key
        representative.setdefault(key, config)
    out: dict[str, CandidateTable] = {}
    cached: dict[str, bool] = {}
    for i, (key, config) in enumerate(representative.items()):
        label = f"replay {i + 1}/{len(representative)}"
        out[key], cached[key] = cached_replay(
            dataset, config, store.with_name(store.name + ".cache"), frequency=frequency,
            limit=limit, policy=_policy(cfg),
            progress=lambda done, total, label=label: progress(label, done, total))
        out[key] = _with_questions(out[key], questions)
    first = next(iter(out.values()))
    for key, table in out.items():
        if table.searches["event_id"].to_list() != first.searches["event_id"].to_list():
            raise AssertionError(f"replay {key}: evaluated searches differ between tables")
    split = split_searches(first.searches, cfg.split.spec())
    return Prepared(dataset, store, out, keys, split, cached, labels)


def window_table(prepared: Prepared, name: str, window: str) -> CandidateTable:
    """The table configuration `name` is scored from, restricted to one window."""
    return prepared.table(name).subset((prepared.split == window).to_numpy())


def split_tables(prepared: Prepared, window: str) -> dict[str, CandidateTable]:
    """Each table restricted to one window ("train" or "test")."""
    mask = (prepared.split == window).to_numpy()
    return {key: table.subset(mask) for key, table in prepared.tables.items()}


UNITS = ("query", "search")


def _stats_settings(cfg: ExperimentConfig) -> dict[str, Any]:
    return {"n_resamples": cfg.metrics.bootstrap, "seed": cfg.seed,
            "min_support": cfg.metrics.min_support}


def summarize(frames: Mapping[str, pl.DataFrame], cfg: ExperimentConfig, *,
              group_cols: tuple[str, ...] = GROUPS,
              metric_cols: tuple[str, ...] | None = None) -> pl.DataFrame:
    """`stats.aggregate` of each arm's per-search frame per query and per search, with an
    `arm` column; `metric_cols` defaults to the experiment's metrics."""
    names = list(cfg.metrics.names if metric_cols is None else metric_cols)
    return pl.concat([
        aggregate(frame, metric_cols=names, group_cols=group_cols, unit=unit,
                  cluster="query_id", **_stats_settings(cfg))
        .select(pl.lit(name).alias("arm"), pl.all())
        for name, frame in frames.items() for unit in UNITS], how="diagonal_relaxed")


def compare_units(base: pl.DataFrame, arms: Mapping[str, pl.DataFrame], cfg: ExperimentConfig,
                  *, reference: str, group_cols: tuple[str, ...] = GROUPS) -> pl.DataFrame:
    """`stats.compare` per query and per search, with a `reference` column; per-search
    frames in, paired by search event, clustered by query."""
    names = list(cfg.metrics.names)
    return pl.concat([
        compare(base, arms, metric_cols=names, group_cols=group_cols, key="event_id",
                unit=unit, cluster="query_id", correction=cfg.metrics.correction,
                **_stats_settings(cfg))
        .select(pl.lit(reference).alias("reference"), pl.all())
        for unit in UNITS], how="diagonal_relaxed")


def side_effect_frame(on_zero: pl.DataFrame, effects: Mapping[str, pl.DataFrame],
                      cfg: ExperimentConfig, *, top10_changed: Mapping[str, int],
                      searches: int) -> pl.DataFrame:
    """Each block's effect at zero weight: one family over the blocks, each block-off arm
    (`no-feedback`, ...) against on-zero, flipped so the delta reads as on-zero minus the
    arm without the block; with the number of searches whose top 10 that block changes."""
    raw = compare_units(on_zero, effects, cfg, reference="on-zero", group_cols=())
    return raw.with_columns(
        block=pl.col("arm").str.strip_prefix("no-"),
        mean_base=pl.col("mean_arm"), mean_arm=pl.col("mean_base"),
        delta=0.0 - pl.col("delta"), ci_low=0.0 - pl.col("ci_high"),
        ci_high=0.0 - pl.col("ci_low"),  # 0.0 - x: no -0.0 where nothing moved
        top10_changed=pl.col("arm").replace_strict(dict(top10_changed),
                                                   return_dtype=pl.Int64),
        searches=pl.lit(searches, dtype=pl.Int64))


def ablate(cfg: ExperimentConfig, prepared: Prepared, configs: Mapping[str, EngineConfig],
           *, window: str = "test", effects: Mapping[str, EngineConfig] | None = None,
           ) -> AblationResult:
    """Every arm on the `window` searches, against each reference arm, per group and unit;
    the side-effect arms (`effects`) against `on-zero`; every arm's match rate."""
    metrics = [parse_metric(m) for m in cfg.metrics.names]
    windowed = split_tables(prepared, window)
    scorers = {key: Scorer.of(table, metrics) for key, table in windowed.items()}
    every = {**configs, **(effects or {})}
    arms = ladder_arms(every)
    frames = {name: scorers[prepared.key_of[name]].frame(arm) for name, arm in arms.items()}
    ladder_names = list(configs)
    summary = summarize({name: frames[name] for name in ladder_names}, cfg)
    # Each arm's returned lists, once: the match rates and the top-10 changes read them.
    rankings = {name: scorers[prepared.key_of[name]].rankings(arm)
                for name, arm in arms.items()}
    notes = []
    comparisons = [compare_units(frames[ref], {n: frames[n] for n in ladder_names if n != ref},
                                 cfg, reference=ref)
                   for ref in REFERENCES if ref in frames and len(ladder_names) > 1]
    comparison = pl.concat(comparisons, how="diagonal_relaxed") if comparisons else pl.DataFrame()
    if not comparisons:
        notes.append("no reference arm (off or on-zero) beside another arm: no comparisons")
    side = pl.DataFrame()
    if effects and "on-zero" in frames:
        top = [ids[:10] for ids in rankings["on-zero"]]
        changed = {name: sum(a != b[:10] for a, b in zip(top, rankings[name], strict=True))
                   for name in effects}
        side = side_effect_frame(frames["on-zero"], {n: frames[n] for n in effects}, cfg,
                                 top10_changed=changed, searches=len(top))
    match = pl.DataFrame([
        {"arm": name, **dict(zip(("matched", "logged"),
                                 scorers[prepared.key_of[name]].match_rate(
                                     arm, rankings=rankings[name]), strict=True))}
        for name, arm in arms.items()], schema={"arm": pl.String, "matched": pl.Int64,
                                                 "logged": pl.Int64}, orient="row"
    ).with_columns(rate=pl.col("matched") / pl.col("logged"))
    if "roles" in arms and cfg.replay.policy == "none":
        notes.append("roles: no role policy installed (replay.policy = none), so the roles "
                     "arm ranks exactly as on-zero")
    return AblationResult(arms, dict(every), frames, summary, comparison, side, match, notes)


def funnel(cfg: ExperimentConfig, prepared: Prepared, arms: Mapping[str, Arm],
           per_search: Mapping[str, pl.DataFrame], *, window: str = "test"
           ) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
    """Each arm's stage funnel on the `window` searches (`funnel.funnel_frame`, primary
    metric), per search, and summarized per group and unit like the metrics."""
    metric = parse_metric(cfg.metrics.primary)
    windowed = split_tables(prepared, window)
    frames = {name: funnel_frame(windowed[prepared.key_of[name]], per_search[name],
                                 metric=metric, roles=arm.roles)
              for name, arm in arms.items()}
    return frames, summarize(frames, cfg, metric_cols=FUNNEL_COLUMNS)


@dataclass(frozen=True)
class ExperimentArms:
    """Every configuration an experiment scores: the ladder's arms (in order), the
    side-effect arms (`on-zero` less one recording block), the references the test window
    compares the tuned weights against, and `tuned` (the engine config as given, whose six
    weights the search replaces)."""

    ladder: dict[str, EngineConfig]
    effects: dict[str, EngineConfig]
    references: dict[str, EngineConfig]
    tuned: EngineConfig

    def every(self) -> dict[str, EngineConfig]:
        return {**self.ladder, **self.effects, **self.references, "tuned": self.tuned}


def experiment_arms(cfg: ExperimentConfig, *, ablation: bool) -> ExperimentArms:
    """The configurations of an experiment; without `ablation` only the references and
    `tuned` (what `tune` needs for its test window)."""
    refs = REFERENCES if cfg.engine.mspr.enabled else ("off",)
    arms = ladder(cfg.engine, cfg.ablation.arms, cfg.ablation.weights) if ablation else {}
    effects = side_effects(cfg.engine) if ablation and "on-zero" in arms else {}
    return ExperimentArms(arms, effects, ladder(cfg.engine, refs, {}), cfg.engine)


def baseline_arm(cfg: ExperimentConfig) -> Arm:
    """The tuning's starting point, enqueued as its first trial: the configured switches,
    new weights at 0 (with intent routing as configured, so not `on-zero` when it is on)."""
    zero = replace(cfg.engine, retrieval=replace(cfg.engine.retrieval, delta_personal=0.0,
                                                 epsilon_frequency=0.0, zeta_success=0.0))
    return arm_of("start", zero)


def engine_params(config: EngineConfig) -> dict[str, Any]:
    from ..tracking import flatten
    return flatten(as_dict(config), "engine.")


def arms_frame(arms: Mapping[str, Arm], configs: Mapping[str, EngineConfig]) -> pl.DataFrame:
    """One row per arm: its full definition, the switches it runs with and the six weights
    (`intent` and `roles` as the arm scores them)."""
    rows = []
    for name, arm in arms.items():
        switch = switches(configs[name])
        rows.append({"name": name, **{k: switch[k] for k in ("mspr", "feedback", "success",
                                                             "frequency")},
                     **arm.as_dict()})
    return pl.DataFrame(rows)


def isolation_audit(cfg: ExperimentConfig, prepared: Prepared,
                    configs: Mapping[str, EngineConfig], *, window: str = "test",
                    progress: Stage = _quiet) -> pl.DataFrame:
    """Per arm, in compat mode (the library: role policies judge the seeds only) and strict
    mode (`corrections.strict_role_isolation`: graph neighbours too): how many returned
    results the searcher may not see (`replay.AUDIT_POLICY`: tenant isolation and role
    scope on the memory's stored payload) over the `window` searches."""
    from msprlab.engine.batch import row_ranks, scores
    strict_configs = {name: replace(config, corrections=replace(
        config.corrections, strict_role_isolation=True)) for name, config in configs.items()}
    strict = tables(cfg, prepared.store, strict_configs, progress)
    rows = []
    for mode, prep, mine in (("compat", prepared, configs), ("strict", strict, strict_configs)):
        windowed = split_tables(prep, window)
        for name, config in mine.items():
            table = windowed[prep.key_of[name]]
            arm = arm_of(name, config)
            block = table.block()
            rank = row_ranks(block, scores(block, arm.weights, intent=arm.intent),
                             roles=arm.roles)
            returned = rank[block.internal_rows(np.arange(block.n_rows))] >= 0
            leaked = returned & ~table.candidates["visible"].to_numpy()
            searches = table.candidates["search"].to_numpy()
            rows.append({"arm": name, "mode": mode, "roles": arm.roles,
                         "searches": table.searches.height, "returned": int(returned.sum()),
                         "leaked": int(leaked.sum()),
                         "leaked_searches": int(np.unique(searches[leaked]).size)})
    return pl.DataFrame(rows)
