"""Scenario files (`ck-mspr-scenario/1`, SCENARIOS.md): validated loading into typed records.

Every problem is reported as `ScenarioError` naming the file, the JSON path and what is
wrong. Unknown keys are ignored, as the format says.
"""

from __future__ import annotations

import functools
import json
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import datetime
from itertools import chain, repeat
from pathlib import Path
from typing import Any, TypeVar

from msprlab.datasets import strict_json
from msprlab.engine.config import ConfigError, EngineConfig
from msprlab.engine.config_dict import config_from_dict
from msprlab.engine.graph import EdgeType
from msprlab.engine.roles import POLICY_NAMES

FORMAT = "ck-mspr-scenario/1"
DEFAULT_NOW = datetime(2024, 1, 1)


class ScenarioError(ValueError):
    """A malformed scenario: `file: $.json.path: what is wrong`."""


@dataclass(frozen=True, slots=True)
class ScenarioMemory:
    id: str
    text: str
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    tenant_id: str | None
    sub_tenant_id: str | None
    role: Any
    allowed_roles: Any
    metadata: dict[str, Any]
    embedding: list[float] | None
    created_at: datetime
    updated_at: datetime
    last_accessed_at: datetime | None
    relevance: float
    relevance_floor: float
    access_count: int
    archived: bool
    in_graph: bool
    in_vector_store: bool


@dataclass(frozen=True, slots=True)
class ScenarioEdge:
    src: str
    dst: str
    type: EdgeType
    weight: float
    updated_at: datetime | None


@dataclass(frozen=True, slots=True)
class FeedbackEvent:
    memory_id: str
    helpful: bool
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    query: str | None
    metadata: dict[str, Any] | None
    at: datetime | None


@dataclass(frozen=True, slots=True)
class SearchEvent:
    query: str
    query_embedding: list[float]
    user_id: str | None
    agent_id: str | None
    run_id: str | None
    filters: dict[str, Any] | None
    limit: int
    threshold: float | None
    include_archived: bool
    seeds: list[tuple[str | None, float | None]]
    at: datetime | None


@dataclass(frozen=True, slots=True)
class RoleSetup:
    policy: str
    treat_global_as_visible: bool
    treat_unrestricted_as_visible: bool


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    source: str
    now: datetime
    config: EngineConfig
    role: RoleSetup
    memories: list[ScenarioMemory]
    edges: list[ScenarioEdge]
    events: list[FeedbackEvent | SearchEvent] = field(default_factory=list)


class _Reader:
    """Typed access to a JSON value that knows its own path, for error messages."""

    def __init__(self, source: str, value: Any, path: str = "$") -> None:
        self.source, self.value, self.path = source, value, path

    def fail(self, message: str) -> ScenarioError:
        return ScenarioError(f"{self.source}: {self.path}: {message}")

    def child(self, key: str | int) -> _Reader:
        sub = f"{self.path}[{key}]" if isinstance(key, int) else f"{self.path}.{key}"
        value = self.value[key] if isinstance(key, int) else self.value.get(key)
        return _Reader(self.source, value, sub)

    def obj(self) -> _Reader:
        if not isinstance(self.value, dict):
            raise self.fail(f"expected an object, got {_kind(self.value)}")
        return self

    def items(self) -> list[_Reader]:
        if not isinstance(self.value, list):
            raise self.fail(f"expected a list, got {_kind(self.value)}")
        return [self.child(i) for i in range(len(self.value))]

    def get(self, key: str, kind: str, default: Any = None, *, required: bool = False) -> Any:
        """Read `key` as kind (str, opt_str, bool, int, num, opt_num, time, opt_time, list)."""
        sub = self.child(key)
        if key not in self.value:
            if required:
                raise sub.fail("is required")
            return default
        return sub.as_kind(kind, default)

    def as_kind(self, kind: str, default: Any = None) -> Any:
        v = self.value
        optional = kind.startswith("opt_")
        base = kind.removeprefix("opt_")
        if v is None and optional:
            return None
        if v is None and default is not None and base == "time":
            return default
        checks = {
            "str": lambda: isinstance(v, str),
            "bool": lambda: isinstance(v, bool),
            "int": lambda: isinstance(v, int) and not isinstance(v, bool),
            "num": lambda: isinstance(v, int | float) and not isinstance(v, bool)
            and math.isfinite(v),
            "time": lambda: isinstance(v, str),
        }
        if not checks[base]():
            wanted = {"str": "a string", "bool": "true or false", "int": "an integer",
                      "num": "a finite number", "time": "an ISO-8601 timestamp"}[base]
            if optional:
                wanted += " or null"
            raise self.fail(f"expected {wanted}, got {_kind(v)} {v!r}")
        if base == "time":
            return _parse_time(self, v)
        if base == "num":
            return float(v)
        return v

    def vector(self, *, allow_null: bool) -> list[float] | None:
        if self.value is None and allow_null:
            return None
        values = []
        for item in self.items():
            values.append(item.as_kind("num"))
        return values


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")


