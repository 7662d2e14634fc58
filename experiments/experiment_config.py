"""Experiment definitions: TOML files in `experiments/configs/`, read strictly.

A definition names the dataset (and how its feedback log is simulated), the time split,
the engine configuration (a ContextKit config dict: the full ranker the arms switch parts
of), the replay settings, the metrics, the ablation arms, whether the reference rankers
run, the weight search and the tracking store. Every table is read by `_section`, which
rejects a key it does not know and lists the known ones, so a typo never silently falls
back to a default, and checks each value against its type and the `Rule` declared beside
the key (a range, choices, not empty); then the section's validator (`SECTIONS`) checks
what involves several keys or sections. So every value is refused at load, before any
work, with a message naming the key, the value and what is allowed. `load_experiment`
takes a file path or the name of a shipped definition (`locomo`, `synthetic`,
`scifact-sanity`).
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from msprlab.engine import EngineConfig, config_from_dict
from msprlab.engine.batch import INTENTS, WEIGHTS
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
SINGLE_OBJECTIVE = ("cmaes", "wilcoxon")  # a sampler or pruner of one objective only


@dataclass(frozen=True)
class Rule:
    """What a key allows beyond its type, declared once beside the key (`ranged`, `one_of`,
    `filled`) and checked by `_section` when a definition is loaded: a numeric range (an
    open end excluded), choices (each element of a list), or a non-empty string or list.
    `choices` may be a function, for a registry whose module is imported only to check."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] | Callable[[], Iterable[str]] | None = None
    filled: bool = False
    retired: Mapping[str, str] = field(default_factory=dict)  # a former choice -> what now

    def options(self) -> tuple[str, ...]:
        choices = self.choices() if callable(self.choices) else self.choices
        return tuple(choices or ())

    def in_range(self, value: float) -> bool:
        above = self.low is None or value > self.low or (value == self.low and not self.low_open)
        below = self.high is None or value < self.high or (
            value == self.high and not self.high_open)
        return above and below

    def describe(self, kind: str) -> str:
        """"an integer >= 1", "a number in [0, 1]", "a number > 0", ..."""
        noun = "an integer" if kind == "int" else "a number"
        if self.low is not None and self.high is not None:
            return (f"{noun} in {'(' if self.low_open else '['}{self.low:g}, "
                    f"{self.high:g}{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{noun} {'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"{noun} {'<' if self.high_open else '<='} {self.high:g}"
        return noun


def ranged(default: float, low: float | None = None, high: float | None = None, *,
           low_open: bool = False, high_open: bool = False) -> Any:
    """A numeric key's default and the range it allows."""
    return field(default=default, metadata={"rule": Rule(low, high, low_open, high_open)})


def one_of(default: Any, choices: tuple[str, ...] | Callable[[], Iterable[str]],
           retired: Mapping[str, str] | None = None) -> Any:
    """A string key (or list of strings, each checked) with its default and its choices."""
    return field(default=default, metadata={"rule": Rule(choices=choices, filled=True,
                                                         retired=retired or {})})


def filled(default: Any) -> Any:
    """A string or list key that must not be empty."""
    return field(default=default, metadata={"rule": Rule(filled=True)})


def _click_models() -> Iterable[str]:
    from msprlab.datasets.build import CLICK_MODELS
    return CLICK_MODELS


def _embedders() -> Iterable[str]:
    from msprlab.datasets.embed import EMBEDDERS  # imports scikit-learn: only when checked
    return sorted(EMBEDDERS)


def _scifact_splits() -> Iterable[str]:
    from msprlab.datasets.sources.scifact import SPLITS
    return SPLITS


@dataclass(frozen=True)
class TopSection:
    """The definition's top-level values (an empty name: the file's stem)."""

    name: str = ""
    description: str = ""
    seed: int = ranged(0, low=0)   # numpy's seeds are non-negative


@dataclass(frozen=True)
class DatasetSection:
    source: str = one_of("locomo-log", SOURCES)
    store: str = filled("runs/locomo.duckdb")  # relative to the working folder
    searches: int = ranged(3000, low=1)        # simulated searches (locomo-log, synthetic)
    click_model: str = one_of("pbm", _click_models)
    seed: int = ranged(1, low=0)       # the log's seed (the experiment seed drives the rest)
    split: str = one_of("test", _scifact_splits)  # scifact: the BEIR split
    embedder: str = one_of("tfidf-svd", _embedders)
    users: int = ranged(12, low=1)                 # synthetic: users
    memories_per_user: int = ranged(60, low=1)     # synthetic
    queries_per_user: int = ranged(8, low=1)       # synthetic
    # Where relevance comes from: the store's qrels, or its feedback verdicts
    # (datasets/verdict_labels.py: one search per occurrence, replayed before its verdicts).
    labels: str = one_of("qrels", LABELS)
    verdict_window_minutes: float = ranged(30.0, low=0, low_open=True)  # one occurrence's span
    verdict_limit: int = ranged(10, low=1)    # labels = "verdicts": the replayed search's limit


@dataclass(frozen=True)
class SplitSection:
    test_fraction: float = ranged(0.3, 0, 1, low_open=True, high_open=True)
    gap_days: float = ranged(0.0, low=0)
    per_user: bool = False

    def spec(self) -> SplitSpec:
        return SplitSpec(test_fraction=self.test_fraction,
                         gap=timedelta(days=self.gap_days), per_user=self.per_user)


@dataclass(frozen=True)
class ReplaySection:
    frequency: str = one_of("logged", FREQUENCY_MODES)
    limit: int = ranged(0, low=0)   # 0: each logged search's own limit
    policy: str = one_of("none", POLICY_NAMES)


@dataclass(frozen=True)
class MetricsSection:
    names: tuple[str, ...] = filled(("ndcg@10", "recall@10", "mrr"))
    primary: str = "ndcg@10"
    bootstrap: int = ranged(10_000, low=1)  # resamples per bootstrap CI of a mean
    min_support: int = ranged(30, low=0)   # queries a group needs to be tested
    # The exploratory rows' correction, within each breakdown: "bonferroni" pairs each CI
    # with its adjusted p (compare.py); "holm" and "bh" adjust p only.
    correction: str = one_of("bonferroni", CORRECTIONS)
    # Verdict labels: an arm whose judged share of the top K (judged@K) is below this
    # fraction of the best-judged arm's is marked "not assessable" rather than scored.
    min_judged_ratio: float = ranged(0.5, 0, 1)


# The weight a new signal gets when its arm switches it on; the engine's range for a weight.
NEW_WEIGHTS = ("delta_personal", "epsilon_frequency", "zeta_success")
WEIGHT_RULE = Rule(0, 1)


@dataclass(frozen=True)
class AblationSection:
    arms: tuple[str, ...] = one_of(ARMS, ARMS, retired={"baseline": (
        "is now two arms: 'off' (MSPR disabled, the context graph alone) and 'on-zero' (MSPR "
        "on, new weights at 0); name either or both")})
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
    # "stop": exit 2 before any table; "warn": go on, marked
    on_fail: str = one_of("stop", ("stop", "warn"))
    search: bool = True         # on a failure, try the settings production may have run
    # relevance, floors, edge weights and deltas: equal within
    tolerance: float = ranged(1e-6, 0, 1)
    min_nodes: float = ranged(0.95, 0, 1)  # share of nodes whose relevance and floor match
    min_edges: float = ranged(0.95, 0, 1)  # share of edges with equal weights
    min_deltas: float = ranged(0.99, 0, 1)  # share of verdicts whose delta_applied is applied
    min_success: float = ranged(0.99, 0, 1)  # share of verdicts whose success row matches
    min_in_top: float = ranged(0.90, 0, 1)  # share of verdicted memories in the replayed top k
    min_ranks: float = ranged(0.70, 0, 1)  # share of recorded ranks (metadata.rank) reproduced

    def thresholds(self) -> dict[str, float]:
        return {"nodes": self.min_nodes, "edges": self.min_edges, "deltas": self.min_deltas,
                "success": self.min_success, "in_top": self.min_in_top,
                "ranks": self.min_ranks}


@dataclass(frozen=True)
class CounterfactualSection:
    """Verdict labels: the position bias of the log, estimated, and each arm's IPS and SNIPS
    nDCG@k against it (`experiments/counterfactual`)."""

    enabled: bool = True
    # the estimate the verdict-labelled decision reads: IPS, which the validation on
    # generated worlds supports best (README, "Position bias and counterfactual estimates")
    estimator: str = one_of("ips", ("snips", "ips"))
    clip: float = ranged(0.05, 0, 1, low_open=True)  # propensities below it are raised to it
    resamples: int = ranged(200, low=1)  # bootstrap over questions, the click model refitted
    # never-shown share of an arm's top k above which it is bounded, not scored
    max_unshown: float = ranged(0.1, 0, 1)


@dataclass(frozen=True)
class TuneSection:
    trials: int = ranged(300, low=1)
    sampler: str = one_of("tpe", SAMPLERS)
    pruner: str = one_of("none", PRUNERS)
    objectives: tuple[str, ...] = filled(("ndcg@10",))
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=lambda: dict.fromkeys(
        WEIGHTS, (0.0, 1.0)))
    storage: str = ""   # empty: a journal file beside the store
    workers: int = ranged(1, low=1)
    # On a database storage: each running trial's heartbeat, in seconds, and how long
    # without one before another worker fails the trial and runs it again.
    heartbeat: int = ranged(10, low=1)
    heartbeat_grace: int = ranged(30, low=2)
    # The ranking settings searched beside the weights, in a study of its own (the
    # configuration search, `variants.space`): its trial target and how trials are grouped
    # (`tune.configuration`). Empty: no configuration search.
    settings: Mapping[str, Any] = field(default_factory=dict)
    config_trials: int = ranged(100, low=1)
    points_per_state: int = ranged(4, low=1, high=64)
    trials_per_point: int = ranged(4, low=1, high=1000)


