"""Experiment definitions: TOML files in `experiments/configs/`, read strictly.

A definition names the dataset (and how its feedback log is simulated), the time split,
the engine configuration (a ContextKit config dict: the full ranker the arms switch parts
of), the replay settings, the metrics, the ablation arms, whether the reference rankers
run, the weight search and the tracking store. Every table is read by `_section`, which
rejects a key it does not know and lists the known ones, so a typo never silently falls
back to a default. `load_experiment` takes a file path or the name of a shipped definition
(`locomo`, `synthetic`, `scifact-sanity`).
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from msprlab.engine import EngineConfig, config_from_dict
from msprlab.engine.batch import WEIGHTS
from msprlab.engine.config import ConfigError, EdgesConfig, IntentConfig, RoleConfig
from msprlab.engine.roles import POLICY_NAMES

from .decision.settings import DecisionSettings
from .errors import ExperimentError
from .measures.compare import CORRECTIONS
from .measures.metrics import parse_metric
from .measures.splits import SplitSpec
from .replay import FREQUENCY_MODES

__all__ = ["ARMS", "CONFIG_DIR", "ExperimentConfig", "ExperimentError", "load_experiment",
           "shipped_experiments"]

CONFIG_DIR = Path(__file__).parent / "configs"
SOURCES = ("locomo-log", "synthetic", "scifact", "store")
LABELS = ("qrels", "verdicts")
# The ladder, in order: the context graph alone, MSPR on at zero new weights, each signal
# alone, all (ablation.py says what each arm is).
ARMS = ("off", "on-zero", "personal", "frequency", "success", "intent", "roles", "all")
SAMPLERS = ("tpe", "cmaes", "random")
PRUNERS = ("none", "wilcoxon")


@dataclass(frozen=True)
class DatasetSection:
    source: str = "locomo-log"
    store: str = "runs/locomo.duckdb"  # relative to the working folder
    searches: int = 3000               # simulated searches (locomo-log, synthetic)
    click_model: str = "pbm"
    seed: int = 1                      # the log's seed (the experiment seed drives the rest)
    split: str = "test"                # scifact: the BEIR split
    embedder: str = "tfidf-svd"
    users: int = 12                    # synthetic: users
    memories_per_user: int = 60        # synthetic
    queries_per_user: int = 8          # synthetic
    # Where relevance comes from: the store's qrels, or its feedback verdicts
    # (datasets/verdict_labels.py: one search per occurrence, replayed before its verdicts).
    labels: str = "qrels"
    verdict_window_minutes: float = 30.0  # labels = "verdicts": one occurrence's span
    verdict_limit: int = 10               # labels = "verdicts": the replayed search's limit


@dataclass(frozen=True)
class SplitSection:
    test_fraction: float = 0.3
    gap_days: float = 0.0
    per_user: bool = False

    def spec(self) -> SplitSpec:
        return SplitSpec(test_fraction=self.test_fraction,
                         gap=timedelta(days=self.gap_days), per_user=self.per_user)


@dataclass(frozen=True)
class ReplaySection:
    frequency: str = "logged"
    limit: int = 0   # 0: each logged search's own limit
    policy: str = "none"


@dataclass(frozen=True)
class MetricsSection:
    names: tuple[str, ...] = ("ndcg@10", "recall@10", "mrr")
    primary: str = "ndcg@10"
    bootstrap: int = 1000
    min_support: int = 30
    # The exploratory rows' correction, within each breakdown: "bonferroni" pairs each CI
    # with its adjusted p (compare.py); "holm" and "bh" adjust p only.
    correction: str = "bonferroni"
    # Verdict labels: an arm whose judged share of the top K (judged@K) is below this
    # fraction of the best-judged arm's is marked "not assessable" rather than scored.
    min_judged_ratio: float = 0.5


@dataclass(frozen=True)
class AblationSection:
    arms: tuple[str, ...] = ARMS
    # The weight a new signal gets when its arm switches it on.
    weights: Mapping[str, float] = field(default_factory=lambda: {
        "delta_personal": 0.3, "epsilon_frequency": 0.1, "zeta_success": 0.3})


@dataclass(frozen=True)
class ReferencesSection:
    # BM25 and dense-only beside the ladder (experiments/references.py); off for stores
    # too large to index once per visible set.
    enabled: bool = True


@dataclass(frozen=True)
class FidelitySection:
    """Is the replay production? On a store holding production's end state (ContextKit
    artifacts), the replay under [engine] is compared with it before any table
    (`experiments/fidelity`); below a threshold the run stops (exit 2) or warns."""

    enabled: bool = True
    on_fail: str = "stop"       # "stop": exit 2 before any table; "warn": go on, marked
    search: bool = True         # on a failure, try the settings production may have run
    tolerance: float = 1e-6     # relevance, floors, edge weights and deltas: equal within
    min_nodes: float = 0.95     # share of nodes whose relevance and floor the replay reaches
    min_edges: float = 0.95     # share of edges with equal weights
    min_deltas: float = 0.99    # share of verdicts whose delta_applied the replay applies
    min_in_top: float = 0.90    # share of verdicted memories in the replayed top k
    min_ranks: float = 0.80     # share of recorded ranks (metadata.rank) reproduced exactly

    def thresholds(self) -> dict[str, float]:
        return {"nodes": self.min_nodes, "edges": self.min_edges, "deltas": self.min_deltas,
                "in_top": self.min_in_top, "ranks": self.min_ranks}


@dataclass(frozen=True)
class CounterfactualSection:
    """Verdict labels: the position bias of the log, estimated, and each arm's IPS and SNIPS
    nDCG@k against it (`experiments/counterfactual`)."""

    enabled: bool = True
    estimator: str = "snips"    # the estimate the verdict-labelled decision reads
    clip: float = 0.05          # propensities below it are raised to it
    resamples: int = 200        # bootstrap over questions, the click model refitted in each
    max_unshown: float = 0.1    # never-shown share of an arm's top k above which it is
    #                             bounded, not scored


@dataclass(frozen=True)
class TuneSection:
    trials: int = 300
    sampler: str = "tpe"
    pruner: str = "none"
    objectives: tuple[str, ...] = ("ndcg@10",)
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=lambda: dict.fromkeys(
        WEIGHTS, (0.0, 1.0)))
    storage: str = ""   # empty: a journal file beside the store
    workers: int = 1
    # On a database storage: each running trial's heartbeat, in seconds, and how long
    # without one before another worker fails the trial and runs it again.
    heartbeat: int = 10
    heartbeat_grace: int = 30


@dataclass(frozen=True)
class TrackingSection:
    uri: str = "sqlite:///mlflow.db"
    experiment: str = "msprlab"


@dataclass(frozen=True)
class ExperimentConfig:
    """A parsed, validated experiment definition."""

    name: str
    path: Path
    description: str
    seed: int
    dataset: DatasetSection
    split: SplitSection
    engine: EngineConfig
    engine_dict: Mapping[str, Any]
    replay: ReplaySection
    metrics: MetricsSection
    ablation: AblationSection
    references: ReferencesSection
    tune: TuneSection
    tracking: TrackingSection
    raw: Mapping[str, Any] = field(repr=False)
    decision: DecisionSettings = field(default_factory=DecisionSettings)
    fidelity: FidelitySection = field(default_factory=FidelitySection)
    counterfactual: CounterfactualSection = field(default_factory=CounterfactualSection)

    def digest(self) -> str:
        """sha256 of the definition as parsed (the config hash every result carries)."""
        return hashlib.sha256(json.dumps(self.raw, sort_keys=True, default=str).encode()
                              ).hexdigest()


_TOP = ("name", "description", "seed", "dataset", "split", "engine", "replay", "metrics",
        "ablation", "references", "tune", "tracking", "decision", "fidelity",
        "counterfactual")


def _section(cls: type, raw: Any, where: str) -> Any:
    """`cls(**raw)` with every key known, every value of the default's type."""
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        raise ExperimentError(f"{where}: expected a table, got {raw!r}")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ExperimentError(f"{where}: unknown key {unknown[0]!r}; known keys: "
                              f"{', '.join(known)}")
    defaults = cls()
    values: dict[str, Any] = {}
    for key, value in raw.items():
        default = getattr(defaults, key)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            value = float(value) if ok else value
        elif isinstance(default, str):
            ok = isinstance(value, str)
        elif isinstance(default, tuple):
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
            value = tuple(value) if ok else value
        else:  # a mapping: checked by the caller
            ok = isinstance(value, dict)
        if not ok:
            raise ExperimentError(f"{where}.{key}: expected {type(default).__name__}, got "
                                  f"{value!r}")
        values[key] = value
    return cls(**values)


