"""The ranking settings a configuration search explores beside the weights (`[tune.settings]`).

A definition names each searched setting by its key (`variants.settings.SETTINGS`) with
the values to try:

    [tune.settings]
    "context_graph.retrieval.expansion_depth" = [1, 3]               # integers low..high
    "context_graph.retrieval.max_candidates" = { low = 25, high = 200, step = 25 }
    "context_graph.retrieval.edge_weight_floor" = { low = 0.0, high = 0.2, step = 0.05 }
    "context_graph.retrieval.algorithm" = ["bfs", "ppr"]            # choices
    "search.limit" = { choices = [10, 20] }

An integer setting takes `[low, high]` (every integer between) or `{ low, high, step }`; a
float setting `{ low, high, step }` (a grid: trials meet the tables of earlier ones, which
a continuous range would never let them) or `{ choices = [...] }`; a text or true/false
setting a list of choices. Every value must be one the library accepts (the engine's
configuration checks it, naming the key and the range), the configured value (`[engine]`,
or the library's default) must be one of the values searched (the search starts from it),
and a setting must be able to act in the experiment's configuration: a feedback setting
needs `mspr.feedback`, the success sample size `mspr.success`, a decay setting decay with
its tick on read, a PPR setting PPR among the algorithms, the depth BFS among them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from msprlab.engine import EngineConfig

from ..errors import ExperimentError
from .settings import LIMIT, SETTINGS, value_of, with_values
from .tables import Point

__all__ = ["SettingRange", "SettingsSpace", "parse_settings", "setting_value"]

_ALGORITHM = "context_graph.retrieval.algorithm"


@dataclass(frozen=True)
class SettingRange:
    """The values one setting takes: `choices`, or `low`..`high` by `step`."""

    key: str
    choices: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0
    step: float = 1.0

    @property
    def integer(self) -> bool:
        return SETTINGS[self.key].kind is int

    def values(self) -> list[Any]:
        """Every value searched, in order."""
        if self.choices:
            return list(self.choices)
        count = round((self.high - self.low) / self.step) + 1
        if self.integer:
            return [int(self.low) + i * int(self.step) for i in range(count)]
        return [_grid(self.low + i * self.step) for i in range(count)]

    def suggest(self, trial: Any) -> Any:
        """The trial's value (Optuna's parameter named by the key)."""
        if self.choices:
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.integer:
            return trial.suggest_int(self.key, int(self.low), int(self.high),
                                     step=int(self.step))
        return _grid(trial.suggest_float(self.key, self.low, self.high, step=self.step))

    def as_dict(self) -> dict[str, Any]:
        if self.choices:
            return {"choices": list(self.choices)}
        return {"low": self.low, "high": self.high, "step": self.step}


def _grid(value: float) -> float:
    """A grid value rounded to 12 significant digits: low + i * step lands a few ulps off
    the decimal the definition meant (0.1 + 2 * 0.05), and the table key must not care."""
    return float(f"{value:.12g}")


def setting_value(key: str, value: Any) -> Any:
    """A searched setting's value as its point takes it: a float on its grid (a trial's
    parameter, as Optuna stores it, may be a few ulps off: 0.15000000000000002)."""
    return _grid(value) if SETTINGS[key].kind is float and value is not None else value


@dataclass(frozen=True)
class SettingsSpace:
    """The searched settings (in `SETTINGS` order) over a base configuration: the
    experiment's, whose other settings every point keeps."""

    ranges: Mapping[str, SettingRange]

    @property
    def keys(self) -> list[str]:
        return list(self.ranges)

    def state_keys(self) -> list[str]:
        """The searched settings that change the recorded state (each value a replay)."""
        return [k for k in self.ranges if SETTINGS[k].touches == "state"]

    def point(self, base: EngineConfig, values: Mapping[str, Any],
              limit: int | None = None) -> Point:
        """The configuration point of `values` (the others from `base`; the limit from
        `values`, else `limit`)."""
        settings = {k: v for k, v in values.items() if k != LIMIT}
        return Point(with_values(base, settings), values.get(LIMIT, limit))

    def base_values(self, base: EngineConfig, limit: int | None) -> dict[str, Any]:
        """The configured value of each searched setting (the search's starting point)."""
        return {k: value_of(base, k, limit) for k in self.ranges}

    def as_dict(self) -> dict[str, Any]:
        return {k: r.as_dict() for k, r in self.ranges.items()}

    def draw(self, rng: Any, *, fixed: Mapping[str, Any] | None = None,
             avoid: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """Each setting's value drawn uniformly from its values (those in `fixed` kept),
        another draw while the result is one of `avoid` (at most 100 tries)."""
        fixed = dict(fixed or {})
        values: dict[str, Any] = {}
        for _ in range(100):
            values = {k: fixed[k] if k in fixed else
                      r.values()[int(rng.integers(len(r.values())))]
                      for k, r in self.ranges.items()}
            if values not in list(avoid):
                break
        return values

    def notes(self, base: EngineConfig, limit: int | None) -> list[str]:
        """What the reader should know about the space."""
        out = []
        seeds = self.ranges.get("context_graph.retrieval.seed_top_k")
        limits = self.ranges.get(LIMIT)
        top = max(limits.values()) if limits else limit
        if seeds is not None and top is not None and max(seeds.values()) > top:
            out.append(f"seeds are min(limit, seed_top_k): seed_top_k above {top} finds no "
                       "more seeds than the search limit asks for (those points share a table)")
        if limits is None and limit is None and seeds is not None:
            out.append("seeds are min(limit, seed_top_k): each search keeps its logged limit "
                       "(search.limit is not searched)")
        return out


def parse_settings(raw: Mapping[str, Any], base: EngineConfig, *,
                   limit: int | None) -> SettingsSpace:
    """`[tune.settings]` as a SettingsSpace over `base` (the experiment's engine
    configuration; `limit`: `replay.limit`, None for each logged search's own); anything
    the library or the replay could not take is an ExperimentError naming the key."""
    ranges: dict[str, SettingRange] = {}
    for key, given in raw.items():
        where = f"tune.settings.{key!r}"
        if key not in SETTINGS:
            raise ExperimentError(f"{where}: not a ranking setting that can be searched; "
                                  f"known: {', '.join(SETTINGS)}")
        ranges[key] = _range(key, given, where)
    ordered = {k: ranges[k] for k in SETTINGS if k in ranges}
    space = SettingsSpace(ordered)
    for key, r in ordered.items():
        for value in r.values():
            try:
                with_values(base, {key: value})
            except ExperimentError as exc:
                raise ExperimentError(f"tune.settings.{key!r}: {exc}") from None
        configured = value_of(base, key, limit)
        if configured is None:  # the limit: each logged search's own
            raise ExperimentError(f"tune.settings.{key!r}: the search limit is searched, so the "
                                  "replay needs one to start from: set replay.limit to one "
                                  f"of {r.values()}")
        if not any(_same(configured, v) for v in r.values()):
            raise ExperimentError(
                f"tune.settings.{key!r}: the configured value {configured!r} is not among the "
                f"values searched {r.values()}, so the search cannot start from the "
                "experiment's configuration; widen the range (or its grid) to hold it")
    _reaches(space, base)
    return space


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, int | float) and isinstance(b, int | float) and math.isclose(
            a, b, rel_tol=1e-12, abs_tol=1e-12)
    return bool(a == b and type(a) is type(b))


