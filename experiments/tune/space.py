"""What a study searches and maximises: the search space, the objectives, the trial
function, and the sampler and pruner that search it.

A trial maps Optuna's suggestions to an `Arm` (the searched weights from the trial, the
others from the base arm), scores it on the train scorer with one vectorised
`Scorer.values` call, and returns the mean of each `Objective` over the searches it covers.

- A weight whose signal the experiment's engine config switches off is not searched: it is
  fixed at 0 (`search_space`, `fixed_weights`), and the result's notes and the study say so.
- Samplers are seeded: TPE (Optuna 5 defaults: multivariate for one objective, independent
  for several, constant liar on), CMA-ES (needs the `cmaes` package; one objective) or
  random. A call's sampler seed is derived from `seed`, the number of trials the study
  already holds and the worker index (`workers.Plan.seed`), so a resumed study does not
  replay its first proposals and parallel workers do not propose the same points.
- `pruner="wilcoxon"` (one objective) reports the objective's per-query values as steps:
  the covered searches in a fixed seeded order, cut into `WILCOXON_STEPS` blocks; step k is
  block k's mean, so steps pair across trials and resumes. `trial.should_prune()` runs
  every `PRUNE_EVERY` steps. Blocks, not single queries: every report is one storage write
  and every check re-reads the steps, so one step per query with a check every 200
  (LoCoMo, 3,000 searches) took 10-12 s per trial here (when the journal fsync'ed each
  write), against ~2 ms for the scoring; 32 blocks with a check every 8 add 50-110 ms to a
  trial. Without the pruner a trial writes no intermediate value. The pruner
  saves no scoring (a trial's values come from one vectorised call): it marks trials that
  are worse than the best one as pruned, which TPE then learns from.
"""

from __future__ import annotations

import math
import os
import socket
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import optuna

from msprlab.engine import EngineConfig
from msprlab.engine.batch import INTENTS, WEIGHTS

from ..errors import ExperimentError
from ..measures.metrics import parse_metric
from ..measures.scoring import Arm, Scorer
from .attrs import SAMPLER_ATTR, WORKER_ATTR

SamplerName = Literal["tpe", "cmaes", "random"]
PrunerName = Literal["none", "wilcoxon"]
SAMPLERS: tuple[SamplerName, ...] = ("tpe", "cmaes", "random")
PRUNERS: tuple[PrunerName, ...] = ("none", "wilcoxon")
WILCOXON_STEPS = 32
PRUNE_EVERY = 8
_STEP_ORDER_SEED = 20260105  # fixed: steps must pair across trials, calls and resumes
_LABELS = tuple(label.value for label in INTENTS)