def judged_metric(names: tuple[str, ...] | list[str]) -> str | None:
    """The first judged@K metric of `names`: the judged share printed beside verdict labels."""
    return next((n for n in names if parse_metric(n).kind == "judged"), None)


def _choice(where: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ExperimentError(f"{where}: {value!r} is not one of {', '.join(allowed)}")


def _weights(where: str, raw: Mapping[str, Any]) -> None:
    for name in raw:
        if name not in WEIGHTS:
            raise ExperimentError(f"{where}: unknown weight {name!r}; known: "
                                  f"{', '.join(WEIGHTS)}")


# Why a ContextKit key that `config_from_dict` accepts but sets nothing with cannot act.
_NO_EFFECT = (
    ("context_graph.edges.", "LLM edges are not modelled, and edges are built into the store "
                             "at ingest, not at replay"),
    ("context_graph.", "the replay rebuilds the graph from the store"),
    ("mspr.", "the library declares it but never reads it (MSPR.md section 3.2)"),
    ("", "the replay models the ranking path only: the seeds are the exact cosine of the "
         "store's embeddings ([dataset] names the embedder) and no LLM runs"),
)


def replayable_engine(engine_dict: dict[str, Any], replay: ReplaySection) -> EngineConfig:
    """The engine config of a definition, validated and refused where the replay could not
    honour a setting. Every path from a TOML to a ranking goes through here (the regress
    gate's [ranker] block too), so no entry point skips a refusal."""
    ignored: list[str] = []
    try:
        engine = config_from_dict(engine_dict, ignored=ignored)
    except ConfigError as exc:
        raise ExperimentError(f"engine: {exc}") from None
    _refuse_unreplayable(engine, ignored, replay)
    return engine


def _refuse_unreplayable(engine: EngineConfig, ignored: list[str],
                         replay: ReplaySection) -> None:
    """Every engine setting reaches the replay (and its scoring), or the definition is
    refused here, naming the key: a setting the replay cannot honour is never dropped."""
    for key in ignored:
        why = next(reason for prefix, reason in _NO_EFFECT if key.startswith(prefix))
        raise ExperimentError(f"engine: {key} cannot reach the replay: {why}; remove it")
    changed = _changed("context_graph.edges", engine.edges, EdgesConfig())
    if changed:
        raise ExperimentError(
            f"engine: {changed[0]} cannot reach the replay: edges are synthesised when the "
            "store is built (with the library's defaults) and read from the store at replay; "
            "remove it")
    intent = engine.mspr.intent
    if intent.strategy != "regex":
        raise ExperimentError(
            f"engine: mspr.intent.strategy cannot reach the replay: {intent.strategy!r} asks "
            "an LLM, and the replay runs no LLM classifier, so every query would be labelled "
            "as by 'regex'; use 'regex'")
    if intent.llm_timeout_seconds != IntentConfig().llm_timeout_seconds:
        raise ExperimentError(
            "engine: mspr.intent.llm_timeout_seconds cannot reach the replay: only the LLM "
            "stage reads it, and the replay runs no LLM classifier; remove it")
    if engine.corrections.idempotent_backfill:
        raise ExperimentError(
            "engine: msprlab.corrections.idempotent_backfill cannot reach the replay: it "
            "changes backfill_mspr, which the replay never runs; remove it")
    if replay.policy == "none":
        roles = _changed("mspr.role", engine.mspr.role, RoleConfig())
        if engine.corrections.strict_role_isolation:
            roles.append("msprlab.corrections.strict_role_isolation")
        if roles:
            raise ExperimentError(
                f"engine: {roles[0]} cannot reach the replay: no role policy is installed "
                "(replay.policy = \"none\"), so role settings have nothing to apply; set "
                "replay.policy or remove it")


def _changed(prefix: str, value: Any, default: Any) -> list[str]:
    """The keys of a config block that differ from the library's defaults."""
    return [f"{prefix}.{f.name}" for f in fields(value)
            if getattr(value, f.name) != getattr(default, f.name)]


def shipped_experiments() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))


