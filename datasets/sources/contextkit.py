"""ContextKit's own artifacts as a `Dataset`: the feedback and success SQLite files, the
context graph's JSONL export and the Qdrant local collection of `Memory`'s vector store.

Each input is optional (`None`), but the memories come from the Qdrant collection or the
graph export, so at least one of those is needed. The SQLite files are read with the
standard `sqlite3` module, read-only (DuckDB's sqlite extension downloads at run time).

- **Memories.** One per point of the Qdrant collection (the vector store is the library's
  record of which memories exist): `memory_id` = point id, `text` = payload `data`;
  `user_id`, `agent_id`, `run_id`, `tenant_id`, `sub_tenant_id` and `role` are the payload
  keys of those names. `Memory.update` rewrites the payload without its custom keys, so an
  owner or tenant id missing from the payload is taken from the graph node, which keeps
  them. `allowed_roles` is read as the library's `RoleScopePolicy` reads it: a list as its
  items (as strings), a plain string as its characters (MSPR.md §18 quirk 16).
  `created_at` / `updated_at` are the payload's ISO times (written in US/Pacific) as naive
  UTC; `updated_at` = `created_at` until the memory was updated. `metadata` holds the other
  payload keys (custom keys, `actor_id`; the payload's md5 `hash` is dropped) and, under
  `contextkit_node`, the node's graph state from the export: version, prev_version_id,
  relevance, relevance_floor, archived, access_count, last_accessed_at, helpful_count,
  unhelpful_count, last_feedback_at, the node's own created_at, updated_at and tenant ids
  (times as naive-UTC ISO text).
- **Deleted memories.** `Memory.delete` drops the point and archives the node, so a node
  with no point is a deleted memory. It is read from the node's payload copy (its
  `metadata`) and fields, with `deleted_at` = the export's time (the envelope's
  `created_at`): the artifacts record that it was gone by then, not when it went. Without
  a Qdrant folder every node is a live memory (archived nodes stay archived in
  `contextkit_node`); without a graph export there is no graph state and no deleted memory.
- **Embeddings.** Embedder `"contextkit"`: each point's vector; a deleted memory's vector
  comes from the export's `embedding` lines (the graph's sidecar keeps it).
- **Edges.** The export's `edge` lines: src, dst, type, weight, created_at, updated_at,
  evidence. Edge `metadata` (`{"similarity": ...}`, `{"window_s": ...}`) has no column.
- **Events.** `memory_added` at created_at, `memory_updated` at updated_at when later,
  `memory_deleted` at deleted_at, and one `feedback` event per `feedback_events` row: ts =
  the row's ISO timestamp as naive UTC, memory, user, agent and run ids, the query text,
  helpful, and `query_id` = the row's query hash (null for a verdict without a query).
  The replay recomputes each verdict's delta; what production applied is kept beside it
  in `feedback_records` (memory, time, user, helpful, `delta_applied`, `metadata_json` as
  text, and whether `query_success.db` holds its row), for the fidelity check to compare
  (`experiments/fidelity`). Order: (ts, kind in
  `EVENT_KINDS` order, source order with feedback rows by id); `seq` = `event_id` = the
  position on that timeline.
- **Queries.** One per distinct query hash of the feedback rows: `query_id` = the hash
  (`hash_query`: sha256 of strip().lower(), 16 hex digits), `text` = the first row's
  query as typed, owner ids the rows' common value (null where they differ).
- **Success history is re-derived, not stored.** `record_feedback` writes one success row
  per verdict with a query, and replaying the feedback events does the same, so the store
  keeps no success rows. `query_success.db` is read and checked against that replay: each
  success row must match its own feedback row with the same (query_hash, memory_id,
  user_id, helpful, timestamp). A row the replay would not reproduce (a second copy from
  `backfill_mspr`, §18 quirk 7, or a row written by hand) is an error; leave the success
  file out to ingest without this check. Verdicts recorded while success was off have no
  success row and still give success history on replay.

Every row is checked and a bad one is reported with its file, its row (`row id=N` in the
SQLite tables, `line N` in the export, `point ID` in the collection), the field and the
reason; the result is checked with `validate`. The digest is the sha256 over the given
files' bytes (the Qdrant folder: every file but `.lock`, by path), the collection name and
the loader revision.
"""