def _range(key: str, given: Any, where: str) -> SettingRange:
    kind = SETTINGS[key].kind
    if isinstance(given, list):
        if kind is int and len(given) == 2 and all(_is_int(v) for v in given):
            given = {"low": given[0], "high": given[1]}
        elif kind in (str, bool):
            given = {"choices": given}
        else:
            raise ExperimentError(
                f"{where}: expected [low, high] (integers) or a table "
                f"{{ low, high, step }} or {{ choices = [...] }}, got {given!r}"
                + ("; a float setting is searched on a grid, so trials meet the tables of "
                   "earlier ones: give { low = ..., high = ..., step = ... }"
                   if kind is float else ""))
    if not isinstance(given, dict):
        raise ExperimentError(f"{where}: expected a list or a table, got {given!r}")
    unknown = sorted(set(given) - {"low", "high", "step", "choices"})
    if unknown:
        raise ExperimentError(f"{where}: unknown key {unknown[0]!r}; known: low, high, step, "
                              "choices")
    if "choices" in given:
        if set(given) != {"choices"}:
            raise ExperimentError(f"{where}: give either choices or low/high/step, not both")
        choices = given["choices"]
        if not (isinstance(choices, list) and choices):
            raise ExperimentError(f"{where}: choices must be a non-empty list, got {choices!r}")
        for value in choices:
            if not _of_kind(value, kind):
                raise ExperimentError(f"{where}: choice {value!r} is not {_kind_name(kind)}")
        if len(set(map(repr, choices))) != len(choices):
            raise ExperimentError(f"{where}: choices {choices!r} name a value twice")
        if kind is float:
            choices = [float(v) for v in choices]
        return SettingRange(key, choices=tuple(choices))
    if kind not in (int, float):
        raise ExperimentError(f"{where}: a {_kind_name(kind)} setting takes a list of choices")
    if "low" not in given or "high" not in given:
        raise ExperimentError(f"{where}: give low and high (and step)")
    if "step" not in given and kind is float:
        raise ExperimentError(f"{where}: a float setting is searched on a grid, so trials "
                              "meet the tables of earlier ones: add step = ...")
    low, high, step = given["low"], given["high"], given.get("step", 1)
    check = _is_int if kind is int else _is_number
    if not all(check(v) for v in (low, high, step)):
        raise ExperimentError(f"{where}: low, high and step must be {_kind_name(kind)}s, got "
                              f"{low!r}, {high!r}, {step!r}")
    if not (low < high and step > 0):
        raise ExperimentError(f"{where}: `low < high` and `step > 0` must hold, got low {low!r}, "
                              f"high {high!r}, step {step!r}")
    steps = (high - low) / step
    if abs(steps - round(steps)) > 1e-9:
        raise ExperimentError(f"{where}: high - low must be a whole number of steps, got low "
                              f"{low!r}, high {high!r}, step {step!r}")
    return SettingRange(key, low=float(low), high=float(high), step=float(step))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(float(value)))