def load_experiment(name_or_path: str | Path) -> ExperimentConfig:
    """Read and validate a definition: a .toml path, or a shipped name like "locomo"."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = CONFIG_DIR / f"{name_or_path}.toml"
        if not path.is_file():
            raise ExperimentError(f"no experiment {str(name_or_path)!r}: pass a .toml file or "
                                  f"one of {', '.join(shipped_experiments())}")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ExperimentError(f"{path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path}: not valid TOML: {exc}") from None
    try:
        return _parse(raw, path)
    except ExperimentError as exc:
        raise ExperimentError(f"{path}: {exc}") from None


def _parse(raw: dict[str, Any], path: Path) -> ExperimentConfig:
    unknown = sorted(set(raw) - set(_TOP))
    if unknown:
        raise ExperimentError(f"unknown key {unknown[0]!r}; known top-level keys: "
                              f"{', '.join(_TOP)}")
    name = raw.get("name", path.stem)
    seed = raw.get("seed", 0)
    if not isinstance(name, str) or not isinstance(seed, int) or isinstance(seed, bool):
        raise ExperimentError("name must be a string and seed an integer")
    dataset = _section(DatasetSection, raw.get("dataset"), "dataset")
    _choice("dataset.source", dataset.source, SOURCES)
    _choice("dataset.labels", dataset.labels, LABELS)
    if dataset.labels == "verdicts" and dataset.source != "store":
        raise ExperimentError(f"dataset.labels = \"verdicts\" reads an ingested store's "
                              f"feedback (dataset.source = \"store\"), not {dataset.source!r}, "
                              "whose qrels are the truth")
    if not dataset.verdict_window_minutes > 0 or dataset.verdict_limit < 1:
        raise ExperimentError(f"dataset.verdict_window_minutes must be > 0 and "
                              f"dataset.verdict_limit >= 1, got {dataset.verdict_window_minutes} "
                              f"and {dataset.verdict_limit}")
    split = _section(SplitSection, raw.get("split"), "split")
    try:
        split.spec()
    except ValueError as exc:
        raise ExperimentError(str(exc)) from None
    engine_dict = raw.get("engine", {})
    replay = _section(ReplaySection, raw.get("replay"), "replay")
    _choice("replay.frequency", replay.frequency, FREQUENCY_MODES)
    _choice("replay.policy", replay.policy, POLICY_NAMES)
    engine = replayable_engine(engine_dict, replay)
    metrics = _section(MetricsSection, raw.get("metrics"), "metrics")
    try:  # canonical names ("P_10" -> "precision@10"): the tables' columns use them
        metrics = replace(metrics, names=tuple(parse_metric(m).name for m in metrics.names),
                          primary=parse_metric(metrics.primary).name)
    except ValueError as exc:
        raise ExperimentError(f"metrics: {exc}") from None
    if metrics.primary not in metrics.names:
        raise ExperimentError(f"metrics.primary {metrics.primary!r} must be one of "
                              f"metrics.names {list(metrics.names)}")
    _choice("metrics.correction", metrics.correction, CORRECTIONS)
    if not 0.0 <= metrics.min_judged_ratio <= 1.0:
        raise ExperimentError(f"metrics.min_judged_ratio must be in [0, 1], got "
                              f"{metrics.min_judged_ratio}")
    if dataset.labels == "verdicts" and judged_metric(metrics.names) is None:
        raise ExperimentError("metrics.names: verdict labels leave most memories unjudged, so "
                              "every figure needs its judged share beside it; add a judged@K "
                              "metric (judged@10) to metrics.names")
    ablation = _section(AblationSection, raw.get("ablation"), "ablation")
    if not ablation.arms:
        raise ExperimentError(f"ablation.arms is empty; name at least one of {', '.join(ARMS)}")
    for arm in ablation.arms:
        if arm == "baseline":
            raise ExperimentError("ablation.arms: 'baseline' is now two arms: 'off' (MSPR "
                                  "disabled, the context graph alone) and 'on-zero' (MSPR on, "
                                  "new weights at 0); name either or both")
        _choice("ablation.arms", arm, ARMS)
    if len(set(ablation.arms)) != len(ablation.arms):
        raise ExperimentError(f"ablation.arms: {list(ablation.arms)} names an arm twice")
    _weights("ablation.weights", ablation.weights)
    references = _section(ReferencesSection, raw.get("references"), "references")
    tune = _section(TuneSection, raw.get("tune"), "tune")
    _choice("tune.sampler", tune.sampler, SAMPLERS)
    _choice("tune.pruner", tune.pruner, PRUNERS)
    _weights("tune.ranges", tune.ranges)
    ranges = {}
    for weight, bounds in tune.ranges.items():
        if not (isinstance(bounds, list | tuple) and len(bounds) == 2
                and all(isinstance(b, int | float) for b in bounds)
                and 0.0 <= bounds[0] <= bounds[1] <= 1.0):
            raise ExperimentError(f"tune.ranges.{weight}: expected [low, high] with "
                                  f"0 <= low <= high <= 1, got {bounds!r}")
        ranges[weight] = (float(bounds[0]), float(bounds[1]))
    if "ranges" in (raw.get("tune") or {}):
        tune = replace(tune, ranges=ranges)
    if tune.trials < 1 or tune.workers < 1:
        raise ExperimentError("tune.trials and tune.workers must be >= 1")
    try:
        tune = replace(tune, objectives=tuple(
            "/".join([parse_metric(o.split("/")[0]).name, *o.split("/")[1:]])
            for o in tune.objectives))
    except ValueError as exc:
        raise ExperimentError(f"tune.objectives: {exc}") from None
    if not 1 <= tune.heartbeat < tune.heartbeat_grace:
        raise ExperimentError(f"tune.heartbeat and tune.heartbeat_grace: `1 <= heartbeat < "
                              f"heartbeat_grace` (seconds) must hold, but got "
                              f"{tune.heartbeat} and {tune.heartbeat_grace}")
    for objective in tune.objectives:
        metric = objective.split("/")[0]
        if metric not in metrics.names:
            raise ExperimentError(f"tune.objectives: {objective!r} measures {metric!r}, which "
                                  f"is not in metrics.names {list(metrics.names)}")
    tracking = _section(TrackingSection, raw.get("tracking"), "tracking")
    decision = _decision(raw.get("decision"), metrics)
    fidelity = _section(FidelitySection, raw.get("fidelity"), "fidelity")
    _choice("fidelity.on_fail", fidelity.on_fail, ("stop", "warn"))
    for key, value in (("tolerance", fidelity.tolerance), *(
            (f"min_{name}", v) for name, v in fidelity.thresholds().items())):
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise ExperimentError(f"fidelity.{key} must be in [0, 1], got {value!r}")
    counterfactual = _section(CounterfactualSection, raw.get("counterfactual"),
                              "counterfactual")
    _choice("counterfactual.estimator", counterfactual.estimator, ("snips", "ips"))
    for key, value, low_open in (("clip", counterfactual.clip, True),
                                 ("max_unshown", counterfactual.max_unshown, False)):
        if not (math.isfinite(value) and (value > 0.0 if low_open else value >= 0.0)
                and value <= 1.0):
            raise ExperimentError(f"counterfactual.{key} must be in {'(' if low_open else '['}"
                                  f"0, 1], got {value!r}")
    if counterfactual.resamples < 1:
        raise ExperimentError(f"counterfactual.resamples must be >= 1, got "
                              f"{counterfactual.resamples}")
    return ExperimentConfig(
        name=name, path=path, description=str(raw.get("description", "")), seed=seed,
        dataset=dataset, split=split, engine=engine, engine_dict=engine_dict, replay=replay,
        metrics=metrics, ablation=ablation, references=references, tune=tune,
        tracking=tracking, raw=raw, decision=decision, fidelity=fidelity,
        counterfactual=counterfactual)


def _decision(raw: Any, metrics: MetricsSection) -> DecisionSettings:
    """The `[decision]` table: every key known, every value in range (exit 2 naming it);
    the metric defaults to `metrics.primary` and must be one of `metrics.names`."""
    try:
        settings = _section(DecisionSettings, raw, "decision")
    except ValueError as exc:  # DecisionSettings' own range checks
        raise ExperimentError(str(exc)) from None
    metric = settings.metric or metrics.primary
    try:
        metric = parse_metric(metric).name
    except ValueError as exc:
        raise ExperimentError(f"decision.metric: {exc}") from None
    if metric not in metrics.names:
        raise ExperimentError(f"decision.metric {metric!r} must be one of metrics.names "
                              f"{list(metrics.names)}")
    return replace(settings, metric=metric)