from __future__ import annotations

import hashlib
import json
import math
import pickle
import sqlite3
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import polars as pl

from msprlab.engine.success import hash_query

from ..schema import (
    EDGES,
    EMBEDDINGS,
    EVENTS,
    FEEDBACK_RECORDS,
    MEMORIES,
    PAYLOAD_FIELDS,
    QUERIES,
    Dataset,
)
from ..store import Progress
from ..strict_json import DuplicateKeyError, loads
from ..validate import IngestError, show, validate

__all__ = ["DEFAULT_COLLECTION", "EMBEDDER", "FLAGS", "NODE_STATE_KEY", "edges_at_creation",
           "last_tick", "load_contextkit"]

SOURCE = "contextkit"
VERSION = "outhad-contextkitai 0.1.4 artifacts (graph export envelope 1)"
EMBEDDER = "contextkit"
DEFAULT_COLLECTION = "outhad_contextkit"  # the library's QdrantConfig.collection_name
NODE_STATE_KEY = "contextkit_node"
FLAGS = {"feedback_db": "--feedback-db", "success_db": "--success-db",
         "graph_jsonl": "--graph-jsonl", "qdrant_path": "--qdrant-path"}
_LOADER_REVISION = 3  # 2: feedback_records; 3: their success_row
_OWNERS = ("user_id", "agent_id", "run_id", "tenant_id", "sub_tenant_id")
_COLUMN_KEYS = frozenset(PAYLOAD_FIELDS)  # the payload keys with a column; the rest: metadata
_KINDS = ("node", "edge", "embedding")


# ---- values ----------------------------------------------------------------------------
def _fail(where: str, field: str | None, reason: str) -> NoReturn:
    raise IngestError(where, reason, field=field)