@dataclass(frozen=True)
class TrackingSection:
    uri: str = filled("sqlite:///mlflow.db")
    experiment: str = filled("msprlab")


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


def _section(cls: type, raw: Any, where: str) -> Any:
    """`cls(**raw)` with every key known, every value of the default's type and within the
    key's `Rule`; `where` is the section's name ("" for the top level)."""
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
        name = f"{where}.{key}" if where else key
        default = getattr(defaults, key)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, int | float) and not isinstance(value, bool) \
                and math.isfinite(value)
            value = float(value) if ok else value
        elif isinstance(default, str):
            ok = isinstance(value, str)
        elif isinstance(default, tuple):
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
            value = tuple(value) if ok else value
        else:  # a mapping: checked by the section's validator
            ok = isinstance(value, dict)
        if not ok:
            raise ExperimentError(f"{name}: expected {_kind(default)}, got {value!r}")
        if (rule := known[key].metadata.get("rule")) is not None:
            _check_rule(name, value, rule, default)
        values[key] = value
    try:
        return cls(**values)
    except ExperimentError:
        raise
    except ValueError as exc:  # the section's own checks (e.g. DecisionSettings)
        raise ExperimentError(str(exc)) from None


def _kind(default: Any) -> str:
    if isinstance(default, tuple):
        return "a list of strings"
    return type(default).__name__


