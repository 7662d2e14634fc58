"""Run a scenario (SCENARIOS.md) through the ContextKit library itself: the parity oracle.

The library's own `Memory` does all the work, driven through its public calls:
`Memory.from_config`, `ContextGraph.upsert_memory_node` / `upsert_edge`,
`Memory.set_role_policy`, `Memory.search` and `Memory.record_feedback`. Two pieces are
stood in for, because a scenario pins them down: the embedder (it returns the search
event's `query_embedding`) and the vector store (it returns the event's `seeds`
verbatim, and resolves a memory id to its payload).

While a scenario runs, the library's clock is frozen at scenario time and its PostHog
client class is replaced by an inert one; see `standins` for what is swapped
and why. The swaps are process-global: run scenarios one at a time per process (use
processes, not threads, to run them in parallel).

Example (needs the `parity` extra)::

    output = run_scenario_with_contextkit(json.loads(Path("scn.json").read_text()))
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.metadata
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from hashlib import md5
from pathlib import Path
from types import ModuleType
from typing import Any

from .standins import (
    STORE_DIMS,
    Clock,
    ScenarioEmbedder,
    ScenarioVectorStore,
    SwallowedLog,
    library_session,
    parse_time,
)

__all__ = ["OUTPUT_FORMAT", "SCENARIO_FORMAT", "run_scenario_with_contextkit"]

SCENARIO_FORMAT = "ck-mspr-scenario/1"
OUTPUT_FORMAT = "ck-mspr-oracle-output/1"
SIGNALS = ("dense", "lexical", "graph", "frequency", "personal", "success")
DEFAULT_NOW = "2024-01-01T00:00:00"
POLICIES = ("none", "tenant", "role_scope", "composite", "allow_all")
# Keys of config.mspr.role that choose the adapter's policy object, not library config.
_POLICY_KEYS = ("policy", "treat_global_as_visible", "treat_unrestricted_as_visible")


@dataclass(frozen=True)
class _Library:
    """The library modules the adapter touches, imported once."""

    main: ModuleType
    facade: ModuleType
    backends: ModuleType
    telemetry: ModuleType
    types: ModuleType
    role: ModuleType


@functools.cache
def _library() -> _Library:
    # Telemetry reads its switch at import time, and the library writes its home folder at
    # import time, so both must be set before the first import.
    os.environ.setdefault("OUTHAD_CONTEXTKIT_TELEMETRY", "false")
    os.environ.setdefault(
        "OUTHAD_CONTEXTKIT_DIR", str(Path(tempfile.gettempdir()) / "msprlab-contextkit-home")
    )
    try:
        def load(name: str) -> ModuleType:
            return importlib.import_module(f"outhad_contextkit.{name}")

        lib = _Library(
            main=load("memory.main"),
            facade=load("memory.context_graph.facade"),
            backends=load("memory.context_graph.backends"),
            telemetry=load("memory.telemetry"),
            types=load("memory.context_graph.types"),
            role=load("memory.personalized.role"),
        )
    except ImportError as exc:
        raise ImportError(
            "the ContextKit adapter needs the library: pip install 'msprlab[parity]' "
            "(outhad-contextkitai==0.1.4, networkx, scipy)"
        ) from exc
    # If something imported the library earlier with telemetry on, nothing is sent either:
    # during a run every event's PostHog client is the inert stand-in (library_session).
    return lib


def _given(mapping: dict[str, Any], key: str, default: Any) -> Any:
    """A scenario field; missing or null means the SCENARIOS.md default."""
    value = mapping.get(key)
    return default if value is None else value


# ---- building the memory -------------------------------------------------------------


def _memory_config(config: dict[str, Any], workdir: Path, client: Any) -> dict[str, Any]:
    """The scenario config as a `Memory.from_config` dict, every store inside `workdir`."""
    mspr = copy.deepcopy(_given(config, "mspr", {}))
    intent = _given(mspr, "intent", {})
    if _given(intent, "strategy", "regex") != "regex":
        raise ValueError(
            f"config.mspr.intent.strategy must be 'regex', got {intent['strategy']!r}: "
            "the other strategies ask an LLM, which a scenario cannot describe"
        )
    role = _given(mspr, "role", {})
    mspr["role"] = {k: v for k, v in role.items() if k not in _POLICY_KEYS}
    mspr["feedback"] = {**_given(mspr, "feedback", {}), "sqlite_path": str(workdir / "feedback.db")}
    mspr["success"] = {**_given(mspr, "success", {}), "sqlite_path": str(workdir / "success.db")}
    return {
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "client": client, "collection_name": "msprlab",
                "embedding_model_dims": STORE_DIMS,
            },
        },
        # Built by the library and replaced by the stand-in right after; the key is never sent.
        "embedder": {"provider": "openai", "config": {"api_key": "unused"}},
        "llm": {"provider": "openai", "config": {"api_key": "unused"}},
        "history_db_path": str(workdir / "history.db"),
        "context_graph": {
            "enabled": True,
            "backend": "networkx",
            # Never written (Memory does not snapshot); it places the change log in workdir.
            "persist_path": str(workdir / "context_graph.pkl"),
            "log_changes": bool(_given(config, "log_changes", False)),
            "decay": {"enabled": False, **_given(config, "decay", {})},
            "retrieval": dict(_given(config, "retrieval", {})),
        },
        "mspr": mspr,
    }


def _role_policy(lib: _Library, role: dict[str, Any]) -> Any:
    """The bundled policy that `config.mspr.role.policy` names, or None."""
    name = _given(role, "policy", "none")
    tenant = functools.partial(
        lib.role.TenantIsolationPolicy,
        treat_global_as_visible=_given(role, "treat_global_as_visible", True),
    )
    scope = functools.partial(
        lib.role.RoleScopePolicy,
        treat_unrestricted_as_visible=_given(role, "treat_unrestricted_as_visible", True),
    )
    builders: dict[str, Callable[[], Any]] = {
        "none": lambda: None,
        "tenant": tenant,
        "role_scope": scope,
        "composite": lambda: lib.role.CompositePolicy([tenant(), scope()]),
        "allow_all": lib.role.AllowAllPolicy,
    }
    if name not in builders:
        raise ValueError(f"config.mspr.role.policy must be one of {POLICIES}, got {name!r}")
    return builders[name]()


def _payload(memory: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The vector-store payload `Memory.add` would have stored for this memory."""
    text = memory.get("text") or ""
    created = parse_time(memory["created_at"]) if memory.get("created_at") else now
    updated = parse_time(memory["updated_at"]) if memory.get("updated_at") else created
    payload = dict(memory.get("metadata") or {})
    for key in ("tenant_id", "sub_tenant_id", "role", "allowed_roles"):
        if memory.get(key) is not None:
            payload[key] = memory[key]
    for key in ("user_id", "agent_id", "run_id"):  # add() writes only truthy owner ids
        if memory.get(key):
            payload[key] = memory[key]
    payload.update(
        data=text,
        hash=md5(text.encode()).hexdigest(),
        created_at=created.isoformat(),
        updated_at=updated.isoformat(),
    )
    return payload