def _string(value: Any, where: str, field: str, *, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        _fail(where, field, f"expected {'a non-empty string' if required else 'a string or null'}"
                            f", got {show(value)}")
    return value


def _text(value: Any, where: str, field: str) -> str:
    return str(_string(value, where, field, required=True))


def _time(value: Any, where: str, field: str) -> datetime:
    """ISO-8601 text as naive UTC (an offset is converted; naive text is UTC already)."""
    try:
        moment = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        _fail(where, field, f"expected an ISO-8601 timestamp, got {show(value)}")
    try:
        return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment
    except OverflowError:  # e.g. 9999-12-31T23:00-08:00 is past the last UTC datetime
        _fail(where, field, f"expected a timestamp within years 1-9999 once converted to "
                            f"UTC, got {show(value)}")


def _maybe_time(value: Any, where: str, field: str) -> datetime | None:
    return None if value is None else _time(value, where, field)


def _integer(value: Any, where: str, field: str) -> int:
    if type(value) is not int:
        _fail(where, field, f"expected an integer, got {show(value)}")
    return value


def _number(value: Any, where: str, field: str) -> float:
    if type(value) not in (int, float):
        _fail(where, field, f"expected a number, got {show(value)}")
    return float(value)


def _helpful(value: Any, where: str) -> bool:
    if type(value) is not int or value not in (0, 1):
        _fail(where, "helpful", f"expected 0 or 1, got {show(value)}")
    return value == 1


def _roles(value: Any) -> list[str] | None:
    """`allowed_roles` as the library's RoleScopePolicy reads it (quirk 16 for strings)."""
    if value is None:
        return None
    if isinstance(value, str | list | tuple):
        return [str(x) for x in value]
    return [str(value)]


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


# ---- inputs ----------------------------------------------------------------------------
def _check_inputs(paths: dict[str, Path | None]) -> None:
    for name, path in paths.items():
        if path is None:
            continue
        flag = FLAGS[name]
        if path.is_symlink() and not path.exists():  # exists() follows the link
            raise IngestError(str(path), f"a dangling symbolic link or a link loop (to "
                                         f"{path.readlink()}; given as {flag}): point it at "
                                         "an existing file")
        if not path.exists():
            raise IngestError(str(path), f"no such {'folder' if name == 'qdrant_path' else 'file'}"
                                         f" (given as {flag})")
        if name == "qdrant_path" and not (path / "meta.json").is_file():
            raise IngestError(str(path), f"not a Qdrant local folder: no meta.json (given as "
                                         f"{flag}; pass the vector store's `path`)")
        if name != "qdrant_path" and not path.is_file():
            raise IngestError(str(path), f"not a file (given as {flag})")
    if paths["qdrant_path"] is None and paths["graph_jsonl"] is None:
        raise IngestError("contextkit", "the memories come from --qdrant-path or "
                                        "--graph-jsonl: give at least one of them")
    if paths["success_db"] is not None and paths["feedback_db"] is None:
        raise IngestError(str(paths["success_db"]), "--success-db needs --feedback-db: each "
                          "success row is checked against the verdict it came from")


def _files(paths: dict[str, Path | None]) -> Iterator[tuple[str, Path]]:
    for name, path in paths.items():
        if path is not None and path.is_dir():
            for file in sorted(p for p in path.rglob("*") if p.is_file() and p.name != ".lock"):
                yield f"{name}/{file.relative_to(path).as_posix()}", file
        elif path is not None:
            yield name, path
            wal = _wal(path)
            if wal.is_file():  # committed rows not yet folded into the database file
                yield f"{name}-wal", wal


def _wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def _digest(paths: dict[str, Path | None], collection: str) -> str:
    sha = hashlib.sha256()
    for label, file in _files(paths):
        try:
            sha.update(f"{label}\0{file.stat().st_size}\0".encode())
            with file.open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    sha.update(chunk)
        except OSError as exc:  # no read permission, or a link inside the Qdrant folder
            flag = FLAGS[label.split("/")[0].removesuffix("-wal")]
            raise IngestError(str(file), f"cannot be read ({exc.strerror or exc}; given as "
                                         f"{flag}); make it readable") from None
    sha.update(json.dumps({"collection": collection, "loader_revision": _LOADER_REVISION}).encode())
    return sha.hexdigest()


# ---- SQLite stores -----------------------------------------------------------------------
@dataclass(frozen=True)
class _Verdict:
    """One feedback_events row, checked; `key` is what its success row would repeat."""

    id: int
    memory_id: str
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    query: str | None
    query_hash: str | None
    helpful: bool
    ts: datetime
    file: str
    delta_applied: float
    metadata: str | None

    @property
    def row(self) -> str:
        return f"row id={self.id}"

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.query_hash, self.memory_id, self.user_id, self.helpful, self.ts)


def _sqlite_rows(path: Path, table: str, columns: tuple[str, ...], flag: str) -> list[Any]:
    what = (f"{flag} expects ContextKit's {table} table as outhad-contextkitai 0.1.4 "
            "writes it (artifacts of another library version are not read)")
    # Read-only either way. Without a WAL beside it the file is the whole database, and
    # `immutable` reads it without creating -wal/-shm files in the user's folder.
    mode = "mode=ro" if _wal(path).exists() else "immutable=1"
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True)
    try:
        found = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if not found:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master "
                                                 "WHERE type = 'table' ORDER BY name")]
            raise IngestError(path.name, f"no table {table!r} (found {tables}); {what}")
        if missing := [c for c in columns if c not in found]:
            raise IngestError(path.name, f"table {table!r} has no column {missing}; {what}")
        return conn.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY id").fetchall()
    except sqlite3.DatabaseError as e:
        raise IngestError(path.name, f"cannot read it as SQLite ({e}); {what}") from e
    finally:
        conn.close()


