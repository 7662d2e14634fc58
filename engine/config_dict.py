"""Read a ContextKit configuration dictionary (the one `Memory.from_config` takes).

Ranking keys (`context_graph.*`, `mspr.*`) become an `EngineConfig`; msprlab's own switches
live under `msprlab.corrections.*`. Keys that ContextKit knows but that do not touch ranking
(vector store, LLM, edge-LLM settings, ...) are accepted and ignored, and listed by
`ignored_keys`; any other key is an error naming it and the keys allowed there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from .config import (
    ConfigError,
    Corrections,
    DecayConfig,
    EdgesConfig,
    EngineConfig,
    FeedbackConfig,
    FrequencyConfig,
    IntentConfig,
    MsprConfig,
    RetrievalConfig,
    RoleConfig,
    SuccessConfig,
)

# ContextKit keys that exist in 0.1.4 but have no effect on the ranking path.
_OTHER_TOP_LEVEL = frozenset({
    "vector_store", "llm", "embedder", "history_db_path", "graph_store", "tcmgm", "version",
    "custom_fact_extraction_prompt", "custom_update_memory_prompt", "ppmf", "chunking",
    "tenant", "decay_v2", "state_store"})
_OTHER_CONTEXT_GRAPH = frozenset({"backend", "persist_path", "log_changes"})
_OTHER_EDGES = frozenset({"use_llm_inference", "llm"})
# Fields the library declares but never reads (MSPR.md quirk 39): accepted, validated, unused.
_UNUSED = {
    "mspr.frequency": {"epsilon_weight", "normalise"},
    "mspr.role": {"tenant_field", "role_field"},
    "mspr.success": {"zeta_weight", "query_hash_algo", "sqlite_path"},
    "mspr.feedback": {"sqlite_path"},
}


def _mapping(path: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path} must be a table of keys, got {value!r}")
    return value


def _build(cls: Any, path: str, raw: object, *, nested: Mapping[str, Any] | None = None,
           other: frozenset[str] = frozenset(), ignored: list[str] | None = None) -> Any:
    """Construct a config dataclass from a mapping, rejecting unknown keys by name."""
    data = _mapping(path, raw)
    own = {f.name for f in fields(cls)} - set(nested or {})
    unused = _UNUSED.get(path, set())
    allowed = own | set(nested or {}) | other | unused
    for key in data:
        if key not in allowed:
            raise ConfigError(
                f"unknown key {path}.{key}; allowed keys at {path}: {', '.join(sorted(allowed))}")
    kwargs = {k: v for k, v in data.items() if k in own}
    for key, build in (nested or {}).items():
        if key in data:
            kwargs[key] = build(f"{path}.{key}", data[key])
    if ignored is not None:
        ignored.extend(f"{path}.{k}" for k in data if k in other or k in unused)
    return cls(**kwargs)


def config_from_dict(raw: Mapping[str, Any], *, ignored: list[str] | None = None) -> EngineConfig:
    """An EngineConfig from a ContextKit config dict; `ignored` collects non-ranking keys."""
    allowed_top = {"context_graph", "mspr", "msprlab"} | _OTHER_TOP_LEVEL
    for key in _mapping("config", raw):
        if key not in allowed_top:
            raise ConfigError(
                f"unknown key {key}; allowed top-level keys: {', '.join(sorted(allowed_top))}")
    if ignored is not None:
        ignored.extend(sorted(k for k in raw if k in _OTHER_TOP_LEVEL))

    def sub(cls: Any, **kw: Any) -> Any:
        return lambda path, value: _build(cls, path, value, ignored=ignored, **kw)

    graph = _mapping("context_graph", raw.get("context_graph", {}))
    mspr = _build(MsprConfig, "mspr", raw.get("mspr", {}), ignored=ignored, nested={
        "intent": sub(IntentConfig), "feedback": sub(FeedbackConfig),
        "frequency": sub(FrequencyConfig), "role": sub(RoleConfig),
        "success": sub(SuccessConfig)})
    allowed_graph = {"enabled", "retrieval", "decay", "edges"} | _OTHER_CONTEXT_GRAPH
    for key in graph:
        if key not in allowed_graph:
            raise ConfigError(f"unknown key context_graph.{key}; allowed keys at "
                              f"context_graph: {', '.join(sorted(allowed_graph))}")
    if ignored is not None:
        ignored.extend(f"context_graph.{k}" for k in graph if k in _OTHER_CONTEXT_GRAPH)
    corrections_raw = _mapping("msprlab", raw.get("msprlab", {}))
    for key in corrections_raw:
        if key != "corrections":
            raise ConfigError(f"unknown key msprlab.{key}; allowed keys at msprlab: corrections")
    return EngineConfig(
        context_graph_enabled=graph.get("enabled", False),  # off unless asked, as in ContextKit
        retrieval=_build(RetrievalConfig, "context_graph.retrieval", graph.get("retrieval", {}),
                         ignored=ignored),
        decay=_build(DecayConfig, "context_graph.decay", graph.get("decay", {}),
                     ignored=ignored),
        edges=_build(EdgesConfig, "context_graph.edges", graph.get("edges", {}),
                     other=_OTHER_EDGES, ignored=ignored),
        mspr=mspr,
        corrections=_build(Corrections, "msprlab.corrections",
                           corrections_raw.get("corrections", {}), ignored=ignored),
    )