@dataclass(frozen=True)
class SearchSpace:
    """Which weights are searched, each in a range within [0, 1]; `fixed` weights are held
    at 0 in every trial (weight -> why, e.g. "mspr.success off"); the others keep the base
    arm's values. Both stored in `WEIGHTS` order whatever the order given.

    `search_space(ranges, config)` builds one for an engine configuration: it fixes the
    weights whose signal the configuration switches off.

    Everything the study knows of its parameters goes through the space: their ranges
    (checked here), the arm a trial's suggestions make (`suggest`), trial 0's parameters
    (`baseline`, checked against the ranges by `check_base`) and how a finished trial's
    parameters are read back into weights (`weights_of`). A new kind of parameter is added
    in these places."""

    ranges: Mapping[str, tuple[float, float]]
    fixed: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.ranges, Mapping) or not self.ranges:
            raise ExperimentError("SearchSpace: name at least one weight to search "
                                  f"({', '.join(WEIGHTS)}), got {self.ranges!r}")
        if unknown := [name for name in self.ranges if name not in WEIGHTS]:
            raise ExperimentError(f"SearchSpace: unknown weights {unknown}; the weights are "
                                  f"{', '.join(WEIGHTS)}")
        if not isinstance(self.fixed, Mapping) or not all(
                isinstance(why, str) and why for why in self.fixed.values()):
            raise ExperimentError("SearchSpace: fixed must map weights to the reason each is held "
                                  f"at 0, e.g. {{'zeta_success': 'mspr.success off'}}, got "
                                  f"{self.fixed!r}")
        if unknown := [name for name in self.fixed if name not in WEIGHTS]:
            raise ExperimentError(f"SearchSpace: unknown fixed weights {unknown}; the weights are "
                                  f"{', '.join(WEIGHTS)}")
        if both := [name for name in WEIGHTS if name in self.ranges and name in self.fixed]:
            raise ExperimentError(f"SearchSpace: {', '.join(both)} both searched and fixed at 0; "
                                  "leave each out of one of them")
        object.__setattr__(self, "fixed", {name: self.fixed[name] for name in WEIGHTS
                                           if name in self.fixed})
        ordered: dict[str, tuple[float, float]] = {}
        for name in WEIGHTS:
            if name not in self.ranges:
                continue
            given = self.ranges[name]
            if not (isinstance(given, tuple | list) and len(given) == 2
                    and all(is_number(x) for x in given)):
                raise ExperimentError(f"SearchSpace: {name} must be a (low, high) pair of numbers, "
                                      f"got {given!r}")
            low, high = float(given[0]), float(given[1])
            if not 0.0 <= low < high <= 1.0:
                raise ExperimentError(f"SearchSpace: `0 <= low < high <= 1` must hold for {name}, "
                                      f"but got ({low}, {high}); to fix a weight, leave it out of "
                                      "the space (it then keeps the base arm's value)")
            ordered[name] = (low, high)
        object.__setattr__(self, "ranges", ordered)

    @staticmethod
    def unit(names: Sequence[str] = WEIGHTS) -> SearchSpace:
        """Each named weight searched over [0, 1]."""
        return SearchSpace(dict.fromkeys(names, (0.0, 1.0)))

    def as_dict(self) -> dict[str, list[float]]:
        """The searched ranges (the fixed weights are `fixed`)."""
        return {name: [low, high] for name, (low, high) in self.ranges.items()}

    def suggest(self, trial: optuna.Trial, base: Arm) -> Arm:
        """The arm a trial scores: each searched weight suggested in its range, the others
        from `base` (the fixed weights are 0 there: `with_fixed`)."""
        weights = list(base.weights)
        for name, (low, high) in self.ranges.items():
            weights[WEIGHTS.index(name)] = trial.suggest_float(name, low, high)
        return Arm(f"trial {trial.number}", tuple(weights), base.intent, base.roles)

    def baseline(self, base: Arm) -> dict[str, float]:
        """`base`'s value of each searched weight: the parameters of trial 0."""
        return {name: base.weights[WEIGHTS.index(name)] for name in self.ranges}

    def check_base(self, base: Arm) -> None:
        """Refuse a base arm that trial 0 cannot score: a searched value outside its range."""
        for name, (low, high) in self.ranges.items():
            value = base.weights[WEIGHTS.index(name)]
            if not low <= value <= high:
                raise ExperimentError(f"tune: the base arm's {name} = {value} lies outside its "
                                      f"searched range ({low}, {high}), so the baseline cannot "
                                      "be trial 0; widen the range to include it")

    def note(self) -> str | None:
        """"fixed at 0: zeta_success (mspr.success off)", or None when nothing is fixed."""
        if not self.fixed:
            return None
        return "fixed at 0: " + ", ".join(f"{name} ({why})" for name, why in self.fixed.items())


# The switches each new weight's term needs (MSPR.md section 1, step 5, and sections 15, 17).
_SIGNAL_SWITCH = {"epsilon_frequency": "frequency", "delta_personal": "feedback",
                  "zeta_success": "success"}


def fixed_weights(config: EngineConfig) -> dict[str, str]:
    """The new weights whose term `config` keeps at 0 in the library, each with the switch
    that does it, in `WEIGHTS` order.

    - delta_personal: the personal-boost provider is built only when `mspr.enabled` and
      `mspr.feedback.enabled` (MSPR.md 1, step 5.6); without it the term is 0.
    - zeta_success: the success provider needs `mspr.enabled` and `mspr.success.enabled`
      (MSPR.md 1, step 5.7).
    - epsilon_frequency: the term itself is read whenever ε > 0, even with MSPR off
      (MSPR.md 15 and 17, quirk 22), but it reads access counts, and the library counts
      accesses only when `mspr.enabled` and `mspr.frequency.enabled` (step 5.10). A
      `logged` replay takes the counts from the log whatever the switches, so a searched ε
      would score counts that a deployment of this configuration never accumulates (only
      counts restored from a snapshot or bumped by decay-v2 would exist there).

    With `mspr.enabled` false all three are fixed, for "mspr off".
    """
    mspr = config.mspr
    gates = {"frequency": mspr.frequency.enabled, "feedback": mspr.feedback.enabled,
             "success": mspr.success.enabled}
    return {name: "mspr off" if not mspr.enabled else f"mspr.{switch} off"
            for name, switch in _SIGNAL_SWITCH.items()
            if not (mspr.enabled and gates[switch])}