def _read_feedback(path: Path) -> list[_Verdict]:
    columns = ("id", "memory_id", "user_id", "agent_id", "run_id", "query", "query_hash",
               "helpful", "timestamp", "delta_applied", "metadata_json")
    verdicts = []
    for (row_id, memory_id, user, agent, run, query, stored_hash, helpful, ts, delta,
         metadata) in _sqlite_rows(path, "feedback_events", columns, FLAGS["feedback_db"]):
        where = f"{path.name} row id={row_id}"
        query = _string(query, where, "query")
        expected = hash_query(query)
        if stored_hash != expected:
            _fail(where, "query_hash", f"expected {show(expected)} (hash_query of the query "
                                       f"{show(query)}), got {show(stored_hash)}")
        verdicts.append(_Verdict(
            id=row_id, memory_id=_text(memory_id, where, "memory_id"),
            user_id=_string(user, where, "user_id"), agent_id=_string(agent, where, "agent_id"),
            run_id=_string(run, where, "run_id"), query=query, query_hash=expected,
            helpful=_helpful(helpful, where), ts=_time(ts, where, "timestamp"),
            file=path.name, delta_applied=_number(delta, where, "delta_applied"),
            metadata=_string(metadata, where, "metadata_json")))
        if len(verdicts) > 1 and verdicts[-1].ts < verdicts[-2].ts:
            before = verdicts[-2]
            _fail(where, "timestamp", f"{verdicts[-1].ts.isoformat()} is earlier than "
                  f"{before.row}'s {before.ts.isoformat()}: the library appends verdicts as "
                  "they happen, so out-of-order rows mean merged files or a clock that went "
                  "back, and a replay would give verdicts before the searches they follow; "
                  "fix or drop those rows")
    return verdicts


def _check_success(path: Path, verdicts: list[_Verdict]) -> list[bool]:
    """Every success row must be one the replay of the verdicts writes again; returns, per
    verdict, whether a success row is its own (each row taken by the first verdict of its
    key not taken yet)."""
    columns = ("id", "query_hash", "memory_id", "user_id", "helpful", "timestamp")
    left = Counter(v.key for v in verdicts if v.query_hash is not None)
    found: Counter[tuple[Any, ...]] = Counter()
    for row_id, query_hash, memory_id, user, helpful, ts in _sqlite_rows(
            path, "query_success", columns, FLAGS["success_db"]):
        where = f"{path.name} row id={row_id}"
        key = (_text(query_hash, where, "query_hash"),
               _text(memory_id, where, "memory_id"),
               _string(user, where, "user_id"), _helpful(helpful, where),
               _time(ts, where, "timestamp"))
        if left[key] == 0:
            _fail(where, None, "no verdict in --feedback-db is left with the same query_hash, "
                  "memory_id, user_id, helpful and timestamp: success history is re-derived "
                  "by replaying the verdicts, so this row would be lost (a second copy from "
                  "backfill_mspr, MSPR.md §18 quirk 7, looks like this); leave out "
                  "--success-db to ingest without the check")
        left[key] -= 1
        found[key] += 1
    rowed = []
    for v in verdicts:
        rowed.append(found[v.key] > 0 and v.query_hash is not None)
        if rowed[-1]:
            found[v.key] -= 1
    return rowed


# ---- graph export ------------------------------------------------------------------------
@dataclass(frozen=True)
class _Node:
    id: str
    file: str
    row: str
    created_at: datetime
    owners: dict[str, str | None]
    payload: dict[str, Any]  # the node's copy of the vector payload (its metadata)
    state: dict[str, Any]


@dataclass(frozen=True)
class _Graph:
    exported_at: datetime
    nodes: dict[str, _Node]
    edges: list[dict[str, Any]]
    embeddings: dict[str, tuple[list[float], str]]  # id -> (vector, its line)


def _node(data: dict[str, Any], file: str, row: str) -> _Node:
    where = f"{file} {row}"
    node_id = _text(data.get("id"), where, "id")
    created = _time(data.get("created_at"), where, "created_at")
    updated = _time(data.get("updated_at"), where, "updated_at")
    state: dict[str, Any] = {
        "version": _integer(data.get("version", 1), where, "version"),
        "prev_version_id": _string(data.get("prev_version_id"), where, "prev_version_id"),
        "relevance": _number(data.get("relevance", 1.0), where, "relevance"),
        "relevance_floor": _number(data.get("relevance_floor", 0.0), where, "relevance_floor"),
        "archived": data.get("archived", False),
        "created_at": _iso(created), "updated_at": _iso(updated),
    }
    if type(state["archived"]) is not bool:
        _fail(where, "archived", f"expected true or false, got {show(state['archived'])}")
    for counter in ("access_count", "helpful_count", "unhelpful_count"):
        state[counter] = _integer(data.get(counter, 0), where, counter)
    for moment in ("last_accessed_at", "last_feedback_at"):
        state[moment] = _iso(_maybe_time(data.get(moment), where, moment))
    owners = {key: _string(data.get(key), where, key) for key in _OWNERS}
    state.update(tenant_id=owners["tenant_id"], sub_tenant_id=owners["sub_tenant_id"])
    payload = data.get("metadata") or {}
    if not isinstance(payload, dict):
        _fail(where, "metadata", f"expected a JSON object, got {show(payload)}")
    return _Node(node_id, file, row, created, owners, payload, state)