def _add_node(graph: Any, clock: Clock, memory: dict[str, Any], payload: dict[str, Any]) -> None:
    created = parse_time(payload["created_at"])
    with clock.at(created):
        node = graph.upsert_memory_node(
            memory["id"],
            payload["data"],
            user_id=payload.get("user_id"),
            agent_id=payload.get("agent_id"),
            run_id=payload.get("run_id"),
            metadata=payload,
            embedding=memory.get("embedding"),
        )
    node.updated_at = parse_time(payload["updated_at"])
    accessed = memory.get("last_accessed_at")
    node.last_accessed_at = parse_time(accessed) if accessed else None
    node.relevance = float(_given(memory, "relevance", 1.0))
    node.relevance_floor = float(_given(memory, "relevance_floor", 0.0))
    node.access_count = int(_given(memory, "access_count", 0))
    graph.backend.upsert_node(node)
    if _given(memory, "archived", False):
        graph.archive_memory_node(memory["id"])


def _add_edge(lib: _Library, graph: Any, clock: Clock, edge: dict[str, Any]) -> None:
    # upsert_edge stamps created_at/updated_at with the clock, so freeze it at updated_at.
    stamped = parse_time(edge["updated_at"]) if edge.get("updated_at") else clock.now
    with clock.at(stamped):
        graph.upsert_edge(
            edge["src"], edge["dst"], lib.types.EdgeType(edge["type"]), weight=edge["weight"]
        )