def _shown(value: Any) -> str:
    """A value as the definition wrote it (a list, not the tuple it is kept as)."""
    return repr(list(value) if isinstance(value, tuple) else value)


def _check_rule(name: str, value: Any, rule: Rule, default: Any) -> None:
    if rule.filled and not value:
        raise ExperimentError(f"{name} = {_shown(value)}: must not be empty")
    if options := rule.options():
        for item in (value if isinstance(value, tuple) else (value,)):
            if item in rule.retired:
                raise ExperimentError(f"{name}: {item!r} {rule.retired[item]}")
            _choice(name, item, options)
    if isinstance(value, int | float) and not isinstance(value, bool) \
            and not rule.in_range(value):
        kind = "int" if isinstance(default, int) else "float"
        raise ExperimentError(f"{name} = {value!r} is out of range: it must be "
                              f"{rule.describe(kind)}")


def judged_metric(names: tuple[str, ...] | list[str]) -> str | None:
    """The first judged@K metric of `names`: the judged share printed beside verdict labels."""
    return next((n for n in names if parse_metric(n).kind == "judged"), None)


def _choice(where: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ExperimentError(f"{where}: {value!r} is not one of {', '.join(allowed)}")


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


# -- the sections' own checks -----------------------------------------------------------
# Each section is read by `_section` (keys, types, the `Rule` of each key) and then checked
# by its validator here, which sees the sections read before it (`parsed`, in `SECTIONS`
# order) and returns the section as the experiment keeps it. A new section adds a dataclass
# with its rules, a validator, and a row to `SECTIONS`.

def _check_dataset(dataset: DatasetSection, parsed: dict[str, Any]) -> DatasetSection:
    if dataset.labels == "verdicts" and dataset.source != "store":
        raise ExperimentError(f"dataset.labels = \"verdicts\" reads an ingested store's "
                              f"feedback (dataset.source = \"store\"), not {dataset.source!r}, "
                              "whose qrels are the truth")
    if dataset.source == "synthetic":  # the world's own rules (there may be more than ranges)
        from msprlab.datasets.synthetic import SyntheticSpec
        try:
            SyntheticSpec(n_users=dataset.users, memories_per_user=dataset.memories_per_user,
                          queries_per_user=dataset.queries_per_user)
        except ValueError as exc:
            raise ExperimentError(f"dataset (users, memories_per_user, queries_per_user): "
                                  f"{exc}") from None
    return dataset


def _check_split(split: SplitSection, parsed: dict[str, Any]) -> SplitSection:
    try:
        split.spec()
    except ValueError as exc:
        raise ExperimentError(str(exc)) from None
    return split


def _check_metrics(metrics: MetricsSection, parsed: dict[str, Any]) -> MetricsSection:
    try:  # canonical names ("P_10" -> "precision@10"): the tables' columns use them
        metrics = replace(metrics, names=tuple(parse_metric(m).name for m in metrics.names),
                          primary=parse_metric(metrics.primary).name)
    except ValueError as exc:
        raise ExperimentError(f"metrics: {exc}") from None
    if len(set(metrics.names)) != len(metrics.names):
        raise ExperimentError(f"metrics.names: {list(metrics.names)} names a metric twice")
    if metrics.primary not in metrics.names:
        raise ExperimentError(f"metrics.primary {metrics.primary!r} must be one of "
                              f"metrics.names {list(metrics.names)}")
    if parsed["dataset"].labels == "verdicts" and judged_metric(metrics.names) is None:
        raise ExperimentError("metrics.names: verdict labels leave most memories unjudged, so "
                              "every figure needs its judged share beside it; add a judged@K "
                              "metric (judged@10) to metrics.names")
    return metrics


def _check_ablation(ablation: AblationSection, parsed: dict[str, Any]) -> AblationSection:
    if len(set(ablation.arms)) != len(ablation.arms):
        raise ExperimentError(f"ablation.arms: {list(ablation.arms)} names an arm twice")
    for name, value in ablation.weights.items():
        if name not in NEW_WEIGHTS:
            raise ExperimentError(f"ablation.weights: unknown weight {name!r}; the arms switch "
                                  f"on {', '.join(NEW_WEIGHTS)}")
        _number(f"ablation.weights.{name}", value, WEIGHT_RULE)
    # Whether the engine runs the arms (MSPR and the state they read) is checked where the
    # ladder is built (`arms.experiment_arms`), before any work: `tune` runs no ladder.
    return replace(ablation, weights={k: float(v) for k, v in ablation.weights.items()})


def _check_tune(tune: TuneSection, parsed: dict[str, Any]) -> TuneSection:
    # The search space's own rules (weights known, 0 <= low < high <= 1, not all fixed by
    # the engine), declared once there, checked now; its import is optuna's.
    from .tune.space import search_space
    given = (parsed["raw"].get("tune") or {}).get("ranges")
    try:
        search_space(tune.ranges, parsed["engine"])
    except ExperimentError as exc:
        shown = str(exc).removeprefix("SearchSpace: ").removeprefix("tune: ")
        raise ExperimentError(f"tune.ranges: {shown}") from None
    if given is not None:
        tune = replace(tune, ranges={k: (float(v[0]), float(v[1])) for k, v in given.items()})
    names, labels = parsed["metrics"].names, tuple(label.value for label in INTENTS)
    objectives = []
    for objective in tune.objectives:
        if objective == "cost":  # the engine's time per search: a configuration's
            if not tune.settings:
                raise ExperimentError("tune.objectives: \"cost\" (the engine's time per "
                                      "search) differs between configurations, not between "
                                      "weights: search settings beside the weights "
                                      "([tune.settings]) or remove it")
            objectives.append(objective)
            continue
        parts = objective.split("/")
        if not (len(parts) == 1 or (len(parts) == 3 and parts[1] == "intent")):
            raise ExperimentError(f"tune.objectives: {objective!r}; use METRIC or "
                                  "METRIC/intent/LABEL")
        try:
            metric = parse_metric(parts[0]).name
        except ValueError as exc:
            raise ExperimentError(f"tune.objectives: {exc}") from None
        if metric not in names:
            raise ExperimentError(f"tune.objectives: {objective!r} measures {metric!r}, which "
                                  f"is not in metrics.names {list(names)}")
        if len(parts) == 3 and parts[2] not in labels:
            raise ExperimentError(f"tune.objectives: {objective!r}: intent {parts[2]!r} is not "
                                  f"one of {', '.join(labels)}")
        objectives.append("/".join([metric, *parts[1:]]))
    if len(set(objectives)) != len(objectives):
        raise ExperimentError(f"tune.objectives: {objectives} names an objective twice")
    single = [f"{key} = {value!r}" for key, value in (("sampler", tune.sampler),
                                                       ("pruner", tune.pruner))
              if value in SINGLE_OBJECTIVE]
    if single and len(objectives) > 1:
        raise ExperimentError(f"tune: {' and '.join(single)} handles a single objective, but "
                              f"tune.objectives has {len(objectives)}; use sampler 'tpe' or "
                              "'random' without a pruner for a Pareto front")
    if not tune.heartbeat < tune.heartbeat_grace:
        raise ExperimentError(f"tune.heartbeat and tune.heartbeat_grace: `1 <= heartbeat < "
                              f"heartbeat_grace` (seconds) must hold, but got "
                              f"{tune.heartbeat} and {tune.heartbeat_grace}")
    _settings_search(tune, parsed["engine"], parsed["replay"])
    return replace(tune, objectives=tuple(objectives))


def _settings_search(tune: TuneSection, engine: EngineConfig, replay: ReplaySection) -> None:
    """`[tune.settings]`, checked before any work (`variants.space`): every value one the
    library accepts, the configured value among them, a setting that can act."""
    if not tune.settings:
        return
    from .variants.space import parse_settings
    if replay.frequency != "logged":
        raise ExperimentError("tune.settings: a configuration search scores many settings "
                              "from tables replayed with the log's access counts; set "
                              "replay.frequency = \"logged\"")
    parse_settings(tune.settings, engine, limit=replay.limit or None)


def _check_decision(settings: DecisionSettings, parsed: dict[str, Any]) -> DecisionSettings:
    """The metric defaults to `metrics.primary` and must be one of `metrics.names` (the
    other values are checked by `DecisionSettings` itself, through `_section`)."""
    metrics = parsed["metrics"]
    metric = settings.metric or metrics.primary
    try:
        metric = parse_metric(metric).name
    except ValueError as exc:
        raise ExperimentError(f"decision.metric: {exc}") from None
    if metric not in metrics.names:
        raise ExperimentError(f"decision.metric {metric!r} must be one of metrics.names "
                              f"{list(metrics.names)}")
    return replace(settings, metric=metric)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value)