def _entries(path: Path) -> Iterator[tuple[int, str, dict[str, Any]]]:
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            where = f"{path.name} line {number}"
            try:
                entry = loads(raw)
            except DuplicateKeyError as e:
                raise IngestError(where, str(e), field=e.field) from None
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise IngestError(where, f"not JSON ({e})") from None
            if number == 1:
                if not isinstance(entry, dict) or entry.get("__envelope__") != 1:
                    _fail(where, "__envelope__", "expected the export envelope "
                          f"{{\"__envelope__\": 1, ...}} of ContextGraph.export_jsonl, got "
                          f"{raw[:80]!r} (given as --graph-jsonl)")
                yield number, "envelope", entry
                continue
            kind = entry.get("kind") if isinstance(entry, dict) else None
            if kind not in _KINDS or not isinstance(entry.get("data"), dict):
                _fail(where, "kind", f"expected {{\"kind\": one of {list(_KINDS)}, \"data\": "
                                     f"{{...}}}}, got {raw[:80]!r}")
            yield number, kind, entry["data"]


def _read_graph(path: Path) -> _Graph:
    envelope: dict[str, Any] = {}
    nodes: dict[str, _Node] = {}
    edges: list[dict[str, Any]] = []
    embeddings: dict[str, tuple[list[float], str]] = {}
    for number, kind, data in _entries(path):
        row = f"line {number}"
        where = f"{path.name} {row}"
        if kind == "envelope":
            envelope = data
        elif kind == "node":
            node = _node(data, path.name, row)
            if node.id in nodes:
                _fail(where, "id", f"duplicate node {node.id!r} (first at {nodes[node.id].row})")
            nodes[node.id] = node
        elif kind == "edge":
            edges.append(_edge(data, path.name, row))
        else:
            vector = data.get("vector")
            if not isinstance(vector, list) or any(type(x) not in (int, float) for x in vector):
                _fail(where, "vector", f"expected a list of numbers, got {show(vector)}")
            embeddings[_text(data.get("id"), where, "id")] = (vector, row)
    if not envelope:
        raise IngestError(path.name, "no export envelope on line 1: expected a file written "
                                     "by ContextGraph.export_jsonl (given as --graph-jsonl)")
    counts = (envelope.get("node_count"), envelope.get("edge_count"))
    if counts != (len(nodes), len(edges)):
        raise IngestError(path.name, f"the envelope announces {counts[0]} nodes and "
                          f"{counts[1]} edges, the file holds {len(nodes)} and {len(edges)} "
                          "(a truncated or edited export?)")
    exported = _time(envelope.get("created_at"), f"{path.name} line 1", "created_at")
    return _Graph(exported, nodes, edges, embeddings)


def _edge(data: dict[str, Any], file: str, row: str) -> dict[str, Any]:
    where = f"{file} {row}"
    return {
        "src": _text(data.get("src"), where, "src"),
        "dst": _text(data.get("dst"), where, "dst"),
        "type": _text(data.get("type"), where, "type"),
        "weight": _number(data.get("weight", 1.0), where, "weight"),
        "created_at": _maybe_time(data.get("created_at"), where, "created_at"),
        "updated_at": _maybe_time(data.get("updated_at"), where, "updated_at"),
        "evidence": _string(data.get("evidence"), where, "evidence"),
        "_file": file, "_row": row,
    }


# ---- Qdrant collection -------------------------------------------------------------------
@dataclass(frozen=True)
class _Point:
    id: str
    payload: dict[str, Any]
    vector: list[float]