def _validate(scenario: dict[str, Any]) -> None:
    if scenario.get("format") != SCENARIO_FORMAT:
        raise ValueError(
            f"scenario {scenario.get('name')!r}: format must be {SCENARIO_FORMAT!r}, "
            f"got {scenario.get('format')!r}"
        )
    ids = [m["id"] for m in _given(scenario, "memories", [])]
    if len(ids) != len(set(ids)):
        duplicated = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"scenario {scenario.get('name')!r}: duplicate memory ids {duplicated}")
    stored = {m["id"] for m in _given(scenario, "memories", [])
              if _given(m, "in_vector_store", True)}
    for index, event in enumerate(_given(scenario, "events", [])):
        if event.get("type") not in ("search", "feedback"):
            raise ValueError(f"event {index}: type must be 'search' or 'feedback', "
                             f"got {event.get('type')!r}")
        bad = [s.get("id") for s in _given(event, "seeds", []) if s.get("id") not in stored]
        if bad:
            raise ValueError(f"event {index}: seeds {bad} are not in_vector_store memories")


# ---- events --------------------------------------------------------------------------


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def _result_row(entry: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"id": entry.get("id"), "score": _float_or_none(entry.get("score"))}
    breakdown = entry.get("context_graph")
    if breakdown is not None:  # absent when the library fell back to the raw vector hits
        row.update({name: float(breakdown[name]) for name in SIGNALS})
        row["was_seed"] = bool(breakdown["was_seed"])
    return row


@dataclass
class _Run:
    """One scenario in flight: the library's Memory plus the stand-ins feeding it."""

    memory: Any
    store: ScenarioVectorStore
    embedder: ScenarioEmbedder

    def search(self, event: dict[str, Any], *, with_subgraph: bool) -> dict[str, Any]:
        self.store.seeds = list(_given(event, "seeds", []))
        self.embedder.vector = list(event["query_embedding"])
        try:
            found = self.memory.search(
                event["query"],
                user_id=event.get("user_id"),
                agent_id=event.get("agent_id"),
                run_id=event.get("run_id"),
                limit=_given(event, "limit", 100),
                filters=copy.deepcopy(event.get("filters")),
                threshold=event.get("threshold"),
                include_archived=_given(event, "include_archived", False),
            )
        except Exception as exc:  # the library raised: that is the recorded outcome
            return {"type": "search", "error": f"{type(exc).__name__}: {exc}"}
        record: dict[str, Any] = {
            "type": "search",
            "results": [_result_row(entry) for entry in found["results"]],
        }
        router = self.memory._intent_router
        if router is not None:
            # The search already classified this query; with the regex strategy this is a
            # cache hit (or the same deterministic answer), so it changes no state.
            record["intent"] = router.classify(event["query"]).label.value
        if with_subgraph:
            record["subgraph"] = [
                {**edge, "weight": float(edge["weight"])} for edge in found.get("subgraph", [])
            ]
        return record

    def feedback(self, event: dict[str, Any]) -> dict[str, Any]:
        try:
            result = self.memory.record_feedback(
                event["memory_id"],
                helpful=bool(event["helpful"]),
                user_id=event.get("user_id"),
                agent_id=event.get("agent_id"),
                run_id=event.get("run_id"),
                query=event.get("query"),
                metadata=event.get("metadata"),
            )
        except Exception as exc:  # the library raised: that is the recorded outcome
            return {"type": "feedback", "error": f"{type(exc).__name__}: {exc}"}
        if result is None:
            return {"type": "feedback", "result": None}
        return {
            "type": "feedback",
            "result": {
                "memory_id": result["memory_id"],
                "delta_applied": float(result["delta_applied"]),
                "new_relevance": _float_or_none(result["new_relevance"]),
                "event_id": int(result["event_id"]),
                "helpful": bool(result["helpful"]),
            },
        }

    def final_nodes(self) -> dict[str, dict[str, Any]]:
        return {
            node.id: {
                "relevance": float(node.relevance),
                "relevance_floor": float(node.relevance_floor),
                "access_count": int(node.access_count),
                "helpful_count": int(node.helpful_count),
                "unhelpful_count": int(node.unhelpful_count),
                "archived": bool(node.archived),
            }
            for node in self.memory.context_graph.backend.iter_nodes(include_archived=True)
        }