def search_space(ranges: Mapping[str, tuple[float, float]], config: EngineConfig
                 ) -> SearchSpace:
    """`ranges` as a SearchSpace for an experiment replayed with `config`: the weights whose
    signal is off there (`fixed_weights`) are fixed at 0, searched or not."""
    fixed = fixed_weights(config)
    searched = {name: bounds for name, bounds in ranges.items() if name not in fixed}
    if ranges and not searched:
        raise ExperimentError(f"tune: every weight in the search space is fixed at 0 "
                              f"({', '.join(f'{n} ({fixed[n]})' for n in ranges)}); add a weight "
                              "whose signal is on to tune.ranges, or switch its signal on")
    return SearchSpace(searched, fixed=fixed)


COST = "cost"  # the objective: the engine's time per search of a configuration (minimised)


@dataclass(frozen=True)
class Objective:
    """A metric to maximise, averaged over the searches with a relevant memory, optionally
    only those whose intent label (`searches.intent_label`) is `intent`; or `cost` (COST),
    the engine's time per search on a configuration's table, to minimise (a configuration
    search's objective: every weight vector of one table has the same)."""

    metric: str
    intent: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str):
            raise ExperimentError(f"Objective: metric must be a name such as 'ndcg@10', "
                                  f"got {self.metric!r}")
        if self.metric == COST:
            if self.intent is not None:
                raise ExperimentError("Objective: cost is the time of every search; it has "
                                      "no intent")
            return
        object.__setattr__(self, "metric", parse_metric(self.metric).name)  # canonical name
        if self.intent is not None and self.intent not in _LABELS:
            raise ExperimentError(f"Objective: intent must be one of {', '.join(_LABELS)} or None, "
                                  f"got {self.intent!r}")

    @property
    def is_cost(self) -> bool:
        return self.metric == COST

    @property
    def direction(self) -> str:
        """Optuna's direction: a metric is maximised, the cost minimised."""
        return "minimize" if self.is_cost else "maximize"

    def label(self) -> str:
        """The objective's name in results: "ndcg@10", "ndcg@10/intent/FACTUAL", "cost"."""
        if self.is_cost:
            return COST
        return self.metric if self.intent is None else f"{self.metric}/intent/{self.intent}"

    def key(self) -> str:
        """`label` as an MLflow-safe metric key: "ndcg_at_10/intent/FACTUAL",
        "cost_ms_per_search"."""
        if self.is_cost:
            return "cost_ms_per_search"
        key = parse_metric(self.metric).key
        return key if self.intent is None else f"{key}/intent/{self.intent}"


def covered(values: Mapping[str, np.ndarray], objective: Objective,
            labels: np.ndarray) -> np.ndarray:
    """The searches an objective averages over (table order): those with a relevant memory
    (NaN marks the others, whatever the weights), with its intent label if it has one."""
    keep = ~np.isnan(values[objective.metric])
    if objective.intent is not None:
        keep &= labels == objective.intent
    return np.flatnonzero(keep)


def objective_means(values: Mapping[str, np.ndarray], objectives: Sequence[Objective],
                    labels: np.ndarray) -> tuple[float, ...]:
    """Each metric objective's value as a trial computes it: its mean over the searches it
    covers (`covered`). `msprlab score` calls this too, so it gives a trial's value."""
    return tuple(float(values[o.metric][covered(values, o, labels)].mean())
                 for o in objectives)