# What a damaged Qdrant local folder raises as qdrant-client reads it: its meta.json
# (JSON), its per-collection SQLite file, the pickled points inside it.
_CORRUPT = (sqlite3.DatabaseError, ValueError, KeyError, EOFError, pickle.UnpicklingError,
            AttributeError, TypeError)


def _read_qdrant(path: Path, collection: str) -> list[_Point]:
    try:
        return _scroll_qdrant(path, collection)
    except IngestError:
        raise
    except _CORRUPT as e:
        raise IngestError(str(path), f"the Qdrant storage is damaged ({type(e).__name__}: "
                                     f"{str(e).splitlines()[0] if str(e) else 'no detail'}); "
                                     "copy the folder again from the running system (given "
                                     "as --qdrant-path)") from None


def _scroll_qdrant(path: Path, collection: str) -> list[_Point]:
    from qdrant_client import QdrantClient, models

    try:
        client = QdrantClient(path=str(path))
    except RuntimeError as e:  # the folder is locked by a running client
        raise IngestError(str(path), f"cannot open the Qdrant folder ({e}); stop the process "
                                     "using it or copy the folder (given as --qdrant-path)") from e
    try:
        if not client.collection_exists(collection):
            names = sorted(c.name for c in client.get_collections().collections)
            raise IngestError(str(path), f"no collection {collection!r} (found {names}); "
                                         "name it with --collection")
        vectors = client.get_collection(collection).config.params.vectors
        if not isinstance(vectors, models.VectorParams):
            raise IngestError(str(path), f"collection {collection!r} has named vectors "
                                         f"{sorted(vectors or {})}; ContextKit writes one "
                                         "unnamed vector per point")
        points: list[_Point] = []
        offset = None
        while True:
            batch, offset = client.scroll(collection, limit=1024, offset=offset,
                                          with_payload=True, with_vectors=True)
            points += [_Point(str(p.id), dict(p.payload or {}), list(p.vector or []))  # type: ignore[arg-type]
                       for p in batch]
            if offset is None:
                return points
    finally:
        client.close()


# ---- tables ------------------------------------------------------------------------------
def _provenanced(schema: pl.Schema) -> pl.Schema:
    """A table's schema plus the `_file` / `_row` columns errors are located by."""
    return pl.Schema([*schema.items(), ("_file", pl.String()), ("_row", pl.String())])


def _memory(memory_id: str, payload: dict[str, Any], node: _Node | None, *, file: str,
            row: str, deleted_at: datetime | None) -> dict[str, Any]:
    where = f"{file} {row}"
    owners = {key: _string(payload.get(key), where, key) for key in _OWNERS}
    if node is not None:  # ids that Memory.update dropped from the payload survive on the node
        owners = {key: value or node.owners[key] for key, value in owners.items()}
    created = _maybe_time(payload.get("created_at"), where, "created_at")
    if created is None and node is None:
        _fail(where, "created_at", "required, got null (and no graph node gives the time)")
    created = created or (node.created_at if node is not None else None)
    updated = _maybe_time(payload.get("updated_at"), where, "updated_at") or created
    metadata = {k: v for k, v in payload.items() if k not in _COLUMN_KEYS}
    if node is not None:
        metadata[NODE_STATE_KEY] = node.state
    return {
        "memory_id": memory_id,
        "text": _string(payload.get("data"), where, "data", required=deleted_at is None),
        **owners, "role": _string(payload.get("role"), where, "role"),
        "allowed_roles": _roles(payload.get("allowed_roles")),
        "metadata": json.dumps(metadata, ensure_ascii=False, sort_keys=True),
        "created_at": created, "updated_at": updated, "deleted_at": deleted_at,
        "_file": file, "_row": row,
    }


