"""Typed engine configuration, mirroring ContextKit's configuration tree (MSPR.md section 3).

Defaults are the library's. Ranges are checked on construction, so an invalid value fails
where it is made, naming the ContextKit key, the value and the allowed range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Literal, NamedTuple

Algorithm = Literal["bfs", "ppr"]
IntentStrategy = Literal["regex", "llm", "hybrid"]
PolicyName = Literal["none", "tenant", "role_scope", "composite", "allow_all"]


class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type or out of range."""


def _check_number(key: str, value: object, low: float, high: float, *,
                  low_open: bool = False, high_open: bool = False,
                  integer: bool = False) -> None:
    kind = "an integer" if integer else "a number"
    ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok_type:
        raise ConfigError(f"{key} must be {kind}, got {value!r}")
    number = float(value)  # type: ignore[arg-type]
    if math.isnan(number):
        raise ConfigError(f"{key} must be {kind}, got {value!r}")
    too_low = number <= low if low_open else number < low
    too_high = number >= high if high_open else number > high
    if too_low or too_high:
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        shown_high = "inf" if math.isinf(high) else f"{high:g}"
        raise ConfigError(
            f"{key} must be in {lo}{low:g}, {shown_high}{hi}, got {value!r}")


def _check_choice(key: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{key} must be one of {', '.join(map(repr, choices))}, got {value!r}")


def _check_bool(key: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, got {value!r}")


UNIT = (0.0, 1.0)


class Weights(NamedTuple):
    """The six MSPR weights, by their `RetrievalConfig` field names, in the order the score
    adds their terms (MSPR.md 10.5): every weight vector in msprlab is laid out in this
    order. A tuple, so it goes wherever a weight vector goes; `_asdict()` names them."""

    alpha_dense: float
    beta_bm25: float
    gamma_graph: float
    epsilon_frequency: float
    delta_personal: float
    zeta_success: float


WEIGHTS = Weights._fields  # the names, in that order


@dataclass(frozen=True, slots=True)
class RetrievalConfig:
    """`context_graph.retrieval.*`: seeds, expansion and the six ranking weights."""

    enabled: bool = True
    seed_top_k: int = 10
    expansion_depth: int = 2
    max_candidates: int = 50
    edge_weight_floor: float = 0.1
    alpha_dense: float = 0.55
    beta_bm25: float = 0.15
    gamma_graph: float = 0.30
    algorithm: Algorithm = "bfs"
    ppr_damping: float = 0.85
    ppr_max_iter: int = 200
    ppr_tolerance: float = 1e-6
    delta_personal: float = 0.0
    epsilon_frequency: float = 0.0
    zeta_success: float = 0.0

    def __post_init__(self) -> None:
        p = "context_graph.retrieval."
        _check_bool(p + "enabled", self.enabled)
        _check_number(p + "seed_top_k", self.seed_top_k, 1, 100, integer=True)
        _check_number(p + "expansion_depth", self.expansion_depth, 0, 4, integer=True)
        _check_number(p + "max_candidates", self.max_candidates, 1, 500, integer=True)
        for name in ("edge_weight_floor", *WEIGHTS):
            _check_number(p + name, getattr(self, name), *UNIT)
        _check_choice(p + "algorithm", self.algorithm, ("bfs", "ppr"))
        _check_number(p + "ppr_damping", self.ppr_damping, 0.0, 1.0,
                      low_open=True, high_open=True)
        _check_number(p + "ppr_max_iter", self.ppr_max_iter, 5, 500, integer=True)
        _check_number(p + "ppr_tolerance", self.ppr_tolerance, 0.0, math.inf, low_open=True)


@dataclass(frozen=True, slots=True)
class DecayConfig:
    """`context_graph.decay.*`."""

    enabled: bool = True
    half_life_days: float = 30.0
    min_edge_weight: float = 0.05
    min_node_relevance: float = 0.02
    tick_on_read: bool = True

    def __post_init__(self) -> None:
        p = "context_graph.decay."
        _check_bool(p + "enabled", self.enabled)
        _check_bool(p + "tick_on_read", self.tick_on_read)
        _check_number(p + "half_life_days", self.half_life_days, 0.0, math.inf, low_open=True)
        _check_number(p + "min_edge_weight", self.min_edge_weight, *UNIT)
        _check_number(p + "min_node_relevance", self.min_node_relevance, *UNIT)


@dataclass(frozen=True, slots=True)
class EdgesConfig:
    """`context_graph.edges.*` (edge synthesis, MSPR.md section 4; LLM edges are not modelled)."""

    enable_reply_to: bool = True
    enable_topic_similar: bool = True
    enable_document_link: bool = True
    enable_temporal_next: bool = True
    topic_top_k: int = 5
    topic_min_similarity: float = 0.75
    reply_to_window_seconds: int = 1800

    def __post_init__(self) -> None:
        p = "context_graph.edges."
        for name in ("enable_reply_to", "enable_topic_similar", "enable_document_link",
                     "enable_temporal_next"):
            _check_bool(p + name, getattr(self, name))
        _check_number(p + "topic_top_k", self.topic_top_k, 1, 50, integer=True)
        _check_number(p + "topic_min_similarity", self.topic_min_similarity, *UNIT)
        _check_number(p + "reply_to_window_seconds", self.reply_to_window_seconds, 1, math.inf,
                      integer=True)


@dataclass(frozen=True, slots=True)
class FeedbackConfig:
    """`mspr.feedback.*`."""

    enabled: bool = False
    boost_delta: float = 0.15
    penalty_delta: float = 0.10
    max_boost_per_memory: float = 0.60
    pin_floor_on_boost: bool = True

    def __post_init__(self) -> None:
        p = "mspr.feedback."
        _check_bool(p + "enabled", self.enabled)
        _check_bool(p + "pin_floor_on_boost", self.pin_floor_on_boost)
        for name in ("boost_delta", "penalty_delta", "max_boost_per_memory"):
            _check_number(p + name, getattr(self, name), *UNIT)


@dataclass(frozen=True, slots=True)
class FrequencyConfig:
    """`mspr.frequency.*`. Only `enabled` (access counting) has an effect in the library."""

    enabled: bool = False

    def __post_init__(self) -> None:
        _check_bool("mspr.frequency.enabled", self.enabled)


@dataclass(frozen=True, slots=True)
class SuccessConfig:
    """`mspr.success.*`."""

    enabled: bool = False
    min_sample_size: int = 3

    def __post_init__(self) -> None:
        _check_bool("mspr.success.enabled", self.enabled)
        _check_number("mspr.success.min_sample_size", self.min_sample_size, 1, math.inf,
                      integer=True)


@dataclass(frozen=True, slots=True)
class IntentConfig:
    """`mspr.intent.*`."""

    enabled: bool = False
    strategy: IntentStrategy = "regex"
    llm_timeout_seconds: float = 2.0
    cache_size: int = 1024
    enable_regex_fastpath: bool = True

    def __post_init__(self) -> None:
        p = "mspr.intent."
        _check_bool(p + "enabled", self.enabled)
        _check_bool(p + "enable_regex_fastpath", self.enable_regex_fastpath)
        _check_choice(p + "strategy", self.strategy, ("regex", "llm", "hybrid"))
        _check_number(p + "llm_timeout_seconds", self.llm_timeout_seconds, 0.0, math.inf,
                      low_open=True)
        _check_number(p + "cache_size", self.cache_size, 0, math.inf, integer=True)


@dataclass(frozen=True, slots=True)
class RoleConfig:
    """`mspr.role.*`. A policy must also be installed for roles to act (MSPR.md section 12)."""

    enabled: bool = False
    hard_filter: bool = True

    def __post_init__(self) -> None:
        _check_bool("mspr.role.enabled", self.enabled)
        _check_bool("mspr.role.hard_filter", self.hard_filter)


@dataclass(frozen=True, slots=True)
class MsprConfig:
    """`mspr.*`: the master switch and one block per signal."""

    enabled: bool = False
    intent: IntentConfig = field(default_factory=IntentConfig)
    feedback: FeedbackConfig = field(default_factory=FeedbackConfig)
    frequency: FrequencyConfig = field(default_factory=FrequencyConfig)
    role: RoleConfig = field(default_factory=RoleConfig)
    success: SuccessConfig = field(default_factory=SuccessConfig)

    def __post_init__(self) -> None:
        _check_bool("mspr.enabled", self.enabled)


@dataclass(frozen=True, slots=True)
class Corrections:
    """Fixes for library quirks (MSPR.md section 18). All off by default: compat mode.

    personal_boost_user_scoped: the personal term sums only the searching user's verdicts
        (quirk 1: the library sums every user's).
    strict_role_isolation: role policies also filter graph neighbours, which are judged on
        their full stored payload (quirks 12 and 13: the library filters seeds only).
    apply_edge_type_priors: the intent's declared edge-type priors multiply edge weights
        during BFS expansion, clamped to [0, 1] (quirk 9: declared but never read).
    idempotent_backfill: backfill_mspr adds a success row only for feedback rows that do not
        have one yet (quirk 7: every run duplicates all rows).
    ppr_undirected: PPR walks each edge in both directions, like BFS (quirk 27).
    """

    personal_boost_user_scoped: bool = False
    strict_role_isolation: bool = False
    apply_edge_type_priors: bool = False
    idempotent_backfill: bool = False
    ppr_undirected: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            _check_bool(f"msprlab.corrections.{f.name}", getattr(self, f.name))


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything the engine reads. `context_graph.enabled` is the CGL master switch."""

    context_graph_enabled: bool = True
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    decay: DecayConfig = field(default_factory=DecayConfig)
    edges: EdgesConfig = field(default_factory=EdgesConfig)
    mspr: MsprConfig = field(default_factory=MsprConfig)
    corrections: Corrections = field(default_factory=Corrections)

    def __post_init__(self) -> None:
        _check_bool("context_graph.enabled", self.context_graph_enabled)


def as_dict(obj: Any) -> dict[str, Any]:
    """Nested plain-dict view of a config dataclass (for logging and hashing)."""
    out: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        out[f.name] = as_dict(value) if hasattr(value, "__dataclass_fields__") else value
    return out