def _of_kind(value: object, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return _is_int(value)
    if kind is float:
        return _is_number(value)
    return isinstance(value, str)


def _kind_name(kind: type) -> str:
    return {int: "an integer", float: "a number", str: "a text", bool: "true or false"}[kind]


def _reaches(space: SettingsSpace, base: EngineConfig) -> None:
    """Every searched setting can act in `base` with some searched algorithm, else the
    definition is refused naming it (it would only replay identical tables)."""
    algorithms = set(space.ranges[_ALGORITHM].values()) if _ALGORITHM in space.ranges else {
        base.retrieval.algorithm}
    mspr = base.mspr
    why: dict[str, str | None] = {
        "context_graph.retrieval.expansion_depth":
            None if "bfs" in algorithms else "the algorithm is PPR, which has no depth",
        "mspr.success.min_sample_size":
            None if mspr.enabled and mspr.success.enabled else "mspr.success is off",
    }
    for name in ("ppr_damping", "ppr_max_iter", "ppr_tolerance"):
        why[f"context_graph.retrieval.{name}"] = (
            None if "ppr" in algorithms else "the algorithm is BFS, which reads no PPR setting")
    feedback_on = mspr.enabled and mspr.feedback.enabled and base.context_graph_enabled
    decay_on = base.decay.enabled and base.decay.tick_on_read
    for key, setting in SETTINGS.items():
        if setting.block == ("mspr", "feedback"):
            why[key] = None if feedback_on else "mspr.feedback is off"
        elif setting.block == ("decay",):
            why[key] = None if decay_on else "decay (or its tick on read) is off"
    for key in space.ranges:
        if why.get(key):
            raise ExperimentError(f"tune.settings.{key!r} cannot act in this experiment: "
                                  f"{why[key]} in [engine]; remove it or switch that on")