def _memories(points: list[_Point] | None, graph: _Graph | None, qdrant_file: str,
              ) -> tuple[pl.DataFrame, pl.DataFrame]:
    nodes = graph.nodes if graph is not None else {}
    rows, vectors = [], []
    for point in points or []:
        rows.append(_memory(point.id, point.payload, nodes.get(point.id), file=qdrant_file,
                            row=f"point {point.id}", deleted_at=None))
        vectors.append((point.id, point.vector, qdrant_file, f"point {point.id}"))
    in_store = {point.id for point in points or []}
    for node in nodes.values():
        if node.id in in_store:
            continue
        deleted = graph.exported_at if graph is not None and points is not None else None
        rows.append(_memory(node.id, node.payload, node, file=node.file, row=node.row,
                            deleted_at=deleted))
        if graph is not None and node.id in graph.embeddings:
            vector, row = graph.embeddings[node.id]
            vectors.append((node.id, vector, node.file, row))
    schema = _provenanced(MEMORIES)
    memories = pl.DataFrame(rows, schema=schema)
    memories = memories.sort("created_at", "memory_id", nulls_last=True)
    order = {m: i for i, m in enumerate(memories["memory_id"])}
    embeddings = pl.DataFrame(
        {"memory_id": [v[0] for v in vectors], "embedder": [EMBEDDER] * len(vectors),
         "vector": [v[1] for v in vectors], "_file": [v[2] for v in vectors],
         "_row": [v[3] for v in vectors]},
        schema=_provenanced(EMBEDDINGS))
    embeddings = embeddings.sort(pl.col("memory_id").replace_strict(order, default=len(order)))
    return memories, embeddings


def _events(memories: pl.DataFrame, verdicts: list[_Verdict]) -> pl.DataFrame:
    records: list[dict[str, Any]] = []
    for m in memories.iter_rows(named=True):
        base = {key: m[key] for key in ("memory_id", "user_id", "agent_id", "run_id",
                                         "_file", "_row")}
        records.append({**base, "ts": m["created_at"], "kind": "memory_added"})
        if m["updated_at"] is not None and m["updated_at"] > m["created_at"]:
            records.append({**base, "ts": m["updated_at"], "kind": "memory_updated"})
        if m["deleted_at"] is not None:
            records.append({**base, "ts": m["deleted_at"], "kind": "memory_deleted"})
    records += [{"ts": v.ts, "kind": "feedback", "memory_id": v.memory_id,
                 "query_id": v.query_hash, "user_id": v.user_id, "agent_id": v.agent_id,
                 "run_id": v.run_id, "query": v.query, "helpful": v.helpful,
                 "_file": v.file, "_row": v.row} for v in verdicts]
    schema = _provenanced(EVENTS)
    frame = pl.DataFrame([{c: r.get(c) for c in schema} for r in records], schema=schema)
    return (frame.with_row_index("_order")
            .sort(pl.col("ts"), pl.col("kind").to_physical(), pl.col("_order"))
            .drop("_order")
            .with_columns(event_id=pl.int_range(pl.len(), dtype=pl.Int64),
                          seq=pl.int_range(pl.len(), dtype=pl.Int64)))


def _feedback_records(verdicts: list[_Verdict]) -> pl.DataFrame:
    rows = [{"memory_id": v.memory_id, "ts": v.ts, "user_id": v.user_id, "helpful": v.helpful,
             "delta_applied": v.delta_applied, "metadata": v.metadata, "success_row": None,
             "_file": v.file, "_row": v.row} for v in verdicts]
    return pl.DataFrame(rows, schema=_provenanced(FEEDBACK_RECORDS))


def _queries(verdicts: list[_Verdict]) -> pl.DataFrame:
    asked: dict[str, list[_Verdict]] = {}
    for v in verdicts:
        if v.query_hash is not None:
            asked.setdefault(v.query_hash, []).append(v)

    def common(group: list[_Verdict], key: str) -> str | None:
        values = {getattr(v, key) for v in group}
        return values.pop() if len(values) == 1 else None

    rows = [{"query_id": h, "text": group[0].query,
             **{k: common(group, k) for k in ("user_id", "agent_id", "run_id")},
             "question_type": None, "_file": group[0].file, "_row": group[0].row}
            for h, group in asked.items()]
    return pl.DataFrame(rows, schema=_provenanced(QUERIES))