def _number(name: str, value: Any, rule: Rule) -> None:
    if not _is_number(value):
        raise ExperimentError(f"{name}: expected a number, got {value!r}")
    if not rule.in_range(value):
        raise ExperimentError(f"{name} = {value!r} is out of range: it must be "
                              f"{rule.describe('float')}")


Validator = Callable[[Any, dict[str, Any]], Any]

# Every table of a definition, in the order they are read and checked: (name, dataclass,
# validator). "" is the top level's values; the engine is read by `replayable_engine`.
SECTIONS: tuple[tuple[str, type | None, Validator | None], ...] = (
    ("", TopSection, None),
    ("dataset", DatasetSection, _check_dataset),
    ("split", SplitSection, _check_split),
    ("replay", ReplaySection, None),
    ("engine", None, None),
    ("metrics", MetricsSection, _check_metrics),
    ("ablation", AblationSection, _check_ablation),
    ("references", ReferencesSection, None),
    ("tune", TuneSection, _check_tune),
    ("tracking", TrackingSection, None),
    ("decision", DecisionSettings, _check_decision),
    ("fidelity", FidelitySection, None),
    ("counterfactual", CounterfactualSection, None),
)
_TOP = (*(f.name for f in fields(TopSection)), *(name for name, _, _ in SECTIONS if name))