def _parse_time(reader: _Reader, text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise reader.fail(f"expected an ISO-8601 timestamp, got {text!r}") from None
    offset = moment.utcoffset()
    if offset is not None:  # the graph keeps naive UTC
        try:
            moment = (moment - offset).replace(tzinfo=None)
        except OverflowError:
            raise reader.fail(f"{text!r} falls outside years 1-9999 in UTC") from None
    return moment


def load_scenario(path: Path) -> Scenario:
    """Read and validate one scenario file."""
    source = str(path)
    try:
        raw = strict_json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"{source}: cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    except strict_json.DuplicateKeyError as exc:
        raise ScenarioError(f"{source}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"{source}: line {exc.lineno} column {exc.colno}: "
                            f"not valid JSON: {exc.msg}") from None
    return parse_scenario(raw, source=source)


def parse_scenario(raw: Any, *, source: str = "<scenario>") -> Scenario:
    """Validate a parsed scenario document into records (SCENARIOS.md).

    The long lists (memories, edges, events) are checked in bulk, a column at a time
    (`_bulk_memories` and the others below). A list a bulk check does not pass goes
    through the precise walk (`_memory`, `_edge`, `_event`), which checks value by value
    in document order and raises the `ScenarioError` naming the first bad value; and a
    list the bulk checks pass, the walk would give the same records for. The sections
    are taken in document order either way, so the first problem is the one reported.
    """
    top = _Reader(source, raw).obj()
    fmt = top.get("format", "str", required=True)
    if fmt != FORMAT:
        raise top.child("format").fail(f"expected {FORMAT!r}, got {fmt!r}")
    now = top.get("now", "time", DEFAULT_NOW)
    config, role = _config(top.child("config")) if "config" in raw else (
        _config(_Reader(source, {}, "$.config")))
    times = _Times()
    memories: list[ScenarioMemory] = []
    if "memories" in raw:
        bulk = _bulk_memories(raw["memories"], now, times)
        memories = bulk if bulk is not None else [
            _memory(m, now) for m in top.child("memories").items()]
    ids = [m.id for m in memories]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise top.child("memories").fail(f"memory id {dup!r} appears more than once")
    edges: list[ScenarioEdge] = []
    if "edges" in raw:
        bulk_edges = _bulk_edges(raw["edges"], times)
        edges = bulk_edges if bulk_edges is not None else [
            _edge(e) for e in top.child("edges").items()]
    vector_ids = {m.id for m in memories if m.in_vector_store}
    events: list[FeedbackEvent | SearchEvent] = []
    if "events" in raw:
        bulk_events = _bulk_events(raw["events"], vector_ids, times)
        events = bulk_events if bulk_events is not None else [
            _event(e, vector_ids) for e in top.child("events").items()]
    name = top.get("name", "str", Path(source).stem)
    return Scenario(name, source, now, config, role, memories, edges, events)


def _config(reader: _Reader) -> tuple[EngineConfig, RoleSetup]:
    """Scenario config -> the ContextKit dict shape -> EngineConfig (bounds checked there)."""
    reader.obj()
    raw = reader.value
    for block in ("retrieval", "decay", "mspr"):
        if raw.get(block) is not None:
            reader.child(block).obj()
    mspr = dict(raw.get("mspr") or {})
    for block in ("feedback", "frequency", "success", "intent", "role"):
        if mspr.get(block) is not None:
            reader.child("mspr").child(block).obj()
    role_raw = dict(mspr.get("role") or {})
    role_reader = reader.child("mspr").child("role") if "role" in mspr else None
    setup = RoleSetup(
        policy=role_raw.pop("policy", "none"),
        treat_global_as_visible=role_raw.pop("treat_global_as_visible", True),
        treat_unrestricted_as_visible=role_raw.pop("treat_unrestricted_as_visible", True))
    if setup.policy not in POLICY_NAMES:
        where = role_reader.child("policy") if role_reader else reader
        raise where.fail(f"expected one of {', '.join(POLICY_NAMES)}, got {setup.policy!r}")
    for knob in ("treat_global_as_visible", "treat_unrestricted_as_visible"):
        if not isinstance(getattr(setup, knob), bool):
            assert role_reader is not None
            raise role_reader.child(knob).fail(f"expected true or false, got "
                                               f"{getattr(setup, knob)!r}")
    mspr_known = {"enabled", "feedback", "frequency", "success", "intent", "role"}
    blocks = {
        "feedback": {"enabled", "boost_delta", "penalty_delta", "max_boost_per_memory",
                     "pin_floor_on_boost"},
        "frequency": {"enabled"}, "success": {"enabled", "min_sample_size"},
        "intent": {"enabled", "strategy", "llm_timeout_seconds", "cache_size",
                   "enable_regex_fastpath"},
        "role": {"enabled", "hard_filter"}}
    mspr_dict: dict[str, Any] = {}
    for key, value in mspr.items():
        if key not in mspr_known:
            continue
        if key == "role":
            value = role_raw
        mspr_dict[key] = ({k: v for k, v in value.items() if k in blocks[key]}
                          if isinstance(value, dict) and key in blocks else value)
    retrieval_keys = {"alpha_dense", "beta_bm25", "gamma_graph", "delta_personal",
                      "epsilon_frequency", "zeta_success", "seed_top_k", "expansion_depth",
                      "max_candidates", "edge_weight_floor", "algorithm", "ppr_damping",
                      "ppr_max_iter", "ppr_tolerance"}
    decay_keys = {"enabled", "half_life_days", "min_edge_weight", "min_node_relevance",
                  "tick_on_read"}
    retrieval = raw.get("retrieval") or {}
    decay = {"enabled": False, **(raw.get("decay") or {})}  # scenarios default decay off
    ck = {
        "context_graph": {
            "enabled": True,
            "retrieval": {k: v for k, v in retrieval.items() if k in retrieval_keys}
            if isinstance(retrieval, dict) else retrieval,
            "decay": {k: v for k, v in decay.items() if k in decay_keys},
        },
        "mspr": mspr_dict,
    }
    try:
        config = config_from_dict(ck)
    except ConfigError as exc:
        message = str(exc)
        path = reader.path
        for prefix, json_prefix in (("context_graph.retrieval.", "retrieval."),
                                    ("context_graph.decay.", "decay."), ("mspr.", "mspr.")):
            if message.startswith(prefix):
                key, _, rest = message.partition(" ")
                raise ScenarioError(f"{reader.source}: {path}."
                                    f"{json_prefix}{key.removeprefix(prefix)}: {rest}") from None
        raise reader.fail(message) from None
    return config, setup


def _memory(reader: _Reader, now: datetime) -> ScenarioMemory:
    m = reader.obj()
    created = m.get("created_at", "opt_time") or now
    updated = m.get("updated_at", "opt_time") or created
    metadata = m.child("metadata").obj().value if m.value.get("metadata") is not None else {}
    relevance = m.get("relevance", "num", 1.0)
    floor = m.get("relevance_floor", "num", 0.0)
    access = m.get("access_count", "int", 0)
    if access < 0:
        raise m.child("access_count").fail(f"must be >= 0, got {access}")
    return ScenarioMemory(
        id=m.get("id", "str", required=True),
        text=m.get("text", "str", ""),
        user_id=m.get("user_id", "opt_str") or None,
        agent_id=m.get("agent_id", "opt_str") or None,
        run_id=m.get("run_id", "opt_str") or None,
        tenant_id=m.get("tenant_id", "opt_str"),
        sub_tenant_id=m.get("sub_tenant_id", "opt_str"),
        role=m.value.get("role"), allowed_roles=m.value.get("allowed_roles"),
        metadata=dict(metadata),
        embedding=m.child("embedding").vector(allow_null=True),
        created_at=created, updated_at=updated,
        last_accessed_at=m.get("last_accessed_at", "opt_time"),
        relevance=relevance, relevance_floor=floor, access_count=access,
        archived=m.get("archived", "bool", False),
        in_graph=m.get("in_graph", "bool", True),
        in_vector_store=m.get("in_vector_store", "bool", True))


def _edge(reader: _Reader) -> ScenarioEdge:
    e = reader.obj()
    kind = e.get("type", "str", required=True)
    if kind not in EdgeType.__members__:
        raise e.child("type").fail(
            f"expected one of {', '.join(EdgeType.__members__)}, got {kind!r}")
    return ScenarioEdge(src=e.get("src", "str", required=True),
                        dst=e.get("dst", "str", required=True), type=EdgeType(kind),
                        weight=e.get("weight", "num", 1.0),
                        updated_at=e.get("updated_at", "opt_time"))


def _event(reader: _Reader, vector_ids: set[str]) -> FeedbackEvent | SearchEvent:
    e = reader.obj()
    kind = e.get("type", "str", required=True)
    at = e.get("at", "opt_time")
    if kind == "feedback":
        meta = e.value.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise e.child("metadata").fail(f"expected an object or null, got {_kind(meta)}")
        return FeedbackEvent(
            memory_id=e.get("memory_id", "str", required=True),
            helpful=e.get("helpful", "bool", required=True),
            user_id=e.get("user_id", "opt_str"), agent_id=e.get("agent_id", "opt_str"),
            run_id=e.get("run_id", "opt_str"), query=e.get("query", "opt_str"),
            metadata=meta, at=at)
    if kind != "search":
        raise e.child("type").fail(f"expected 'search' or 'feedback', got {kind!r}")
    if "query_embedding" not in e.value:
        raise e.child("query_embedding").fail("is required ([] for no query vector)")
    filters = e.value.get("filters")
    if filters is not None and not isinstance(filters, dict):
        raise e.child("filters").fail(f"expected an object or null, got {_kind(filters)}")
    seeds: list[tuple[str | None, float | None]] = []
    for s in e.child("seeds").items() if e.value.get("seeds") is not None else []:
        s.obj()
        sid = s.get("id", "opt_str")
        if sid is not None and sid not in vector_ids:
            raise s.child("id").fail(f"seed {sid!r} is not an in_vector_store memory")
        seeds.append((sid, s.get("score", "opt_num")))
    return SearchEvent(
        query=e.get("query", "str", required=True),
        query_embedding=e.child("query_embedding").vector(allow_null=False) or [],
        user_id=e.get("user_id", "opt_str"), agent_id=e.get("agent_id", "opt_str"),
        run_id=e.get("run_id", "opt_str"), filters=filters,
        limit=e.get("limit", "int", 100), threshold=e.get("threshold", "opt_num"),
        include_archived=e.get("include_archived", "bool", False), seeds=seeds, at=at)


# ---- bulk checks -----------------------------------------------------------------------
#
# Each takes one list of the document and returns its records, or None when a check does
# not pass; the caller then walks the list value by value (above) for the message. Every
# check is the walk's, made over a column of values gathered once: `dict.get` with the
# walk's default (so a key given as null is told apart where the walk tells it apart),
# the set of the column's exact types against the types the walk accepts (bool is not an
# int there, as in the walk; a subclass of dict or str is left to the walk), and one sum
# for finiteness: a sum of numbers is finite only if each is (when it is not, an overflow
# of finite values included, the walk decides). Timestamps are parsed once per distinct
# text.

_MISSING = object()  # a key not given, where the walk requires it: no type accepts it
_NULL = type(None)
_STR = frozenset({str})
_OPT_STR = frozenset({str, _NULL})
_NUM = frozenset({float, int})
_OPT_NUM = frozenset({float, int, _NULL})
_INT = frozenset({int})
_BOOL = frozenset({bool})
_DICT = frozenset({dict})
_OPT_DICT = frozenset({dict, _NULL})
_LIST = frozenset({list})
_OPT_LIST = frozenset({list, _NULL})
_EVENT_TYPES = frozenset({"search", "feedback"})
_EDGE_TYPES = {name: EdgeType(name) for name in EdgeType.__members__}  # what _edge makes
_Record = TypeVar("_Record", ScenarioMemory, ScenarioEdge, FeedbackEvent, SearchEvent)
_FIELDS = {cls: tuple(f.name for f in fields(cls))
           for cls in (ScenarioMemory, ScenarioEdge, FeedbackEvent, SearchEvent)}


def _records(cls: type[_Record], *columns: list[Any]) -> list[_Record]:
    """`list(map(cls, *columns))` for one of the frozen, slotted record classes above,
    made a field at a time: the objects first, then each column stored through its slot
    in one pass. (The generated `__init__` stores each value through `object.__setattr__`,
    a call per value: a third of what checking edges cost.) The classes have no
    `__post_init__` and every field comes from a column, so the records are the same."""
    count = len(columns[0])
    if any(len(column) != count for column in columns):
        raise AssertionError(f"{cls.__name__} columns of unequal lengths")
    made = list(map(object.__new__, repeat(cls, count)))
    for name, column in zip(_FIELDS[cls], columns, strict=True):
        deque(map(getattr(cls, name).__set__, made, column), maxlen=0)
    return made


def _kinds(values: Iterable[Any]) -> set[type]:
    return set(map(type, values))


def _rows(value: Any) -> list[dict[str, Any]] | None:
    """The list itself when it is a list of objects."""
    if type(value) is not list or not _kinds(value) <= _DICT:
        return None
    return value


def _column(rows: list[dict[str, Any]], key: str, default: Any = None) -> list[Any]:
    return list(map(dict.get, rows, repeat(key), repeat(default)))


def _finite(values: list[Any]) -> bool:
    """Whether numbers (not bools) sum to a finite float: then none is NaN or infinite."""
    try:
        return math.isfinite(sum(values))
    except OverflowError:  # an integer too large for a float: the walk decides
        return False


def _numbers(values: list[Any], *, optional: bool) -> list[Any] | None:
    """A column of finite numbers (or nulls, when optional) as floats, as `as_kind` reads
    "num" / "opt_num"."""
    kinds = _kinds(values)
    if not kinds <= (_OPT_NUM if optional else _NUM):
        return None
    present = [v for v in values if v is not None] if _NULL in kinds else values
    if not _finite(present):
        return None
    if int in kinds:
        return [None if v is None else float(v) for v in values]
    return values


def _vectors(values: list[Any], *, allow_null: bool) -> list[Any] | None:
    """A column of vectors (lists of finite numbers) as `_Reader.vector` reads each."""
    kinds = _kinds(values)
    if not kinds <= (_OPT_LIST if allow_null else _LIST):
        return None
    vectors = [v for v in values if v is not None] if _NULL in kinds else values
    flat = list(chain.from_iterable(vectors))
    number_kinds = _kinds(flat)
    if not number_kinds <= _NUM or not _finite(flat):
        return None
    if int in number_kinds:
        return [None if v is None else [float(x) for x in v] for v in values]
    return [None if v is None else v[:] for v in values]


def _owner_ids(values: list[Any]) -> list[Any]:
    """`_memory`'s owner ids: falsy means absent."""
    return [v or None for v in values] if "" in values else values


class _Times:
    """ISO-8601 texts parsed as `_parse_time` does, once per distinct text."""

    def __init__(self) -> None:
        self.parsed: dict[str, datetime] = {}

    def column(self, values: list[Any]) -> list[datetime | None] | None:
        """An "opt_time" column (strings or nulls) parsed; None when one does not parse."""
        if not _kinds(values) <= _OPT_STR:
            return None
        parsed = self.parsed
        for text in set(values):
            if text is None or text in parsed:
                continue
            try:
                moment = datetime.fromisoformat(text)
                offset = moment.utcoffset()
                if offset is not None:
                    moment = (moment - offset).replace(tzinfo=None)
            except (ValueError, OverflowError):
                return None
            parsed[text] = moment
        return list(map(parsed.get, values))


def _bulk_memories(value: Any, now: datetime, times: _Times) -> list[ScenarioMemory] | None:
    """`[_memory(m, now) for m in ...]`, or None for the walk to find what is wrong."""
    rows = _rows(value)
    if rows is None:
        return None
    col = functools.partial(_column, rows)
    ids, texts = col("id", _MISSING), col("text", "")
    owners = [col(key) for key in ("user_id", "agent_id", "run_id")]
    tenants = [col(key) for key in ("tenant_id", "sub_tenant_id")]
    if not (_kinds(ids) <= _STR and _kinds(texts) <= _STR
            and all(_kinds(c) <= _OPT_STR for c in (*owners, *tenants))):
        return None
    metadata = col("metadata")
    access = col("access_count", 0)
    flags = [col("archived", False), col("in_graph", True), col("in_vector_store", True)]
    if not (_kinds(metadata) <= _OPT_DICT and _kinds(access) <= _INT
            and (not access or min(access) >= 0) and all(_kinds(c) <= _BOOL for c in flags)):
        return None
    relevance = _numbers(col("relevance", 1.0), optional=False)
    floor = _numbers(col("relevance_floor", 0.0), optional=False)
    embeddings = _vectors(col("embedding"), allow_null=True)
    created = times.column(col("created_at"))
    updated = times.column(col("updated_at"))
    accessed = times.column(col("last_accessed_at"))
    if (relevance is None or floor is None or embeddings is None or created is None
            or updated is None or accessed is None):
        return None
    created = [now if c is None else c for c in created]
    updated = [c if u is None else u for u, c in zip(updated, created, strict=True)]
    return _records(
        ScenarioMemory, ids, texts, *map(_owner_ids, owners), *tenants, col("role"),
        col("allowed_roles"), [{} if m is None else dict(m) for m in metadata], embeddings,
        created, updated, accessed, relevance, floor, access, *flags)


def _bulk_edges(value: Any, times: _Times) -> list[ScenarioEdge] | None:
    """`[_edge(e) for e in ...]`, or None for the walk to find what is wrong."""
    rows = _rows(value)
    if rows is None:
        return None
    kinds, src, dst = (_column(rows, key, _MISSING) for key in ("type", "src", "dst"))
    if not (_kinds(kinds) <= _STR and set(kinds) <= _EDGE_TYPES.keys()
            and _kinds(src) <= _STR and _kinds(dst) <= _STR):
        return None
    weights = _numbers(_column(rows, "weight", 1.0), optional=False)
    updated = times.column(_column(rows, "updated_at"))
    if weights is None or updated is None:
        return None
    return _records(ScenarioEdge, src, dst, list(map(_EDGE_TYPES.__getitem__, kinds)),
                    weights, updated)


def _bulk_events(value: Any, vector_ids: set[str],
                 times: _Times) -> list[FeedbackEvent | SearchEvent] | None:
    """`[_event(e, vector_ids) for e in ...]`, or None for the walk to find what is wrong."""
    rows = _rows(value)
    if rows is None:
        return None
    kinds = _column(rows, "type", _MISSING)
    if not (_kinds(kinds) <= _STR and set(kinds) <= _EVENT_TYPES):
        return None
    at = times.column(_column(rows, "at"))
    if at is None:
        return None
    searches = [i for i, kind in enumerate(kinds) if kind == "search"]
    feedback = [i for i, kind in enumerate(kinds) if kind == "feedback"]
    found_searches = _bulk_searches([rows[i] for i in searches], [at[i] for i in searches],
                                    vector_ids)
    found_feedback = _bulk_feedback([rows[i] for i in feedback], [at[i] for i in feedback])
    if found_searches is None or found_feedback is None:
        return None
    events: list[FeedbackEvent | SearchEvent] = [*found_searches, *found_feedback]
    order = [*searches, *feedback]
    out: list[FeedbackEvent | SearchEvent] = events[:]
    for place, event in zip(order, events, strict=True):
        out[place] = event
    return out


def _bulk_feedback(rows: list[dict[str, Any]],
                   at: list[datetime | None]) -> list[FeedbackEvent] | None:
    metadata = _column(rows, "metadata")
    memory_ids, helpful = _column(rows, "memory_id", _MISSING), _column(rows, "helpful", _MISSING)
    texts = [_column(rows, key) for key in ("user_id", "agent_id", "run_id", "query")]
    if not (_kinds(metadata) <= _OPT_DICT and _kinds(memory_ids) <= _STR
            and _kinds(helpful) <= _BOOL and all(_kinds(c) <= _OPT_STR for c in texts)):
        return None
    return _records(FeedbackEvent, memory_ids, helpful, *texts, metadata, at)


def _bulk_searches(rows: list[dict[str, Any]], at: list[datetime | None],
                   vector_ids: set[str]) -> list[SearchEvent] | None:
    queries = _column(rows, "query", _MISSING)
    filters = _column(rows, "filters")
    owners = [_column(rows, key) for key in ("user_id", "agent_id", "run_id")]
    limits = _column(rows, "limit", 100)
    archived = _column(rows, "include_archived", False)
    seed_lists = _column(rows, "seeds")
    if not (_kinds(queries) <= _STR and _kinds(filters) <= _OPT_DICT
            and all(_kinds(c) <= _OPT_STR for c in owners) and _kinds(limits) <= _INT
            and _kinds(archived) <= _BOOL and _kinds(seed_lists) <= _OPT_LIST):
        return None
    vectors = _vectors(_column(rows, "query_embedding", _MISSING), allow_null=False)
    thresholds = _numbers(_column(rows, "threshold"), optional=True)
    seeds = _bulk_seeds(seed_lists, vector_ids)
    if vectors is None or thresholds is None or seeds is None:
        return None
    return _records(SearchEvent, queries, vectors, *owners, filters, limits, thresholds,
                    archived, seeds, at)


def _bulk_seeds(seed_lists: list[list[Any] | None],
                vector_ids: set[str]) -> list[list[tuple[str | None, float | None]]] | None:
    """Every search's seeds, checked in one column of all of them, then dealt back."""
    lists = [[] if seeds is None else seeds for seeds in seed_lists]
    rows = _rows(list(chain.from_iterable(lists)))
    if rows is None:
        return None
    ids = _column(rows, "id")
    if not _kinds(ids) <= _OPT_STR or not set(ids) - {None} <= vector_ids:
        return None
    scores = _numbers(_column(rows, "score"), optional=True)
    if scores is None:
        return None
    pairs = list(zip(ids, scores, strict=True))
    out, start = [], 0
    for seeds in lists:
        out.append(pairs[start:start + len(seeds)])
        start += len(seeds)
    return out