@dataclass(frozen=True, eq=False)
class TrialFunction:
    """The trial function (picklable, so spawned workers get it by value)."""

    scorer: Scorer
    base: Arm
    space: SearchSpace
    metrics: tuple[str, ...]          # metric name of each objective
    covered: tuple[np.ndarray, ...]   # searches each objective averages over
    steps: tuple[np.ndarray, ...] | None  # Wilcoxon blocks of searches, in step order
    sampler: SamplerName = "tpe"      # recorded on each trial

    def __call__(self, trial: optuna.Trial) -> float | tuple[float, ...]:
        trial.set_user_attr(SAMPLER_ATTR, self.sampler)  # first: failed trials record it too
        trial.set_user_attr(WORKER_ATTR, f"{socket.gethostname()}:{os.getpid()}")
        values = self.scorer.values(self.space.suggest(trial, self.base))
        means = tuple(float(values[m][rows].mean())
                      for m, rows in zip(self.metrics, self.covered, strict=True))
        if self.steps is not None:
            column = values[self.metrics[0]]
            for step, rows in enumerate(self.steps):
                trial.report(float(column[rows].mean()), step)
                if (step + 1) % PRUNE_EVERY == 0 and step + 1 < len(self.steps) \
                        and trial.should_prune():
                    raise optuna.TrialPruned()
        return means[0] if len(means) == 1 else means


def weights_of(params: Mapping[str, Any], base: Arm) -> tuple[float, ...]:
    """The six weights of a trial whose parameters are `params` (`suggest`'s inverse): the
    searched ones from `params`, the others `base`'s."""
    return tuple(float(params.get(name, value))
                 for name, value in base.named_weights._asdict().items())


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(float(value))


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def with_fixed(base: Arm, space: SearchSpace) -> Arm:
    """`base` with the space's fixed weights at 0."""
    if not space.fixed:
        return base
    return replace(base, weights=tuple(0.0 if name in space.fixed else value
                                       for name, value in base.named_weights._asdict().items()))


def trial_function(train: Scorer, base: Arm, space: SearchSpace,
                   objectives: tuple[Objective, ...], *, pruner: str,
                   sampler: SamplerName = "tpe") -> TrialFunction:
    """Which searches each objective averages over (fixed: NaN marks a search without a
    relevant memory, whatever the weights) and, for the pruner, the step blocks."""
    computed = [m.name for m in train.metrics]
    for o in objectives:
        if o.metric not in computed and not o.is_cost:
            raise ExperimentError(f"tune: objective {o.label()!r} needs the scorer to compute "
                                  f"{o.metric}, but it computes {', '.join(computed)}; build it "
                                  f"with Scorer.of(table, [..., parse_metric({o.metric!r})])")
    if any(o.is_cost for o in objectives):
        raise ExperimentError("tune: the objective 'cost' is the engine's time per search of "
                              "a configuration; a weights-only study scores one table, whose "
                              "cost every trial shares: search settings beside the weights "
                              "(tune.settings) to trade quality against it")
    values = train.values(base)  # also refuses a table bound to other weights
    labels = train.table.searches["intent_label"].to_numpy()
    rows = []
    for o in objectives:
        keep = covered(values, o, labels)
        if not keep.size:
            counts = dict(zip(*np.unique(labels[~np.isnan(values[o.metric])],
                                         return_counts=True), strict=True))
            raise ExperimentError(f"tune: objective {o.label()!r} covers no train search with a "
                                  f"relevant memory; searches with one, by intent label: "
                                  f"{ {str(k): int(v) for k, v in counts.items()} }")
        rows.append(keep)
    steps = None
    if pruner == "wilcoxon":
        order = np.random.default_rng(_STEP_ORDER_SEED).permutation(rows[0])
        steps = tuple(np.array_split(order, min(WILCOXON_STEPS, order.size)))
    return TrialFunction(train, base, space, tuple(o.metric for o in objectives),
                         tuple(rows), steps, sampler)


def make_sampler(name: SamplerName, seed: tuple[int, ...]) -> optuna.samplers.BaseSampler:
    derived = int(np.random.SeedSequence(list(seed)).generate_state(1)[0])
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=derived)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=derived)
    return optuna.samplers.RandomSampler(seed=derived)


def make_pruner(name: PrunerName) -> optuna.pruners.BasePruner:
    if name == "none":
        return optuna.pruners.NopPruner()
    with warnings.catch_warnings():  # experimental since 3.6; chosen knowingly
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.pruners.WilcoxonPruner()