def load_contextkit(*, feedback_db: Path | None, success_db: Path | None,
                    graph_jsonl: Path | None, qdrant_path: Path | None,
                    collection: str = DEFAULT_COLLECTION,
                    progress: Progress | None = None) -> Dataset:
    """Read ContextKit's artifacts into a validated `Dataset` (see the module docstring).

    Parameters
    ----------
    feedback_db, success_db : `feedback_events.db` and `query_success.db`, or None.
    graph_jsonl : the file `ContextGraph.export_jsonl` wrote, or None.
    qdrant_path : the Qdrant local folder of `Memory`'s vector store (its `path`), or None.
    collection : the collection name in that folder (the library's default name).
    progress : called as progress(stage, done, total) while reading.

    Raises `IngestError` naming the file, row and field of the first bad record, or the
    flag (`--feedback-db`, ...) of a missing file.
    """
    paths = {"feedback_db": feedback_db, "success_db": success_db,
             "graph_jsonl": graph_jsonl, "qdrant_path": qdrant_path}
    paths = {k: None if v is None else Path(v) for k, v in paths.items()}
    _check_inputs(paths)
    report = progress or (lambda stage, done, total: None)
    report("digest", 0, 5)
    digest = _digest(paths, collection)
    report("feedback", 1, 5)
    verdicts = _read_feedback(paths["feedback_db"]) if paths["feedback_db"] else []
    report("graph", 2, 5)
    graph = _read_graph(paths["graph_jsonl"]) if paths["graph_jsonl"] else None
    report("qdrant", 3, 5)
    qdrant = paths["qdrant_path"]
    points = _read_qdrant(qdrant, collection) if qdrant is not None else None
    qdrant_file = f"{qdrant.name} collection {collection!r}" if qdrant is not None else ""
    memories, embeddings = _memories(points, graph, qdrant_file)
    edges = pl.DataFrame(graph.edges if graph else [],
                         schema=_provenanced(EDGES))
    report("validate", 4, 5)
    ds = Dataset(SOURCE, VERSION, digest, memories=memories, embeddings=embeddings,
                 edges=edges, events=_events(memories, verdicts), queries=_queries(verdicts),
                 feedback_records=_feedback_records(verdicts))
    validate(ds)
    if paths["success_db"] is not None:  # after validate: a bad verdict is the first report
        rowed = _check_success(paths["success_db"], verdicts)
        ds = replace(ds, feedback_records=ds.feedback_records.with_columns(
            success_row=pl.Series(rowed, dtype=pl.Boolean)))
    report("read", 5, 5)
    return ds


# ---- a snapshot under decay -------------------------------------------------------------
_DECAY_EXEMPT = ("CAUSAL", "CONTRADICTS")  # decay skips them (MSPR.md 5.1)


# The edges a decay tick changed: updated after creation, of a type decay visits.
_DECAYED = (pl.col("updated_at") > pl.col("created_at")) & ~pl.col("type").is_in(_DECAY_EXEMPT)


def edges_at_creation(ds: Dataset, half_life_days: float) -> Dataset:
    """`ds` (a ContextKit snapshot) with its edges at the weights they were created with,
    were production's decay of this half-life: the export holds each edge's weight after
    the ticks that changed it, the last at its `updated_at`, and a tick multiplies a weight
    by exp(-lambda * hours since its last change), so the weight at creation was
    w * exp(lambda * hours(updated_at - created_at)) (at most 1). Edges decay never
    changed keep theirs. A replay with decay on enters the edges at their creation and
    lets its own ticks decay them as production's did; edges production pruned are not in
    the export and stay missing."""
    rate = math.log(2.0) / (half_life_days * 24.0)  # per hour
    hours = (pl.col("updated_at") - pl.col("created_at")).dt.total_microseconds() / 3.6e9
    edges = ds.edges.with_columns(weight=pl.when(_DECAYED).then(
        pl.min_horizontal(pl.lit(1.0), pl.col("weight") * (hours * rate).exp()))
        .otherwise(pl.col("weight")))
    return replace(ds, edges=edges)


def last_tick(edges: pl.DataFrame) -> datetime | None:
    """When production's decay last changed an edge (the latest `updated_at` of a decayed
    edge), or None when no edge was decayed."""
    found = edges.filter(_DECAYED)["updated_at"].max()
    return found if isinstance(found, datetime) else None
