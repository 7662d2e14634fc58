"""The ranking settings beside the six weights, split by what they touch (DESIGN.md,
"Settings split by what they touch").

- Search settings (`touches == "search"`) change what a search finds but record nothing:
  the retrieval settings (seeds, expansion, BFS or PPR), the success sample size (read by
  the success term at search time: MSPR.md 14; `record_feedback` appends the same success
  row whatever it is) and the application's search `limit`. In a `logged` replay (access
  counts from the log) one walk over the timeline scores any number of them at each search
  (`variants.walk`).
- State settings change what the replay records as it goes: the feedback deltas, the cap
  and the floor pinning (`record_feedback`), and decay (`tick_decay`). Each distinct value
  needs a replay of its own.

A setting is named by its ContextKit key (`context_graph.retrieval.expansion_depth`,
`mspr.feedback.boost_delta`, ...); the search limit, which is an argument of
`Memory.search`, not a configuration key, is `search.limit`. Values are checked by the
engine's configuration, whose ranges are the library's (`engine.config`).

`reaching(config, max_limit=...)` is `config` with every setting that cannot reach its
candidate table set to the library's default, so that two configurations whose tables are
equal bit for bit share one key (tests/test_variants.py replays both and compares):
- BFS reads no PPR setting (damping, iterations, tolerance, the undirected walk); PPR reads
  no expansion depth;
- the seeds are min(limit, seed_top_k) (MSPR.md 1 and 6; with the hard role filter the
  limit's hits are filtered, then the first seed_top_k kept): with every search's limit at
  most `max_limit` (and at least 1), a seed_top_k above it finds what `max_limit` does;
- the success sample size is read only by the success term, so not with success off;
- the feedback settings act only through `record_feedback`, which does nothing unless
  MSPR, its feedback block and the context graph are on;
- decay settings act only through the tick on read, which runs only with decay on and
  `tick_on_read`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from msprlab.engine import EngineConfig
from msprlab.engine.config import (
    ConfigError,
    Corrections,
    DecayConfig,
    FeedbackConfig,
    RetrievalConfig,
    SuccessConfig,
)

from ..errors import ExperimentError

__all__ = ["LIMIT", "SETTINGS", "Setting", "reaching", "state_of", "value_of", "with_values"]

Touches = Literal["search", "state"]
LIMIT = "search.limit"  # the application's `Memory.search(limit=...)`: a what-if


@dataclass(frozen=True)
class Setting:
    """One ranking setting: its key, where it sits in `EngineConfig` (`block`, then the
    field `name`; the search limit has no block), the type of its values and what it
    touches."""

    key: str
    block: tuple[str, ...]
    name: str
    kind: type
    touches: Touches

    @property
    def default(self) -> Any:
        """The library's default (the search limit: None, each logged search's own)."""
        return None if not self.block else getattr(_block(EngineConfig(), self.block),
                                                    self.name)


def _setting(key: str, kind: type, touches: Touches) -> Setting:
    *path, name = key.split(".")
    block = {"context_graph.retrieval": ("retrieval",), "context_graph.decay": ("decay",),
             "mspr.feedback": ("mspr", "feedback"),
             "mspr.success": ("mspr", "success")}[".".join(path)]
    return Setting(key, block, name, kind, touches)


SETTINGS: dict[str, Setting] = {s.key: s for s in (
    _setting("context_graph.retrieval.seed_top_k", int, "search"),
    _setting("context_graph.retrieval.expansion_depth", int, "search"),
    _setting("context_graph.retrieval.max_candidates", int, "search"),
    _setting("context_graph.retrieval.edge_weight_floor", float, "search"),
    _setting("context_graph.retrieval.algorithm", str, "search"),
    _setting("context_graph.retrieval.ppr_damping", float, "search"),
    _setting("context_graph.retrieval.ppr_max_iter", int, "search"),
    _setting("context_graph.retrieval.ppr_tolerance", float, "search"),
    _setting("mspr.success.min_sample_size", int, "search"),
    _setting("mspr.feedback.boost_delta", float, "state"),
    _setting("mspr.feedback.penalty_delta", float, "state"),
    _setting("mspr.feedback.max_boost_per_memory", float, "state"),
    _setting("mspr.feedback.pin_floor_on_boost", bool, "state"),
    _setting("context_graph.decay.half_life_days", float, "state"),
    _setting("context_graph.decay.min_edge_weight", float, "state"),
    _setting("context_graph.decay.min_node_relevance", float, "state"),
    Setting(LIMIT, (), "limit", int, "search"),
)}


def _block(config: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        config = getattr(config, name)
    return config


def _replaced(config: Any, path: tuple[str, ...], **values: Any) -> Any:
    """`config` with the block at `path` given `values` (checked as the block is made)."""
    if not path:
        return replace(config, **values)
    head, *rest = path
    return replace(config, **{head: _replaced(getattr(config, head), tuple(rest), **values)})


def value_of(config: EngineConfig, key: str, limit: int | None = None) -> Any:
    """The value of setting `key` in `config` (the search limit: `limit`)."""
    setting = SETTINGS[key]
    return limit if not setting.block else getattr(_block(config, setting.block), setting.name)


def with_values(config: EngineConfig, values: Mapping[str, Any]) -> EngineConfig:
    """`config` with the settings' `values` (the search limit is not part of it); a key
    that is not a setting, or a value the library refuses, is an ExperimentError naming
    the key, the value and the allowed range."""
    for key, value in values.items():
        setting = SETTINGS.get(key)
        if setting is None:
            raise ExperimentError(f"{key!r} is not a ranking setting that can be searched; "
                                  f"known: {', '.join(SETTINGS)}")
        if not setting.block:
            check_limit(value, key)
            continue
        if setting.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        try:
            config = _replaced(config, setting.block, **{setting.name: value})
        except ConfigError as exc:
            raise ExperimentError(str(exc)) from None
    return config


def check_limit(value: Any, key: str = LIMIT) -> int:
    """A search limit: an integer >= 1 (the vector store is asked for that many hits)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ExperimentError(f"{key} must be an integer >= 1 (Memory.search's limit), "
                              f"got {value!r}")
    return value