def _versions() -> dict[str, str | None]:
    def version(distribution: str) -> str | None:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            return None  # e.g. no SciPy: the library's PageRank then falls back silently

    return {
        "outhad_contextkitai": version("outhad-contextkitai"),
        "networkx": version("networkx"),
        "scipy": version("scipy"),
        "numpy": version("numpy"),
    }


def _scratch_root() -> str | None:
    """Where the scenario's SQLite stores go: RAM when the OS offers it.

    The library opens a connection and commits per operation, and each commit syncs to
    disk; on tmpfs a batch runs about twice as fast. Results do not depend on the place.
    """
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def _build_run(
    lib: _Library, scenario: dict[str, Any], workdir: Path, clock: Clock, client: Any
) -> _Run:
    """The library's Memory with the stand-ins plugged in and the scenario state built."""
    config = _given(scenario, "config", {})
    memory = lib.main.Memory.from_config(_memory_config(config, workdir, client))
    memories = _given(scenario, "memories", [])
    payloads = {m["id"]: _payload(m, clock.now) for m in memories}
    stored = {m["id"] for m in memories if _given(m, "in_vector_store", True)}
    store = ScenarioVectorStore({i: p for i, p in payloads.items() if i in stored})
    embedder = ScenarioEmbedder()
    memory.vector_store = store
    memory.embedding_model = embedder
    memory.set_role_policy(_role_policy(lib, _given(_given(config, "mspr", {}), "role", {})))
    graph = memory.context_graph
    for m in memories:
        if _given(m, "in_graph", True):
            _add_node(graph, clock, m, payloads[m["id"]])
    for edge in _given(scenario, "edges", []):
        _add_edge(lib, graph, clock, edge)
    return _Run(memory, store, embedder)


def _replay(
    run: _Run, events: list[dict[str, Any]], clock: Clock, log: SwallowedLog,
    with_subgraph: bool,
) -> list[dict[str, Any]]:
    records = []
    for index, event in enumerate(events):
        if event.get("at"):
            clock.now = parse_time(event["at"])
        if event["type"] == "search":
            record = run.search(event, with_subgraph=with_subgraph)
        else:
            record = run.feedback(event)
        records.append({"index": index, **record, "swallowed": log.take()})
    return records


def run_scenario_with_contextkit(
    scenario: dict[str, Any], *, with_subgraph: bool = False
) -> dict[str, Any]:
    """Replay `scenario` through the ContextKit library and return its output.

    Parameters
    ----------
    scenario : dict
        A `ck-mspr-scenario/1` document (SCENARIOS.md). It is not modified.
    with_subgraph : bool
        Add each search's `subgraph` edge list to its event.

    Returns
    -------
    dict
        A `ck-mspr-oracle-output/1` document: one entry per event in order, then
        `final_nodes`. A search or feedback call that raised is recorded as `"error"`.
    """
    _validate(scenario)
    lib = _library()
    from qdrant_client import QdrantClient  # a dependency of the library

    clock = Clock(parse_time(scenario.get("now") or DEFAULT_NOW))
    session = library_session(
        facade=lib.facade, backends=lib.backends, telemetry=lib.telemetry, clock=clock)
    scratch = tempfile.TemporaryDirectory(prefix="msprlab-ck-", dir=_scratch_root())
    # The library builds its own vector store from the config; it only ever holds the
    # telemetry user id. The scenario's store is the stand-in.
    client = QdrantClient(":memory:")
    try:
        with scratch as tmp, session as log:
            run = _build_run(lib, scenario, Path(tmp), clock, client)
            try:
                log.take()  # what building the state logged belongs to no event
                events = _replay(run, _given(scenario, "events", []), clock, log, with_subgraph)
                final_nodes = run.final_nodes()
            finally:
                run.memory.close()
                run.memory.db.close()
    finally:
        client.close()
    return {
        "format": OUTPUT_FORMAT,
        "scenario": scenario.get("name"),
        "library": _versions(),
        "events": events,
        "final_nodes": final_nodes,
    }