def _parse(raw: dict[str, Any], path: Path) -> ExperimentConfig:
    unknown = sorted(set(raw) - set(_TOP))
    if unknown:
        raise ExperimentError(f"unknown key {unknown[0]!r}; known top-level keys: "
                              f"{', '.join(_TOP)}")
    parsed: dict[str, Any] = {"raw": raw}
    for name, cls, check in SECTIONS:
        if name == "engine":
            engine_dict = raw.get("engine", {})
            if not isinstance(engine_dict, dict):
                raise ExperimentError(f"engine: expected a table, got {engine_dict!r}")
            parsed["engine"] = replayable_engine(engine_dict, parsed["replay"])
            continue
        assert cls is not None
        given = {k: v for k, v in raw.items() if k in {f.name for f in fields(TopSection)}} \
            if name == "" else raw.get(name)
        section = _section(cls, given, name)
        parsed[name] = check(section, parsed) if check is not None else section
    top = parsed[""]
    return ExperimentConfig(
        name=top.name or path.stem, path=path, description=top.description, seed=top.seed,
        dataset=parsed["dataset"], split=parsed["split"], engine=parsed["engine"],
        engine_dict=raw.get("engine", {}), replay=parsed["replay"], metrics=parsed["metrics"],
        ablation=parsed["ablation"], references=parsed["references"], tune=parsed["tune"],
        tracking=parsed["tracking"], raw=raw, decision=parsed["decision"],
        fidelity=parsed["fidelity"], counterfactual=parsed["counterfactual"])