def state_of(config: EngineConfig) -> EngineConfig:
    """`config` with every search setting at the library's default: two configurations
    with the same `state_of` record the same state in a replay, so one walk scores both."""
    for setting in SETTINGS.values():
        if setting.touches == "search" and setting.block:
            config = _replaced(config, setting.block, **{setting.name: setting.default})
    return config


def reaching(config: EngineConfig, *, max_limit: int | None = None) -> EngineConfig:
    """`config` with every setting that cannot reach its candidate table at the library's
    default (module docstring). `max_limit`: the largest search limit of the replay, when
    every search's limit is at least 1 (None: not known, seed_top_k is kept)."""
    r = config.retrieval
    default = RetrievalConfig()
    corrections = config.corrections
    if r.algorithm == "bfs":
        r = replace(r, ppr_damping=default.ppr_damping, ppr_max_iter=default.ppr_max_iter,
                    ppr_tolerance=default.ppr_tolerance)
        corrections = replace(corrections, ppr_undirected=Corrections().ppr_undirected)
    else:
        r = replace(r, expansion_depth=default.expansion_depth)
    if max_limit is not None and r.seed_top_k > max_limit:
        r = replace(r, seed_top_k=max(1, max_limit))
    mspr = config.mspr
    if not (mspr.enabled and mspr.success.enabled):
        mspr = replace(mspr, success=replace(
            mspr.success, min_sample_size=SuccessConfig().min_sample_size))
    if not (mspr.enabled and mspr.feedback.enabled and config.context_graph_enabled):
        mspr = replace(mspr, feedback=replace(FeedbackConfig(), enabled=mspr.feedback.enabled))
    decay = config.decay
    if not (decay.enabled and decay.tick_on_read):
        decay = replace(DecayConfig(), enabled=decay.enabled, tick_on_read=decay.tick_on_read)
    return replace(config, retrieval=r, mspr=mspr, decay=decay, corrections=corrections)
